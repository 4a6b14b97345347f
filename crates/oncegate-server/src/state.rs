//! The state every request shares: the config as resolved once at start-up, the derived keys,
//! the metrics, and the small backlog of decisions the store could not record while it was down.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncegate_core::contract::Contract;
use oncegate_core::ids::DeliveryId;
use oncegate_core::json::Limits;
use oncegate_core::matrix::{self, Rejection, Situation};
use oncegate_store::{DecideRequest, Store, StoreError};
use time::OffsetDateTime;

use crate::auth::Tokens;
use crate::metrics::Metrics;
use crate::reservation::TokenKey;
use crate::secrets::ProviderSecrets;
use crate::{Clock, ServiceConfig};

/// A reception that was journaled but whose decision could not be recorded (the store went
/// away between the two commits). It was answered 503; once the store is back its proof is
/// recorded as a rejection so the report never shows it as an unexplained gap.
#[derive(Debug, Clone)]
pub(crate) struct Undecided {
    pub delivery: DeliveryId,
    pub event_type: Option<String>,
}

/// At most this many undecided receptions are remembered; past it the oldest are dropped (and
/// logged), because an outage long enough to fill it is visible in the report anyway.
const BACKLOG_LIMIT: usize = 10_000;

pub(crate) struct Inner {
    pub contract: Arc<Contract>,
    pub store: Arc<dyn Store>,
    pub salt: Vec<u8>,
    pub tokens: Tokens,
    pub secrets: ProviderSecrets,
    pub metrics_public: bool,
    pub request_timeout: Duration,
    pub body_timeout: Duration,
    pub lease: Duration,
    pub breaker_window: time::Duration,
    pub purge_every: Option<Duration>,
    pub lease_sweep: bool,
    pub clock: Clock,
    pub token_key: TokenKey,
    pub limits: Limits,
    pub metrics: Metrics,
    /// Wakes the reconciler as soon as an item is queued (a quarantine or a reconcile), so an
    /// item is attempted right away instead of at the next poll; `Notify` keeps one permit,
    /// so a burst of deliveries makes one run, not one per delivery.
    pub reconcile_wake: Arc<tokio::sync::Notify>,
    backlog: Mutex<Vec<Undecided>>,
}

#[derive(Clone)]
pub(crate) struct AppState(Arc<Inner>);

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub fn new(config: ServiceConfig) -> AppState {
        let settings = &config.contract.settings;
        let limits = Limits {
            max_bytes: settings.max_body_bytes,
            max_depth: settings.max_depth,
        };
        let lease = config.lease.unwrap_or(settings.lease);
        AppState(Arc::new(Inner {
            tokens: Tokens::new(&config.tokens),
            token_key: TokenKey::derive(&config.salt),
            contract: config.contract,
            store: config.store,
            salt: config.salt,
            secrets: config.secrets,
            metrics_public: config.metrics_public,
            request_timeout: config.request_timeout,
            body_timeout: config.body_timeout,
            lease,
            breaker_window: to_time(config.breaker_window),
            purge_every: config.purge_every,
            lease_sweep: config.lease_sweep,
            clock: config.clock,
            limits,
            metrics: Metrics::new(),
            reconcile_wake: Arc::new(tokio::sync::Notify::new()),
            backlog: Mutex::new(Vec::new()),
        }))
    }

    pub fn now(&self) -> OffsetDateTime {
        (self.clock)()
    }

    pub fn lease_time(&self) -> time::Duration {
        to_time(self.lease)
    }

    pub fn remember_undecided(&self, u: Undecided) {
        let mut backlog = self.backlog.lock().expect("backlog lock");
        if backlog.len() >= BACKLOG_LIMIT {
            let dropped = backlog.remove(0);
            tracing::error!(delivery_id = %dropped.delivery, "undecided backlog full; this reception stays without a proof");
        }
        backlog.push(u);
    }

    /// Records the decisions the store missed while it was down, as rejections. Returns how
    /// many are still waiting.
    pub async fn settle_undecided(&self) -> usize {
        let pending: Vec<Undecided> =
            std::mem::take(&mut *self.backlog.lock().expect("backlog lock"));
        if pending.is_empty() {
            return 0;
        }
        let mut still = Vec::new();
        let now = self.now();
        for u in pending {
            let rejection = Rejection {
                code: "store_unavailable".to_owned(),
                message: "the store was unavailable when this delivery arrived; it was answered 503 so the provider retries".to_owned(),
            };
            let decision = matrix::decide(&Situation::Rejected(rejection));
            let matrix = move |_: &oncegate_store::PriorView| decision.clone();
            let request = DecideRequest {
                delivery: u.delivery.clone(),
                event_type: u.event_type.clone(),
                key: None,
                lease: self.lease_time(),
                details_json: r#"{"rejection":"store_unavailable"}"#.to_owned(),
                now,
                resource: None,
                critical: true,
            };
            match self.store.decide(request, &matrix).await {
                Ok(_) => {
                    self.metrics.rejected("store_unavailable");
                    tracing::info!(delivery_id = %u.delivery, "recorded the decision missed while the store was down");
                }
                // Already decided: the first attempt did commit after all.
                Err(StoreError::Conflict(_)) | Err(StoreError::NotFound { .. }) => {}
                Err(_) => still.push(u),
            }
        }
        let n = still.len();
        if n > 0 {
            let mut backlog = self.backlog.lock().expect("backlog lock");
            still.append(&mut backlog);
            *backlog = still;
        }
        n
    }
}

pub(crate) fn to_time(d: Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

/// The upkeep loop `serve` runs beside the server: expired leases become `unknown` and missed
/// decisions are recorded. Both are idempotent, so several instances may run it at once.
pub(crate) async fn upkeep(state: AppState) {
    let period = (state.lease / 2).clamp(Duration::from_secs(1), Duration::from_secs(15));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if state.lease_sweep {
            match state.store.expire_leases(state.now()).await {
                // A critical effect whose lease passed has a "verify before retry" item now.
                Ok(expired) if !expired.is_empty() => state.reconcile_wake.notify_one(),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "lease sweep skipped");
                    continue;
                }
            }
        }
        state.settle_undecided().await;
    }
}
