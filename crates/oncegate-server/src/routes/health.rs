//! `/healthz` (the process answers), `/readyz` (the store answers) and `/metrics` (Prometheus
//! text, open or behind an operator token as configured).

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::auth::Role;
use crate::error::ApiError;
use crate::state::AppState;

pub(crate) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// The longest `/readyz` takes to answer.
const READY_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) async fn readyz(
    State(state): State<AppState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    // A probe that hangs is read as a dead instance by a balancer with a shorter timeout than
    // ours: the check answers within `READY_BOUND`, ready or not.
    match tokio::time::timeout(READY_BOUND, state.gate.ping()).await {
        Ok(Ok(())) => Ok(Json(
            json!({"status": "ready", "store": state.gate.backend()}),
        )),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "not ready: the store does not answer");
            Err(ApiError::store_unavailable())
        }
        Err(_) => {
            tracing::warn!(
                bound_ms = READY_BOUND.as_millis() as u64,
                "not ready: the store did not answer in time"
            );
            Err(ApiError::store_unavailable())
        }
    }
}

pub(crate) async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if !state.metrics_public {
        state
            .tokens
            .require(&headers, &[Role::Operator, Role::Admin])?;
    }
    let text = state.gate.scrape_metrics().await;
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
