//! `POST /v1/deliveries/{delivery_id}/replay`: a deliberate late replay of one delivery (see
//! `crate::replay`), answered with the new reception's decision.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use oncegate_core::ids::DeliveryId;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::auth::Role;
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire;

#[derive(Debug, Serialize)]
pub(crate) struct ReplayBody {
    /// The delivery that was replayed.
    pub replay_of: String,
    /// The new reception the replay was journaled as (its proof explains it).
    pub delivery_id: String,
    pub action: &'static str,
    pub reason: String,
    pub rule: &'static str,
    pub effect_id: Option<String>,
    pub result: Option<Box<RawValue>>,
    pub queue_item_id: Option<String>,
}

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
    match state.store.delivery(&id).await? {
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
