//! The view a decision is made on: the delivery's scope as journaled, then in one statement
//! the earlier packet with its transport key, the live index entry of its effect key with its
//! effect, the latest effect with the key, an alias's effect and the position of the key's
//! strategy breaker, turned into the matrix's `PriorView` by `plan`.

use oncegate_core::ids::DeliveryId;
use oncegate_core::matrix::Prior;

use crate::breaker::BreakerState;
use crate::codes::{delivery_id_floor, ms};
use crate::decision::{event_type_of, DecideRequest, PriorView};
use crate::delivery::TransportStrength;
use crate::error::StoreError;
use crate::plan::{self, EffectRow, Scope};
use crate::sql::{opt_int, opt_text, text, Dialect, Row, Statement, Tx};

type Result<T> = std::result::Result<T, StoreError>;

/// The delivery being decided, as journaled, and whether it already has a proof.
pub(super) async fn scope<T: Tx + Send>(tx: &mut T, delivery: &DeliveryId) -> Result<Scope> {
    let rows = tx
        .query(
            "SELECT d.tenant, d.provider, d.env, d.event_type, d.transport_key, d.transport_strength, d.body_sha256, \
             CASE WHEN d.decided_at IS NULL THEN 0 ELSE 1 END \
             FROM deliveries d WHERE d.id = $1",
            &[text(delivery.as_str())],
        )
        .await?;
    let row = rows.first().ok_or_else(|| StoreError::NotFound {
        what: "delivery",
        id: delivery.to_string(),
    })?;
    Ok(Scope {
        tenant: row.text(0)?,
        provider: row.text(1)?,
        env: row.text(2)?,
        event_type: row.opt_text(3)?,
        transport_key: row.opt_text(4)?,
        transport_strength: row
            .opt_text(5)?
            .as_deref()
            .and_then(TransportStrength::parse),
        body_sha256: row.text(6)?,
        decided: row.int(7)? > 0,
    })
}

const EFFECT_VIEW_COLS: &str = "e.id, e.state, e.fencing_token, e.lease_until, e.first_delivery, e.discriminants, e.result, e.error";

/// How many columns `EFFECT_VIEW_COLS` names (counted once, by the compiler).
const EFFECT_VIEW_COL_COUNT: usize = {
    let bytes = EFFECT_VIEW_COLS.as_bytes();
    let (mut i, mut commas) = (0, 0);
    while i < bytes.len() {
        if bytes[i] == b',' {
            commas += 1;
        }
        i += 1;
    }
    commas + 1
};

// `effect_row` reads the columns `EFFECT_VIEW_COLS` names, in order.
const _: () = assert!(EFFECT_VIEW_COL_COUNT == 8);

fn effect_row(row: &Row, at: usize) -> Result<EffectRow> {
    Ok(EffectRow {
        id: row.text(at)?,
        state: row.text(at + 1)?,
        token: row.int(at + 2)?,
        lease_until: row.opt_int(at + 3)?,
        first_delivery: row.text(at + 4)?,
        discriminants: row.text(at + 5)?,
        result: row.opt_text(at + 6)?,
        error: row.opt_text(at + 7)?,
    })
}

/// What is known about the delivery's transport key and effect key, in one statement.
/// `hash`: the key's scope hash (`key_hash`), made once per decision.
pub(super) async fn load<T: Tx + Send>(
    tx: &mut T,
    scope: &Scope,
    req: &DecideRequest,
    hash: Option<&str>,
) -> Result<PriorView> {
    let (sql, params) = statement(tx.dialect(), scope, req, hash);
    let rows = tx.query(sql, &params).await?;
    read(scope, req, &rows)
}

/// How far back a strong transport key is looked for: a provider's retries end within days
/// (Stripe's after 3, Shopify's after 2, GitHub sends none), so an id seen again after a month
/// is no retry, and what it carries is decided by its effect key, as any other delivery's.
/// The bound is a range of ids on the journal's primary key, so on a store partitioned by day
/// (`partition`) the look-up reads only the month's partitions, however many days are kept
/// (`scripts/pg-partitions`: 51x the one table's cost across 400 partitions without it,
/// 1.3x with it).
pub(crate) const TRANSPORT_WINDOW: time::Duration = time::Duration::days(31);

/// The scope hash of the request's key, under which its effect is indexed and found: made
/// once per decision, for its view and its writes alike.
pub(crate) fn key_hash(scope: &Scope, req: &DecideRequest) -> Option<String> {
    let event_type = event_type_of(scope, req);
    req.key.as_ref().map(|key| scope.key_hash(event_type, key))
}

/// The view's statement (see `load`), for a backend that sends several at once.
pub(crate) fn statement<'a>(
    dialect: Dialect,
    scope: &'a Scope,
    req: &'a DecideRequest,
    hash: Option<&'a str>,
) -> Statement<'a> {
    let event_type = event_type_of(scope, req);
    let strategy = req.key.as_ref().map(|key| &key.strategy);
    (
        view_sql(dialect),
        vec![
            opt_text(hash),
            text(scope.tenant.as_str()),
            text(scope.provider.as_str()),
            text(scope.env.as_str()),
            opt_text(scope.strong_transport_key()),
            text(req.delivery.as_str()),
            text(scope.body_sha256.as_str()),
            opt_text(event_type),
            opt_text(strategy.map(|s| s.name.as_str())),
            opt_int(strategy.map(|s| i64::from(s.version))),
            text(delivery_id_floor(
                req.now.checked_sub(TRANSPORT_WINDOW).unwrap_or(req.now),
            )),
        ],
    )
}

/// The view's statement text in `dialect`, built once.
fn view_sql(dialect: Dialect) -> &'static str {
    static POSTGRES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static SQLITE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    // One statement, so one snapshot: at READ COMMITTED two separate look-ups could see the
    // index before a concurrent reservation committed and its effect after, and mistake a live
    // key for a purged one. It is also one round trip instead of three.
    //
    // `t`: the earliest decided, non-rejected delivery with the same strong transport key (one
    // with the same body first) within `TRANSPORT_WINDOW` (`$11`, the window's first id); a
    // packet journaled but refused proves nothing. `i`/`e`: a fast-index entry written before
    // schema version 13 and its effect, probed only when that table holds any slot at all
    // (`any_row`: nothing writes the table any more, and the purge empties it as the slots
    // expire). `l`: the latest effect with this key, whatever the index says, for when the
    // horizon passed, with its number and its slot: it holds the key's slot itself
    // (`indexed`) unless a possible duplicate came after it, and then `s` is the latest effect
    // that does. `a`: an alias's effect, read only for a key no effect has, on a store that
    // holds aliases. Each of those two is looked up only when its condition holds (a `CASE`,
    // which both engines evaluate lazily; in the join's condition, PostgreSQL probes first). Then
    // the state of the strategy's collision breaker (`breaker`), read in the same snapshot as
    // the rest, and only on a store where some breaker has ever opened (its row is written
    // when it first opens).
    //
    // SQLite finds `t` as the first of two look-ups that holds an id, each the least id of its
    // matches: one with the same body, then any. The same row as PostgreSQL's one sorted
    // look-up, without the two temporary B-trees SQLite makes for it (the subquery materialized,
    // and its ORDER BY), each with a page cache of its own, on every decision.
    let sql = match dialect {
        Dialect::Postgres => &POSTGRES,
        Dialect::Sqlite => &SQLITE,
    };
    sql.get_or_init(|| {
        // The earlier packets with this strong transport key: decided (a proof's action, in
        // the delivery's own row), not refused, in the window.
        let packets = "FROM deliveries d \
             WHERE d.tenant = $2 AND d.provider = $3 AND d.env = $4 AND d.transport_key = $5 \
             AND d.transport_strength = 'strong' AND d.id <> $6 AND d.id >= $11 \
             AND d.action <> 'reject'";
        let transport = match dialect {
            Dialect::Postgres => format!(
                "LEFT JOIN (SELECT d.id, d.body_sha256 {packets} \
                 ORDER BY CASE WHEN d.body_sha256 = $7 THEN 0 ELSE 1 END, d.id LIMIT 1) t ON 1 = 1"
            ),
            Dialect::Sqlite => format!(
                "LEFT JOIN deliveries t ON t.id = COALESCE(\
                 (SELECT MIN(d.id) {packets} AND d.body_sha256 = $7), (SELECT MIN(d.id) {packets}))"
            ),
        };
        // The key's latest effect: PostgreSQL reads it whole from the one backward scan of
        // `effects_scope_seq` that finds it (a lateral join); SQLite, which has no lateral
        // join, finds its id so, then the row by its primary key.
        let latest_join = match dialect {
            Dialect::Postgres => format!(
                "LEFT JOIN LATERAL (SELECT {latest_cols}, x.scope_seq, x.indexed, x.index_expires_at \
                 FROM effects x WHERE x.scope_hash = k.h AND x.scope_seq IS NOT NULL \
                 ORDER BY x.scope_seq DESC LIMIT 1) l ON TRUE",
                latest_cols = EFFECT_VIEW_COLS.replace("e.", "x."),
            ),
            Dialect::Sqlite => "LEFT JOIN effects l ON l.id = (SELECT x.id FROM effects x WHERE x.scope_hash = k.h \
                 AND x.scope_seq IS NOT NULL ORDER BY x.scope_seq DESC LIMIT 1)"
                .to_owned(),
        };
        format!(
            "SELECT t.id, t.body_sha256, i.scope_hash, i.expires_at, {indexed}, {latest}, {aliased}, \
             CASE WHEN {any_breaker} THEN \
              (SELECT b.state FROM breakers b WHERE b.provider = $3 AND b.env = $4 AND b.event_type = $8 \
               AND b.strategy_name = $9 AND b.strategy_version = $10) END, \
             l.scope_seq, l.indexed, l.index_expires_at, {slot}, s.index_expires_at \
             FROM (SELECT CAST($1 AS TEXT) AS h) k \
             {transport} \
             LEFT JOIN effect_index i ON i.scope_hash = CASE WHEN {any_slot} THEN k.h END \
             LEFT JOIN effects e ON e.id = i.effect_id \
             {latest_join} \
             LEFT JOIN effects s ON s.id = CASE WHEN l.indexed = FALSE THEN \
                                            (SELECT z.id FROM effects z WHERE z.scope_hash = k.h AND z.scope_seq IS NOT NULL \
                                             AND z.indexed ORDER BY z.scope_seq DESC LIMIT 1) END \
             LEFT JOIN effects a ON a.id = CASE WHEN l.id IS NULL AND {any_alias} THEN \
                                            (SELECT y.effect_id FROM effect_aliases y WHERE y.alias_hash = k.h) END",
            any_slot = any_row("effect_index", "scope_hash"),
            any_breaker = any_row("breakers", "provider"),
            any_alias = any_row("effect_aliases", "alias_hash"),
            indexed = EFFECT_VIEW_COLS,
            latest = EFFECT_VIEW_COLS.replace("e.", "l."),
            aliased = EFFECT_VIEW_COLS.replace("e.", "a."),
            slot = EFFECT_VIEW_COLS.replace("e.", "s."),
        )
    })
}

/// Whether `table` holds any row, as a condition of the view's statement: the first entry of
/// the index `column` leads, read once per statement (an uncorrelated subquery), in the
/// statement's snapshot. A look-up of a table most stores leave empty (the slots written before
/// schema version 13, the breakers ever opened, the aliases of a cut-over) is made for each
/// decision only where the table holds something.
fn any_row(table: &str, column: &str) -> String {
    format!("(SELECT n.{column} FROM {table} n ORDER BY n.{column} LIMIT 1) IS NOT NULL")
}

/// The view from the rows of its statement.
pub(crate) fn read(scope: &Scope, req: &DecideRequest, rows: &[Row]) -> Result<PriorView> {
    let now = ms(req.now);
    let row = rows
        .first()
        .ok_or_else(|| StoreError::corrupt("the key look-up returned no row"))?;
    let earlier = match row.opt_text(0)? {
        Some(id) => Some((id, row.text(1)?)),
        None => None,
    };
    let (transport, transport_reference) = plan::transport_of(scope, earlier)?;
    let Some(key) = &req.key else {
        return Ok(PriorView {
            transport,
            transport_reference,
            prior: Prior::None,
            effect: None,
            differences: vec![],
            breaker_open: false,
            next_seq: 1,
        });
    };
    let effect_cols = EFFECT_VIEW_COL_COUNT;
    let indexed_at = 4;
    let latest_at = indexed_at + effect_cols;
    let aliased_at = latest_at + effect_cols;
    let breaker_at = aliased_at + effect_cols;
    let (seq_at, slot_at) = (breaker_at + 1, breaker_at + 4);
    let breaker_open = row.opt_str(breaker_at)? == Some(BreakerState::Open.as_str());
    let live = |expires: Option<i64>| expires.is_none_or(|at| at > now);
    let legacy_live = row.opt_str(2)?.is_some() && live(row.opt_int(3)?);
    let latest = row.opt_str(latest_at)?.is_some();
    // The effect holding the key's slot, with the slot's expiry: the latest effect, or the
    // latest of those that hold one.
    let slot = if latest && row.boolean(seq_at + 1)? {
        Some((latest_at, row.opt_int(seq_at + 2)?))
    } else if row.opt_str(slot_at)?.is_some() {
        Some((slot_at, row.opt_int(slot_at + effect_cols)?))
    } else {
        None
    };
    let mut effect = None;
    let mut index_without_effect = false;
    if legacy_live {
        if row.opt_str(indexed_at)?.is_some() {
            effect = Some(plan::prior_effect(effect_row(row, indexed_at)?, true, now)?);
        } else {
            index_without_effect = true;
        }
    } else if let Some((at, _)) = slot.filter(|&(_, expires)| live(expires)) {
        effect = Some(plan::prior_effect(effect_row(row, at)?, true, now)?);
    } else if latest {
        // Past the horizon the fast index no longer answers, but a record of the key may
        // remain (its proof and effect are kept longer): the matrix hears `Purged`.
        effect = Some(plan::prior_effect(effect_row(row, latest_at)?, false, now)?);
    } else if row.opt_str(aliased_at)?.is_some() {
        // No effect holds this key, but `oncegate migrate` recorded it as another strategy
        // version's key for an existing effect (a cut-over): that effect is the prior, so a
        // retry of an event processed under the old version is never applied twice.
        effect = Some(plan::prior_effect(effect_row(row, aliased_at)?, true, now)?);
    }
    let prior = plan::prior_of(effect.as_ref(), index_without_effect);
    let differences = effect
        .as_ref()
        .map(|e| plan::differences(&e.discriminants, &key.discriminants))
        .unwrap_or_default();
    Ok(PriorView {
        transport,
        transport_reference,
        prior,
        effect,
        differences,
        breaker_open,
        next_seq: row.opt_int(seq_at)?.map_or(1, |seq| seq + 1),
    })
}
