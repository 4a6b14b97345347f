//! `GET /v1/deliveries/{delivery_id}`: the proof of one delivery — the decision, where it came
//! from, which strategy made its key and why the ones before it were skipped, what it is linked
//! to and how the queue resolved it. No payload unless an admin asks for it.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use base64::Engine;
use oncegate::store::{EffectRecord, QueueItem, ResolutionRecord, TenantFilter};
use oncegate::{DeliveryProof, Gate};
use oncegate_core::ids::DeliveryId;
use oncegate_core::matrix::{Action, Layer};
use serde::Deserialize;
use serde_json::value::RawValue;
use utoipa::IntoParams;

use super::ApiQuery;
use crate::auth::{Caller, Role};
use crate::error::{ApiError, Problem};
use crate::state::AppState;
use crate::wire::{
    self, DecisionBody, EffectBody, ErrorBody, LinkBody, ProofBody, ResolutionBody, StrategyBody,
};
use oncegate::details::Details;

/// The query string of `GET /v1/deliveries/{delivery_id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ProofQuery {
    /// Include the body as received (an `admin` token only).
    payload: Option<bool>,
}

pub(crate) fn effect_body(e: &EffectRecord) -> EffectBody {
    EffectBody {
        id: e.id.to_string(),
        state: wire::state_of(e.state),
        result: e
            .result
            .as_deref()
            .or(e.error.as_deref())
            .map(wire::raw_json),
        stored_state: Some(e.state.as_str()),
    }
}

pub(crate) fn resolution_body(r: &ResolutionRecord) -> ResolutionBody {
    ResolutionBody {
        outcome: r.resolution.outcome.as_str(),
        authoritative_ref: r.resolution.authoritative_ref.clone(),
        note: r.resolution.note.clone(),
        by: r.resolution.by.clone(),
        at: r.resolution.at,
        effect_id: r.effect.as_ref().map(ToString::to_string),
    }
}

/// The proof of one delivery: its decision, where it came from and why.
#[utoipa::path(
    get,
    path = "/v1/deliveries/{delivery_id}",
    operation_id = "get_proof",
    tag = "deliveries",
    params(
        ("delivery_id" = String, Path, min_length = 1, description = "The delivery's id (`dlv_…`)."),
        ProofQuery,
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The proof.", body = ProofBody),
        (status = 400, description = "`invalid_request`: the query string.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the role is not `operator` or `admin`, or the payload was asked without `admin`.", body = ErrorBody),
        (status = 404, description = "`not_found` (no such delivery for this token's tenants), `not_decided` (journaled, no decision yet).", body = ErrorBody),
    )
)]
pub(crate) async fn get_proof(
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<ProofQuery>,
) -> Result<Json<ProofBody>, ApiError> {
    let caller = state
        .tokens
        .require(&headers, &[Role::Operator, Role::Admin])?;
    let (proof, _) = build(&state, &caller, &raw_id, q.payload.unwrap_or(false)).await?;
    Ok(Json(proof))
}

/// What the proof page of the console shows beyond the JSON proof, read on the same pass.
pub(crate) struct ProofExtras {
    /// The matrix's view of the prior effect when the decision was made.
    pub prior: &'static str,
    pub effect: Option<EffectRecord>,
    pub queue_item: Option<QueueItem>,
    /// The proof's details, typed (the body's `details` is their stored JSON).
    pub details: Details,
}

/// The proof of `raw_id` as `caller` may see it (another tenant's delivery is `not_found`),
/// shared by the `/v1` route and the console so both show the same thing.
pub(crate) async fn build(
    state: &AppState,
    caller: &Caller,
    raw_id: &str,
    want_payload: bool,
) -> Result<(ProofBody, ProofExtras), ApiError> {
    build_from(
        &state.gate,
        &caller.tenants,
        caller.is_admin(),
        raw_id,
        want_payload,
    )
    .await
}

/// The proof of `raw_id` read through `gate` for a reader who sees `tenants` (and may read
/// payloads when `admin`): the route's, the console's and `oncegate explain --json`'s.
pub(crate) async fn build_from(
    gate: &Gate,
    tenants: &TenantFilter,
    admin: bool,
    raw_id: &str,
    want_payload: bool,
) -> Result<(ProofBody, ProofExtras), ApiError> {
    let missing = || ApiError::not_found(format!("No delivery {raw_id} exists."));
    let id: DeliveryId = raw_id.parse().map_err(|_| missing())?;
    let DeliveryProof {
        delivery,
        decision,
        details,
        effect,
        forward,
        attempts,
        queue_item,
    } = gate
        .delivery_proof(&id, tenants)
        .await?
        .ok_or_else(missing)?;
    if want_payload && !admin {
        return Err(ApiError::forbidden(
            "Only an admin token may read a delivery's payload.",
        ));
    }
    let proof = decision.ok_or_else(|| {
        ApiError::new(
            Problem::NotFound,
            "not_decided",
            format!("Delivery {id} was journaled but has no recorded decision yet."),
        )
    })?;
    let resolution = queue_item
        .as_ref()
        .and_then(|item| item.resolution.as_ref().map(resolution_body));
    let details_value: serde_json::Value =
        serde_json::from_str(&proof.details_json).unwrap_or(serde_json::Value::Null);
    let (payload, payload_base64) = match (&delivery.payload, want_payload) {
        (Some(bytes), true) => match std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| RawValue::from_string(s.to_owned()).ok())
        {
            Some(raw) => (Some(raw), None),
            None => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
            ),
        },
        _ => (None, None),
    };
    let decision = DecisionBody {
        delivery_id: id.to_string(),
        action: proof.action.as_str(),
        reason: proof.reason.clone(),
        layer: wire::layer_name(proof.layer),
        strategy: proof
            .strategy
            .as_ref()
            .map(|s| StrategyBody::new(s, proof.confidence.map(|c| c.as_str()))),
        effect_key: proof.key.clone(),
        // Like the decision's answer: a transport-layer ignore points at the delivery that
        // made the effect, not at whichever earlier retry the store found first.
        reference_delivery_id: match (&effect, proof.action, proof.layer) {
            (Some(e), Action::Ignore, Some(Layer::Transport)) => Some(e.first_delivery.to_string()),
            _ => proof.reference_delivery.as_ref().map(ToString::to_string),
        },
        effect: effect.as_ref().map(effect_body),
        // A reservation token is handed only to the caller that got `process` (or a claim):
        // a proof is read by people and must not let them act as the holder.
        reservation: None,
        differences: wire::differences(&proof.differences),
        flags: proof.flags.iter().map(|f| f.as_str()).collect(),
        rule: proof.rule.clone(),
        event_type: proof.event_type.clone().or(delivery.event_type.clone()),
        queue_item_id: proof.queue_item.as_ref().map(ToString::to_string),
        shadow: oncegate::details::differing(&details.shadow, proof.action.as_str()),
    };
    let body = ProofBody {
        decision,
        received_at: delivery.received_at,
        decided_at: proof.decided_at,
        tenant: delivery.tenant.clone(),
        provider: delivery.provider.clone(),
        env: delivery.env.clone(),
        transport_key: delivery.transport_key.as_ref().map(|t| t.value.clone()),
        transport_strength: delivery.transport_key.as_ref().map(|t| t.strength.as_str()),
        raw_sha256: delivery.body_sha256.clone(),
        size: delivery.size,
        skipped_strategies: details.skipped.clone(),
        linked_deliveries: effect
            .as_ref()
            .map(|e| {
                e.deliveries
                    .iter()
                    .map(|l| LinkBody {
                        delivery_id: l.delivery.to_string(),
                        kind: l.kind.as_str(),
                        at: l.at,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        resolution,
        forward: forward
            .as_ref()
            .map(|f| super::forwards::body_with(f, &attempts)),
        rule_version: proof.matrix_version,
        details: details_value,
        payload,
        payload_base64,
    };
    let extras = ProofExtras {
        prior: proof.prior.as_str(),
        effect,
        queue_item,
        details,
    };
    Ok((body, extras))
}
