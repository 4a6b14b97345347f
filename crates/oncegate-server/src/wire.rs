//! The JSON shapes of the HTTP contract (v1). These types exist only at the edge: the core and
//! the store never see them, so a change of the wire shape never touches the decision matrix.
//!
//! Field names follow the HTTP contract (v1) in docs/api.md exactly; fields marked "extra" are
//! additions the contract allows.

use oncegate::store::{EffectState, StrategyRef};
use oncegate_core::matrix::{Difference, Layer, Prior};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use time::OffsetDateTime;
use utoipa::{IntoParams, ToSchema};

/// `{"error": {"code", "message"}}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    pub code: &'static str,
    pub message: String,
    /// For `internal`: the id under which the log holds the cause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct StrategyBody {
    pub name: String,
    pub version: u32,
    pub level: String,
    pub confidence: Option<&'static str>,
}

impl StrategyBody {
    pub fn new(s: &StrategyRef, confidence: Option<&'static str>) -> Self {
        StrategyBody {
            name: s.name.clone(),
            version: s.version,
            level: s.level.clone(),
            confidence,
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct EffectBody {
    pub id: String,
    /// `in_progress` | `completed` | `failed` | `unknown`.
    pub state: &'static str,
    #[schema(value_type = Option<serde_json::Value>)]
    pub result: Option<Box<RawValue>>,
    /// Extra: the store's own state name (`reserved`, `released`, `failed_retryable`, …), when
    /// it was read; the contract's four states fold some of them together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_state: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ReservationBody {
    pub token: String,
    pub fencing: u64,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub lease_expires_at: OffsetDateTime,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct DifferenceBody {
    /// A JSON Pointer.
    pub field: String,
    /// The existing effect's value (canonical form; a keyed hash when sensitive); null when absent.
    #[schema(value_type = Option<serde_json::Value>)]
    pub reference: Option<Box<RawValue>>,
    /// This delivery's value, likewise.
    #[schema(value_type = Option<serde_json::Value>)]
    pub this: Option<Box<RawValue>>,
}

/// The answer to a delivery post, and the head of a proof.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct DecisionBody {
    pub delivery_id: String,
    pub action: &'static str,
    pub reason: String,
    pub layer: &'static str,
    pub strategy: Option<StrategyBody>,
    pub effect_key: Option<String>,
    pub reference_delivery_id: Option<String>,
    pub effect: Option<EffectBody>,
    /// Present only when the action is `process`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationBody>,
    pub differences: Vec<DifferenceBody>,
    pub flags: Vec<&'static str>,
    /// Extra: the matrix row that decided (`R1`…).
    pub rule: String,
    /// Extra: the event type read from the delivery, when it could be read.
    pub event_type: Option<String>,
    /// Extra: the queue item opened for a quarantine or a reconcile.
    pub queue_item_id: Option<String>,
    /// What shadow strategies would have decided, for those that would have decided otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<oncegate::details::ShadowVerdict>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct LinkBody {
    pub delivery_id: String,
    /// `reserved`, `transport`, `effect`, `resolved_duplicate`, `resolved_distinct`, `claimed`.
    pub kind: &'static str,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub at: OffsetDateTime,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ResolutionBody {
    pub outcome: &'static str,
    pub authoritative_ref: Option<String>,
    pub note: String,
    pub by: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub at: OffsetDateTime,
    pub effect_id: Option<String>,
}

/// `GET /v1/deliveries/{delivery_id}`: the decision plus where it came from and why.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProofBody {
    #[serde(flatten)]
    pub decision: DecisionBody,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub received_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub decided_at: OffsetDateTime,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub transport_key: Option<String>,
    /// Extra: `strong` (provider delivery id) or `weak` (raw body hash).
    pub transport_strength: Option<&'static str>,
    pub raw_sha256: String,
    /// Extra: the raw body size in bytes.
    pub size: u64,
    pub skipped_strategies: Vec<oncegate_core::identity::Skipped>,
    pub linked_deliveries: Vec<LinkBody>,
    pub resolution: Option<ResolutionBody>,
    /// Gateway mode: the effect's forward to the consumer's endpoint and every attempt of it
    /// (absent when the effect is not forwarded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward: Option<ForwardBody>,
    /// The decision matrix version the decision was made under (the row is `rule`).
    pub rule_version: u32,
    /// Extra: the key's scope in words, the fields used (masked when sensitive) and notes: a
    /// free JSON object (null only when the stored details cannot be read).
    #[schema(value_type = Option<Object>)]
    pub details: serde_json::Value,
    /// Only with `?payload=true` and an admin token; the body exactly as received when it is
    /// JSON, else null (and `payload_base64` holds it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
}

/// `POST /v1/effects/{effect_id}/complete`.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct CompleteRequest {
    /// The reservation token handed with `process` (or a claim).
    pub token: String,
    /// The effect's result: references (transaction, resource, rule version), under 16 KiB.
    #[serde(default)]
    #[schema(value_type = Option<serde_json::Value>)]
    pub result: Option<Box<RawValue>>,
}

/// `POST /v1/effects/{effect_id}/fail`.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct FailRequest {
    /// The reservation token handed with `process` (or a claim).
    pub token: String,
    /// Whether a later claim may run the effect again.
    pub retryable: bool,
    /// Why it failed: a string or any JSON, under 16 KiB.
    #[serde(default)]
    pub error: Option<serde_json::Value>,
}

/// `POST /v1/effects/{effect_id}/heartbeat`.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct HeartbeatRequest {
    /// The reservation token handed with `process` (or a claim).
    pub token: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EffectOutcomeBody {
    pub effect_id: String,
    pub state: &'static str,
    pub fencing: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HeartbeatBody {
    pub effect_id: String,
    pub fencing: u64,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub lease_expires_at: OffsetDateTime,
}

/// The query string of `GET /v1/queue`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct QueueQuery {
    /// `quarantine`, `reconcile` or `all` (the default).
    pub kind: Option<String>,
    /// `open` (the default), `resolved` or `all`.
    pub status: Option<String>,
    pub provider: Option<String>,
    /// Items per page: 100 unless given, clamped to 1..=1000.
    pub limit: Option<u32>,
    /// The delivery's event type.
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// Queued before: a duration back from now (`90s`, `15m`, `2h`, `7d`) or an RFC 3339 instant.
    pub older_than: Option<String>,
    /// Queued at or after: a duration back from now or an RFC 3339 instant.
    pub newer_than: Option<String>,
    /// The `next` of the previous page, unchanged.
    pub after: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueueItemBody {
    pub delivery_id: String,
    pub kind: &'static str,
    pub effect_key: Option<String>,
    pub reference_delivery_id: Option<String>,
    pub differences: Vec<DifferenceBody>,
    #[schema(value_type = Option<serde_json::Value>)]
    pub existing_result: Option<Box<RawValue>>,
    /// `distinct`, `duplicate` or `verify` (ask the authority, else a person).
    pub proposed_action: &'static str,
    pub age_seconds: i64,
    /// Extras for the reviewer.
    pub queue_item_id: String,
    pub status: &'static str,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    pub reason: String,
    pub existing_effect_id: Option<String>,
    pub resolution: Option<ResolutionBody>,
    /// The reconciler's last attempt on the item, and why it left the item open.
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_attempt_at: Option<OffsetDateTime>,
    pub last_error: Option<String>,
    pub reconcile_attempts: u64,
    /// What the authority answered (sensitive values masked): at the last attempt, and the
    /// evidence a reconciler resolution rests on.
    #[schema(value_type = Option<serde_json::Value>)]
    pub last_evidence: Option<Box<RawValue>>,
    #[schema(value_type = Option<serde_json::Value>)]
    pub resolution_evidence: Option<Box<RawValue>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueueListBody {
    pub items: Vec<QueueItemBody>,
    /// Pass as `after` for the next page; `null` on the last one.
    pub next: Option<String>,
    /// Items per kind and status under the tenant, provider, type and age filters.
    pub counts: QueueCountsBody,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueueCountsBody {
    pub quarantine: StatusCountsBody,
    pub reconcile: StatusCountsBody,
    /// Gateway mode's dead letters under the token's tenants (forwards whose attempts ran
    /// out), listed and re-sent through `/v1/forwards`.
    pub dead_letters: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StatusCountsBody {
    pub open: u64,
    pub resolved: u64,
}

/// `POST /v1/queue/{id}/resolve`.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ResolveRequest {
    /// `distinct` (a new effect) or `duplicate` (the existing effect).
    pub outcome: String,
    /// The provider's own reference for the operation, when known.
    #[serde(default)]
    pub authoritative_ref: Option<String>,
    /// What was checked.
    #[serde(default)]
    pub note: Option<String>,
    /// Who resolved it (default: the token's label).
    #[serde(default)]
    pub by: Option<String>,
}

/// `POST /v1/work/claim`.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ClaimRequest {
    /// Effects to claim: 1 unless given, clamped to 1..=100.
    #[serde(default)]
    pub limit: Option<u32>,
    /// The lease of each claim (at least 1, at most a day; default: the contract's lease).
    #[serde(default)]
    pub lease_seconds: Option<u64>,
    /// Extra: a name for the worker, recorded as the effect's holder.
    #[serde(default)]
    pub worker: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ClaimItemBody {
    pub effect_id: String,
    pub delivery_id: String,
    pub event_type: Option<String>,
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<RawValue>>,
    pub reservation: ReservationBody,
    /// Extras.
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub effect_key: Option<String>,
    pub authoritative_ref: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ClaimListBody {
    pub items: Vec<ClaimItemBody>,
}

/// The query string of `GET /v1/report`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReportQuery {
    /// Count receptions from this RFC 3339 instant (default: all).
    pub since: Option<String>,
    /// Only this tenant (one the token sees).
    pub tenant: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReportRowBody {
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
    /// Extras.
    pub reconcile: u64,
    pub reconcile_resolved: u64,
    pub effects_failed: u64,
    pub effects_unknown: u64,
    /// Operations the authority lists with no local effect (the invisible-losses sweep).
    pub missing_at_source: u64,
    /// Deliveries a shadow strategy would have decided otherwise.
    pub shadow_disagreements: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReportBody {
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub since: OffsetDateTime,
    pub rows: Vec<ReportRowBody>,
    /// Extra: the sum of the rows (`tenant` is `*` when the rows span several tenants).
    pub total: ReportRowBody,
}

/// A stored JSON text as a raw value, or a JSON string holding it when it is not JSON (a
/// canonical form is JSON; a keyed hash `hmac:…` or a free-text error is not).
pub(crate) fn raw_json(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap_or_else(|_| {
        RawValue::from_string(serde_json::to_string(text).expect("a string serializes"))
            .expect("a serialized string is JSON")
    })
}

pub(crate) fn differences(list: &[Difference]) -> Vec<DifferenceBody> {
    list.iter()
        .map(|d| DifferenceBody {
            field: d.field.clone(),
            reference: d.existing.as_deref().map(raw_json),
            this: d.incoming.as_deref().map(raw_json),
        })
        .collect()
}

/// The contract's four effect states from the matrix's view of the prior effect.
pub(crate) fn state_of_prior(prior: Prior) -> &'static str {
    match prior {
        Prior::Completed => "completed",
        Prior::Failed { .. } => "failed",
        Prior::Unknown | Prior::Purged => "unknown",
        Prior::None | Prior::InProgress => "in_progress",
    }
}

/// The contract's four effect states from a stored state. A released effect is waiting for a
/// worker: work is under way as far as the caller is concerned.
pub(crate) fn state_of(state: EffectState) -> &'static str {
    match state {
        EffectState::Reserved | EffectState::Released => "in_progress",
        EffectState::Completed => "completed",
        EffectState::Failed { .. } => "failed",
        EffectState::Unknown => "unknown",
    }
}

/// `transport` for a duplicate recognized as the same packet, `effect` for every other decision
/// (they are all made about the effect the delivery asks for).
pub(crate) fn layer_name(layer: Option<Layer>) -> &'static str {
    match layer {
        Some(Layer::Transport) => "transport",
        _ => "effect",
    }
}

/// One attempt to deliver a forward to the consumer's endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ForwardAttemptBody {
    /// The attempt series (1, then one more per re-send or takeover).
    pub series: u64,
    pub attempt: u64,
    /// The fencing token the attempt was sent with (`oncegate-fencing`).
    pub fencing: u64,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub ended_at: Option<OffsetDateTime>,
    /// The endpoint's HTTP status, when it answered.
    pub status: Option<u16>,
    pub latency_ms: Option<u64>,
    /// `delivered`, `retry`, `dead`, `stale` (the effect had moved on), `unknown` (cut by a
    /// stop before its answer was recorded); null while in flight.
    pub outcome: Option<String>,
    pub error: Option<String>,
}

/// A forward: where the effect's delivery to the consumer stands, and its attempts.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ForwardBody {
    pub effect_id: String,
    pub delivery_id: String,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    /// `pending`, `sending`, `delivered`, `dead` (re-sendable), `interrupted` (outcome
    /// unknown: verified or reconciled, never re-sent blindly) or `superseded`.
    pub state: &'static str,
    pub series: u64,
    /// Attempts in this series.
    pub attempts: u64,
    pub fencing: u64,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub due_at: OffsetDateTime,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
    /// Every attempt of every series, in order.
    pub log: Vec<ForwardAttemptBody>,
}
