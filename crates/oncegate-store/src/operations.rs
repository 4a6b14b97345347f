//! The store's operations, written once against `sql::Tx` and run by both backends. Each
//! function runs inside a transaction the backend opened; none of them commits, so the backend
//! decides how (SQLite: batched group commits; PostgreSQL: one transaction per call, retried on
//! serialization failures).
//!
//! Every state change is a conditional statement (`ON CONFLICT`, `WHERE fencing_token = …`),
//! never a read followed by an unconditional write, so the same code is race-free on a single
//! SQLite writer and on many PostgreSQL clients at READ COMMITTED or SERIALIZABLE.

use std::collections::BTreeMap;

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_core::matrix::{Action, Confidence, Decision, Prior, MATRIX_VERSION};
use time::{Duration, OffsetDateTime};

use crate::codes::{self, duration_ms, from_ms, ms, new_id};
use crate::decision::{
    DecideOutcome, DecideRequest, Horizon, PriorView, ProofRecord, Reservation, StrategyRef,
};
use crate::delivery::{
    DeliveryFilter, DeliveryRecord, DeliverySummary, NewReception, TenantFilter, TransportKey,
    TransportStrength,
};
use crate::effect::{Claim, EffectLink, EffectRecord, EffectState, LinkKind};
use crate::error::StoreError;
use crate::plan::{self, EffectRow, Plan, Scope, MAX_ATTEMPTS};
use crate::queue::{
    Proposal, QueueCounts, QueueCursor, QueueFilter, QueueItem, QueueKind, QueuePage, QueueStatus,
    Resolution, ResolutionOutcome, ResolutionRecord,
};
use crate::report::{Report, ReportCounts, ReportRow};
use crate::retention::{PurgeCounts, PurgePolicy};
use crate::sql::{int, opt_int, opt_text, text, Query, Row, Statement, Tx, Value};

type Result<T> = std::result::Result<T, StoreError>;

// ---------------------------------------------------------------------------------------------
// Deliveries

const DELIVERY_COLS: &str =
    "d.id, d.tenant, d.provider, d.env, d.event_type, d.received_at, d.size, d.body_sha256, \
     d.headers_json, d.transport_key, d.transport_strength, d.correlation_id";

fn delivery_from(row: &Row, payload_at: Option<usize>) -> Result<DeliveryRecord> {
    let transport_key = match (row.opt_text(9)?, row.opt_text(10)?) {
        (Some(value), Some(strength)) => Some(TransportKey {
            value,
            strength: TransportStrength::parse(&strength).ok_or_else(|| {
                StoreError::corrupt(format!("unknown transport strength {strength:?}"))
            })?,
        }),
        _ => None,
    };
    Ok(DeliveryRecord {
        id: plan::parse_delivery_id(&row.text(0)?)?,
        tenant: row.text(1)?,
        provider: row.text(2)?,
        env: row.text(3)?,
        event_type: row.opt_text(4)?,
        received_at: from_ms(row.int(5)?)?,
        size: row.int(6)? as u64,
        body_sha256: row.text(7)?,
        headers_json: row.text(8)?,
        payload: match payload_at {
            Some(i) => row.opt_bytes(i)?,
            None => None,
        },
        transport_key,
        correlation_id: row.opt_text(11)?,
    })
}

/// Journals one reception under an id the caller generated (so a retried transaction keeps it).
pub(crate) async fn journal<T: Tx + Send>(
    tx: &mut T,
    id: &DeliveryId,
    r: &NewReception,
) -> Result<()> {
    tx.exec(
        "INSERT INTO deliveries (id, tenant, provider, env, event_type, received_at, size, body_sha256, headers_json, \
         payload, transport_key, transport_strength, correlation_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        &[
            text(id.as_str()),
            text(r.tenant.as_str()),
            text(r.provider.as_str()),
            text(r.env.as_str()),
            opt_text(r.event_type.as_deref()),
            int(ms(r.received_at)),
            int(i64::try_from(r.size).unwrap_or(i64::MAX)),
            text(r.body_sha256.as_str()),
            text(r.headers_json.as_str()),
            Value::Bytes(r.payload.clone()),
            opt_text(r.transport_key.as_ref().map(|k| k.value.as_str())),
            opt_text(r.transport_key.as_ref().map(|k| k.strength.as_str())),
            opt_text(r.correlation_id.as_deref()),
        ],
    )
    .await?;
    Ok(())
}

pub(crate) async fn delivery<T: Tx + Send>(
    tx: &mut T,
    id: &DeliveryId,
) -> Result<Option<DeliveryRecord>> {
    let sql = format!("SELECT {DELIVERY_COLS}, d.payload FROM deliveries d WHERE d.id = $1");
    let rows = tx.query(&sql, &[text(id.as_str())]).await?;
    rows.first().map(|r| delivery_from(r, Some(12))).transpose()
}

pub(crate) async fn deliveries<T: Tx + Send>(
    tx: &mut T,
    f: &DeliveryFilter,
) -> Result<Vec<DeliverySummary>> {
    let mut q = Query::new(&format!(
        "SELECT {DELIVERY_COLS}, p.action, p.reason, p.key_value, p.effect_id \
         FROM deliveries d LEFT JOIN proofs p ON p.delivery_id = d.id WHERE 1 = 1"
    ));
    q.tenants("d.tenant", &f.tenants);
    q.eq_if("d.provider", f.provider.as_deref());
    q.eq_if("d.env", f.env.as_deref());
    q.eq_if("d.event_type", f.event_type.as_deref());
    q.eq_if("p.action", f.action.map(Action::as_str));
    q.eq_if("p.key_value", f.key.as_deref());
    q.eq_if("d.correlation_id", f.correlation_id.as_deref());
    q.eq_if("d.transport_key", f.transport_key.as_deref());
    if let Some(since) = f.since {
        let p = q.bind(int(ms(since)));
        q.push(&format!(" AND d.received_at >= {p}"));
    }
    if let Some(until) = f.until {
        let p = q.bind(int(ms(until)));
        q.push(&format!(" AND d.received_at < {p}"));
    }
    if let Some(before) = &f.before {
        let p = q.bind(text(before.as_str()));
        q.push(&format!(" AND d.id < {p}"));
    }
    let p = q.bind(int(i64::from(f.limit)));
    q.push(&format!(" ORDER BY d.id DESC LIMIT {p}"));
    let rows = tx.query(&q.sql, &q.params).await?;
    rows.iter()
        .map(|r| {
            Ok(DeliverySummary {
                delivery: delivery_from(r, None)?,
                action: r
                    .opt_text(12)?
                    .map(|a| {
                        Action::parse(&a)
                            .ok_or_else(|| StoreError::corrupt(format!("unknown action {a:?}")))
                    })
                    .transpose()?,
                reason: r.opt_text(13)?,
                key: r.opt_text(14)?,
                effect: r
                    .opt_text(15)?
                    .map(|e| plan::parse_effect_id(&e))
                    .transpose()?,
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The decision transaction

async fn scope<T: Tx + Send>(tx: &mut T, delivery: &DeliveryId) -> Result<Scope> {
    let rows = tx
        .query(
            "SELECT d.tenant, d.provider, d.env, d.event_type, d.transport_key, d.transport_strength, d.body_sha256, \
             (SELECT COUNT(*) FROM proofs p WHERE p.delivery_id = d.id) \
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

fn event_type_of(scope: &Scope, req: &DecideRequest) -> Option<String> {
    req.event_type.clone().or_else(|| scope.event_type.clone())
}

async fn load_view<T: Tx + Send>(
    tx: &mut T,
    scope: &Scope,
    req: &DecideRequest,
) -> Result<PriorView> {
    let now = ms(req.now);
    let hash = req
        .key
        .as_ref()
        .map(|key| scope.key_hash(event_type_of(scope, req).as_deref(), key));
    // One statement, so one snapshot: at READ COMMITTED two separate look-ups could see the
    // index before a concurrent reservation committed and its effect after, and mistake a live
    // key for a purged one. It is also one round trip instead of three.
    //
    // `t`: the earliest decided, non-rejected delivery with the same strong transport key (one
    // with the same body first); a packet journaled but refused proves nothing. `i`/`e`: the
    // fast-index entry and its effect. `l`: the latest effect with this key, whatever the index
    // says, for when the horizon passed.
    let sql = format!(
        "SELECT t.id, t.body_sha256, i.scope_hash, i.expires_at, {indexed}, {latest}, {aliased} \
         FROM (SELECT CAST($1 AS TEXT) AS h) k \
         LEFT JOIN (SELECT d.id, d.body_sha256 FROM deliveries d JOIN proofs p ON p.delivery_id = d.id \
                    WHERE d.tenant = $2 AND d.provider = $3 AND d.env = $4 AND d.transport_key = $5 \
                    AND d.transport_strength = 'strong' AND d.id <> $6 AND p.action <> 'reject' \
                    ORDER BY CASE WHEN d.body_sha256 = $7 THEN 0 ELSE 1 END, d.id LIMIT 1) t ON 1 = 1 \
         LEFT JOIN effect_index i ON i.scope_hash = k.h \
         LEFT JOIN effects e ON e.id = i.effect_id \
         LEFT JOIN effects l ON l.id = (SELECT x.id FROM effects x WHERE x.scope_hash = k.h \
                                        ORDER BY x.created_at DESC, x.id DESC LIMIT 1) \
         LEFT JOIN effects a ON a.id = (SELECT y.effect_id FROM effect_aliases y WHERE y.alias_hash = k.h)",
        indexed = EFFECT_VIEW_COLS,
        latest = EFFECT_VIEW_COLS.replace("e.", "l."),
        aliased = EFFECT_VIEW_COLS.replace("e.", "a."),
    );
    let rows = tx
        .query(
            &sql,
            &[
                opt_text(hash.as_deref()),
                text(scope.tenant.as_str()),
                text(scope.provider.as_str()),
                text(scope.env.as_str()),
                opt_text(scope.strong_transport_key()),
                text(req.delivery.as_str()),
                text(scope.body_sha256.as_str()),
            ],
        )
        .await?;
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
        });
    };
    let indexed_at = 4;
    let latest_at = indexed_at + EFFECT_VIEW_COLS.split(',').count();
    let aliased_at = latest_at + EFFECT_VIEW_COLS.split(',').count();
    let index_live = row.opt_text(2)?.is_some()
        && match row.opt_int(3)? {
            None => true,
            Some(expires) => expires > now,
        };
    let mut effect = None;
    let mut index_without_effect = false;
    if index_live {
        if row.opt_text(indexed_at)?.is_some() {
            effect = Some(plan::prior_effect(effect_row(row, indexed_at)?, true, now)?);
        } else {
            index_without_effect = true;
        }
    } else if row.opt_text(latest_at)?.is_some() {
        // Past the horizon the fast index no longer answers, but a record of the key may
        // remain (its proof and effect are kept longer): the matrix hears `Purged`.
        effect = Some(plan::prior_effect(effect_row(row, latest_at)?, false, now)?);
    } else if row.opt_text(aliased_at)?.is_some() {
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
    })
}

fn already_decided(id: &DeliveryId) -> StoreError {
    StoreError::Conflict(format!("delivery {id} was already decided"))
}

/// The scope of a delivery as `journal` wrote it (not decided yet), so a backend that keeps it
/// can spare `decide` reading it back.
pub(crate) fn journaled_scope(r: &NewReception) -> Scope {
    Scope {
        tenant: r.tenant.clone(),
        provider: r.provider.clone(),
        env: r.env.clone(),
        event_type: r.event_type.clone(),
        transport_key: r.transport_key.as_ref().map(|k| k.value.clone()),
        transport_strength: r.transport_key.as_ref().map(|k| k.strength),
        body_sha256: r.body_sha256.clone(),
        decided: false,
    }
}

/// Reads the view, asks `choose` for a decision on it and applies it. When applying loses a
/// race (the key was reserved, or the effect moved, since the view was read), the view is read
/// again and `choose` asked again, so the answer is always based on what was true when it
/// committed.
///
/// `known` is the delivery's scope when the backend kept it from `journal`; it is read
/// otherwise. Either way a delivery is decided once: the proof's primary key refuses a second
/// decision, and with it everything that decision would have written.
pub(crate) async fn decide<T, F>(
    tx: &mut T,
    req: &DecideRequest,
    known: Option<Scope>,
    mut choose: F,
) -> Result<DecideOutcome>
where
    T: Tx + Send,
    F: FnMut(&PriorView) -> Decision + Send,
{
    let scope = match known {
        Some(scope) => scope,
        None => scope(tx, &req.delivery).await?,
    };
    if scope.decided {
        return Err(already_decided(&req.delivery));
    }
    for _ in 0..MAX_ATTEMPTS {
        let view = load_view(tx, &scope, req).await?;
        let decision = choose(&view);
        if let Some(outcome) = apply(tx, &scope, req, &view, decision).await? {
            return Ok(outcome);
        }
    }
    Err(StoreError::Conflict(format!(
        "the key of delivery {} kept changing while it was decided; try again",
        req.delivery
    )))
}

struct NewEffect<'a> {
    id: &'a EffectId,
    scope: &'a Scope,
    event_type: Option<&'a str>,
    strategy: Option<&'a StrategyRef>,
    key_value: Option<&'a str>,
    scope_hash: Option<&'a str>,
    durable: bool,
    state: EffectState,
    token: i64,
    lease_until: Option<i64>,
    holder: Option<&'a str>,
    discriminants: String,
    authoritative_ref: Option<&'a str>,
    first_delivery: &'a DeliveryId,
    queue_item: Option<&'a QueueItemId>,
    now: i64,
    resource: Option<&'a str>,
    critical: bool,
}

const INSERT_EFFECT: &str = "INSERT INTO effects (id, tenant, provider, env, event_type, strategy_name, strategy_version, \
     strategy_level, key_value, scope_hash, durable, state, fencing_token, lease_until, holder, discriminants, result, error, \
     authoritative_ref, first_delivery, queue_item_id, created_at, updated_at, resource, critical) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, NULL, NULL, $17, $18, $19, $20, $20, $21, $22)";

fn insert_effect(e: NewEffect<'_>) -> Statement {
    let strategy = e.strategy;
    (
        INSERT_EFFECT,
        vec![
            text(e.id.as_str()),
            text(e.scope.tenant.as_str()),
            text(e.scope.provider.as_str()),
            text(e.scope.env.as_str()),
            opt_text(e.event_type),
            opt_text(strategy.map(|s| s.name.as_str())),
            opt_int(strategy.map(|s| i64::from(s.version))),
            opt_text(strategy.map(|s| s.level.as_str())),
            opt_text(e.key_value),
            opt_text(e.scope_hash),
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
        ],
    )
}

pub(crate) fn link(
    effect: &EffectId,
    delivery: &DeliveryId,
    kind: LinkKind,
    now: i64,
) -> Statement {
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

fn horizon_parts(h: Option<Horizon>) -> (bool, Option<i64>) {
    match h {
        None => (false, None),
        Some(Horizon::Durable) => (true, None),
        Some(Horizon::For(d)) => (false, Some(duration_ms(d))),
    }
}

/// Applies a decision; `None` when its conditional write found the ground moved (nothing of
/// this attempt was written: everything else is kept only if that write changed a row).
async fn apply<T: Tx + Send>(
    tx: &mut T,
    scope: &Scope,
    req: &DecideRequest,
    view: &PriorView,
    decision: Decision,
) -> Result<Option<DecideOutcome>> {
    let now = ms(req.now);
    let event_type = event_type_of(scope, req);
    let key = req.key.as_ref();
    let hash = key.map(|k| scope.key_hash(event_type.as_deref(), k));
    let durable = matches!(key.map(|k| k.horizon), Some(Horizon::Durable));
    let lease_until = now.saturating_add(duration_ms(req.lease));
    let discriminants = codes::map_json(&key.map(|k| k.discriminants.clone()).unwrap_or_default());
    let existing = view.effect.as_ref().map(|e| e.id.clone());

    let mut effect = None;
    let mut reservation = None;
    let mut queue_item = None;
    // The one conditional write that settles a race, if the plan has one, and everything
    // after it, kept only if it changed a row: all sent at once where the backend can (one
    // statement and one round trip on PostgreSQL).
    let mut head: Option<Statement> = None;
    let mut writes: Vec<Statement> = Vec::new();
    // A new effect reserved for this delivery with fencing token 1, in the unique index
    // (`scope_hash` given) or beside it (a possible duplicate, an unkeyed delivery).
    let reserve_new = |writes: &mut Vec<Statement>, id: &EffectId, scope_hash: Option<&str>| {
        writes.push(insert_effect(NewEffect {
            id,
            scope,
            event_type: event_type.as_deref(),
            strategy: key.map(|k| &k.strategy),
            key_value: key.map(|k| k.value.as_str()),
            scope_hash,
            durable,
            state: EffectState::Reserved,
            token: 1,
            lease_until: Some(lease_until),
            holder: None,
            discriminants: discriminants.clone(),
            authoritative_ref: None,
            first_delivery: &req.delivery,
            queue_item: None,
            now,
            resource: req.resource.as_deref(),
            critical: req.critical,
        }));
        writes.push(link(id, &req.delivery, LinkKind::Reserved, now));
        Ok::<_, StoreError>(Reservation {
            effect: id.clone(),
            fencing_token: 1,
            lease_until: from_ms(lease_until)?,
        })
    };
    match plan::plan(key, view, &decision) {
        Plan::ReserveIndexed => {
            let id = EffectId::from_u128(new_id(req.now));
            let hash = hash.clone().unwrap_or_default();
            let expires = match key.map(|k| k.horizon) {
                Some(Horizon::For(d)) => Some(now.saturating_add(duration_ms(d))),
                _ => None,
            };
            // The atomic reservation: the unique index decides the winner. An expired slot
            // (past its horizon, not yet purged) may be taken over; a live one never.
            head = Some((
                "INSERT INTO effect_index (scope_hash, effect_id, expires_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (scope_hash) DO UPDATE SET effect_id = excluded.effect_id, expires_at = excluded.expires_at \
                 WHERE effect_index.expires_at IS NOT NULL AND effect_index.expires_at <= $4",
                vec![text(hash.as_str()), text(id.as_str()), opt_int(expires), int(now)],
            ));
            reservation = Some(reserve_new(&mut writes, &id, Some(hash.as_str()))?);
            effect = Some(id);
        }
        Plan::Takeover { effect: id, token } => {
            // Only the holder of the token that was read may move the effect on; anyone who
            // moved it first (another takeover, a late complete) makes this change no row.
            head = Some((
                "UPDATE effects SET state = 'reserved', fencing_token = fencing_token + 1, lease_until = $3, \
                 holder = NULL, error = NULL, updated_at = $4 \
                 WHERE id = $1 AND fencing_token = $2 \
                 AND (state IN ('failed_retryable', 'unknown') OR (state = 'reserved' AND lease_until <= $4))",
                vec![text(id.as_str()), int(token as i64), int(lease_until), int(now)],
            ));
            writes.push(link(&id, &req.delivery, LinkKind::Reserved, now));
            reservation = Some(Reservation {
                effect: id.clone(),
                fencing_token: token + 1,
                lease_until: from_ms(lease_until)?,
            });
            effect = Some(id);
        }
        Plan::ReserveUnindexed => {
            let id = EffectId::from_u128(new_id(req.now));
            reservation = Some(reserve_new(&mut writes, &id, hash.as_deref())?);
            effect = Some(id);
        }
        Plan::Link { effect: id, kind } => {
            writes.push(link(&id, &req.delivery, kind, now));
            effect = Some(id);
        }
        Plan::Queue(kind) => {
            let id = QueueItemId::from_u128(new_id(req.now));
            let (q_durable, horizon_ms) = horizon_parts(key.map(|k| k.horizon));
            let strategy = key.map(|k| &k.strategy);
            let proposed = Proposal::for_decision(&view.differences, &decision.flags);
            writes.push((
                "INSERT INTO queue_items (id, kind, status, delivery_id, tenant, provider, env, event_type, strategy_name, \
                 strategy_version, strategy_level, key_value, scope_hash, durable, horizon_ms, discriminants, existing_effect, \
                 first_delivery, differences, existing_result, proposed, reason, created_at, resource, critical) \
                 VALUES ($1, $2, 'open', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)",
                vec![
                    text(id.as_str()),
                    text(kind.as_str()),
                    text(req.delivery.as_str()),
                    text(scope.tenant.as_str()),
                    text(scope.provider.as_str()),
                    text(scope.env.as_str()),
                    opt_text(event_type.as_deref()),
                    opt_text(strategy.map(|s| s.name.as_str())),
                    opt_int(strategy.map(|s| i64::from(s.version))),
                    opt_text(strategy.map(|s| s.level.as_str())),
                    opt_text(key.map(|k| k.value.as_str())),
                    opt_text(hash.as_deref()),
                    Value::Bool(q_durable),
                    opt_int(horizon_ms),
                    text(discriminants.clone()),
                    opt_text(existing.as_ref().map(EffectId::as_str)),
                    opt_text(view.effect.as_ref().map(|e| e.first_delivery.as_str())),
                    text(codes::differences_json(&view.differences)),
                    opt_text(plan::existing_result(view)),
                    text(proposed.as_str()),
                    text(decision.reason.as_str()),
                    int(now),
                    opt_text(req.resource.as_deref()),
                    Value::Bool(req.critical),
                ],
            ));
            queue_item = Some(id);
            effect = existing.clone();
        }
        Plan::ProofOnly => {
            if decision.action != Action::Reject {
                effect = existing.clone();
            }
        }
    }

    if req.event_type.is_some() && scope.event_type.is_none() {
        writes.push((
            "UPDATE deliveries SET event_type = $2 WHERE id = $1",
            vec![
                text(req.delivery.as_str()),
                opt_text(req.event_type.as_deref()),
            ],
        ));
    }

    let reference = plan::reference_delivery(view);
    let strategy = key.map(|k| &k.strategy);
    // No `ON CONFLICT` here: a delivery decided concurrently makes this insert fail, which
    // undoes every write of this decision (they are sent together with the commit).
    writes.push((
        "INSERT INTO proofs (delivery_id, tenant, provider, env, event_type, decided_at, strategy_name, strategy_version, \
         strategy_level, key_value, confidence, prior, transport, action, layer, reason, flags, rule, matrix_version, \
         reference_delivery, effect_id, queue_item_id, differences, details) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)",
            vec![
                text(req.delivery.as_str()),
                text(scope.tenant.as_str()),
                text(scope.provider.as_str()),
                text(scope.env.as_str()),
                opt_text(event_type.as_deref()),
                int(now),
                opt_text(strategy.map(|s| s.name.as_str())),
                opt_int(strategy.map(|s| i64::from(s.version))),
                opt_text(strategy.map(|s| s.level.as_str())),
                opt_text(key.map(|k| k.value.as_str())),
                opt_text(key.map(|k| k.confidence.as_str())),
                text(codes::prior_code(view.prior)),
                text(codes::transport_code(view.transport)),
                text(decision.action.as_str()),
                opt_text(decision.layer.map(|l| l.as_str())),
                text(decision.reason.as_str()),
                text(codes::flags_json(&decision.flags)),
                text(decision.rule),
                int(i64::from(MATRIX_VERSION)),
                opt_text(reference.as_ref().map(DeliveryId::as_str)),
                opt_text(effect.as_ref().map(EffectId::as_str)),
                opt_text(queue_item.as_ref().map(QueueItemId::as_str)),
                text(codes::differences_json(&view.differences)),
                text(req.details_json.as_str()),
            ],
    ));
    let applied = match tx.write_decision(head.as_ref(), &writes).await {
        Ok(applied) => applied,
        // The proof's primary key: another transaction decided this delivery concurrently.
        // Nothing of this attempt was kept.
        Err(StoreError::Conflict(_)) => return Err(already_decided(&req.delivery)),
        Err(e) => return Err(e),
    };
    if !applied {
        return Ok(None);
    }

    let existing_result = if decision.action == Action::Ignore {
        plan::existing_result(view)
    } else {
        None
    };
    Ok(Some(DecideOutcome {
        prior: view.prior,
        transport: view.transport,
        effect,
        reservation,
        reference_delivery: reference,
        existing_result,
        queue_item,
        decision,
    }))
}

// ---------------------------------------------------------------------------------------------
// Proofs

const PROOF_COLS: &str = "p.delivery_id, p.tenant, p.provider, p.env, p.event_type, p.decided_at, p.strategy_name, \
     p.strategy_version, p.strategy_level, p.key_value, p.confidence, p.prior, p.transport, p.action, p.layer, p.reason, \
     p.flags, p.rule, p.matrix_version, p.reference_delivery, p.effect_id, p.queue_item_id, p.differences, p.details";

fn strategy_from(row: &Row, at: usize) -> Result<Option<StrategyRef>> {
    Ok(
        match (
            row.opt_text(at)?,
            row.opt_int(at + 1)?,
            row.opt_text(at + 2)?,
        ) {
            (Some(name), Some(version), Some(level)) => Some(StrategyRef {
                name,
                version: u32::try_from(version)
                    .map_err(|_| StoreError::corrupt("a strategy version is out of range"))?,
                level,
            }),
            _ => None,
        },
    )
}

fn proof_from(row: &Row) -> Result<ProofRecord> {
    let action = row.text(13)?;
    Ok(ProofRecord {
        delivery: plan::parse_delivery_id(&row.text(0)?)?,
        tenant: row.text(1)?,
        provider: row.text(2)?,
        env: row.text(3)?,
        event_type: row.opt_text(4)?,
        decided_at: from_ms(row.int(5)?)?,
        strategy: strategy_from(row, 6)?,
        key: row.opt_text(9)?,
        confidence: row
            .opt_text(10)?
            .map(|c| {
                Confidence::parse(&c)
                    .ok_or_else(|| StoreError::corrupt(format!("unknown confidence {c:?}")))
            })
            .transpose()?,
        prior: codes::parse_prior(&row.text(11)?)?,
        transport: codes::parse_transport(&row.text(12)?)?,
        action: Action::parse(&action)
            .ok_or_else(|| StoreError::corrupt(format!("unknown action {action:?}")))?,
        layer: row
            .opt_text(14)?
            .map(|l| codes::parse_layer(&l))
            .transpose()?,
        reason: row.text(15)?,
        flags: codes::parse_flags(&row.text(16)?)?,
        rule: row.text(17)?,
        matrix_version: u32::try_from(row.int(18)?)
            .map_err(|_| StoreError::corrupt("a matrix version is out of range"))?,
        reference_delivery: row
            .opt_text(19)?
            .map(|d| plan::parse_delivery_id(&d))
            .transpose()?,
        effect: row
            .opt_text(20)?
            .map(|e| plan::parse_effect_id(&e))
            .transpose()?,
        queue_item: row.opt_text(21)?.map(|q| parse_queue_id(&q)).transpose()?,
        differences: codes::parse_differences(&row.text(22)?)?,
        details_json: row.text(23)?,
    })
}

fn parse_queue_id(s: &str) -> Result<QueueItemId> {
    s.parse()
        .map_err(|_| StoreError::corrupt(format!("stored queue item id {s:?} is malformed")))
}

pub(crate) async fn proof<T: Tx + Send>(
    tx: &mut T,
    id: &DeliveryId,
) -> Result<Option<ProofRecord>> {
    let sql = format!("SELECT {PROOF_COLS} FROM proofs p WHERE p.delivery_id = $1");
    let rows = tx.query(&sql, &[text(id.as_str())]).await?;
    rows.first().map(proof_from).transpose()
}

// ---------------------------------------------------------------------------------------------
// Effects: outcomes, leases, reads and claims

pub(crate) const EFFECT_COLS: &str = "e.id, e.tenant, e.provider, e.env, e.event_type, e.strategy_name, e.strategy_version, \
     e.strategy_level, e.key_value, e.durable, e.state, e.fencing_token, e.lease_until, e.holder, e.discriminants, \
     e.result, e.error, e.authoritative_ref, e.first_delivery, e.queue_item_id, e.created_at, e.updated_at, e.resource, e.critical";

pub(crate) fn effect_from(row: &Row) -> Result<EffectRecord> {
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
        queue_item: row.opt_text(19)?.map(|q| parse_queue_id(&q)).transpose()?,
        created_at: from_ms(row.int(20)?)?,
        updated_at: from_ms(row.int(21)?)?,
        deliveries: Vec::new(),
        resource: row.opt_text(22)?,
        critical: row.boolean(23)?,
    })
}

pub(crate) async fn effect<T: Tx + Send>(
    tx: &mut T,
    id: &EffectId,
) -> Result<Option<EffectRecord>> {
    let sql = format!("SELECT {EFFECT_COLS} FROM effects e WHERE e.id = $1");
    let rows = tx.query(&sql, &[text(id.as_str())]).await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let mut record = effect_from(row)?;
    let links = tx
        .query(
            "SELECT l.delivery_id, l.kind, l.at FROM links l WHERE l.effect_id = $1 ORDER BY l.at, l.delivery_id",
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

/// After a guarded update changed nothing: says why, from the effect as it stands.
async fn refusal<T: Tx + Send>(tx: &mut T, effect: &EffectId, token: u64) -> Result<StoreError> {
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
/// still running.
const HOLDER: &str = "id = $1 AND fencing_token = $2 AND state = 'reserved' AND lease_until > $3";

pub(crate) async fn complete<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    result: &str,
    now: OffsetDateTime,
) -> Result<()> {
    let sql = format!(
        "UPDATE effects SET state = 'completed', result = $4, updated_at = $3 WHERE {HOLDER}"
    );
    let n = tx
        .exec(
            &sql,
            &[
                text(effect.as_str()),
                int(token as i64),
                int(ms(now)),
                text(result),
            ],
        )
        .await?;
    if n == 0 {
        return Err(refusal(tx, effect, token).await?);
    }
    Ok(())
}

pub(crate) async fn fail<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    retryable: bool,
    error: &str,
    now: OffsetDateTime,
) -> Result<()> {
    let state = EffectState::Failed { retryable }.as_str();
    let sql = format!("UPDATE effects SET state = $5, error = $4, updated_at = $3 WHERE {HOLDER}");
    let n = tx
        .exec(
            &sql,
            &[
                text(effect.as_str()),
                int(token as i64),
                int(ms(now)),
                text(error),
                text(state),
            ],
        )
        .await?;
    if n == 0 {
        return Err(refusal(tx, effect, token).await?);
    }
    Ok(())
}

pub(crate) async fn heartbeat<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    lease: Duration,
    now: OffsetDateTime,
) -> Result<OffsetDateTime> {
    let until = ms(now).saturating_add(duration_ms(lease));
    let sql = format!("UPDATE effects SET lease_until = $4, updated_at = $3 WHERE {HOLDER}");
    let n = tx
        .exec(
            &sql,
            &[
                text(effect.as_str()),
                int(token as i64),
                int(ms(now)),
                int(until),
            ],
        )
        .await?;
    if n == 0 {
        return Err(refusal(tx, effect, token).await?);
    }
    from_ms(until)
}

pub(crate) async fn expire_leases<T: Tx + Send>(
    tx: &mut T,
    now: OffsetDateTime,
) -> Result<Vec<EffectId>> {
    // Critical effects become `unknown` with a "verify before retry" item; reversible ones are
    // released for takeover under a new token (see `reconciliation::expire_leases`).
    crate::reconciliation::expire_leases(tx, now).await
}

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
        let mut q = Query::new("SELECT e.id FROM effects e WHERE e.state = 'released'");
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
                "UPDATE effects SET state = 'reserved', fencing_token = fencing_token + 1, lease_until = $2, holder = $3, \
                 updated_at = $4 WHERE id = $1 AND state = 'released' \
                 RETURNING fencing_token, first_delivery, tenant, provider, env, event_type, key_value, authoritative_ref, queue_item_id",
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
            queue_item: r.opt_text(8)?.map(|q| parse_queue_id(&q)).transpose()?,
        }));
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------------
// The queue

pub(crate) const QUEUE_COLS: &str = "q.id, q.kind, q.status, q.delivery_id, q.tenant, q.provider, q.env, q.event_type, \
     q.strategy_name, q.strategy_version, q.strategy_level, q.key_value, q.durable, q.horizon_ms, q.discriminants, \
     q.existing_effect, q.first_delivery, q.differences, q.existing_result, q.proposed, q.reason, q.created_at, \
     q.resolution_outcome, q.resolution_ref, q.resolution_note, q.resolution_by, q.resolved_at, q.resolution_effect, q.scope_hash, \
     q.resource, q.attempts, q.last_attempt_at, q.last_error, q.last_evidence, q.resolution_evidence, q.critical";

pub(crate) fn queue_from(row: &Row) -> Result<QueueItem> {
    let kind = row.text(1)?;
    let status = row.text(2)?;
    let proposed = row.text(19)?;
    let horizon = match (row.boolean(12)?, row.opt_int(13)?) {
        (true, _) => Some(Horizon::Durable),
        (false, Some(h)) => Some(Horizon::For(Duration::milliseconds(h))),
        (false, None) => None,
    };
    let resolution = match (row.opt_text(22)?, row.opt_int(26)?) {
        (Some(outcome), Some(at)) => Some(ResolutionRecord {
            resolution: Resolution {
                outcome: ResolutionOutcome::parse(&outcome).ok_or_else(|| {
                    StoreError::corrupt(format!("unknown resolution {outcome:?}"))
                })?,
                authoritative_ref: row.opt_text(23)?,
                note: row.opt_text(24)?.unwrap_or_default(),
                by: row.opt_text(25)?.unwrap_or_default(),
                at: from_ms(at)?,
            },
            effect: row
                .opt_text(27)?
                .map(|e| plan::parse_effect_id(&e))
                .transpose()?,
        }),
        _ => None,
    };
    Ok(QueueItem {
        id: parse_queue_id(&row.text(0)?)?,
        kind: QueueKind::parse(&kind)
            .ok_or_else(|| StoreError::corrupt(format!("unknown queue kind {kind:?}")))?,
        status: QueueStatus::parse(&status)
            .ok_or_else(|| StoreError::corrupt(format!("unknown queue status {status:?}")))?,
        delivery: plan::parse_delivery_id(&row.text(3)?)?,
        tenant: row.text(4)?,
        provider: row.text(5)?,
        env: row.text(6)?,
        event_type: row.opt_text(7)?,
        strategy: strategy_from(row, 8)?,
        key: row.opt_text(11)?,
        horizon,
        discriminants: codes::parse_map(&row.text(14)?)?,
        existing_effect: row
            .opt_text(15)?
            .map(|e| plan::parse_effect_id(&e))
            .transpose()?,
        first_delivery: row
            .opt_text(16)?
            .map(|d| plan::parse_delivery_id(&d))
            .transpose()?,
        differences: codes::parse_differences(&row.text(17)?)?,
        existing_result: row.opt_text(18)?,
        proposed: Proposal::parse(&proposed)
            .ok_or_else(|| StoreError::corrupt(format!("unknown proposal {proposed:?}")))?,
        reason: row.text(20)?,
        created_at: from_ms(row.int(21)?)?,
        resolution,
        resource: row.opt_text(29)?,
        reconcile_attempts: row.int(30)?.max(0) as u64,
        last_attempt_at: row.opt_int(31)?.map(from_ms).transpose()?,
        last_error: row.opt_text(32)?,
        last_evidence: row.opt_text(33)?,
        resolution_evidence: row.opt_text(34)?,
        critical: row.boolean(35)?,
    })
}

pub(crate) async fn queue_item<T: Tx + Send>(
    tx: &mut T,
    id: &QueueItemId,
) -> Result<Option<QueueItem>> {
    let sql = format!("SELECT {QUEUE_COLS} FROM queue_items q WHERE q.id = $1");
    let rows = tx.query(&sql, &[text(id.as_str())]).await?;
    rows.first().map(queue_from).transpose()
}

/// The filters a listing and its counts share: tenant, provider, type, delivery and age.
fn queue_scope(q: &mut Query, f: &QueueFilter) {
    q.tenants("q.tenant", &f.tenants);
    q.eq_if("q.provider", f.provider.as_deref());
    q.eq_if("q.event_type", f.event_type.as_deref());
    q.eq_if("q.delivery_id", f.delivery.as_ref().map(DeliveryId::as_str));
    if let Some(before) = f.created_before {
        let p = q.bind(int(ms(before)));
        q.push(&format!(" AND q.created_at < {p}"));
    }
    if let Some(since) = f.created_since {
        let p = q.bind(int(ms(since)));
        q.push(&format!(" AND q.created_at >= {p}"));
    }
}

pub(crate) async fn queue_list<T: Tx + Send>(
    tx: &mut T,
    f: &QueueFilter,
) -> Result<Vec<QueueItem>> {
    let mut q = Query::new(&format!(
        "SELECT {QUEUE_COLS} FROM queue_items q WHERE 1 = 1"
    ));
    queue_scope(&mut q, f);
    q.eq_if("q.status", f.status.map(QueueStatus::as_str));
    q.eq_if("q.kind", f.kind.map(QueueKind::as_str));
    if let Some(after) = &f.after {
        // Keyset paging on the listing's own order: rows inserted meanwhile are created
        // later, so they sort after the cursor and never shift a page already handed out.
        let c = q.bind(int(ms(after.created_at)));
        let i = q.bind(text(after.id.as_str()));
        // The `>=` bound alone is what an index on `created_at` can seek to; the rest drops
        // the items of the cursor's own instant up to and including its id.
        q.push(&format!(
            " AND q.created_at >= {c} AND (q.created_at > {c} OR q.id > {i})"
        ));
    }
    if let Some(before) = &f.before {
        let c = q.bind(int(ms(before.created_at)));
        let i = q.bind(text(before.id.as_str()));
        q.push(&format!(
            " AND q.created_at <= {c} AND (q.created_at < {c} OR q.id < {i})"
        ));
    }
    // Paging backwards reads the items nearest the cursor first, then lists them oldest first.
    let backwards = f.before.is_some() && f.after.is_none();
    let order = if backwards {
        "q.created_at DESC, q.id DESC"
    } else {
        "q.created_at, q.id"
    };
    let p = q.bind(int(i64::from(f.limit)));
    q.push(&format!(" ORDER BY {order} LIMIT {p}"));
    let rows = tx.query(&q.sql, &q.params).await?;
    let mut items = rows.iter().map(queue_from).collect::<Result<Vec<_>>>()?;
    if backwards {
        items.reverse();
    }
    Ok(items)
}

/// Whether the listing holds any item after `after` (or before `before`).
async fn queue_has<T: Tx + Send>(
    tx: &mut T,
    f: &QueueFilter,
    after: Option<QueueCursor>,
    before: Option<QueueCursor>,
) -> Result<bool> {
    let probe = QueueFilter {
        after,
        before,
        limit: 1,
        ..f.clone()
    };
    Ok(!queue_list(tx, &probe).await?.is_empty())
}

/// Items per kind and status under the filter's tenant, provider, type, delivery and age.
pub(crate) async fn queue_counts<T: Tx + Send>(tx: &mut T, f: &QueueFilter) -> Result<QueueCounts> {
    let mut q = Query::new("SELECT q.kind, q.status, COUNT(*) FROM queue_items q WHERE 1 = 1");
    queue_scope(&mut q, f);
    q.push(" GROUP BY q.kind, q.status");
    let mut counts = QueueCounts::default();
    for row in tx.query(&q.sql, &q.params).await? {
        let (kind, status) = (row.text(0)?, row.text(1)?);
        let kind = QueueKind::parse(&kind)
            .ok_or_else(|| StoreError::corrupt(format!("unknown queue kind {kind:?}")))?;
        let n = row.int(2)?.max(0) as u64;
        let slot = counts.of(kind);
        match QueueStatus::parse(&status) {
            Some(QueueStatus::Open) => slot.open = n,
            Some(QueueStatus::Resolved) => slot.resolved = n,
            None => {
                return Err(StoreError::corrupt(format!(
                    "unknown queue status {status:?}"
                )))
            }
        }
    }
    Ok(counts)
}

/// One page and the counts, in the caller's (one) transaction. One row more than the page
/// is read to know whether another page follows in the reading direction; the other side is
/// probed for one item when a cursor was given.
pub(crate) async fn queue_page<T: Tx + Send>(tx: &mut T, f: &QueueFilter) -> Result<QueuePage> {
    let mut probe = f.clone();
    probe.limit = f.limit.saturating_add(1);
    let mut items = queue_list(tx, &probe).await?;
    let more = items.len() > f.limit as usize;
    let backwards = f.before.is_some() && f.after.is_none();
    let (next, previous) = if backwards {
        if more {
            items.remove(0);
        }
        let previous = if more {
            items.first().map(QueueCursor::after)
        } else {
            None
        };
        let next = match items.last() {
            Some(last) => queue_has(tx, f, Some(QueueCursor::after(last)), None)
                .await?
                .then(|| QueueCursor::after(last)),
            None => None,
        };
        (next, previous)
    } else {
        items.truncate(f.limit as usize);
        let next = if more {
            items.last().map(QueueCursor::after)
        } else {
            None
        };
        let previous = match (&f.after, items.first()) {
            (Some(_), Some(first)) => queue_has(tx, f, None, Some(QueueCursor::after(first)))
                .await?
                .then(|| QueueCursor::after(first)),
            _ => None,
        };
        (next, previous)
    };
    let counts = queue_counts(tx, f).await?;
    Ok(QueuePage {
        items,
        next,
        previous,
        counts,
    })
}

/// Marks an open item resolved; `Conflict` when it is not open. This guarded update comes
/// first in every resolution: of two concurrent resolutions exactly one changes the row, and
/// the other writes nothing.
pub(crate) async fn mark_resolved<T: Tx + Send>(
    tx: &mut T,
    id: &QueueItemId,
    r: &Resolution,
    effect: Option<&EffectId>,
) -> Result<()> {
    let n = tx
        .exec(
            "UPDATE queue_items SET status = 'resolved', resolution_outcome = $2, resolution_ref = $3, resolution_note = $4, \
             resolution_by = $5, resolved_at = $6, resolution_effect = $7 WHERE id = $1 AND status = 'open'",
            &[
                text(id.as_str()),
                text(r.outcome.as_str()),
                opt_text(r.authoritative_ref.as_deref()),
                text(r.note.as_str()),
                text(r.by.as_str()),
                int(ms(r.at)),
                opt_text(effect.map(EffectId::as_str)),
            ],
        )
        .await?;
    if n == 0 {
        return Err(StoreError::Conflict(format!(
            "queue item {id} is already resolved"
        )));
    }
    Ok(())
}

pub(crate) async fn resolve<T: Tx + Send>(
    tx: &mut T,
    id: &QueueItemId,
    r: &Resolution,
) -> Result<QueueItem> {
    let sql = format!("SELECT {QUEUE_COLS} FROM queue_items q WHERE q.id = $1");
    let rows = tx.query(&sql, &[text(id.as_str())]).await?;
    let row = rows.first().ok_or_else(|| StoreError::NotFound {
        what: "queue item",
        id: id.to_string(),
    })?;
    let item = queue_from(row)?;
    let scope_hash = row.opt_text(28)?;
    let (resource, critical) = (item.resource.clone(), item.critical);
    if item.status == QueueStatus::Resolved {
        return Err(StoreError::Conflict(format!(
            "queue item {id} is already resolved"
        )));
    }
    // An item waiting on an effect whose outcome is unknown is a verdict on that effect, and
    // on every other item waiting on it (see `settlement`).
    if let Some(unknown) = crate::settlement::waiting_on(tx, &item, r.at).await? {
        if let Some(settled) = crate::settlement::settle(tx, &item, &unknown, r).await? {
            return Ok(settled);
        }
    }
    let now = ms(r.at);
    let effect = match r.outcome {
        ResolutionOutcome::Distinct => Some(EffectId::from_u128(new_id(r.at))),
        ResolutionOutcome::Duplicate => item.existing_effect.clone(),
    };
    mark_resolved(tx, id, r, effect.as_ref()).await?;
    match (r.outcome, &effect) {
        (ResolutionOutcome::Distinct, Some(eid)) => {
            // Released outside the unique index: it shares its key with the effect it was
            // told apart from, and its identity is enriched by the authoritative reference.
            let scope = Scope {
                tenant: item.tenant.clone(),
                provider: item.provider.clone(),
                env: item.env.clone(),
                event_type: item.event_type.clone(),
                transport_key: None,
                transport_strength: None,
                body_sha256: String::new(),
                decided: true,
            };
            let insert = insert_effect(NewEffect {
                id: eid,
                scope: &scope,
                event_type: item.event_type.as_deref(),
                strategy: item.strategy.as_ref(),
                key_value: item.key.as_deref(),
                scope_hash: scope_hash.as_deref(),
                durable: item.horizon == Some(Horizon::Durable),
                state: EffectState::Released,
                token: 0,
                lease_until: None,
                holder: None,
                discriminants: codes::map_json(&item.discriminants),
                authoritative_ref: r.authoritative_ref.as_deref(),
                first_delivery: &item.delivery,
                queue_item: Some(id),
                now,
                resource: resource.as_deref(),
                critical,
            });
            tx.exec_all(&[
                insert,
                link(eid, &item.delivery, LinkKind::ResolvedDistinct, now),
            ])
            .await?;
        }
        (ResolutionOutcome::Duplicate, Some(eid)) => {
            tx.exec_all(&[link(eid, &item.delivery, LinkKind::ResolvedDuplicate, now)])
                .await?;
        }
        // A duplicate of nothing stored (e.g. a delivery without a contract): the verdict is
        // recorded on the item and there is nothing to link.
        _ => {}
    }
    queue_item(tx, id)
        .await?
        .ok_or_else(|| StoreError::NotFound {
            what: "queue item",
            id: id.to_string(),
        })
}

// ---------------------------------------------------------------------------------------------
// Report

type Group = (String, String, String, Option<String>);

pub(crate) async fn report<T: Tx + Send>(
    tx: &mut T,
    tenants: &TenantFilter,
    since: OffsetDateTime,
) -> Result<Report> {
    let mut groups: BTreeMap<Group, ReportCounts> = BTreeMap::new();
    let group =
        |r: &Row| -> Result<Group> { Ok((r.text(0)?, r.text(1)?, r.text(2)?, r.opt_text(3)?)) };
    let count = |r: &Row, i: usize| -> Result<u64> { Ok(r.int(i)?.max(0) as u64) };

    let mut q = Query::new(
        "SELECT d.tenant, d.provider, d.env, d.event_type, COUNT(*), \
         COUNT(CASE WHEN p.action = 'reject' THEN 1 END), \
         COUNT(CASE WHEN p.action = 'process' THEN 1 END), \
         COUNT(CASE WHEN p.action = 'ignore' AND p.layer = 'transport' THEN 1 END), \
         COUNT(CASE WHEN p.action = 'ignore' AND (p.layer IS NULL OR p.layer <> 'transport') THEN 1 END), \
         COUNT(CASE WHEN p.action = 'quarantine' THEN 1 END), \
         COUNT(CASE WHEN p.action = 'reconcile' THEN 1 END) \
         FROM deliveries d LEFT JOIN proofs p ON p.delivery_id = d.id WHERE 1 = 1",
    );
    let p = q.bind(int(ms(since)));
    q.push(&format!(" AND d.received_at >= {p}"));
    q.tenants("d.tenant", tenants);
    q.push(" GROUP BY d.tenant, d.provider, d.env, d.event_type");
    for r in tx.query(&q.sql, &q.params).await? {
        let c = groups.entry(group(&r)?).or_default();
        c.received = count(&r, 4)?;
        c.rejected = count(&r, 5)?;
        c.processed = count(&r, 6)?;
        c.ignored_transport = count(&r, 7)?;
        c.ignored_effect = count(&r, 8)?;
        c.quarantined = count(&r, 9)?;
        c.collisions = c.quarantined;
        c.reconcile = count(&r, 10)?;
    }

    let mut q = Query::new(
        "SELECT q.tenant, q.provider, q.env, q.event_type, \
         COUNT(CASE WHEN q.status = 'open' THEN 1 END), COUNT(CASE WHEN q.status = 'resolved' THEN 1 END) \
         FROM queue_items q WHERE q.kind = 'reconcile'",
    );
    let p = q.bind(int(ms(since)));
    q.push(&format!(" AND q.created_at >= {p}"));
    q.tenants("q.tenant", tenants);
    q.push(" GROUP BY q.tenant, q.provider, q.env, q.event_type");
    for r in tx.query(&q.sql, &q.params).await? {
        let c = groups.entry(group(&r)?).or_default();
        c.reconcile_pending = count(&r, 4)?;
        c.reconcile_resolved = count(&r, 5)?;
    }

    let mut q = Query::new(
        "SELECT e.tenant, e.provider, e.env, e.event_type, \
         COUNT(CASE WHEN e.state = 'completed' THEN 1 END), \
         COUNT(CASE WHEN e.state IN ('failed', 'failed_retryable') THEN 1 END), \
         COUNT(CASE WHEN e.state = 'unknown' THEN 1 END) \
         FROM effects e WHERE 1 = 1",
    );
    let p = q.bind(int(ms(since)));
    q.push(&format!(" AND e.created_at >= {p}"));
    q.tenants("e.tenant", tenants);
    q.push(" GROUP BY e.tenant, e.provider, e.env, e.event_type");
    for r in tx.query(&q.sql, &q.params).await? {
        let c = groups.entry(group(&r)?).or_default();
        c.effects_completed = count(&r, 4)?;
        c.effects_failed = count(&r, 5)?;
        c.effects_unknown = count(&r, 6)?;
    }

    for (g, n) in crate::reconciliation::missing_counts(tx, tenants, since).await? {
        groups.entry(g).or_default().missing_at_source_check = n;
    }
    for (g, n) in crate::shadow::report_counts(tx, tenants, since).await? {
        groups.entry(g).or_default().shadow_disagreements = n;
    }

    let mut total = ReportCounts::default();
    let rows = groups
        .into_iter()
        .map(|((tenant, provider, env, event_type), counts)| {
            let counts = counts.with_gap();
            total.add(&counts);
            ReportRow {
                tenant,
                provider,
                env,
                event_type,
                counts,
            }
        })
        .collect();
    Ok(Report { since, rows, total })
}

// ---------------------------------------------------------------------------------------------
// Purge

/// Deliveries old enough to lose their proof, unless an open queue item still needs them.
const PURGEABLE_DELIVERIES: &str = "SELECT d.id FROM deliveries d WHERE d.received_at < $1 \
     AND NOT EXISTS (SELECT 1 FROM queue_items q WHERE q.delivery_id = d.id AND q.status = 'open')";

/// Applies the retention rules inside the caller's transaction; a dry run is the same work
/// rolled back, so its counts are exact.
pub(crate) async fn purge<T: Tx + Send>(
    tx: &mut T,
    policy: &PurgePolicy,
    now: OffsetDateTime,
) -> Result<PurgeCounts> {
    let now_ms = ms(now);
    let payload_cutoff = int(now_ms.saturating_sub(duration_ms(policy.payload_retention)));
    let proof_cutoff = int(now_ms.saturating_sub(duration_ms(policy.proof_retention)));
    let mut counts = PurgeCounts {
        index_entries: tx
            .exec("DELETE FROM effect_index WHERE expires_at IS NOT NULL AND expires_at <= $1", &[int(now_ms)])
            .await?,
        payloads: tx
            .exec("UPDATE deliveries SET payload = NULL WHERE payload IS NOT NULL AND received_at < $1", &[payload_cutoff])
            .await?,
        ..PurgeCounts::default()
    };
    let cut = std::slice::from_ref(&proof_cutoff);
    counts.proofs = tx
        .exec(
            &format!("DELETE FROM proofs WHERE delivery_id IN ({PURGEABLE_DELIVERIES})"),
            cut,
        )
        .await?;
    tx.exec(
        &format!("DELETE FROM links WHERE delivery_id IN ({PURGEABLE_DELIVERIES})"),
        cut,
    )
    .await?;
    counts.queue_items = tx
        .exec(&format!("DELETE FROM queue_items WHERE status = 'resolved' AND delivery_id IN ({PURGEABLE_DELIVERIES})"), cut)
        .await?;
    counts.deliveries = tx
        .exec(
            &format!("DELETE FROM deliveries WHERE id IN ({PURGEABLE_DELIVERIES})"),
            cut,
        )
        .await?;
    // Durable effects keep their identity forever; others go once nothing refers to them and
    // no reservation or claim is in flight.
    counts.effects = tx
        .exec(
            "DELETE FROM effects WHERE durable = FALSE AND state NOT IN ('reserved', 'released') AND updated_at < $1 \
             AND NOT EXISTS (SELECT 1 FROM links l WHERE l.effect_id = effects.id) \
             AND NOT EXISTS (SELECT 1 FROM proofs p WHERE p.effect_id = effects.id) \
             AND NOT EXISTS (SELECT 1 FROM queue_items q WHERE q.existing_effect = effects.id AND q.status = 'open')",
            cut,
        )
        .await?;
    // Counters and settled sightings are observations, not proofs: past the proof retention
    // they explain nothing anyone can still ask about. Without this they would only grow.
    counts.observations = tx
        .exec("DELETE FROM breaker_counts WHERE bucket < $1", cut)
        .await?
        + tx.exec(
            "DELETE FROM missing_operations WHERE settled_at IS NOT NULL AND settled_at < $1",
            cut,
        )
        .await?;
    let kept = tx
        .query(
            "SELECT COUNT(*) FROM effects e WHERE e.durable = TRUE \
             AND NOT EXISTS (SELECT 1 FROM links l WHERE l.effect_id = e.id)",
            &[],
        )
        .await?;
    counts.durable_identities_kept = match kept.first() {
        Some(row) => row.int(0)?.max(0) as u64,
        None => 0,
    };
    Ok(counts)
}
