//! `GET /v1/forwards` and `POST /v1/forwards/{effect_id}/resend`: gateway mode's forwards —
//! pending, in flight, delivered and the dead letters — each with its attempts, and the
//! operator's re-send of a dead letter (a fresh attempt series under the effect's next token).

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use oncegate::store::{ForwardAttempt, ForwardFilter, ForwardRecord, ForwardState, StoreError};
use oncegate::Gate;
use oncegate_core::ids::EffectId;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ApiQuery;
use crate::auth::{Caller, Role};
use crate::error::{ApiError, Problem};
use crate::state::AppState;
use crate::wire::{ErrorBody, ForwardAttemptBody, ForwardBody};

/// `GET /v1/forwards`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ForwardListBody {
    pub forwards: Vec<ForwardBody>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ForwardQuery {
    /// Only forwards in this state (`dead` lists the dead letters).
    #[param(inline, value_type = Option<String>)]
    state: Option<String>,
    /// At most this many (1–100, default 50), most recently changed first.
    #[param(minimum = 1, maximum = 100)]
    limit: Option<u32>,
}

fn attempt_body(a: &ForwardAttempt) -> ForwardAttemptBody {
    ForwardAttemptBody {
        series: a.series,
        attempt: a.attempt,
        fencing: a.fencing_token,
        started_at: a.started_at,
        ended_at: a.ended_at,
        status: a.status,
        latency_ms: a.latency_ms,
        outcome: a.outcome.clone(),
        error: a.error.clone(),
    }
}

/// A forward with its attempts, as the routes and the proof show it.
pub(crate) async fn body(gate: &Gate, f: &ForwardRecord) -> Result<ForwardBody, StoreError> {
    let log = gate.forward_attempts(&f.effect).await?;
    Ok(body_with(f, &log))
}

/// A forward with its attempts as the API shows it.
pub(crate) fn body_with(f: &ForwardRecord, log: &[ForwardAttempt]) -> ForwardBody {
    ForwardBody {
        effect_id: f.effect.to_string(),
        delivery_id: f.delivery.to_string(),
        tenant: f.tenant.clone(),
        provider: f.provider.clone(),
        env: f.env.clone(),
        event_type: f.event_type.clone(),
        state: f.state.as_str(),
        series: f.series,
        attempts: f.attempts,
        fencing: f.fencing_token,
        due_at: f.due_at,
        last_status: f.last_status,
        last_error: f.last_error.clone(),
        updated_at: f.updated_at,
        log: log.iter().map(attempt_body).collect(),
    }
}

/// The forwards this token's tenants see, most recently changed first.
#[utoipa::path(
    get,
    path = "/v1/forwards",
    operation_id = "list_forwards",
    tag = "forwards",
    params(ForwardQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The forwards, each with its attempts.", body = ForwardListBody),
        (status = 400, description = "`invalid_request`: the query string, or a state that does not exist.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the role is not `operator` or `admin`.", body = ErrorBody),
    )
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<ForwardQuery>,
) -> Result<Json<ForwardListBody>, ApiError> {
    let caller = state
        .tokens
        .require(&headers, &[Role::Operator, Role::Admin])?;
    let wanted = match q.state.as_deref() {
        None | Some("") => None,
        Some(s) => Some(ForwardState::parse(s).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                format!("state {s:?} is not one of pending, sending, delivered, dead, interrupted, superseded."),
            )
        })?),
    };
    let limit = q.limit.unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_request",
            "limit must be between 1 and 100.",
        ));
    }
    Ok(Json(list_body(&state.gate, &caller, wanted, limit).await?))
}

/// The listing, shared by the route and the console.
pub(crate) async fn list_body(
    gate: &Gate,
    caller: &Caller,
    state: Option<ForwardState>,
    limit: u32,
) -> Result<ForwardListBody, StoreError> {
    let filter = ForwardFilter {
        tenants: caller.tenants.clone(),
        state,
        limit,
    };
    let mut forwards = Vec::new();
    for f in gate.forwards(&filter).await? {
        forwards.push(body(gate, &f).await?);
    }
    Ok(ForwardListBody { forwards })
}

/// Re-sends a dead letter: the effect is held again under its next fencing token and a fresh
/// attempt series starts now.
#[utoipa::path(
    post,
    path = "/v1/forwards/{effect_id}/resend",
    operation_id = "resend_forward",
    tag = "forwards",
    params(("effect_id" = String, Path, min_length = 1, description = "The effect's id (`eff_…`).")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The forward, pending again.", body = ForwardBody),
        (status = 403, description = "`forbidden`: the role is not `operator` or `admin`.", body = ErrorBody),
        (status = 404, description = "`not_found`: no forward of this effect for this token's tenants.", body = ErrorBody),
        (status = 409, description = "`not_dead`: the forward is not a dead letter.", body = ErrorBody),
    )
)]
pub(crate) async fn resend(
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<ForwardBody>, ApiError> {
    let caller = state
        .tokens
        .require(&headers, &[Role::Operator, Role::Admin])?;
    Ok(Json(resend_as(&state, &caller, &raw_id).await?))
}

/// The re-send, shared by the route and the console.
pub(crate) async fn resend_as(
    state: &AppState,
    caller: &Caller,
    raw_id: &str,
) -> Result<ForwardBody, ApiError> {
    let missing = || ApiError::not_found(format!("No forward of effect {raw_id} exists."));
    let effect: EffectId = raw_id.parse().map_err(|_| missing())?;
    match state.gate.forward(&effect).await? {
        Some(f) if caller.sees(&f.tenant) => {}
        _ => return Err(missing()),
    }
    let f = match state.gate.resend_forward(&effect).await {
        Ok(f) => f,
        Err(StoreError::Conflict(why)) => {
            return Err(ApiError::new(Problem::Conflict, "not_dead", why));
        }
        Err(StoreError::NotFound { .. }) => return Err(missing()),
        Err(e) => return Err(e.into()),
    };
    tracing::info!(effect_id = %effect, by = %caller.label, series = f.series, "dead letter re-sent");
    Ok(body(&state.gate, &f).await?)
}
