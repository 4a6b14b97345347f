//! The route table of the HTTP contract (v1), the request extractors that answer in the error
//! shape, and the request timeout and body deadline.

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;

use crate::deadline::{self, DeadlineBody};
use crate::error::{ApiError, Problem};
use crate::ingest;
use crate::state::AppState;

pub(crate) mod breakers;
mod effects;
mod health;
pub(crate) mod proof;
pub(crate) mod queue;
mod replay;
mod report;
mod work;

pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/v1/deliveries/{tenant}/{provider}/{env}",
            post(ingest::post_delivery),
        )
        .route("/v1/deliveries/{delivery_id}", get(proof::get_proof))
        .route("/v1/deliveries/{delivery_id}/replay", post(replay::replay))
        .route("/v1/effects/{effect_id}/complete", post(effects::complete))
        .route("/v1/effects/{effect_id}/fail", post(effects::fail))
        .route(
            "/v1/effects/{effect_id}/heartbeat",
            post(effects::heartbeat),
        )
        .route("/v1/queue", get(queue::list))
        .route("/v1/queue/{delivery_id}/resolve", post(queue::resolve))
        .route("/v1/work/claim", post(work::claim))
        .route("/v1/report", get(report::report))
        .route("/v1/breakers", get(breakers::list))
        .route("/v1/breakers/close", post(breakers::close))
        .route("/metrics", get(health::metrics))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .merge(crate::console::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), timeout))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::not_found("No route matches this path; see the HTTP contract (v1).")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        Problem::MethodNotAllowed,
        "method_not_allowed",
        "This route does not accept this method.",
    )
}

/// Bounds every request by the configured timeout and answers in the error shape (tower-http's
/// `TimeoutLayer` would answer an empty 408, outside the contract). A delivery's decision runs
/// in its own task, so timing out the answer never cuts a decision in half. The body gets its
/// own, shorter deadline here too: a body still arriving past it fails its reader, which
/// answers `408 body_timeout` (a slow sender is not a reason to retry, so never a 503).
async fn timeout(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let request =
        request.map(|body| axum::body::Body::new(DeadlineBody::new(body, state.body_timeout)));
    match tokio::time::timeout(state.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::timeout().into_response(),
    }
}

/// A JSON body whose rejection is in the error shape.
pub(crate) struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| {
                if let Some(late) = deadline::timed_out(&e) {
                    return ApiError::body_timeout(late);
                }
                if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        Problem::TooLarge,
                        "too_large",
                        "The request body is over the limit.",
                    )
                } else {
                    ApiError::bad_request("invalid_request", "The request body could not be read.")
                }
            })?;
        serde_json::from_slice(&bytes).map(ApiJson).map_err(|e| {
            ApiError::bad_request(
                "invalid_request",
                format!("The request body is not the expected JSON: {e}."),
            )
        })
    }
}

/// A query string whose rejection is in the error shape.
pub(crate) struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e| {
                ApiError::bad_request(
                    "invalid_request",
                    format!("The query string is not acceptable: {}.", e.body_text()),
                )
            })
    }
}
