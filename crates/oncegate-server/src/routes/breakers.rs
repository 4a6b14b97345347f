//! `GET /v1/breakers` and `POST /v1/breakers/close`: the collision breakers of every strategy,
//! and the operator's way to close one, with a note. Nothing else closes a breaker.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use oncegate::store::{Breaker, BreakerScope, StoreError, TenantFilter};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::ApiJson;
use crate::auth::{Caller, Role};
use crate::error::{ApiError, Problem};
use crate::state::AppState;
use crate::wire::ErrorBody;

/// One strategy's collision breaker.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BreakerBody {
    pub provider: String,
    pub env: String,
    pub event_type: String,
    pub strategy: String,
    pub version: u32,
    /// `open` or `closed`.
    pub state: &'static str,
    /// Key matches and collisions inside the window now.
    pub matches: u64,
    pub collisions: u64,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub opened_at: Option<OffsetDateTime>,
    pub reason: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub closed_at: Option<OffsetDateTime>,
    pub closed_by: Option<String>,
    pub note: Option<String>,
}

/// `GET /v1/breakers`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BreakerListBody {
    pub breakers: Vec<BreakerBody>,
}

/// `POST /v1/breakers/close`: the breaker by its scope, and what was checked.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct CloseRequest {
    pub provider: String,
    pub env: String,
    pub event_type: String,
    /// The strategy's name (its version apart).
    pub strategy: String,
    pub version: u32,
    /// What was checked; required.
    pub note: String,
    /// Who closes it (default: the token's label).
    #[serde(default)]
    pub by: Option<String>,
}

pub(crate) fn body(b: &Breaker) -> BreakerBody {
    BreakerBody {
        provider: b.scope.provider.clone(),
        env: b.scope.env.clone(),
        event_type: b.scope.event_type.clone(),
        strategy: b.scope.strategy.clone(),
        version: b.scope.version,
        state: b.state.as_str(),
        matches: b.matches,
        collisions: b.collisions,
        opened_at: b.opened_at,
        reason: b.reason.clone(),
        closed_at: b.closed_at,
        closed_by: b.closed_by.clone(),
        note: b.note.clone(),
    }
}

/// The collision breakers of every strategy, open or closed.
#[utoipa::path(
    get,
    path = "/v1/breakers",
    operation_id = "list_breakers",
    tag = "breakers",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every breaker that ever counted a match.", body = BreakerListBody),
        (status = 403, description = "`forbidden`: the token's role is not `operator` or `admin`.", body = ErrorBody),
    )
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<BreakerListBody>, ApiError> {
    state
        .tokens
        .require(&headers, &[Role::Operator, Role::Admin])?;
    // Breakers count matches across tenants (a strategy is shared) and carry no tenant data.
    let list = state.gate.breakers(&state.gate.breaker_rule()).await?;
    Ok(Json(list_body(&list)))
}

/// Breakers as `GET /v1/breakers` serves them.
pub(crate) fn list_body(list: &[Breaker]) -> BreakerListBody {
    BreakerListBody {
        breakers: list.iter().map(body).collect(),
    }
}

/// Closes an open breaker, with a note: nothing else closes one.
#[utoipa::path(
    post,
    path = "/v1/breakers/close",
    operation_id = "close_breaker",
    tag = "breakers",
    request_body = CloseRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The closed breaker.", body = BreakerBody),
        (status = 400, description = "`invalid_request`: the body, or no note.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the role is not `operator` or `admin`, or the token does not see every tenant.", body = ErrorBody),
        (status = 404, description = "`not_found`: this breaker never opened.", body = ErrorBody),
        (status = 409, description = "`not_open`: the breaker is not open.", body = ErrorBody),
    )
)]
pub(crate) async fn close(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CloseRequest>,
) -> Result<Json<BreakerBody>, ApiError> {
    let caller = state
        .tokens
        .require(&headers, &[Role::Operator, Role::Admin])?;
    let closed = close_breaker(&state, &caller, req).await?;
    Ok(Json(body(&closed)))
}

/// Closes the open breaker `req` names, as `caller`, shared by the `/v1` route and the console
/// so both apply the same rules (a note, a token for every tenant).
pub(crate) async fn close_breaker(
    state: &AppState,
    caller: &Caller,
    req: CloseRequest,
) -> Result<Breaker, ApiError> {
    // A breaker guards every tenant's deliveries of a strategy, so only a token that sees
    // every tenant may close it.
    if caller.tenants != TenantFilter::All {
        return Err(ApiError::forbidden(
            "A breaker applies to every tenant; only a token for all tenants may close it.",
        ));
    }
    let note = req.note.trim();
    if note.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "A breaker is closed with a note saying what was checked.",
        ));
    }
    let by = req
        .by
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| caller.label.clone());
    let scope = BreakerScope {
        provider: req.provider,
        env: req.env,
        event_type: req.event_type,
        strategy: req.strategy,
        version: req.version,
    };
    let closed = match state.gate.close_breaker(&scope, note, &by).await {
        Ok(b) => b,
        Err(StoreError::Conflict(_)) => {
            return Err(ApiError::new(
                Problem::Conflict,
                "not_open",
                format!("The breaker of {scope} is not open."),
            ))
        }
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::not_found(format!(
                "The breaker of {scope} never opened."
            )))
        }
        Err(e) => return Err(e.into()),
    };
    Ok(closed)
}
