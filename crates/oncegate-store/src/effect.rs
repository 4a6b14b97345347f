//! Effects: the business transitions that must happen once. Deliveries are observations
//! linked to them; the effect is what gets reserved, executed, completed and claimed. Here too:
//! its row and links written and read back, the holder's outcomes (`complete`, `fail`,
//! `heartbeat`, each guarded by the fencing token) and the claim of released work.

use std::collections::BTreeMap;

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use time::{Duration, OffsetDateTime};

use crate::codes::{self, duration_ms, from_ms, ms};
use crate::decision::{strategy_from, StrategyRef};
use crate::delivery::TenantFilter;
use crate::error::StoreError;
use crate::plan::{self, Scope, MAX_ATTEMPTS};
use crate::sql::{int, opt_int, opt_text, text, Query, Row, Statement, Tx, Value};

type Result<T> = std::result::Result<T, StoreError>;

/// Where an effect stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EffectState {
    /// A holder has it under a lease and a fencing token.
    Reserved,
    /// Its holder recorded a result with `complete`: a later delivery matching it under a strong
    /// key is ignored and answered with that result.
    Completed,
    /// Its holder recorded a failure with `fail`.
    Failed {
        /// Whether the next delivery of the key may take the effect over (fencing token + 1); a
        /// permanent failure is never taken over.
        retryable: bool,
    },
    /// A reservation's lease passed with neither complete nor fail: nothing is re-run blindly.
    Unknown,
    /// Released by the queue as a distinct operation: waiting for a worker to `claim` it.
    Released,
}

impl EffectState {
    /// The word stored in the effect's `state` column (`reserved`, `completed`, `failed_retryable`,
    /// `failed`, `unknown`, `released`).
    pub fn as_str(self) -> &'static str {
        match self {
            EffectState::Reserved => "reserved",
            EffectState::Completed => "completed",
            EffectState::Failed { retryable: true } => "failed_retryable",
            EffectState::Failed { retryable: false } => "failed",
            EffectState::Unknown => "unknown",
            EffectState::Released => "released",
        }
    }

    /// The state [`as_str`](Self::as_str) spells, or `None` for any other word.
    ///
    /// ```
    /// use oncegate_store::EffectState;
    ///
    /// let retryable = EffectState::Failed { retryable: true };
    /// assert_eq!(retryable.as_str(), "failed_retryable");
    /// assert_eq!(EffectState::parse("failed_retryable"), Some(retryable));
    /// assert_eq!(EffectState::parse("failed"), Some(EffectState::Failed { retryable: false }));
    /// assert_eq!(EffectState::parse("done"), None);
    /// ```
    pub fn parse(s: &str) -> Option<EffectState> {
        [
            EffectState::Reserved,
            EffectState::Completed,
            EffectState::Failed { retryable: true },
            EffectState::Failed { retryable: false },
            EffectState::Unknown,
            EffectState::Released,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}

/// How a delivery came to be attached to an effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// The delivery created (or took over) the effect's reservation.
    Reserved,
    /// Ignored as the same packet again.
    Transport,
    /// Ignored as another packet for the same effect.
    Effect,
    /// A human or the authority said it is a duplicate of this effect.
    ResolvedDuplicate,
    /// A human or the authority said it is a distinct operation: released as this new effect.
    ResolvedDistinct,
    /// A claim of the released effect by a worker.
    Claimed,
}

impl LinkKind {
    /// The word stored in the link's `kind` column (`reserved`, `transport`, `effect`,
    /// `resolved_duplicate`, `resolved_distinct`, `claimed`).
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Reserved => "reserved",
            LinkKind::Transport => "transport",
            LinkKind::Effect => "effect",
            LinkKind::ResolvedDuplicate => "resolved_duplicate",
            LinkKind::ResolvedDistinct => "resolved_distinct",
            LinkKind::Claimed => "claimed",
        }
    }

    /// The kind [`as_str`](Self::as_str) spells, or `None` for any other word.
    ///
    /// ```
    /// use oncegate_store::LinkKind;
    ///
    /// assert_eq!(LinkKind::ResolvedDuplicate.as_str(), "resolved_duplicate");
    /// assert_eq!(LinkKind::parse("resolved_duplicate"), Some(LinkKind::ResolvedDuplicate));
    /// assert_eq!(LinkKind::parse("duplicate"), None);
    /// ```
    pub fn parse(s: &str) -> Option<LinkKind> {
        [
            LinkKind::Reserved,
            LinkKind::Transport,
            LinkKind::Effect,
            LinkKind::ResolvedDuplicate,
            LinkKind::ResolvedDistinct,
            LinkKind::Claimed,
        ]
        .into_iter()
        .find(|l| l.as_str() == s)
    }
}

/// One delivery attached to an effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectLink {
    /// The linked delivery.
    pub delivery: DeliveryId,
    /// How it came to be linked; a delivery is linked to an effect at most once per kind.
    pub kind: LinkKind,
    /// When the link was written.
    pub at: OffsetDateTime,
}

/// An effect read back, with every delivery linked to it (oldest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectRecord {
    /// The effect's id (`eff_…`), time-ordered by creation.
    pub id: EffectId,
    /// The tenant the effect belongs to.
    pub tenant: String,
    /// The provider whose delivery created it.
    pub provider: String,
    /// The provider's environment (`live`, `test`…).
    pub env: String,
    /// The event type of the delivery that created it; `None` when that delivery's type was
    /// never known.
    pub event_type: Option<String>,
    /// The strategy (name, version, level) that made its key; `None` for an unkeyed delivery.
    pub strategy: Option<StrategyRef>,
    /// The effect key's value as the core made it; `None` for an unkeyed delivery.
    pub key: Option<String>,
    /// Durable effects keep their identity forever; purge never removes them.
    pub durable: bool,
    /// As stored (`expire_leases` or an access turns an expired reservation into `Unknown`).
    pub state: EffectState,
    /// The reservation's fencing token: 1 for a new reservation, 0 for an effect a `distinct`
    /// resolution created (until its claim), incremented by every takeover, settlement release
    /// and claim. Only the current token's holder may `complete`, `fail` or `heartbeat`.
    pub fencing_token: u64,
    /// When the current (or last) reservation's lease ends; `None` for an effect never reserved
    /// yet, or whose lease a settlement cleared.
    pub lease_until: Option<OffsetDateTime>,
    /// Who holds or last held the reservation: a worker name for claims.
    pub holder: Option<String>,
    /// The type's discriminants as recorded at reservation: field → canonical (masked) value.
    pub discriminants: BTreeMap<String, String>,
    /// A reference to the transaction, resource and rule version (JSON text), not the payload.
    pub result: Option<String>,
    /// The holder's failure message, when it recorded one with `fail`.
    pub error: Option<String>,
    /// Set when the queue released the effect on the authority's (or a person's) word.
    pub authoritative_ref: Option<String>,
    /// The delivery that created the effect (reserved it, or was released as it).
    pub first_delivery: DeliveryId,
    /// The queue item that released it, when the queue did.
    pub queue_item: Option<QueueItemId>,
    /// When the effect was created.
    pub created_at: OffsetDateTime,
    /// When the effect's row last changed (a takeover, an outcome, a claim, a settlement).
    pub updated_at: OffsetDateTime,
    /// Every delivery linked to it, oldest first (empty in `resource_effects` listings).
    pub deliveries: Vec<EffectLink>,
    /// The resource the effect is about, when its type declares one (reconciliation lists the
    /// local effects of one resource).
    pub resource: Option<String>,
    /// Critical effects are verified before any retry when their lease expires; reversible
    /// ones are released for takeover.
    pub critical: bool,
}

/// Released work handed to one worker exclusively; `complete` / `fail` / `heartbeat` it with
/// the token like any reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The released effect now held by the worker.
    pub effect: EffectId,
    /// The worker's fencing token: the effect's previous token + 1. Present it with every
    /// `complete`, `fail` and `heartbeat`.
    pub fencing_token: u64,
    /// When the worker's lease ends unless a `heartbeat` extends it.
    pub lease_until: OffsetDateTime,
    /// The effect's first delivery: the one whose payload the worker applies.
    pub delivery: DeliveryId,
    /// The effect's tenant.
    pub tenant: String,
    /// The effect's provider.
    pub provider: String,
    /// The effect's environment (`live`, `test`…).
    pub env: String,
    /// The effect's event type, when it has one.
    pub event_type: Option<String>,
    /// The effect key's value, when a strategy made one.
    pub key: Option<String>,
    /// The reference the authority (or a person) gave when releasing it as a distinct operation.
    pub authoritative_ref: Option<String>,
    /// The queue item whose resolution released it, when one did.
    pub queue_item: Option<QueueItemId>,
}

pub(crate) const EFFECT_COLS: &str = "e.id, e.tenant, e.provider, e.env, e.event_type, e.strategy_name, e.strategy_version, \
     e.strategy_level, e.key_value, e.durable, e.state, e.fencing_token, e.lease_until, e.holder, e.discriminants, \
     e.result, e.error, e.authoritative_ref, e.first_delivery, e.queue_item_id, e.created_at, e.updated_at, e.resource, e.critical";

pub(crate) fn record_from(row: &Row) -> Result<EffectRecord> {
    Ok(EffectRecord {
        id: plan::parse_effect_id(&row.text(0)?)?,
        tenant: row.text(1)?,
        provider: row.text(2)?,
        env: row.text(3)?,
        event_type: row.opt_text(4)?,
        strategy: strategy_from(row, 5)?,
        key: row.opt_text(8)?,
        durable: row.boolean(9)?,
        state: plan::parse_state(&row.text(10)?)?,
        fencing_token: row.int(11)? as u64,
        lease_until: row.opt_int(12)?.map(from_ms).transpose()?,
        holder: row.opt_text(13)?,
        discriminants: codes::parse_map(&row.text(14)?)?,
        result: row.opt_text(15)?,
        error: row.opt_text(16)?,
        authoritative_ref: row.opt_text(17)?,
        first_delivery: plan::parse_delivery_id(&row.text(18)?)?,
        queue_item: row
            .opt_text(19)?
            .map(|q| plan::parse_queue_id(&q))
            .transpose()?,
        created_at: from_ms(row.int(20)?)?,
        updated_at: from_ms(row.int(21)?)?,
        deliveries: Vec::new(),
        resource: row.opt_text(22)?,
        critical: row.boolean(23)?,
    })
}

/// The states of the effects `ids` as of `now_ms`, by id, in one read: a reservation whose
/// lease passed reads as unknown, as every decision reads it (`plan::effective_state`); an id
/// with no effect is absent.
///
/// The list of ids is padded to a power of two with its last id, so the statement's text
/// takes a handful of shapes (each prepared once per PostgreSQL connection), not one per
/// length.
pub(crate) async fn states<T: Tx + Send>(
    tx: &mut T,
    ids: &[EffectId],
    now_ms: i64,
) -> Result<BTreeMap<EffectId, EffectState>> {
    let Some(last) = ids.last() else {
        return Ok(BTreeMap::new());
    };
    let mut q = Query::new("SELECT id, state, lease_until FROM effects WHERE id IN (");
    let padded = ids
        .iter()
        .chain(std::iter::repeat(last))
        .take(ids.len().next_power_of_two());
    let placeholders: Vec<String> = padded.map(|id| q.bind(text(id.as_str()))).collect();
    q.push(&placeholders.join(", "));
    q.push(")");
    let rows = tx.query(&q.sql, &q.params).await?;
    rows.iter()
        .map(|row| {
            let state = plan::parse_state(&row.text(1)?)?;
            Ok((
                plan::parse_effect_id(&row.text(0)?)?,
                plan::effective_state(state, row.opt_int(2)?, now_ms),
            ))
        })
        .collect()
}

/// The effect with every delivery linked to it.
pub(crate) async fn read<T: Tx + Send>(tx: &mut T, id: &EffectId) -> Result<Option<EffectRecord>> {
    let sql = format!("SELECT {EFFECT_COLS} FROM effects e WHERE e.id = $1");
    let rows = tx.query(&sql, &[text(id.as_str())]).await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let mut record = record_from(row)?;
    let links = tx
        .query(
            // A decision's link is a column of its proof (schema v10); `links` holds the ones
            // made after a decision (resolutions, claims) and those decided before v10.
            "SELECT l.delivery_id, l.kind, l.at FROM links l WHERE l.effect_id = $1 \
             UNION ALL SELECT p.delivery_id, p.link_kind, p.decided_at FROM proofs p \
             WHERE p.effect_id = $1 AND p.link_kind IS NOT NULL \
             ORDER BY 3, 1, 2",
            &[text(id.as_str())],
        )
        .await?;
    record.deliveries = links
        .iter()
        .map(|l| {
            let kind = l.text(1)?;
            Ok(EffectLink {
                delivery: plan::parse_delivery_id(&l.text(0)?)?,
                kind: LinkKind::parse(&kind)
                    .ok_or_else(|| StoreError::corrupt(format!("unknown link kind {kind:?}")))?,
                at: from_ms(l.int(2)?)?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(Some(record))
}

/// The effect's tenant, without its record or its links.
pub(crate) async fn tenant<T: Tx + Send>(tx: &mut T, id: &EffectId) -> Result<Option<String>> {
    let rows = tx
        .query(
            "SELECT tenant FROM effects WHERE id = $1",
            &[text(id.as_str())],
        )
        .await?;
    rows.first().map(|row| row.text(0)).transpose()
}

/// After a guarded update changed nothing: says why, from the effect as it stands.
pub(crate) async fn refusal<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
) -> Result<StoreError> {
    let rows = tx
        .query(
            "SELECT fencing_token FROM effects WHERE id = $1",
            &[text(effect.as_str())],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(StoreError::NotFound {
            what: "effect",
            id: effect.to_string(),
        });
    };
    let current = row.int(0)? as u64;
    Ok(if current != token {
        StoreError::StaleToken {
            effect: effect.clone(),
            presented: token,
            current,
        }
    } else {
        StoreError::LeaseLost {
            effect: effect.clone(),
            token,
        }
    })
}

/// The condition every holder's write must meet: the current token, still reserved, lease
/// still running; the effect found by primary key alone (see `sql`: the lease is indexed, on
/// PostgreSQL every effect's in `effects_lease_until`, on SQLite the reserved ones').
pub(crate) const HOLDER: &str = "id = $1 AND fencing_token = $2 \
     AND (CASE WHEN state = 'reserved' AND lease_until > $3 THEN TRUE ELSE FALSE END)";

/// A holder's write: `UPDATE effects SET <set>, updated_at = $3` under `HOLDER`, with `values`
/// as `$4`, `$5`…; refused (`refusal`) when the effect is no longer the holder's.
async fn as_holder<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    now: OffsetDateTime,
    set: &str,
    values: Vec<Value<'_>>,
) -> Result<()> {
    let sql = format!("UPDATE effects SET {set}, updated_at = $3 WHERE {HOLDER}");
    let mut params = vec![text(effect.as_str()), int(token as i64), int(ms(now))];
    params.extend(values);
    if tx.exec(&sql, &params).await? == 0 {
        return Err(refusal(tx, effect, token).await?);
    }
    Ok(())
}

/// Records the holder's result: the effect is `completed`.
pub(crate) async fn complete<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    result: &str,
    now: OffsetDateTime,
) -> Result<()> {
    let (sql, params) = complete_statement(effect, token, result, now);
    if tx.exec(sql, &params).await? == 0 {
        return unchanged_complete(tx, effect, token, result).await;
    }
    Ok(())
}

/// A complete that changed no row: done already when the same holder completed the effect
/// with the same result (a retry of a complete that committed but whose answer was lost, in
/// a failover or a cut connection: answering it as refused would tell the holder its work is
/// unrecorded), else why it was refused: `OutcomeRecorded` when that holder recorded another
/// result, `refusal`'s answer otherwise.
pub(crate) async fn unchanged_complete<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    result: &str,
) -> Result<()> {
    let rows = tx
        .query(
            "SELECT fencing_token, state, result FROM effects WHERE id = $1",
            &[text(effect.as_str())],
        )
        .await?;
    if let Some(row) = rows.first() {
        let held = row.int(0)? as u64 == token;
        if held && row.text(1)? == EffectState::Completed.as_str() {
            return match row.opt_text(2)? {
                Some(stored) if same_result(&stored, result) => Ok(()),
                _ => Err(StoreError::OutcomeRecorded {
                    effect: effect.clone(),
                    token,
                }),
            };
        }
    }
    Err(refusal(tx, effect, token).await?)
}

/// Two results are the same when their texts are, or when both are JSON of one value (a
/// retry may spell its result anew).
fn same_result(stored: &str, presented: &str) -> bool {
    stored == presented
        || matches!(
            (
                serde_json::from_str::<serde_json::Value>(stored),
                serde_json::from_str::<serde_json::Value>(presented),
            ),
            (Ok(a), Ok(b)) if a == b
        )
}

/// `complete`'s guarded update (one row changed, or none when the effect is no longer the
/// holder's: then `refusal` says why), for a backend that sends several at once.
pub(crate) fn complete_statement<'a>(
    effect: &'a EffectId,
    token: u64,
    result: &'a str,
    now: OffsetDateTime,
) -> Statement<'a> {
    // Under `HOLDER`: without its CASE, a generic plan chose to scan every reserved effect
    // through their lease index (and hash-join them to a batch's completes) over the primary
    // key, once few effects were reserved (`tests/it/plans.rs`). It changes no indexed column,
    // so PostgreSQL makes it in place (schema v12).
    static COMPLETE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "UPDATE effects SET state = 'completed', result = $4, updated_at = $3 WHERE {HOLDER}"
        )
    });
    (
        COMPLETE.as_str(),
        vec![
            text(effect.as_str()),
            int(token as i64),
            int(ms(now)),
            text(result),
        ],
    )
}

/// Records the holder's failure; a retryable one lets the next delivery of the key take over.
pub(crate) async fn fail<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    retryable: bool,
    error: &str,
    now: OffsetDateTime,
) -> Result<()> {
    let state = EffectState::Failed { retryable }.as_str();
    let values = vec![text(error), text(state)];
    as_holder(tx, effect, token, now, "state = $5, error = $4", values).await
}

/// Extends the holder's lease to `now + lease` and returns the new deadline.
pub(crate) async fn heartbeat<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    lease: Duration,
    now: OffsetDateTime,
) -> Result<OffsetDateTime> {
    let until = ms(now).saturating_add(duration_ms(lease));
    as_holder(tx, effect, token, now, "lease_until = $4", vec![int(until)]).await?;
    from_ms(until)
}

/// A released effect taken by a worker or the forwarder (`$3` the holder), found by primary
/// key alone (see `sql`).
pub(crate) const TAKE_RELEASED: &str = "UPDATE effects SET state = 'reserved', fencing_token = fencing_token + 1, lease_until = $2, holder = $3, \
     updated_at = $4 WHERE id = $1 \
     AND (CASE WHEN state = 'released' THEN TRUE ELSE FALSE END) \
     RETURNING fencing_token, first_delivery, tenant, provider, env, event_type, key_value, authoritative_ref, queue_item_id";

/// The released effects, for a claimer to add its filters and order to. A released effect is
/// the only one without a lease, so PostgreSQL reads them from `effects_unleased` (schema v12:
/// no index names `state`, so a complete is made in place) and SQLite from `effects_released`.
pub(crate) const RELEASED: &str =
    "SELECT e.id FROM effects e WHERE e.lease_until IS NULL AND e.state = 'released'";

/// Hands the oldest released effect to `worker` under the next fencing token and a lease.
pub(crate) async fn claim<T: Tx + Send>(
    tx: &mut T,
    worker: &str,
    tenants: &TenantFilter,
    lease: Duration,
    now: OffsetDateTime,
) -> Result<Option<Claim>> {
    let now_ms = ms(now);
    let until = now_ms.saturating_add(duration_ms(lease));
    for _ in 0..MAX_ATTEMPTS {
        let mut q = Query::new(RELEASED);
        q.tenants("e.tenant", tenants);
        q.push(" ORDER BY e.created_at, e.id LIMIT 1");
        q.push(tx.dialect().skip_locked());
        let rows = tx.query(&q.sql, &q.params).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let id = row.text(0)?;
        let rows = tx
            .query(
                TAKE_RELEASED,
                &[text(id.as_str()), int(until), text(worker), int(now_ms)],
            )
            .await?;
        // With the row locked (PostgreSQL) or a single writer (SQLite) the update cannot miss;
        // looping anyway keeps a claim correct on engines with weaker locking.
        let Some(r) = rows.first() else { continue };
        return Ok(Some(Claim {
            effect: plan::parse_effect_id(&id)?,
            fencing_token: r.int(0)? as u64,
            lease_until: from_ms(until)?,
            delivery: plan::parse_delivery_id(&r.text(1)?)?,
            tenant: r.text(2)?,
            provider: r.text(3)?,
            env: r.text(4)?,
            event_type: r.opt_text(5)?,
            key: r.opt_text(6)?,
            authoritative_ref: r.opt_text(7)?,
            queue_item: r
                .opt_text(8)?
                .map(|q| plan::parse_queue_id(&q))
                .transpose()?,
        }));
    }
    Ok(None)
}

/// A new effect row, as a decision or a resolution writes it.
pub(crate) struct NewEffect<'a> {
    /// Owned: a new effect's id is made where its insert is.
    pub id: String,
    pub scope: &'a Scope,
    pub event_type: Option<&'a str>,
    pub strategy: Option<&'a StrategyRef>,
    pub key_value: Option<&'a str>,
    /// Where the effect stands in its key's scope, for an effect with a key.
    pub keyed: Option<Keyed<'a>>,
    pub durable: bool,
    pub state: EffectState,
    pub token: i64,
    pub lease_until: Option<i64>,
    pub holder: Option<&'a str>,
    pub discriminants: String,
    pub authoritative_ref: Option<&'a str>,
    pub first_delivery: &'a DeliveryId,
    pub queue_item: Option<&'a QueueItemId>,
    pub now: i64,
    pub resource: Option<&'a str>,
    pub critical: bool,
}

/// A keyed effect's place in its key's scope (schema version 13).
pub(crate) struct Keyed<'a> {
    /// The key's scope hash.
    pub hash: &'a str,
    /// Its number among the key's effects: one past the latest its writer saw. The number is
    /// unique with the hash, so a writer that saw an older latest writes nothing.
    pub seq: i64,
    /// Whether it holds the key's index slot, and until when (`None`: for good).
    pub slot: Option<Option<i64>>,
}

/// The insert of an effect: with a key, nothing when the key's scope already has an effect of
/// its number (`Keyed::seq`), so the writes that follow it are kept only if it wrote the row.
const INSERT_EFFECT: &str = "INSERT INTO effects (id, tenant, provider, env, event_type, strategy_name, strategy_version, \
     strategy_level, key_value, scope_hash, durable, state, fencing_token, lease_until, holder, discriminants, result, error, \
     authoritative_ref, first_delivery, queue_item_id, created_at, updated_at, resource, critical, scope_seq, indexed, \
     index_expires_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, NULL, NULL, $17, $18, $19, $20, $20, $21, $22, \
     $23, $24, $25) ON CONFLICT (scope_hash, scope_seq) DO NOTHING";

/// The number the next effect of the key with scope hash `hash` takes in its scope.
pub(crate) async fn next_seq<T: Tx + Send>(tx: &mut T, hash: &str) -> Result<i64> {
    let rows = tx
        .query(
            "SELECT COALESCE(MAX(scope_seq), 0) + 1 FROM effects WHERE scope_hash = $1",
            &[text(hash)],
        )
        .await?;
    rows.first()
        .ok_or_else(|| StoreError::corrupt("an aggregate returned no row"))?
        .int(0)
}

/// The statement that inserts `e`.
pub(crate) fn insert(e: NewEffect<'_>) -> Statement<'_> {
    let strategy = e.strategy;
    (
        INSERT_EFFECT,
        vec![
            text(e.id),
            text(e.scope.tenant.as_str()),
            text(e.scope.provider.as_str()),
            text(e.scope.env.as_str()),
            opt_text(e.event_type),
            opt_text(strategy.map(|s| s.name.as_str())),
            opt_int(strategy.map(|s| i64::from(s.version))),
            opt_text(strategy.map(|s| s.level.as_str())),
            opt_text(e.key_value),
            opt_text(e.keyed.as_ref().map(|k| k.hash)),
            Value::Bool(e.durable),
            text(e.state.as_str()),
            int(e.token),
            opt_int(e.lease_until),
            opt_text(e.holder),
            text(e.discriminants),
            opt_text(e.authoritative_ref),
            text(e.first_delivery.as_str()),
            opt_text(e.queue_item.map(QueueItemId::as_str)),
            int(e.now),
            opt_text(e.resource),
            Value::Bool(e.critical),
            opt_int(e.keyed.as_ref().map(|k| k.seq)),
            Value::Bool(e.keyed.as_ref().is_some_and(|k| k.slot.is_some())),
            opt_int(e.keyed.as_ref().and_then(|k| k.slot.flatten())),
        ],
    )
}

/// The statement that links a delivery to an effect (once per kind).
pub(crate) fn link<'a>(
    effect: &'a EffectId,
    delivery: &'a DeliveryId,
    kind: LinkKind,
    now: i64,
) -> Statement<'a> {
    (
        "INSERT INTO links (effect_id, delivery_id, kind, at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (effect_id, delivery_id, kind) DO NOTHING",
        vec![
            text(effect.as_str()),
            text(delivery.as_str()),
            text(kind.as_str()),
            int(now),
        ],
    )
}
