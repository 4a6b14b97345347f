//! `POST /v1/effects/{effect_id}/complete|fail|heartbeat`: the holder of a reservation reports
//! the effect's outcome or keeps its lease alive, presenting the token it was handed.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use oncegate::store::TenantFilter;
use oncegate_core::ids::EffectId;

use super::ApiJson;
use crate::auth::Role;
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::{
    CompleteRequest, EffectOutcomeBody, ErrorBody, FailRequest, HeartbeatBody, HeartbeatRequest,
};

/// The effect and fencing token a holder's call names, if the effect exists, the caller may
/// see its tenant and the token is the effect's; 404 for an effect of a tenant the caller does
/// not see, so a token of one tenant cannot even learn that another tenant's effect exists.
async fn holder(
    state: &AppState,
    headers: &HeaderMap,
    raw_id: &str,
    token: &str,
) -> Result<(EffectId, u64), ApiError> {
    let caller = state
        .tokens
        .require(headers, &[Role::Ingest, Role::Admin])?;
    let missing = || ApiError::not_found(format!("No effect {raw_id} exists."));
    let id: EffectId = raw_id.parse().map_err(|_| missing())?;
    // A reservation token that verifies was handed out by this service for this effect, so a
    // caller who sees every tenant needs no look-up: the holder's write itself answers 404 for
    // an effect purged since. Any other case reads the effect's tenant first, so a caller
    // learns nothing of another tenant's effects, not even from a token's error.
    if matches!(caller.tenants, TenantFilter::All) {
        if let Ok(fencing) = state.token_key.verify(&id, token) {
            return Ok((id, fencing));
        }
    }
    match state.gate.effect_tenant(&id).await? {
        Some(tenant) if caller.sees(&tenant) => {}
        _ => return Err(missing()),
    }
    let fencing = state.token_key.verify(&id, token)?;
    Ok((id, fencing))
}

/// Completes a reserved effect with its result.
#[utoipa::path(
    post,
    path = "/v1/effects/{effect_id}/complete",
    operation_id = "complete_effect",
    tag = "effects",
    params(("effect_id" = String, Path, min_length = 1, description = "The effect's id (`eff_…`).")),
    request_body = CompleteRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The effect is completed (also when this token already completed it with the same result: a retried complete).", body = EffectOutcomeBody),
        (status = 400, description = "`invalid_request` (the body or the token), `result_too_large`.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the token's role is not `ingest` or `admin`.", body = ErrorBody),
        (status = 404, description = "`not_found`: no such effect for this token's tenants.", body = ErrorBody),
        (status = 409, description = "`stale_token` (a newer reservation holds it), `lease_lost`, `outcome_recorded` (this token completed it with another result).", body = ErrorBody),
    )
)]
pub(crate) async fn complete(
    State(state): State<AppState>,
    Path(effect_id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CompleteRequest>,
) -> Result<Json<EffectOutcomeBody>, ApiError> {
    let (id, fencing) = holder(&state, &headers, &effect_id, &req.token).await?;
    let result = req
        .result
        .map(|r| r.get().to_owned())
        .unwrap_or_else(|| "null".to_owned());
    state
        .gate
        .held(id.clone(), fencing)
        .complete(&result)
        .await?;
    Ok(Json(EffectOutcomeBody {
        effect_id: id.to_string(),
        state: "completed",
        fencing,
    }))
}

/// Fails a reserved effect, retryable or not.
#[utoipa::path(
    post,
    path = "/v1/effects/{effect_id}/fail",
    operation_id = "fail_effect",
    tag = "effects",
    params(("effect_id" = String, Path, min_length = 1, description = "The effect's id (`eff_…`).")),
    request_body = FailRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The effect is failed.", body = EffectOutcomeBody),
        (status = 400, description = "`invalid_request` (the body or the token), `error_too_large`.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the token's role is not `ingest` or `admin`.", body = ErrorBody),
        (status = 404, description = "`not_found`: no such effect for this token's tenants.", body = ErrorBody),
        (status = 409, description = "`stale_token` (a newer reservation holds it), `lease_lost`.", body = ErrorBody),
    )
)]
pub(crate) async fn fail(
    State(state): State<AppState>,
    Path(effect_id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<FailRequest>,
) -> Result<Json<EffectOutcomeBody>, ApiError> {
    let (id, fencing) = holder(&state, &headers, &effect_id, &req.token).await?;
    let error = match req.error {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s,
        Some(other) => other.to_string(),
    };
    state
        .gate
        .held(id.clone(), fencing)
        .fail(req.retryable, &error)
        .await?;
    Ok(Json(EffectOutcomeBody {
        effect_id: id.to_string(),
        state: "failed",
        fencing,
    }))
}

/// Extends the lease of a reserved effect.
#[utoipa::path(
    post,
    path = "/v1/effects/{effect_id}/heartbeat",
    operation_id = "heartbeat_effect",
    tag = "effects",
    params(("effect_id" = String, Path, min_length = 1, description = "The effect's id (`eff_…`).")),
    request_body = HeartbeatRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The lease now runs until `lease_expires_at`.", body = HeartbeatBody),
        (status = 400, description = "`invalid_request`: the body or the token.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the token's role is not `ingest` or `admin`.", body = ErrorBody),
        (status = 404, description = "`not_found`: no such effect for this token's tenants.", body = ErrorBody),
        (status = 409, description = "`stale_token` (a newer reservation holds it), `lease_lost`.", body = ErrorBody),
    )
)]
pub(crate) async fn heartbeat(
    State(state): State<AppState>,
    Path(effect_id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<HeartbeatRequest>,
) -> Result<Json<HeartbeatBody>, ApiError> {
    let (id, fencing) = holder(&state, &headers, &effect_id, &req.token).await?;
    let until = state.gate.held(id.clone(), fencing).heartbeat().await?;
    Ok(Json(HeartbeatBody {
        effect_id: id.to_string(),
        fencing,
        lease_expires_at: until,
    }))
}
