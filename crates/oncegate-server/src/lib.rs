//! The oncegate HTTP service: the only crate that knows HTTP and JSON wire types.
//!
//! It turns the engine (`oncegate`: the gate over the pure core and the durable store) into the
//! `/v1` API: providers post deliveries and get a decision, callers complete or fail
//! the effects they reserved, operators read proofs, work the queue and read the report.
//!
//! Build a [`ServiceConfig`], then either mount [`router`] yourself or call [`serve`] with a
//! bound listener and a shutdown future.
//!
//! | route | who | answers |
//! |---|---|---|
//! | `POST /v1/deliveries/{tenant}/{provider}/{env}` | provider signature, or bearer `ingest`/`admin` | 200 decision; 400 malformed; 401 bad signature/token; 403 role; 408 body too slow; 413 too large; 503 store down or timeout |
//! | `POST /v1/effects/{effect_id}/complete` · `/fail` · `/heartbeat` | bearer `ingest`/`admin` + reservation token | 200; 400 invalid token or body; 404 unknown/other tenant; 409 stale token or lost lease |
//! | `GET /v1/deliveries/{delivery_id}[?payload=true]` | bearer `operator`/`admin` (payload: `admin`) | 200 proof; 403; 404 |
//! | `GET /v1/queue?kind=&status=&provider=&type=&older_than=&newer_than=&limit=&after=` | bearer `operator`/`admin` | 200 `{items, next, counts}`; 400 naming the parameter |
//! | `POST /v1/queue/{queue_item_id or delivery_id}/resolve` | bearer `operator`/`admin` | 200 item; 400; 404 not queued/other tenant; 409 already resolved/ambiguous/conflict |
//! | `POST /v1/work/claim` | bearer `ingest`/`admin` | 200 `{items}`; 400 |
//! | `GET /v1/report?since=&tenant=` | bearer `operator`/`admin` | 200 `{rows, total}`; 400; 404 other tenant |
//! | `POST /v1/deliveries/{delivery_id}/replay` | bearer `operator`/`admin` | 200 the replay's decision (`ignore` found through the proof, or `reconcile`); 404 unknown/other tenant |
//! | `GET /v1/breakers` | bearer `operator`/`admin` | 200 `{breakers}` |
//! | `POST /v1/breakers/close` | bearer `operator`/`admin` for all tenants | 200 breaker; 400 no note; 403 tenant-restricted; 404 never opened; 409 not open |
//! | `GET /v1/openapi.json` | anyone | 200 the OpenAPI 3.1 document of every `/v1` route |
//! | `GET /metrics` | open, or bearer `operator`/`admin` | 200 Prometheus text |
//! | `GET /console…` · `POST /console…` | a console session (signed in with an `operator`/`admin` token) | HTML pages; 303 to sign in; 403 CSRF; 404 other tenant |
//! | `GET /healthz` · `GET /readyz` | anyone | 200; `/readyz` 503 when the store does not answer |
//!
//! Every route above may also answer `503` (`store_unavailable`, `timeout`), and `500 internal`
//! (with a `correlation_id`) when the store refuses a statement for good.
//!
//! The `/v1` routes are one table (`app::v1`) the router is built from; the OpenAPI document
//! at `/v1/openapi.json` is derived from the same handlers and their wire types, and a test
//! compares the two both ways.
//!
//! Every error is `{"error":{"code","message"}}`; a request body that does not arrive within
//! `body_timeout` is answered `408 body_timeout` (a delivery's is journaled as refused). Everything the service needs comes in through the
//! config (the contract, the store, the salt, tokens, provider secrets, the clock), so tests and
//! the CLI drive the very same code.

#![warn(missing_docs)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use oncegate::store::Store;
use oncegate_core::contract::Contract;

mod app;
mod auth;
mod connection;
mod console;
mod deadline;
pub mod document;
mod error;
mod ingest;
mod instant;
pub mod layer;
mod logging;
mod openapi;
mod reservation;
mod routes;
mod secrets;
mod signature;
mod state;
mod wire;

pub use auth::{ApiToken, Role};
pub use error::ApiError;
pub use instant::{parse_instant, InstantError};
pub use logging::init_logging;
pub use oncegate::replay;
pub use oncegate::{
    system_clock, AuthorityError, AuthorityPolicy, Clock, ItemReport, ReconcileError,
    ReconcilerSettings, RunReport, SweepReport, TrustError,
};
pub use secrets::ProviderSecrets;
pub use signature::{sign_adyen_item, sign_hmac, sign_standard_webhooks, SignatureError};

/// Everything the service needs, resolved by the caller (the CLI reads files and the
/// environment; tests build it directly).
#[derive(Clone)]
pub struct ServiceConfig {
    /// The contract deliveries are identified with.
    pub contract: Arc<Contract>,
    /// The store they are journaled and decided in.
    pub store: Arc<Store>,
    /// A streaming standby of the store that the console, the report, proofs read back and the
    /// queue and delivery listings are read from; those answers carry `oncegate-read-lag-ms`.
    pub read_store: Option<Arc<Store>>,
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
    /// How long a connection may take to send a request head, counted from its first byte (or
    /// from the accept, for a new connection); past it the connection is closed. This is what
    /// stops a client that trickles its head (slowloris) from holding a connection.
    pub header_timeout: Duration,
    /// How long a request body may take to arrive, counted from the end of its head; past it
    /// the request is answered `408 body_timeout` and the connection closed. It only bites
    /// when shorter than `request_timeout`, whose `503` would otherwise come first.
    pub body_timeout: Duration,
    /// How long a keep-alive connection may wait, after an answer, for its next request to
    /// start before it is closed.
    pub idle_timeout: Duration,
    /// An extra CA certificate file (PEM) every authority's HTTPS connection trusts beside the
    /// system's roots; the CLI reads it from `ONCEGATE_CA_FILE`. An authority's own `ca_file`
    /// adds to it.
    pub ca_file: Option<PathBuf>,
    /// Overrides the contract's `settings.lease` for `process` reservations.
    pub lease: Option<Duration>,
    /// How far back a strategy's key matches count for its collision breaker (default 24 h).
    pub breaker_window: Duration,
    /// How often `serve` applies the retention rules in the background; `None` never does.
    pub purge_every: Option<Duration>,
    /// Where the background purge archives what it removes before removing it (see
    /// `oncegate::UpkeepSettings::purge_archive`); `None` purges without archiving.
    pub purge_archive: Option<std::path::PathBuf>,
    /// Whether `serve` sweeps expired leases in the background (every half lease, 1–15 s).
    /// Leases are also read as expired on access, so turning the sweep off changes only when
    /// an abandoned effect is turned `unknown`; tests that move the clock by hand turn it off
    /// so the sweep cannot race them.
    pub lease_sweep: bool,
    /// The reconciler worker `serve` runs (woken when an item is queued, polling every 30 s by
    /// default) and its authority policy.
    pub reconciler: ReconcilerSettings,
    /// Where the time is read.
    pub clock: Clock,
}

impl ServiceConfig {
    /// A config with no tokens, no secrets, private metrics, a 10-second request timeout
    /// (30 s for a head, 5 s for a body, 75 s idle), no extra CA, the contract's lease and the
    /// system clock.
    pub fn new(contract: Arc<Contract>, store: Arc<Store>, salt: Vec<u8>) -> Self {
        ServiceConfig {
            contract,
            store,
            read_store: None,
            salt,
            tokens: Vec::new(),
            secrets: ProviderSecrets::default(),
            metrics_public: false,
            request_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(75),
            ca_file: None,
            lease: None,
            breaker_window: Duration::from_secs(24 * 3600),
            purge_every: Some(Duration::from_secs(3600)),
            purge_archive: None,
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
            .field("read_store", &self.read_store.as_ref().map(|s| s.backend()))
            .field("salt", &"<redacted>")
            .field("tokens", &self.tokens.len())
            .field("secrets", &self.secrets)
            .field("metrics_public", &self.metrics_public)
            .field("request_timeout", &self.request_timeout)
            .field("header_timeout", &self.header_timeout)
            .field("body_timeout", &self.body_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("ca_file", &self.ca_file)
            .field("lease", &self.lease)
            .field("breaker_window", &self.breaker_window)
            .field("purge_every", &self.purge_every)
            .field("purge_archive", &self.purge_archive)
            .field("lease_sweep", &self.lease_sweep)
            .field("reconciler", &self.reconciler)
            .finish()
    }
}

/// The whole HTTP API as an axum router, ready to be served.
///
/// It runs no upkeep: leases that pass are still read as expired on access, but nothing turns
/// them `unknown` in the background, records decisions missed during a store outage, works the
/// queue or purges. [`serve`] runs them; a caller mounting this router itself runs them with
/// [`oncegate::Gate::upkeep`] over a gate of the same config (see [`router_with_gate`]).
pub fn router(config: ServiceConfig) -> axum::Router {
    app::router(state::AppState::new(config))
}

/// The HTTP API over an existing gate (the one whose upkeep the caller runs). The config's
/// contract, store, salt, lease, breaker window and clock are the gate's; the rest (tokens,
/// secrets, timeouts) are the HTTP side's.
pub fn router_with_gate(gate: oncegate::Gate, config: ServiceConfig) -> axum::Router {
    app::router(state::AppState::with_gate(gate, config))
}

/// Reads every CA file the authorities of `contract` need (`ca_file`, the CA of every
/// authority, and each authority's own `ca_file`) and builds their HTTPS clients, as [`serve`]
/// and [`reconcile_once`] do before anything else, so a caller can refuse to start before it
/// opens anything.
///
/// ```
/// let contract = oncegate_core::contract::parse(
///     "oncegate.toml",
///     include_str!("../../../examples/oncegate.toml"),
/// )
/// .unwrap();
/// assert!(oncegate_server::check_authorities(&contract, None).is_ok());
/// let missing = std::path::Path::new("/nonexistent/provider-ca.pem");
/// let e = oncegate_server::check_authorities(&contract, Some(missing)).unwrap_err();
/// assert!(e.to_string().contains("/nonexistent/provider-ca.pem"));
/// ```
pub fn check_authorities(
    contract: &Contract,
    ca_file: Option<&std::path::Path>,
) -> Result<(), TrustError> {
    oncegate::check_authorities(contract, ca_file)
}

/// One reconciliation pass over the open items, then the invisible-losses sweep, with the
/// config's contract, store, salt and clock: what `oncegate reconcile --once` runs (see
/// [`oncegate::reconcile_once`]).
pub async fn reconcile_once(config: &ServiceConfig) -> Result<RunReport, ReconcileError> {
    let gate = oncegate::Gate::new(state::gate_config(config));
    oncegate::reconcile_once(
        &gate,
        config.reconciler.authority,
        config.ca_file.as_deref(),
    )
    .await
}

/// Serves the API on `listener` until `shutdown` resolves, then stops accepting connections and
/// lets in-flight requests finish (a decision under way is always completed and recorded).
///
/// Connections are HTTP/1.1 with three deadlines from the config: the request head
/// (`header_timeout`), the request body (`body_timeout`) and the wait for the next request on
/// a kept-alive connection (`idle_timeout`).
///
/// Beside the HTTP server it runs a small upkeep loop: leases that passed are turned into
/// `unknown` with a "verify before retry" item (critical) or released for takeover
/// (reversible), and receptions whose decision could not be recorded while the store was down
/// are recorded as rejected once it is back. It also runs the reconciler, woken as soon as an
/// item is queued (in this process, or by a sibling through the store's hint) and polling every
/// `config.reconciler.every` (default 30 s) as the fallback: open reconcile and quarantine items
/// are checked against their type's authority, and unknown outcomes against the consumer's
/// `verify` API, see [`reconcile_once`].
///
/// A CA file that cannot be used (see [`check_authorities`]) is an `InvalidInput` error before
/// anything is served.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: ServiceConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let deadlines = connection::Deadlines {
        header: config.header_timeout,
        idle: config.idle_timeout,
    };
    let gate = oncegate::Gate::new(state::gate_config(&config));
    let upkeep = gate
        .upkeep(oncegate::UpkeepSettings {
            lease_sweep: config.lease_sweep,
            purge_every: config.purge_every,
            purge_archive: config.purge_archive.clone(),
            report_totals: oncegate::UpkeepSettings::default().report_totals,
            reconciler: config.reconciler,
            ca_file: config.ca_file.clone(),
            forwarder: oncegate::ForwarderSettings::default(),
        })
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let app = app::router(state::AppState::with_gate(gate, config));
    connection::serve(listener, app, deadlines, shutdown).await;
    drop(upkeep);
    Ok(())
}
