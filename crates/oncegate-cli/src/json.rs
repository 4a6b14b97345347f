//! The JSON documents `--json` prints: one compact line on standard output per command, so a
//! script can pipe it to `jq`.
//!
//! Where the HTTP API serves the same data, a shape here carries the API's field names exactly
//! (`GET /v1/deliveries/{id}`, `GET /v1/report`, `GET /v1/queue`, `GET /v1/breakers`). The
//! server's wire types are `pub(crate)` there, and the CLI reads the store directly, so the
//! shapes are restated here with the same names; `tests/it/json.rs` compares the key sets of
//! `explain --json` and the API's proof for the same delivery so the two cannot drift apart.

use anyhow::Result;
use oncegate_core::matrix::Difference;
use oncegate_store::{
    Breaker, DeliveryRecord, EffectRecord, EffectState, ProofRecord, QueueItem, ReportCounts,
    ResolutionRecord, StatusCounts,
};
use serde::Serialize;
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Prints `doc` as one compact JSON line through [`outln!`], so a closed stdout stays quiet.
pub fn print<T: Serialize>(doc: &T) -> Result<()> {
    outln!("{}", serde_json::to_string(doc)?)?;
    Ok(())
}

/// An instant as the API writes it (RFC 3339).
pub fn instant(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// A stored JSON text as its value, or a JSON string holding it when it is not JSON (a keyed
/// hash `hmac:…` or a free-text error), as the API's `raw_json` does.
pub fn raw(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// `{"field", "reference", "this"}`, as the API names a difference.
#[derive(Serialize)]
pub struct DifferenceDoc {
    pub field: String,
    pub reference: Option<Value>,
    pub this: Option<Value>,
}

pub fn differences(list: &[Difference]) -> Vec<DifferenceDoc> {
    list.iter()
        .map(|d| DifferenceDoc {
            field: d.field.clone(),
            reference: d.existing.as_deref().map(raw),
            this: d.incoming.as_deref().map(raw),
        })
        .collect()
}

#[derive(Serialize)]
pub struct ResolutionDoc {
    pub outcome: &'static str,
    pub authoritative_ref: Option<String>,
    pub note: String,
    pub by: String,
    pub at: String,
    pub effect_id: Option<String>,
}

pub fn resolution(r: &ResolutionRecord) -> ResolutionDoc {
    ResolutionDoc {
        outcome: r.resolution.outcome.as_str(),
        authoritative_ref: r.resolution.authoritative_ref.clone(),
        note: r.resolution.note.clone(),
        by: r.resolution.by.clone(),
        at: instant(r.resolution.at),
        effect_id: r.effect.as_ref().map(ToString::to_string),
    }
}

// ---- GET /v1/report ----

/// One row of `GET /v1/report`, the same names and the same extras.
#[derive(Serialize)]
pub struct ReportRowDoc {
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    pub received: u64,
    pub rejected: u64,
    pub processed: u64,
    pub ignored_transport: u64,
    pub ignored_effect: u64,
    pub quarantined: u64,
    pub reconcile_pending: u64,
    pub effects_completed: u64,
    pub collisions: u64,
    pub unexplained_gap: i64,
    pub reconcile: u64,
    pub reconcile_resolved: u64,
    pub effects_failed: u64,
    pub effects_unknown: u64,
    pub missing_at_source: u64,
    pub shadow_disagreements: u64,
}

pub fn report_row(
    tenant: &str,
    provider: &str,
    env: &str,
    event_type: Option<String>,
    c: &ReportCounts,
) -> ReportRowDoc {
    ReportRowDoc {
        tenant: tenant.to_owned(),
        provider: provider.to_owned(),
        env: env.to_owned(),
        event_type,
        received: c.received,
        rejected: c.rejected,
        processed: c.processed,
        ignored_transport: c.ignored_transport,
        ignored_effect: c.ignored_effect,
        quarantined: c.quarantined,
        reconcile_pending: c.reconcile_pending,
        effects_completed: c.effects_completed,
        collisions: c.collisions,
        unexplained_gap: c.unexplained_gap,
        reconcile: c.reconcile,
        reconcile_resolved: c.reconcile_resolved,
        effects_failed: c.effects_failed,
        effects_unknown: c.effects_unknown,
        missing_at_source: c.missing_at_source_check,
        shadow_disagreements: c.shadow_disagreements,
    }
}

/// `GET /v1/report`: `{since, rows, total}`; the total's tenant, provider and env are `*`.
#[derive(Serialize)]
pub struct ReportDoc {
    pub since: String,
    pub rows: Vec<ReportRowDoc>,
    pub total: ReportRowDoc,
}

// ---- GET /v1/queue ----

/// One item of `GET /v1/queue`, the same names and the same extras.
#[derive(Serialize)]
pub struct QueueItemDoc {
    pub delivery_id: String,
    pub kind: &'static str,
    pub effect_key: Option<String>,
    pub reference_delivery_id: Option<String>,
    pub differences: Vec<DifferenceDoc>,
    pub existing_result: Option<Value>,
    pub proposed_action: &'static str,
    pub age_seconds: i64,
    pub queue_item_id: String,
    pub status: &'static str,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    pub reason: String,
    pub existing_effect_id: Option<String>,
    pub resolution: Option<ResolutionDoc>,
    pub last_attempt_at: Option<String>,
    pub last_error: Option<String>,
    pub reconcile_attempts: u64,
    pub last_evidence: Option<Value>,
    pub resolution_evidence: Option<Value>,
}

pub fn queue_item(item: &QueueItem, now: OffsetDateTime) -> QueueItemDoc {
    QueueItemDoc {
        delivery_id: item.delivery.to_string(),
        kind: item.kind.as_str(),
        effect_key: item.key.clone(),
        reference_delivery_id: item.first_delivery.as_ref().map(ToString::to_string),
        differences: differences(&item.differences),
        existing_result: item.existing_result.as_deref().map(raw),
        proposed_action: item.proposed.as_str(),
        age_seconds: (now - item.created_at).whole_seconds().max(0),
        queue_item_id: item.id.to_string(),
        status: item.status.as_str(),
        tenant: item.tenant.clone(),
        provider: item.provider.clone(),
        env: item.env.clone(),
        event_type: item.event_type.clone(),
        reason: item.reason.clone(),
        existing_effect_id: item.existing_effect.as_ref().map(ToString::to_string),
        resolution: item.resolution.as_ref().map(resolution),
        last_attempt_at: item.last_attempt_at.map(instant),
        last_error: item.last_error.clone(),
        reconcile_attempts: item.reconcile_attempts,
        last_evidence: item.last_evidence.as_deref().map(raw),
        resolution_evidence: item.resolution_evidence.as_deref().map(raw),
    }
}

#[derive(Serialize)]
pub struct StatusCountsDoc {
    pub open: u64,
    pub resolved: u64,
}

impl From<StatusCounts> for StatusCountsDoc {
    fn from(c: StatusCounts) -> Self {
        StatusCountsDoc {
            open: c.open,
            resolved: c.resolved,
        }
    }
}

#[derive(Serialize)]
pub struct QueueCountsDoc {
    pub quarantine: StatusCountsDoc,
    pub reconcile: StatusCountsDoc,
}

/// `GET /v1/queue`: `{items, next, counts}`.
#[derive(Serialize)]
pub struct QueueListDoc {
    pub items: Vec<QueueItemDoc>,
    pub next: Option<String>,
    pub counts: QueueCountsDoc,
}

/// `queue show`: the item as the listing has it, plus the payloads it shows side by side (the
/// delivery's and its reference's, as received; `null` once purged).
#[derive(Serialize)]
pub struct QueueShowDoc {
    #[serde(flatten)]
    pub item: QueueItemDoc,
    pub payload: Option<Value>,
    pub reference_payload: Option<Value>,
}

/// A kept payload as JSON, or as a string when it is not JSON (rare: it was accepted).
pub fn payload(d: Option<&DeliveryRecord>) -> Option<Value> {
    let bytes = d?.payload.as_ref()?;
    Some(
        serde_json::from_slice(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned())),
    )
}

// ---- GET /v1/deliveries/{id} ----

#[derive(Serialize)]
pub struct StrategyDoc {
    pub name: String,
    pub version: u32,
    pub level: String,
    pub confidence: Option<&'static str>,
}

#[derive(Serialize)]
pub struct EffectDoc {
    pub id: String,
    /// `in_progress` | `completed` | `failed` | `unknown`, the API's four states.
    pub state: &'static str,
    pub result: Option<Value>,
    /// The store's own state name.
    pub stored_state: &'static str,
}

/// The API's four effect states from a stored state, as the server folds them: a released
/// effect waits for a worker, so work is under way as far as a caller is concerned.
fn state_of(state: EffectState) -> &'static str {
    match state {
        EffectState::Reserved | EffectState::Released => "in_progress",
        EffectState::Completed => "completed",
        EffectState::Failed { .. } => "failed",
        EffectState::Unknown => "unknown",
    }
}

#[derive(Serialize)]
pub struct LinkDoc {
    pub delivery_id: String,
    pub kind: &'static str,
    pub at: String,
}

/// `GET /v1/deliveries/{id}` (without the payload): the same top-level names. A delivery
/// journaled with no recorded decision (the API answers it `not_decided`) keeps every name,
/// with the decision's fields `null` or empty.
#[derive(Serialize)]
pub struct ProofDoc {
    pub delivery_id: String,
    pub action: Option<&'static str>,
    pub reason: Option<String>,
    pub layer: Option<&'static str>,
    pub strategy: Option<StrategyDoc>,
    pub effect_key: Option<String>,
    pub reference_delivery_id: Option<String>,
    pub effect: Option<EffectDoc>,
    pub differences: Vec<DifferenceDoc>,
    pub flags: Vec<&'static str>,
    pub rule: Option<String>,
    pub event_type: Option<String>,
    pub queue_item_id: Option<String>,
    /// Only the shadow verdicts that differ from the decision, and only when there are some.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<Value>,
    pub received_at: String,
    pub decided_at: Option<String>,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub transport_key: Option<String>,
    pub transport_strength: Option<&'static str>,
    pub raw_sha256: String,
    pub size: u64,
    pub skipped_strategies: Vec<Value>,
    pub linked_deliveries: Vec<LinkDoc>,
    pub resolution: Option<ResolutionDoc>,
    pub rule_version: Option<u32>,
    pub details: Value,
}

/// The proof document of one delivery from what the store holds for it.
pub fn proof(
    delivery: &DeliveryRecord,
    proof: Option<&ProofRecord>,
    effect: Option<&EffectRecord>,
    item: Option<&QueueItem>,
) -> ProofDoc {
    use oncegate_core::matrix::{Action, Layer};
    let details: Value = proof
        .and_then(|p| serde_json::from_str(&p.details_json).ok())
        .unwrap_or(Value::Null);
    let list = |k: &str| -> Vec<Value> {
        details
            .get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let action = proof.map(|p| p.action.as_str());
    ProofDoc {
        delivery_id: delivery.id.to_string(),
        action,
        reason: proof.map(|p| p.reason.clone()),
        // `transport` for a duplicate recognized as the same packet, `effect` for every other
        // decision, as the API names the layer.
        layer: proof.map(|p| match p.layer {
            Some(Layer::Transport) => "transport",
            _ => "effect",
        }),
        strategy: proof.and_then(|p| {
            p.strategy.as_ref().map(|s| StrategyDoc {
                name: s.name.clone(),
                version: s.version,
                level: s.level.clone(),
                confidence: p.confidence.map(|c| c.as_str()),
            })
        }),
        effect_key: proof.and_then(|p| p.key.clone()),
        // As the API does: a transport-layer ignore points at the delivery that made the effect.
        reference_delivery_id: proof.and_then(|p| match (effect, p.action, p.layer) {
            (Some(e), Action::Ignore, Some(Layer::Transport)) => Some(e.first_delivery.to_string()),
            _ => p.reference_delivery.as_ref().map(ToString::to_string),
        }),
        effect: effect.map(|e| EffectDoc {
            id: e.id.to_string(),
            state: state_of(e.state),
            result: e.result.as_deref().or(e.error.as_deref()).map(raw),
            stored_state: e.state.as_str(),
        }),
        differences: proof
            .map(|p| differences(&p.differences))
            .unwrap_or_default(),
        flags: proof
            .map(|p| p.flags.iter().map(|f| f.as_str()).collect())
            .unwrap_or_default(),
        rule: proof.map(|p| p.rule.clone()),
        event_type: proof
            .and_then(|p| p.event_type.clone())
            .or(delivery.event_type.clone()),
        queue_item_id: proof.and_then(|p| p.queue_item.as_ref().map(ToString::to_string)),
        shadow: list("shadow")
            .into_iter()
            .filter(|v| v.get("action").and_then(Value::as_str) != action)
            .collect(),
        received_at: instant(delivery.received_at),
        decided_at: proof.map(|p| instant(p.decided_at)),
        tenant: delivery.tenant.clone(),
        provider: delivery.provider.clone(),
        env: delivery.env.clone(),
        transport_key: delivery.transport_key.as_ref().map(|t| t.value.clone()),
        transport_strength: delivery.transport_key.as_ref().map(|t| t.strength.as_str()),
        raw_sha256: delivery.body_sha256.clone(),
        size: delivery.size,
        skipped_strategies: list("skipped"),
        linked_deliveries: effect
            .map(|e| {
                e.deliveries
                    .iter()
                    .map(|l| LinkDoc {
                        delivery_id: l.delivery.to_string(),
                        kind: l.kind.as_str(),
                        at: instant(l.at),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        resolution: item.and_then(|i| i.resolution.as_ref().map(resolution)),
        rule_version: proof.map(|p| p.matrix_version),
        details,
    }
}

// ---- GET /v1/breakers ----

/// One breaker as `GET /v1/breakers` lists it.
#[derive(Serialize)]
pub struct BreakerDoc {
    pub provider: String,
    pub env: String,
    pub event_type: String,
    pub strategy: String,
    pub version: u32,
    pub state: &'static str,
    pub matches: u64,
    pub collisions: u64,
    pub opened_at: Option<String>,
    pub reason: Option<String>,
    pub closed_at: Option<String>,
    pub closed_by: Option<String>,
    pub note: Option<String>,
}

/// `GET /v1/breakers`: `{breakers}`.
#[derive(Serialize)]
pub struct BreakerListDoc {
    pub breakers: Vec<BreakerDoc>,
}

pub fn breaker(b: &Breaker) -> BreakerDoc {
    BreakerDoc {
        provider: b.scope.provider.clone(),
        env: b.scope.env.clone(),
        event_type: b.scope.event_type.clone(),
        strategy: b.scope.strategy.clone(),
        version: b.scope.version,
        state: b.state.as_str(),
        matches: b.matches,
        collisions: b.collisions,
        opened_at: b.opened_at.map(instant),
        reason: b.reason.clone(),
        closed_at: b.closed_at.map(instant),
        closed_by: b.closed_by.clone(),
        note: b.note.clone(),
    }
}
