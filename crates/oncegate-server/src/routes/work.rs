//! `POST /v1/work/claim`: hands released effects (queue resolutions, takeovers) to a worker,
//! each as a reservation it completes or fails like any other.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde_json::value::RawValue;

use super::ApiJson;
use crate::auth::Role;
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::{ClaimItemBody, ClaimListBody, ClaimRequest, ErrorBody, ReservationBody};

const MAX_CLAIM: u32 = 100;

/// Claims released effects, each handed over as a reservation.
#[utoipa::path(
    post,
    path = "/v1/work/claim",
    operation_id = "claim_work",
    tag = "effects",
    request_body = ClaimRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The claimed effects (none when nothing is released).", body = ClaimListBody),
        (status = 400, description = "`invalid_request`: the body, or `lease_seconds` of 0.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the token's role is not `ingest` or `admin`.", body = ErrorBody),
    )
)]
pub(crate) async fn claim(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ClaimRequest>,
) -> Result<Json<ClaimListBody>, ApiError> {
    let caller = state
        .tokens
        .require(&headers, &[Role::Ingest, Role::Admin])?;
    let limit = req.limit.unwrap_or(1).clamp(1, MAX_CLAIM);
    let lease = match req.lease_seconds {
        None => state.gate.lease_time(),
        Some(0) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "lease_seconds must be at least 1.",
            ))
        }
        Some(s) => time::Duration::seconds(s.min(24 * 3600) as i64),
    };
    let worker = req
        .worker
        .map(|w| w.trim().chars().take(64).collect::<String>())
        .filter(|w| !w.is_empty())
        .unwrap_or_else(|| caller.label.clone());
    let mut items = Vec::new();
    // One claim per call to the store: each is its own exclusive hand-over, so a failure half
    // way leaves the items already claimed valid and the rest unclaimed.
    for _ in 0..limit {
        let Some(c) = state.gate.claim(&worker, &caller.tenants, lease).await? else {
            break;
        };
        let payload = match state.gate.delivery(&c.delivery).await? {
            Some(d) => d
                .payload
                .and_then(|p| String::from_utf8(p).ok())
                .and_then(|s| RawValue::from_string(s).ok()),
            None => None,
        };
        tracing::info!(effect_id = %c.effect, delivery_id = %c.delivery, worker = %worker, fencing = c.fencing_token, "work claimed");
        items.push(ClaimItemBody {
            effect_id: c.effect.to_string(),
            delivery_id: c.delivery.to_string(),
            event_type: c.event_type.clone(),
            payload,
            reservation: ReservationBody {
                token: state.token_key.mint(&c.effect, c.fencing_token),
                fencing: c.fencing_token,
                lease_expires_at: c.lease_until,
            },
            tenant: c.tenant.clone(),
            provider: c.provider.clone(),
            env: c.env.clone(),
            effect_key: c.key.clone(),
            authoritative_ref: c.authoritative_ref.clone(),
        });
    }
    Ok(Json(ClaimListBody { items }))
}
