//! The one error type of the API and its one mapping to HTTP: `{"error":{"code","message"}}`
//! with a fitting status, a stable snake_case code and a plain sentence — never database text.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use oncegate::store::StoreError;
use oncegate::{GateError, Refusal, RefusalKind};
use oncegate_core::ids::DeliveryId;

use crate::wire::{ErrorBody, ErrorDetail};

/// What kind of trouble an answer reports; each kind has exactly one HTTP status, chosen in
/// [`Problem::status`] and nowhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// The request is malformed or names something invalid (400).
    BadRequest,
    /// No credential, or one that is not valid (401).
    Unauthorized,
    /// A valid credential whose role or tenant may not do this (403).
    Forbidden,
    /// Nothing by that id exists for this caller (404).
    NotFound,
    /// The route exists, not with this method (405).
    MethodNotAllowed,
    /// The request body did not arrive in time (408): permanent for this request.
    BodyTimeout,
    /// The request conflicts with what is recorded: a stale token, an item resolved (409).
    Conflict,
    /// The body is over the limit (413).
    TooLarge,
    /// The service failed for a reason a retry will not fix (500, with a correlation id).
    Internal,
    /// The store is unavailable or the request ran out of time: a retry can succeed (503).
    Unavailable,
}

impl Problem {
    /// The one status of each kind.
    pub fn status(self) -> StatusCode {
        match self {
            Problem::BadRequest => StatusCode::BAD_REQUEST,
            Problem::Unauthorized => StatusCode::UNAUTHORIZED,
            Problem::Forbidden => StatusCode::FORBIDDEN,
            Problem::NotFound => StatusCode::NOT_FOUND,
            Problem::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Problem::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Problem::Conflict => StatusCode::CONFLICT,
            Problem::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Problem::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Problem::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// An error answer: its kind (hence its status), a stable code and a sentence for humans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The kind, which fixes the status.
    pub problem: Problem,
    /// The stable snake_case code (`stale_token`, `bad_signature`…).
    pub code: &'static str,
    /// A plain sentence for the caller, never database text.
    pub message: String,
    /// Set on `internal` answers: the same id is logged with the cause, so an operator finds
    /// the log line from the answer a provider or a client shows them.
    pub correlation_id: Option<String>,
}

impl ApiError {
    /// An answer of kind `problem` under `code`.
    pub fn new(problem: Problem, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            problem,
            code,
            message: message.into(),
            correlation_id: None,
        }
    }

    /// The answer's status.
    pub fn status(&self) -> StatusCode {
        self.problem.status()
    }

    /// 401 `unauthorized`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(Problem::Unauthorized, "unauthorized", message)
    }

    /// 403 `forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(Problem::Forbidden, "forbidden", message)
    }

    /// 400 under `code`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(Problem::BadRequest, code, message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(Problem::NotFound, "not_found", message)
    }

    /// 409 under `code`.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(Problem::Conflict, code, message)
    }

    /// 503 `store_unavailable`: nothing was recorded; retry.
    pub fn store_unavailable() -> Self {
        ApiError::new(
            Problem::Unavailable,
            "store_unavailable",
            "The store is unavailable; nothing was recorded, so retry later.",
        )
    }

    /// 503 `store_unavailable` when the request's work was sent and its answer lost: it may
    /// have been recorded, and a retry is decided from what the store holds.
    pub fn store_unanswered() -> Self {
        ApiError::new(
            Problem::Unavailable,
            "store_unavailable",
            "The store stopped answering while this request was being recorded; it may have been recorded. Retry: the retry is decided from what the store holds, never done twice.",
        )
    }

    /// 503 `timeout`: the request ran out of time; retry.
    pub fn timeout() -> Self {
        ApiError::new(
            Problem::Unavailable,
            "timeout",
            "The request took longer than the service allows; retry later (a decision already under way is still recorded).",
        )
    }

    /// A request body still arriving past its deadline. Permanent for this request (the same
    /// sender would be as slow again), so a 408, not a 503.
    pub(crate) fn body_timeout(late: crate::deadline::BodyTimedOut) -> Self {
        ApiError::new(
            Problem::BodyTimeout,
            "body_timeout",
            format!(
                "{}; the connection is closed.",
                capitalized(&late.to_string())
            ),
        )
    }

    /// A 500 with a new correlation id, which the caller logs with the cause.
    fn internal() -> Self {
        let id = format!("err_{}", ulid::Ulid::new().to_string().to_lowercase());
        ApiError {
            correlation_id: Some(id.clone()),
            ..ApiError::new(
                Problem::Internal,
                "internal",
                format!("The service failed to answer; the cause is in its log under {id}. Retrying will not help until it is fixed."),
            )
        }
    }
}

fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status().as_u16(),
            self.code,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl From<StoreError> for ApiError {
    /// The store's typed errors become statuses here and only here. Messages are written for
    /// the caller; the store's own text (which may carry a driver's cause) goes to the log.
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::Unavailable {
                cause,
                may_be_recorded,
                ..
            } => {
                tracing::warn!(cause = %cause, may_be_recorded, "store unavailable");
                if *may_be_recorded {
                    ApiError::store_unanswered()
                } else {
                    ApiError::store_unavailable()
                }
            }
            StoreError::StaleToken {
                effect,
                presented,
                current,
            } => ApiError::new(
                Problem::Conflict,
                "stale_token",
                format!("Effect {effect} is held under a newer reservation (fencing {current}); this token (fencing {presented}) is stale."),
            ),
            StoreError::LeaseLost { effect, .. } => ApiError::new(
                Problem::Conflict,
                "lease_lost",
                format!("Effect {effect} is no longer reserved under this token: its lease expired or it already has an outcome."),
            ),
            StoreError::OutcomeRecorded { effect, .. } => ApiError::new(
                Problem::Conflict,
                "outcome_recorded",
                format!("Effect {effect} was already completed under this token with another result; the first result stands."),
            ),
            StoreError::NotFound { what, id } => {
                ApiError::not_found(format!("No {what} {id} exists."))
            }
            StoreError::Conflict(_) => {
                tracing::info!(error = %e, "store conflict");
                ApiError::new(
                    Problem::Conflict,
                    "conflict",
                    "The request conflicts with what is already recorded (for example, an item resolved twice).",
                )
            }
            StoreError::Internal { sqlstate, .. } => {
                let answer = ApiError::internal();
                // The SQLSTATE and our own sentence only: a driver's message can quote values.
                tracing::error!(correlation_id = answer.correlation_id.as_deref().unwrap_or(""), sqlstate = %sqlstate, "the store refused a statement");
                answer
            }
            StoreError::SchemaTooNew { .. }
            | StoreError::Corrupt(_)
            | StoreError::Config(_) => {
                let answer = ApiError::internal();
                tracing::error!(correlation_id = answer.correlation_id.as_deref().unwrap_or(""), error = %e, "store error");
                answer
            }
        }
    }
}

impl ApiError {
    /// A refused reception, naming its journal entry: a refusal is permanent for this request
    /// (the same bytes from the same sender would be refused again), so never a 503.
    pub fn refused(refusal: &Refusal, delivery: &DeliveryId) -> Self {
        let problem = match refusal.kind {
            RefusalKind::BodyTimeout => Problem::BodyTimeout,
            RefusalKind::TooLarge => Problem::TooLarge,
            RefusalKind::Unauthorized | RefusalKind::BadSignature => Problem::Unauthorized,
            RefusalKind::Forbidden => Problem::Forbidden,
            RefusalKind::IncompleteBody
            | RefusalKind::UnknownEnvironment
            | RefusalKind::MalformedJson => Problem::BadRequest,
        };
        ApiError::new(
            problem,
            refusal.kind.code(),
            refusal.sentence(delivery.as_str()),
        )
    }
}

impl From<GateError> for ApiError {
    fn from(e: GateError) -> Self {
        match e {
            GateError::Store(e) => ApiError::from(e),
            GateError::TooLarge { what, .. } => ApiError::bad_request(
                if what == "error" {
                    "error_too_large"
                } else {
                    "result_too_large"
                },
                format!("{}.", capitalized(&e.to_string())),
            ),
            GateError::NotJson { .. } => {
                ApiError::bad_request("invalid_body", format!("{}.", capitalized(&e.to_string())))
            }
            GateError::Trust(_) | GateError::Panicked => {
                let answer = ApiError::internal();
                tracing::error!(correlation_id = answer.correlation_id.as_deref().unwrap_or(""), error = %e, "gate error");
                answer
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                correlation_id: self.correlation_id,
            },
        };
        (status, axum::Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The error statuses this module answers with ([`Problem::status`]).
    const ERROR_STATUSES: [&str; 10] = [
        "BAD_REQUEST",
        "UNAUTHORIZED",
        "FORBIDDEN",
        "NOT_FOUND",
        "METHOD_NOT_ALLOWED",
        "REQUEST_TIMEOUT",
        "CONFLICT",
        "PAYLOAD_TOO_LARGE",
        "INTERNAL_SERVER_ERROR",
        "SERVICE_UNAVAILABLE",
    ];

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read the sources") {
            let path = entry.expect("a source entry").path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Statuses are chosen in one place: outside this module the service's code names an error
    /// status only to read one (a consumer's answer behind the layer, a body limit's rejection),
    /// never to answer with it, and never builds a status from a number. A 503 especially: it
    /// tells a provider to retry, so only `Problem::Unavailable` may answer it.
    #[test]
    fn every_error_status_is_chosen_here() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let mut found = Vec::new();
        for path in files {
            if path.ends_with("error.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read a source file");
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                let named = ERROR_STATUSES
                    .iter()
                    .any(|s| line.contains(&format!("StatusCode::{s}")));
                let compared = line.contains("==");
                if (named && !compared)
                    || line.contains("SERVICE_UNAVAILABLE")
                    || line.contains("StatusCode::from_u16")
                {
                    found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "statuses chosen outside the error mapping: {found:#?}"
        );
        assert_eq!(
            super::Problem::Unavailable.status(),
            axum::http::StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
