//! The gate: one contract, one store and one salt, and the pipeline every delivery goes
//! through after its sender was authenticated — identify, journal, run the shadows, decide in
//! the store (whose view also reads the strategy's breaker), count — whatever transport brought
//! it.

use std::sync::Arc;
use std::time::Duration;

use oncegate_core::contract::Contract;
use oncegate_core::json::Limits;
use oncegate_store::Store;
use time::OffsetDateTime;

use crate::backlog::Backlog;
use crate::error::GateError;
use crate::metrics::Metrics;
use crate::tally::Tallies;

/// Where the gate reads the time. Tests inject a fixed or stepped clock; production uses
/// [`system_clock`].
pub type Clock = Arc<dyn Fn() -> OffsetDateTime + Send + Sync>;

/// The wall clock, in UTC.
pub fn system_clock() -> Clock {
    Arc::new(OffsetDateTime::now_utc)
}

/// The largest result (or failure text) an effect keeps: references, not payloads.
pub const MAX_RESULT_BYTES: usize = 16 * 1024;

/// Everything a gate needs, resolved by the caller.
#[derive(Clone)]
pub struct GateConfig {
    /// The contract deliveries are identified with.
    pub contract: Arc<Contract>,
    /// The store they are journaled and decided in.
    pub store: Arc<Store>,
    /// A streaming standby of `store` that the listings, the report and the proofs read back
    /// are read from (see [`Gate::read_lag`]); everything that decides or acts stays on
    /// `store`. `None`: all of it on `store`.
    pub read_store: Option<Arc<Store>>,
    /// The key salt for sensitive fields (HMAC-SHA-256).
    pub salt: Vec<u8>,
    /// Overrides the contract's `settings.lease` for `process` reservations.
    pub lease: Option<Duration>,
    /// How far back a strategy's key matches count for its collision breaker (default 24 h).
    pub breaker_window: Duration,
    /// Where the time is read.
    pub clock: Clock,
}

impl GateConfig {
    /// The contract's lease, a 24-hour breaker window and the system clock.
    pub fn new(contract: Arc<Contract>, store: Arc<Store>, salt: Vec<u8>) -> GateConfig {
        GateConfig {
            contract,
            store,
            read_store: None,
            salt,
            lease: None,
            breaker_window: Duration::from_secs(24 * 3600),
            clock: system_clock(),
        }
    }
}

impl std::fmt::Debug for GateConfig {
    // Written by hand so the salt can never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateConfig")
            .field("contract", &self.contract.source)
            .field("store", &self.store.backend())
            .field("read_store", &self.read_store.as_ref().map(|s| s.backend()))
            .field("salt", &"<redacted>")
            .field("lease", &self.lease)
            .field("breaker_window", &self.breaker_window)
            .finish()
    }
}

pub(crate) struct Inner {
    contract: Arc<Contract>,
    store: Arc<Store>,
    /// Where the listings, the report and proofs read back are read: the read store, else
    /// `store`.
    reader: Arc<Store>,
    replica: bool,
    salt: Vec<u8>,
    clock: Clock,
    lease: Duration,
    breaker_window: time::Duration,
    limits: Limits,
    metrics: Metrics,
    /// Wakes the reconciler as soon as an item is queued (a quarantine or a reconcile), so an
    /// item is attempted right away instead of at the next poll; `Notify` keeps one permit,
    /// so a burst of deliveries makes one run, not one per delivery.
    wake: Arc<tokio::sync::Notify>,
    /// Wakes the forwarder as soon as a forward is enqueued (gateway mode).
    forward_wake: Arc<tokio::sync::Notify>,
    backlog: Backlog,
    /// Breaker matches waiting to be counted together.
    tallies: Tallies,
}

/// The engine, cheap to clone (one shared state): decides deliveries, holds reservations and
/// runs the upkeep. See the crate's documentation for a delivery decided end to end.
#[derive(Clone)]
pub struct Gate(Arc<Inner>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("contract", &self.0.contract.source)
            .field("store", &self.0.store.backend())
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// A gate over an opened store.
    pub fn new(config: GateConfig) -> Gate {
        let settings = &config.contract.settings;
        let limits = Limits {
            max_bytes: settings.max_body_bytes,
            max_depth: settings.max_depth,
        };
        let lease = config.lease.unwrap_or(settings.lease);
        let metrics = Metrics::new(config.store.batch_sizes());
        let replica = config.read_store.is_some();
        let reader = config.read_store.unwrap_or_else(|| config.store.clone());
        Gate(Arc::new(Inner {
            contract: config.contract,
            store: config.store,
            reader,
            replica,
            salt: config.salt,
            clock: config.clock,
            lease,
            breaker_window: to_time(config.breaker_window),
            limits,
            metrics,
            wake: Arc::new(tokio::sync::Notify::new()),
            forward_wake: Arc::new(tokio::sync::Notify::new()),
            backlog: Backlog::default(),
            tallies: Tallies::default(),
        }))
    }

    /// Opens the store at `url` (`sqlite://path`, `postgres://…`; its schema is created or
    /// migrated) and makes a gate with the default settings.
    pub async fn open(contract: Contract, url: &str, salt: Vec<u8>) -> Result<Gate, GateError> {
        let store = oncegate_store::open(url).await?;
        Ok(Gate::new(GateConfig::new(Arc::new(contract), store, salt)))
    }

    /// The contract the gate decides with.
    pub fn contract(&self) -> &Arc<Contract> {
        &self.0.contract
    }

    /// The store the gate decides in: the engine's own; embedders act through the gate.
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.0.store
    }

    /// The store the listings, the report and proofs read back are read from: the read store
    /// when the gate has one (see [`GateConfig::read_store`]), else the store.
    pub(crate) fn reader(&self) -> &Arc<Store> {
        &self.0.reader
    }

    /// True when the gate's reads come from a read store of their own (a streaming standby),
    /// whose answers say how stale they may be (`read_lag`).
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let contract = oncegate_core::contract::parse("oncegate.toml", "").unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    /// let gate = oncegate::Gate::open(contract, &url, b"salt".to_vec()).await.unwrap();
    /// assert!(!gate.reads_a_replica());
    /// # });
    /// ```
    pub fn reads_a_replica(&self) -> bool {
        self.0.replica
    }

    /// How far behind the store the gate's reads are: `None` when they are read from the
    /// store itself, else the read store's replay lag (zero when it has replayed everything it
    /// received). Answers read from a replica say it (`oncegate-read-lag-ms`).
    pub async fn read_lag(&self) -> Result<Option<Duration>, oncegate_store::StoreError> {
        if !self.0.replica {
            return Ok(None);
        }
        Ok(Some(self.0.reader.read_lag().await?.unwrap_or_default()))
    }

    /// The gate's clock, now.
    pub fn now(&self) -> OffsetDateTime {
        (self.0.clock)()
    }

    /// The body and depth limits of the contract: a transport reads at most `max_bytes`.
    pub fn limits(&self) -> Limits {
        self.0.limits
    }

    /// The lease of a `process` reservation.
    pub fn lease(&self) -> Duration {
        self.0.lease
    }

    /// The gate's Prometheus metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    pub(crate) fn salt(&self) -> &[u8] {
        &self.0.salt
    }

    pub(crate) fn breaker_window(&self) -> time::Duration {
        self.0.breaker_window
    }

    /// The receptions journaled while the store could not record their decision.
    pub(crate) fn backlog(&self) -> &Backlog {
        &self.0.backlog
    }

    pub(crate) fn tallies(&self) -> &Tallies {
        &self.0.tallies
    }

    /// Wakes the reconciler (an item was queued).
    pub(crate) fn wake(&self) -> &Arc<tokio::sync::Notify> {
        &self.0.wake
    }

    /// Wakes the forwarder (a forward was enqueued).
    pub(crate) fn forward_wake(&self) -> &Arc<tokio::sync::Notify> {
        &self.0.forward_wake
    }

    /// The lease of a `process` reservation, as the store takes it.
    pub fn lease_time(&self) -> time::Duration {
        to_time(self.0.lease)
    }
}

/// A standard duration as a `time` one (saturating).
pub(crate) fn to_time(d: Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}
