//! Exactly-once in front of a consumer's own webhook handler: a tower layer for an axum (or
//! any tower) service that runs the handler only when the gate says `process`, and completes
//! or fails the effect from the handler's answer.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use axum::{routing::post, Extension, Router};
//! use oncegate::Gate;
//! use oncegate_server::layer::{Effect, OnceLayer};
//!
//! async fn apply_refund(Extension(effect): Extension<Effect>, body: String) -> String {
//!     // The effect id is a good idempotency key for what the handler calls downstream.
//!     format!(r#"{{"refund":"done","effect":"{}"}}"#, effect.id)
//! }
//!
//! let contract = oncegate_core::contract::parse(
//!     "oncegate.toml",
//!     include_str!("../../../examples/oncegate.toml"),
//! )
//! .unwrap();
//! let dir = tempfile::tempdir().unwrap();
//! let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
//! let gate = Gate::open(contract, &url, b"salt".to_vec()).await.unwrap();
//!
//! let app: Router = Router::new()
//!     .route("/hooks/payflow", post(apply_refund))
//!     // The provider's signature is checked with these secrets (none here: `trusted` says the
//!     // sender was authenticated in front of this service).
//!     .route_layer(OnceLayer::new(gate, "acme", "payflow", "live").trusted());
//! # let _ = app;
//! # });
//! ```
//!
//! What the provider is answered:
//!
//! | the gate says | the handler | the answer |
//! |---|---|---|
//! | `process` | runs; a 2xx completes the effect with its body (JSON, else as a JSON string; at most 16 KiB); a 5xx, 408 or 429 fails it retryably; another status fails it for good | the handler's own |
//! | `ignore` | does not run | 200, the decision (with the first result) |
//! | `quarantine`, `reconcile` | does not run (the queue decides) | 202, the decision |
//! | refused (signature, JSON, size…) | does not run | 4xx `{"error":…}` |
//! | store unavailable | does not run | 503 (the provider retries) |
//!
//! A handler that runs longer than a third of the lease has the lease renewed while it runs.
//! An outcome the store cannot record is answered 503: the effect's lease then passes and a
//! critical effect is verified before anything runs it again (never re-run blindly).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use oncegate::{Gate, Held, Outcome, Reception, Refusal, RefusalKind, MAX_RESULT_BYTES};
use oncegate_core::ids::{DeliveryId, EffectId};
use tower::ServiceExt;

use crate::error::{ApiError, Problem};
use crate::ingest;
use crate::secrets::ProviderSecrets;

/// The effect a handler runs, as a request extension (`Extension<Effect>` in axum).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The effect: a stable idempotency key for what the handler calls downstream.
    pub id: EffectId,
    /// The reservation's fencing token.
    pub fencing: u64,
    /// The delivery that is being processed.
    pub delivery: DeliveryId,
}

/// The layer: one gate, the origin of the deliveries it guards, and how their sender is
/// authenticated.
#[derive(Clone)]
pub struct OnceLayer {
    config: Arc<LayerConfig>,
}

#[derive(Clone)]
struct LayerConfig {
    gate: Gate,
    tenant: String,
    provider: String,
    env: String,
    secrets: ProviderSecrets,
    trusted: bool,
}

impl OnceLayer {
    /// Guards deliveries of `provider` for `tenant` in `env`, authenticated by the provider's
    /// signature scheme in the contract, with no secret yet (see [`OnceLayer::secrets`]).
    pub fn new(
        gate: Gate,
        tenant: impl Into<String>,
        provider: impl Into<String>,
        env: impl Into<String>,
    ) -> OnceLayer {
        OnceLayer {
            config: Arc::new(LayerConfig {
                gate,
                tenant: tenant.into(),
                provider: provider.into(),
                env: env.into(),
                secrets: ProviderSecrets::default(),
                trusted: false,
            }),
        }
    }

    /// The provider signing secrets the signatures are checked with.
    pub fn secrets(self, secrets: ProviderSecrets) -> OnceLayer {
        self.with(|c| c.secrets = secrets)
    }

    /// Skips the signature check: the sender was authenticated in front of this service (a
    /// gateway, mutual TLS). Deliveries are still journaled, identified and decided.
    pub fn trusted(self) -> OnceLayer {
        self.with(|c| c.trusted = true)
    }

    fn with(mut self, change: impl FnOnce(&mut LayerConfig)) -> OnceLayer {
        change(Arc::make_mut(&mut self.config));
        self
    }
}

impl<S> tower::Layer<S> for OnceLayer {
    type Service = Once<S>;

    fn layer(&self, inner: S) -> Once<S> {
        Once {
            inner,
            config: self.config.clone(),
        }
    }
}

/// The service [`OnceLayer`] wraps a handler in.
#[derive(Clone)]
pub struct Once<S> {
    inner: S,
    config: Arc<LayerConfig>,
}

impl<S> tower::Service<Request<Body>> for Once<S>
where
    S: tower::Service<Request<Body>, Response = Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The inner service is cloned and driven to readiness per request (`oneshot`).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let config = self.config.clone();
        Box::pin(async move { Ok(guard(&config, inner, req).await) })
    }
}

async fn guard<S>(config: &LayerConfig, inner: S, req: Request<Body>) -> Response
where
    S: tower::Service<Request<Body>, Response = Response, Error = Infallible> + Send,
    S::Future: Send,
{
    let gate = &config.gate;
    let (parts, body) = req.into_parts();
    let body = ingest::read_body(body, gate.limits().max_bytes).await;
    let origin = (
        config.tenant.clone(),
        config.provider.clone(),
        config.env.clone(),
    );
    let reception = ingest::reception(origin, &parts.headers, body, gate.now());
    let bytes = reception.body().bytes().to_vec();
    let outcome = match authenticate(config, &parts.headers, &reception) {
        Ok(()) => gate.deliver(reception).await,
        Err(refusal) => gate.refuse(reception, refusal).await,
    };
    let delivery = match &outcome {
        Ok(o) => Some(o.proof().delivery.clone()),
        Err(_) => None,
    };
    let held = match outcome {
        Err(e) => return ApiError::from(e).into_response(),
        Ok(Outcome::Rejected(r)) => {
            return ApiError::refused(&r.refusal, &r.proof.delivery).into_response()
        }
        Ok(Outcome::Process(held)) => held,
        Ok(other) => {
            let status = match other {
                Outcome::Ignore(_) | Outcome::Forwarded(_) => StatusCode::OK,
                _ => StatusCode::ACCEPTED,
            };
            let decision = ingest::decision_body(other.proof());
            return tagged((status, axum::Json(decision)).into_response(), &other);
        }
    };
    let mut req = Request::from_parts(parts, Body::from(bytes));
    let effect = Effect {
        id: held.effect().clone(),
        fencing: held.fencing(),
        delivery: delivery.expect("a decided outcome names its delivery"),
    };
    req.extensions_mut().insert(effect);
    run(gate, held, inner, req).await
}

/// A body not yet kept, or a sender not authenticated, is refused before the gate decides.
fn authenticate(
    config: &LayerConfig,
    headers: &axum::http::HeaderMap,
    r: &Reception,
) -> Result<(), Refusal> {
    if config.trusted || r.body().cut_by().is_some() {
        return Ok(());
    }
    let gate = &config.gate;
    let provider = gate.contract().provider(r.provider());
    if provider.and_then(|p| p.signature.as_ref()).is_none() {
        return Err(Refusal::new(
            RefusalKind::Unauthorized,
            "the provider has no signature scheme in the contract and the layer is not marked trusted",
        ));
    }
    ingest::verify_signature(&config.secrets, provider, headers, r, gate.now())
}

/// Runs the handler under its reservation (renewing the lease while it runs) and records its
/// outcome.
async fn run<S>(gate: &Gate, mut held: Held, inner: S, req: Request<Body>) -> Response
where
    S: tower::Service<Request<Body>, Response = Response, Error = Infallible> + Send,
    S::Future: Send,
{
    let period = (gate.lease() / 3).max(std::time::Duration::from_millis(100));
    let handler = inner.oneshot(req);
    tokio::pin!(handler);
    let response = loop {
        tokio::select! {
            answered = &mut handler => break answered.unwrap_or_else(|never| match never {}),
            _ = tokio::time::sleep(period) => {
                if let Err(e) = held.heartbeat().await {
                    tracing::warn!(effect_id = %held.effect(), error = %e, "the lease of a running handler could not be renewed");
                }
            }
        }
    };
    let (parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            tracing::warn!(effect_id = %held.effect(), error = %e, "the handler's answer could not be read");
            let failed = held
                .fail(true, "the handler's answer could not be read")
                .await;
            let answer = ApiError::new(
                Problem::Internal,
                "handler_failed",
                "The handler's answer could not be read; the effect was failed retryably.",
            );
            return recorded(failed, answer.into_response());
        }
    };
    let status = parts.status;
    let text = String::from_utf8_lossy(&bytes);
    let effect = held.effect().clone();
    let outcome = if status.is_success() {
        held.complete(&result_of(&bytes)).await
    } else {
        let retryable = status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS
            || !status.is_client_error();
        let error = format!(
            "the handler answered {status}: {}",
            truncated(&text, MAX_RESULT_BYTES - 64)
        );
        held.fail(retryable, &error).await
    };
    let mut response = Response::from_parts(parts, Body::from(bytes));
    if let Ok(v) = HeaderValue::from_str(effect.as_str()) {
        response.headers_mut().insert("oncegate-effect-id", v);
    }
    response
        .headers_mut()
        .insert("oncegate-action", HeaderValue::from_static("process"));
    recorded(outcome, response)
}

/// The handler's answer, or, when its outcome could not be recorded, the error's own answer
/// from the one error mapping (`ApiError::from`): a 503 only when the store was unavailable
/// (the provider's retry then finds the effect held or unknown, never run twice); a lease lost
/// or a conflict is a 409 and a refused statement a 500, which no retry would cure.
fn recorded(outcome: Result<(), oncegate::GateError>, response: Response) -> Response {
    match outcome {
        Ok(()) => response,
        Err(e) => {
            tracing::warn!(error = %e, "a handler's outcome could not be recorded");
            ApiError::from(e).into_response()
        }
    }
}

/// The result an effect keeps from a 2xx answer: its body when it is JSON within the limit,
/// else the text as a JSON string (cut to the limit), else `null`.
fn result_of(bytes: &[u8]) -> String {
    if bytes.len() <= MAX_RESULT_BYTES
        && serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
    {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    if bytes.is_empty() {
        return "null".to_owned();
    }
    let text = String::from_utf8_lossy(bytes);
    serde_json::to_string(truncated(&text, MAX_RESULT_BYTES / 2)).expect("a string serializes")
}

fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn tagged(mut response: Response, outcome: &Outcome) -> Response {
    response.headers_mut().insert(
        "oncegate-action",
        HeaderValue::from_static(outcome.action().as_str()),
    );
    if let Ok(v) = HeaderValue::from_str(outcome.proof().delivery.as_str()) {
        response.headers_mut().insert("oncegate-delivery-id", v);
    }
    response
}
