//! What the reconciler and the lease sweeper need from storage: the local effects of one
//! resource, a record of each attempt to settle a queue item, resolutions with their evidence,
//! expired reservations turned into verifications (critical) or takeovers (reversible), and
//! the authority operations found with no local effect (invisible losses).
//!
//! Written once against `sql::Tx`, like every operation of the store, and run by both backends.

use std::collections::BTreeMap;

use oncegate_core::ids::{EffectId, QueueItemId};
use time::OffsetDateTime;

use crate::codes::{self, ms, new_id};
use crate::delivery::TenantFilter;
use crate::effect::EffectRecord;
use crate::effect::{self, EFFECT_COLS};
use crate::error::StoreError;
use crate::plan;
use crate::queue::{self, resolution, QueueItem, Resolution, ResolutionOutcome, QUEUE_COLS};
use crate::sql::{int, opt_text, text, Query, Row, Statement, Tx, Value};

type Result<T> = std::result::Result<T, StoreError>;

/// One resource of one type, in one tenant, provider and environment: the unit the authority
/// is asked about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceScope {
    /// The tenant whose effects are compared with the authority's list.
    pub tenant: String,
    /// The provider the authority belongs to.
    pub provider: String,
    /// The provider's environment (`live`, `test`…).
    pub env: String,
    /// The event type whose contract names the authority.
    pub event_type: String,
    /// The resource's value as the type's `resource` field gives it (a payment id, an order id…),
    /// substituted into the authority's URL.
    pub resource: String,
}

/// One attempt of the reconciler on a queue item that it could not settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileAttempt {
    /// When the attempt was made; the item's `last_attempt_at`.
    pub at: OffsetDateTime,
    /// Why the item stays open: no authority, an error, an inconclusive answer.
    pub error: String,
    /// What the authority answered, when it answered (JSON text, sensitive values masked).
    pub evidence: Option<String>,
}

/// An operation the authority lists for a resource with no local effect to match it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingOperation {
    /// The authority's own reference of the operation.
    pub reference: String,
    /// Its discriminants, in the same canonical (masked) form as the effects'.
    pub discriminants: BTreeMap<String, String>,
}

/// The reason written on a "verify before retry" item.
pub const VERIFY_BEFORE_RETRY: &str = "the reservation's lease expired with neither complete nor fail, so the outcome is unknown: verify before retry";

/// The most local effects one resource lists; a resource with more is reconciled by a person.
const MAX_RESOURCE_EFFECTS: i64 = 1000;

/// How far behind its last pass's bound the lease sweeper starts reading (see
/// `expire_leases`): twice the longest a batch's statement may run (`SET LOCAL
/// statement_timeout = '5s'`), so a lease written by a transaction that committed after a pass
/// whose bound had already passed it (or by an instance whose clock is a few seconds behind) is
/// still read by the next pass. A lease committed later still than that (a write that waited
/// longer than its own lease plus this margin) stays reserved with its lease past: every
/// decision reads it as `unknown` and every holder's write is refused (`plan::effective_state`,
/// `effect::HOLDER`), so nothing runs twice; only its "verify before retry" item waits for the
/// next delivery of its key.
pub(crate) const LEASE_SWEEP_MARGIN_MS: i64 = 10_000;

/// The reversible effects whose lease expired in the sweeper's window (`$2`, `$1`], released
/// for takeover. The window is read from `effects_lease_until` on PostgreSQL (every effect's
/// lease: a complete keeps its effect's, so it can be made in place; schema v12) and from the
/// reserved effects' partial index on SQLite.
pub(crate) const RELEASE_EXPIRED: &str = "UPDATE effects SET state = 'released', fencing_token = fencing_token + 1, \
     lease_until = NULL, holder = NULL, updated_at = $1 \
     WHERE lease_until > $2 AND lease_until <= $1 AND state = 'reserved' AND critical = FALSE RETURNING id";

/// The critical effects whose lease expired in the sweeper's window, made `unknown`.
pub(crate) const UNKNOWN_EXPIRED: &str = "UPDATE effects SET state = 'unknown', updated_at = $1 \
     WHERE lease_until > $2 AND lease_until <= $1 AND state = 'reserved' \
     RETURNING id, tenant, provider, env, event_type, strategy_name, strategy_version, strategy_level, key_value, \
     scope_hash, durable, discriminants, first_delivery, resource, critical";

/// Turns expired reservations into what the product promises instead of a silent re-run:
/// critical effects become `unknown` with a "verify before retry" reconcile item (unless an
/// open item already points at them); reversible ones are released for takeover under the next
/// fencing token, so the late holder's `complete` is refused as stale. Returns every effect it
/// moved, sorted.
///
/// A pass reads the leases that expired since the last pass's bound (`sweep_marks`, kept in the
/// store so a restart or a sibling instance does not read history again), less
/// `LEASE_SWEEP_MARGIN_MS`, and moves the bound to `now`: every effect's lease is read by about
/// one pass, whether the effect is still reserved or long completed. A bound only moves
/// forward, so a sibling whose clock is behind never narrows another's window.
pub(crate) async fn expire_leases<T: Tx + Send>(
    tx: &mut T,
    now: OffsetDateTime,
) -> Result<Vec<EffectId>> {
    let now_ms = ms(now);
    let mark = tx
        .query("SELECT at FROM sweep_marks WHERE name = 'leases'", &[])
        .await?
        .first()
        .map(|r| r.int(0))
        .transpose()?
        // A store without a mark was never swept by this version: read every lease once.
        .unwrap_or(i64::MIN);
    let from = mark.saturating_sub(LEASE_SWEEP_MARGIN_MS);
    // Each guarded update returns only the rows it moved, so two sweepers never both act on
    // the same effect.
    let released = tx.query(RELEASE_EXPIRED, &[int(now_ms), int(from)]).await?;
    let unknown = tx.query(UNKNOWN_EXPIRED, &[int(now_ms), int(from)]).await?;
    tx.exec(
        "INSERT INTO sweep_marks (name, at) VALUES ('leases', $1) \
         ON CONFLICT (name) DO UPDATE SET at = excluded.at WHERE sweep_marks.at < excluded.at",
        &[int(now_ms)],
    )
    .await?;
    let mut ids = Vec::new();
    for r in &released {
        ids.push(plan::parse_effect_id(&r.text(0)?)?);
    }
    for r in &unknown {
        let effect = r.text(0)?;
        ids.push(plan::parse_effect_id(&effect)?);
        let open = tx
            .query(
                "SELECT COUNT(*) FROM queue_items WHERE existing_effect = $1 AND status = 'open'",
                &[text(effect.as_str())],
            )
            .await?;
        if open.first().map(|c| c.int(0)).transpose()?.unwrap_or(0) > 0 {
            // A delivery already asked for this effect to be verified; one item is enough.
            continue;
        }
        verify_item(tx, r, now).await?;
    }
    ids.sort();
    Ok(ids)
}

/// Opens the "verify before retry" item of an effect whose outcome became unknown.
async fn verify_item<T: Tx + Send>(tx: &mut T, r: &Row, now: OffsetDateTime) -> Result<()> {
    let id = QueueItemId::from_u128(new_id(now));
    let first_delivery = r.text(12)?;
    tx.exec(
        "INSERT INTO queue_items (id, kind, status, delivery_id, tenant, provider, env, event_type, strategy_name, \
         strategy_version, strategy_level, key_value, scope_hash, durable, horizon_ms, discriminants, existing_effect, \
         first_delivery, differences, existing_result, proposed, reason, created_at, resource, critical) \
         VALUES ($1, 'reconcile', 'open', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, NULL, $13, $14, $2, '[]', NULL, \
         'verify', $15, $16, $17, $18)",
        &[
            text(id.as_str()),
            text(first_delivery),
            text(r.text(1)?),
            text(r.text(2)?),
            text(r.text(3)?),
            opt_text(r.opt_text(4)?),
            opt_text(r.opt_text(5)?),
            Value::Int(r.opt_int(6)?),
            opt_text(r.opt_text(7)?),
            opt_text(r.opt_text(8)?),
            opt_text(r.opt_text(9)?),
            Value::Bool(r.boolean(10)?),
            text(r.text(11)?),
            text(r.text(0)?),
            text(VERIFY_BEFORE_RETRY),
            int(ms(now)),
            opt_text(r.opt_text(13)?),
            Value::Bool(r.boolean(14)?),
        ],
    )
    .await?;
    Ok(())
}

/// Every local effect of one resource, oldest first, without their links.
pub(crate) async fn resource_effects<T: Tx + Send>(
    tx: &mut T,
    scope: &ResourceScope,
) -> Result<Vec<EffectRecord>> {
    let sql = format!(
        "SELECT {EFFECT_COLS} FROM effects e WHERE e.tenant = $1 AND e.provider = $2 AND e.env = $3 \
         AND e.event_type = $4 AND e.resource = $5 ORDER BY e.created_at, e.id LIMIT $6"
    );
    let rows = tx
        .query(
            &sql,
            &[
                text(scope.tenant.as_str()),
                text(scope.provider.as_str()),
                text(scope.env.as_str()),
                text(scope.event_type.as_str()),
                text(scope.resource.as_str()),
                int(MAX_RESOURCE_EFFECTS),
            ],
        )
        .await?;
    rows.iter().map(effect::record_from).collect()
}

async fn item_or_missing<T: Tx + Send>(tx: &mut T, id: &QueueItemId) -> Result<QueueItem> {
    queue::item(tx, id)
        .await?
        .ok_or_else(|| StoreError::NotFound {
            what: "queue item",
            id: id.to_string(),
        })
}

/// An attempt's record on its open item, found by primary key alone (see `sql`).
pub(crate) const RECORD_ATTEMPT: &str = "UPDATE queue_items SET attempts = attempts + 1, last_attempt_at = $2, last_error = $3, last_evidence = $4 \
     WHERE id = $1 \
     AND (CASE WHEN status = 'open' THEN TRUE ELSE FALSE END)";

/// Records the attempts that left items open, each on its item by primary key, all in one
/// transaction (and, on PostgreSQL, one round trip): for each attempt, whether it was recorded.
/// An item resolved meanwhile (by another instance, or a person) takes no more attempts:
/// `false`, and nothing else of the list is refused with it.
pub(crate) async fn record_attempts<T: Tx + Send>(
    tx: &mut T,
    attempts: &[(QueueItemId, ReconcileAttempt)],
) -> Result<Vec<bool>> {
    let statements: Vec<Statement> = attempts
        .iter()
        .map(|(id, attempt)| {
            (
                RECORD_ATTEMPT,
                vec![
                    text(id.as_str()),
                    int(ms(attempt.at)),
                    text(attempt.error.as_str()),
                    opt_text(attempt.evidence.as_deref()),
                ],
            )
        })
        .collect();
    let counts = tx.exec_all(&statements).await?;
    Ok(counts.into_iter().map(|n| n > 0).collect())
}

/// Resolves an item like `resolve`, keeping the evidence the verdict rests on. A `duplicate`
/// verdict on an effect whose outcome was unknown also settles that effect as completed: the
/// authority shows the operation happened, so it must never be run again.
pub(crate) async fn resolve_with_evidence<T: Tx + Send>(
    tx: &mut T,
    id: &QueueItemId,
    resolution: &Resolution,
    evidence: &str,
) -> Result<QueueItem> {
    let item = resolution::resolve(tx, id, resolution).await?;
    let now = ms(resolution.at);
    tx.exec(
        "UPDATE queue_items SET resolution_evidence = $2 WHERE id = $1",
        &[text(id.as_str()), text(evidence)],
    )
    .await?;
    if resolution.outcome == ResolutionOutcome::Duplicate {
        if let Some(effect) = &item.existing_effect {
            let result = crate::settlement::verified_result(resolution, id);
            tx.exec(
                "UPDATE effects SET state = 'completed', result = $2, \
                 authoritative_ref = COALESCE(authoritative_ref, $3), updated_at = $4 \
                 WHERE id = $1 AND (state = 'unknown' OR (state = 'reserved' AND lease_until <= $4))",
                &[
                    text(effect.as_str()),
                    text(result),
                    opt_text(resolution.authoritative_ref.as_deref()),
                    int(now),
                ],
            )
            .await?;
        }
    }
    item_or_missing(tx, id).await
}

/// The open reconcile items, least recently attempted first (never attempted ones before
/// all others, then oldest first), at most `limit`: items that keep failing go to the back,
/// so they never starve the ones behind them. With `attempted_by`, only items never attempted
/// or last attempted at or before it: a worker that knows no item is due sooner than its
/// shortest backoff skips, in the index, the items it attempted within it, instead of reading
/// them on every pass.
pub(crate) async fn open_reconcile_items<T: Tx + Send>(
    tx: &mut T,
    limit: u32,
    attempted_by: Option<OffsetDateTime>,
) -> Result<Vec<QueueItem>> {
    let sql = format!(
        "SELECT {QUEUE_COLS} FROM queue_items q WHERE q.kind IN ('reconcile', 'quarantine') AND q.status = 'open' \
         AND COALESCE(q.last_attempt_at, 0) <= $2 \
         ORDER BY COALESCE(q.last_attempt_at, 0), q.created_at, q.id LIMIT $1"
    );
    let by = attempted_by.map_or(i64::MAX, ms);
    let rows = tx.query(&sql, &[int(i64::from(limit)), int(by)]).await?;
    rows.iter().map(queue::item_from).collect()
}

/// `resources_seen`'s read. No index leads with the provider and the type, so the effects of
/// the window are found by their ids: an effect's id is a ULID of its creation time, and
/// `$4` (`codes::effect_id_floor`) is the least id of the window's first millisecond. Without
/// it each sweep read every effect ever stored; the time test stays beside it
/// (`tests/it/plans.rs`). The queue's items are found by `queue_created`.
pub(crate) const RESOURCES_SEEN: &str =
    "SELECT DISTINCT tenant, provider, env, event_type, resource FROM effects \
     WHERE id >= $4 AND provider = $1 AND event_type = $2 AND resource IS NOT NULL AND created_at >= $3 \
     UNION SELECT DISTINCT tenant, provider, env, event_type, resource FROM queue_items \
     WHERE provider = $1 AND event_type = $2 AND resource IS NOT NULL AND created_at >= $3";

/// The resources that effects or queue items of a type were recorded for at or after `since`.
pub(crate) async fn resources_seen<T: Tx + Send>(
    tx: &mut T,
    provider: &str,
    event_type: &str,
    since: OffsetDateTime,
) -> Result<Vec<ResourceScope>> {
    let rows = tx
        .query(
            RESOURCES_SEEN,
            &[
                text(provider),
                text(event_type),
                int(ms(since)),
                text(codes::effect_id_floor(since)),
            ],
        )
        .await?;
    let mut out: Vec<ResourceScope> = rows
        .iter()
        .map(|r| {
            Ok(ResourceScope {
                tenant: r.text(0)?,
                provider: r.text(1)?,
                env: r.text(2)?,
                event_type: r.text(3)?,
                resource: r.text(4)?,
            })
        })
        .collect::<Result<_>>()?;
    out.sort();
    out.dedup();
    Ok(out)
}

/// Replaces what the last sweep found missing for one resource: operations no longer missing
/// are settled, the new list is recorded (first seen kept). Returns how many are missing now.
pub(crate) async fn record_missing<T: Tx + Send>(
    tx: &mut T,
    scope: &ResourceScope,
    missing: &[MissingOperation],
    now: OffsetDateTime,
) -> Result<u64> {
    let now_ms = ms(now);
    let scope_params = [
        text(scope.tenant.as_str()),
        text(scope.provider.as_str()),
        text(scope.env.as_str()),
        text(scope.event_type.as_str()),
        text(scope.resource.as_str()),
    ];
    let mut settle = scope_params.to_vec();
    settle.push(int(now_ms));
    tx.exec(
        "UPDATE missing_operations SET settled_at = $6 WHERE tenant = $1 AND provider = $2 AND env = $3 \
         AND event_type = $4 AND resource = $5 AND settled_at IS NULL",
        &settle,
    )
    .await?;
    for m in missing {
        let id = codes::scope_hash(
            &scope.tenant,
            &scope.provider,
            &scope.env,
            Some(&scope.event_type),
            &scope.resource,
            0,
            &m.reference,
        );
        let mut params = vec![text(id)];
        params.extend(scope_params.iter().cloned());
        params.push(text(m.reference.as_str()));
        params.push(text(codes::map_json(&m.discriminants)));
        params.push(int(now_ms));
        tx.exec(
            "INSERT INTO missing_operations (id, tenant, provider, env, event_type, resource, reference, discriminants, \
             first_seen_at, last_seen_at, settled_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, NULL) \
             ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at, settled_at = NULL",
            &params,
        )
        .await?;
    }
    Ok(missing.len() as u64)
}

/// Open missing operations last seen at or after `since`, per tenant, provider, env and type (for the
/// report's `missing_at_source_check`).
pub(crate) async fn missing_counts<T: Tx + Send>(
    tx: &mut T,
    tenants: &TenantFilter,
    period: crate::report::Period,
) -> Result<Vec<((String, String, String, Option<String>), u64)>> {
    let mut q = Query::new(
        "SELECT tenant, provider, env, event_type, COUNT(*) FROM missing_operations WHERE settled_at IS NULL",
    );
    period.restrict(&mut q, "last_seen_at");
    q.tenants("tenant", tenants);
    q.push(" GROUP BY tenant, provider, env, event_type");
    tx.query(&q.sql, &q.params)
        .await?
        .iter()
        .map(|r| {
            Ok((
                (r.text(0)?, r.text(1)?, r.text(2)?, r.opt_text(3)?),
                r.int(4)?.max(0) as u64,
            ))
        })
        .collect()
}
