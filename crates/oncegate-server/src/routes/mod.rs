//! The handlers of the HTTP contract (v1), one module per resource, and the request
//! extractors that answer in the error shape. The route table that serves them is `app`'s.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::deadline;
use crate::error::{ApiError, Problem};

pub(crate) mod breakers;
pub(crate) mod effects;
pub(crate) mod forwards;
pub(crate) mod health;
pub(crate) mod proof;
pub(crate) mod queue;
pub(crate) mod replay;
pub(crate) mod report;
pub(crate) mod work;

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
