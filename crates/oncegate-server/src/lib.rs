//! The oncegate HTTP service: the only crate that knows HTTP and JSON wire types.
//!
//! It turns the pure engine (`oncegate-core`) and the durable store (`oncegate-store`) into the
//! `/v1` API: providers post deliveries and get a decision, callers complete or fail
//! the effects they reserved, operators read proofs, work the queue and read the report.
//!
//! Build a [`ServiceConfig`], then either mount [`router`] yourself or call [`serve`] with a
//! bound listener and a shutdown future.
//!
//! | route | who | answers |
//! |---|---|---|
//! | `POST /v1/deliveries/{tenant}/{provider}/{env}` | provider signature, or bearer `ingest`/`admin` | 200 decision; 400 malformed; 401 bad signature/token; 403 role; 413 too large; 503 store down or timeout |
//! | `POST /v1/effects/{effect_id}/complete` · `/fail` · `/heartbeat` | bearer `ingest`/`admin` + reservation token | 200; 400 invalid token or body; 404 unknown/other tenant; 409 stale token or lost lease |
//! | `GET /v1/deliveries/{delivery_id}[?payload=true]` | bearer `operator`/`admin` (payload: `admin`) | 200 proof; 403; 404 |
//! | `GET /v1/queue?kind=&status=` | bearer `operator`/`admin` | 200 `{items}`; 400 |
//! | `POST /v1/queue/{delivery_id}/resolve` | bearer `operator`/`admin` | 200 item; 400; 404 not queued/other tenant; 409 already resolved |
//! | `POST /v1/work/claim` | bearer `ingest`/`admin` | 200 `{items}`; 400 |
//! | `GET /v1/report?since=&tenant=` | bearer `operator`/`admin` | 200 `{rows, total}`; 400; 404 other tenant |
//! | `POST /v1/deliveries/{delivery_id}/replay` | bearer `operator`/`admin` | 200 the replay's decision (`ignore` found through the proof, or `reconcile`); 404 unknown/other tenant |
//! | `GET /v1/breakers` | bearer `operator`/`admin` | 200 `{breakers}` |
//! | `POST /v1/breakers/close` | bearer `operator`/`admin` for all tenants | 200 breaker; 400 no note; 403 tenant-restricted; 404 never opened; 409 not open |
//! | `GET /metrics` | open, or bearer `operator`/`admin` | 200 Prometheus text |
//! | `GET /console…` · `POST /console…` | a console session (signed in with an `operator`/`admin` token) | HTML pages; 303 to sign in; 403 CSRF; 404 other tenant |
//! | `GET /healthz` · `GET /readyz` | anyone | 200; `/readyz` 503 when the store does not answer |
//!
//! Every error is `{"error":{"code","message"}}`. Everything the service needs comes in through the
//! config (the contract, the store, the salt, tokens, provider secrets, the clock), so tests and
//! the CLI drive the very same code.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use oncegate_core::contract::Contract;
use oncegate_store::Store;
use time::OffsetDateTime;

mod auth;
mod authority;
mod breaker;
mod console;
mod error;
mod ingest;
mod logging;
mod metrics;
mod purge;
mod reconciler;
pub mod replay;
mod reservation;
mod routes;
mod secrets;
mod shadow;
mod signature;
mod state;
mod wire;

pub use auth::{ApiToken, Role};
pub use authority::{AuthorityError, AuthorityPolicy};
pub use error::ApiError;
pub use logging::init_logging;
pub use reconciler::{
    reconcile_once, ItemReport, ReconcileError, ReconcilerSettings, RunReport, SweepReport,
};
pub use secrets::ProviderSecrets;
pub use signature::{sign_hmac, sign_standard_webhooks, SignatureError};

/// Where the service reads the time. Tests inject a fixed or stepped clock; production uses
/// [`system_clock`].
pub type Clock = Arc<dyn Fn() -> OffsetDateTime + Send + Sync>;

/// The wall clock, in UTC.
pub fn system_clock() -> Clock {
    Arc::new(OffsetDateTime::now_utc)
}

/// Everything the service needs, resolved by the caller (the CLI reads files and the
/// environment; tests build it directly).
#[derive(Clone)]
pub struct ServiceConfig {
    pub contract: Arc<Contract>,
    pub store: Arc<dyn Store>,
    /// The key salt for sensitive fields (HMAC-SHA-256). The reservation-token key is derived
    /// from it too, so a restarted instance (or a sibling sharing the salt) accepts the tokens
    /// its predecessor handed out.
    pub salt: Vec<u8>,
    /// Bearer tokens; an empty list means only signed provider posts are accepted.
    pub tokens: Vec<ApiToken>,
    /// Signing secrets per provider, resolved from the environment or files.
    pub secrets: ProviderSecrets,
    /// When false, `/metrics` needs an operator or admin bearer token.
    pub metrics_public: bool,
    /// How long one request may take before it is answered `503 timeout`. A decision already
    /// under way still finishes and is recorded; the provider's retry then finds it.
    pub request_timeout: Duration,
    /// Overrides the contract's `settings.lease` for `process` reservations.
    pub lease: Option<Duration>,
    /// How far back a strategy's key matches count for its collision breaker (default 24 h).
    pub breaker_window: Duration,
    /// How often `serve` applies the retention rules in the background; `None` never does.
    pub purge_every: Option<Duration>,
    /// Whether `serve` sweeps expired leases in the background (every half lease, 1–15 s).
    /// Leases are also read as expired on access, so turning the sweep off changes only when
    /// an abandoned effect is turned `unknown`; tests that move the clock by hand turn it off
    /// so the sweep cannot race them.
    pub lease_sweep: bool,
    /// The reconciler worker `serve` runs (every 30 s by default) and its authority policy.
    pub reconciler: ReconcilerSettings,
    pub clock: Clock,
}

impl ServiceConfig {
    /// A config with no tokens, no secrets, private metrics, a 10-second request timeout, the
    /// contract's lease and the system clock.
    pub fn new(contract: Arc<Contract>, store: Arc<dyn Store>, salt: Vec<u8>) -> Self {
        ServiceConfig {
            contract,
            store,
            salt,
            tokens: Vec::new(),
            secrets: ProviderSecrets::default(),
            metrics_public: false,
            request_timeout: Duration::from_secs(10),
            lease: None,
            breaker_window: Duration::from_secs(24 * 3600),
            purge_every: Some(Duration::from_secs(3600)),
            lease_sweep: true,
            reconciler: ReconcilerSettings::default(),
            clock: system_clock(),
        }
    }
}

impl std::fmt::Debug for ServiceConfig {
    // Written by hand so the salt, tokens and secrets can never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceConfig")
            .field("contract", &self.contract.source)
            .field("store", &self.store.backend())
            .field("salt", &"<redacted>")
            .field("tokens", &self.tokens.len())
            .field("secrets", &self.secrets)
            .field("metrics_public", &self.metrics_public)
            .field("request_timeout", &self.request_timeout)
            .field("lease", &self.lease)
            .field("breaker_window", &self.breaker_window)
            .field("purge_every", &self.purge_every)
            .field("lease_sweep", &self.lease_sweep)
            .field("reconciler", &self.reconciler)
            .finish()
    }
}

/// The whole HTTP API as an axum router, ready to be served.
pub fn router(config: ServiceConfig) -> axum::Router {
    routes::router(state::AppState::new(config))
}

/// Serves the API on `listener` until `shutdown` resolves, then stops accepting connections and
/// lets in-flight requests finish (a decision under way is always completed and recorded).
///
/// Beside the HTTP server it runs a small upkeep loop: leases that passed are turned into
/// `unknown` with a "verify before retry" item (critical) or released for takeover
/// (reversible), and receptions whose decision could not be recorded while the store was down
/// are recorded as rejected once it is back. It also runs the reconciler
/// (`config.reconciler.every`, default 30 s): open reconcile items are checked against their
/// type's authority, see [`reconcile_once`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: ServiceConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let reconciler_settings = config.reconciler;
    let state = state::AppState::new(config);
    let upkeep = tokio::spawn(state::upkeep(state.clone()));
    // Reconciliation runs beside the server, never inside a delivery post: an authority that
    // is slow or down delays only the queue.
    let reconciler = tokio::spawn(reconciler::run_forever(state.clone(), reconciler_settings));
    let purge = state
        .purge_every
        .map(|every| tokio::spawn(purge::run(state.clone(), every)));
    let app = routes::router(state);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    upkeep.abort();
    reconciler.abort();
    if let Some(purge) = purge {
        purge.abort();
    }
    result
}
