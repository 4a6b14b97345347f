//! `POST /v1/deliveries/{delivery_id}/replay`: a deliberate late replay of one delivery (see
//! `crate::replay`), answered with the new reception's decision.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use oncegate_core::ids::DeliveryId;
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::auth::Role;
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::{self, ErrorBody};

/// The answer to a late replay.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReplayBody {
    /// The delivery that was replayed.
    pub replay_of: String,
    /// The new reception the replay was journaled as (its proof explains it).
    pub delivery_id: String,
    pub action: &'static str,
    pub reason: String,
    pub rule: &'static str,
    pub effect_id: Option<String>,
    #[schema(value_type = Option<serde_json::Value>)]
    pub result: Option<Box<RawValue>>,
    pub queue_item_id: Option<String>,
}

/// Replays one delivery late: the proof's strategy version over the stored payload.
#[utoipa::path(
    post,
    path = "/v1/deliveries/{delivery_id}/replay",
    operation_id = "replay_delivery",
    tag = "deliveries",
    params(("delivery_id" = String, Path, min_length = 1, description = "The delivery's id (`dlv_…`).")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The replay's decision: `ignore` found through the proof, or `reconcile`.", body = ReplayBody),
        (status = 403, description = "`forbidden`: the token's role is not `operator` or `admin`.", body = ErrorBody),
        (status = 404, description = "`not_found`: no such delivery for this token's tenants.", body = ErrorBody),
        (status = 409, description = "`conflict`: the replay conflicts with what is recorded.", body = ErrorBody),
    )
)]
pub(crate) async fn replay(
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<ReplayBody>, ApiError> {
    let caller = state
        .tokens
        .require(&headers, &[Role::Operator, Role::Admin])?;
    let missing = || ApiError::not_found(format!("No delivery {raw_id} exists."));
    let id: DeliveryId = raw_id.parse().map_err(|_| missing())?;
    // A delivery of a tenant the token does not see does not exist for it.
    match state.gate.delivery(&id).await? {
        Some(d) if caller.sees(&d.tenant) => {}
        _ => return Err(missing()),
    }
    let o = state.gate.replay(&id).await?;
    tracing::info!(
        delivery_id = %o.delivery,
        replay_of = %o.original,
        action = o.action.as_str(),
        rule = o.rule,
        caller = %caller.label,
        "late replay decided"
    );
    Ok(Json(ReplayBody {
        replay_of: o.original.to_string(),
        delivery_id: o.delivery.to_string(),
        action: o.action.as_str(),
        reason: o.reason,
        rule: o.rule,
        effect_id: o.effect.as_ref().map(ToString::to_string),
        result: o.result.as_deref().map(wire::raw_json),
        queue_item_id: o.queue_item.as_ref().map(ToString::to_string),
    }))
}
