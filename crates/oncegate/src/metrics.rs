//! Prometheus metrics (`prometheus-client`), every name prefixed `oncegate_`.
//!
//! Counters are bumped as decisions are made, so they describe this instance since it started.
//! Gauges that describe shared state (queue depth and age, effects by state) are read from the
//! store when `/metrics` is scraped, so every instance sharing a database reports the same
//! values.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncegate_core::matrix::{Action, Decision, Flag, Layer};
use oncegate_store::{
    BatchSizes, BreakerRule, BreakerScope, QueueFilter, QueueKind, QueueStatus, Store,
    TenantFilter, BATCH_SIZE_BOUNDS,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use time::OffsetDateTime;

mod decisions;
mod forward;
mod reconcile;
mod shadow;

pub(crate) use decisions::DecisionLabels;
use decisions::{DecisionCounters, DeliveryLabels, KeyLabels};
pub(crate) use forward::ForwardMetrics;
pub(crate) use reconcile::ReconcileMetrics;
pub use shadow::ShadowMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabels {
    provider: String,
    env: String,
    event_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StrategyLabels {
    provider: String,
    env: String,
    event_type: String,
    strategy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlagLabels {
    flag: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

/// How often the effects-by-state gauges are recomputed at most: they come from the report
/// query, which scans deliveries, so a scrape every few seconds must not run it every time.
const EFFECT_GAUGE_INTERVAL: Duration = Duration::from_secs(30);

/// Queue items read per kind when refreshing the queue gauges. A deeper queue is reported at
/// this value (with the oldest age still exact, the listing being oldest first).
const QUEUE_SCAN_LIMIT: u32 = 10_000;

/// The store's batch sizes as a histogram, read when scraped (the store counts them itself).
#[derive(Debug)]
struct BatchSizesMetric(Arc<BatchSizes>);

impl prometheus_client::encoding::EncodeMetric for BatchSizesMetric {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        let seen = self.0.snapshot();
        // `f64::MAX` is how the encoder spells the `+Inf` bucket.
        let buckets: Vec<(f64, u64)> = BATCH_SIZE_BOUNDS
            .iter()
            .map(|&bound| bound as f64)
            .chain(std::iter::once(f64::MAX))
            .zip(seen.per_bucket)
            .collect();
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            seen.calls as f64,
            seen.batches,
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

/// The round trips the store's group commits took to their server, a counter read when
/// scraped (none for a store in process).
#[derive(Debug)]
struct RoundTripsMetric(Arc<BatchSizes>);

impl prometheus_client::encoding::EncodeMetric for RoundTripsMetric {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
            &self.0.snapshot().round_trips,
            None,
        )
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Counter
    }
}

/// A gate's Prometheus registry and its counters, gauges and histograms (`oncegate_*`).
pub struct Metrics {
    registry: Registry,
    /// `oncegate_deliveries_total` and `oncegate_keys_total`, by decision.
    decisions: DecisionCounters,
    transport_duplicates: Family<TypeLabels, Counter>,
    effect_duplicates: Family<StrategyLabels, Counter>,
    collisions: Family<StrategyLabels, Counter>,
    rejected: Family<ReasonLabels, Counter>,
    flags: Family<FlagLabels, Counter>,
    resolutions: Family<OutcomeLabels, Counter>,
    effect_outcomes: Family<OutcomeLabels, Counter>,
    queue_depth: Family<KindLabels, Gauge>,
    queue_oldest: Family<KindLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    effects: Family<StateLabels, Gauge>,
    unexplained_gap: Gauge,
    store_up: Gauge,
    breaker_open: Family<StrategyLabels, Gauge>,
    latency: Histogram,
    effects_refreshed: Mutex<Option<Instant>>,
    /// The reconciler's own metrics (attempts by outcome, missing effects).
    pub(crate) reconcile: ReconcileMetrics,
    /// Shadow strategies' disagreements with the active hierarchy.
    pub(crate) shadow: ShadowMetrics,
    /// Gateway mode's forwards (attempts by outcome, latency, dead letters, backlog).
    pub(crate) forward: ForwardMetrics,
}

impl Metrics {
    /// A new registry with every family registered; `batch_sizes`, the store's group commits.
    pub(crate) fn new(batch_sizes: Arc<BatchSizes>) -> Metrics {
        let mut registry = Registry::with_prefix("oncegate");
        registry.register(
            "store_batch_calls",
            "Calls gathered into each group commit of the store (one transaction, one commit)",
            BatchSizesMetric(batch_sizes.clone()),
        );
        registry.register(
            "store_round_trips",
            "Round trips the store's group commits took to the database server (two for a \
             batch with a decision, one for one without)",
            RoundTripsMetric(batch_sizes),
        );
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        registry.register(
            "deliveries",
            "Deliveries decided, by provider, environment, event type, strategy, level and action",
            deliveries.clone(),
        );
        let keys = Family::<KeyLabels, Counter>::default();
        registry.register(
            "keys",
            "Effect keys made, by confidence (strong vs medium/weak keys)",
            keys.clone(),
        );
        let transport_duplicates = Family::<TypeLabels, Counter>::default();
        registry.register(
            "transport_duplicates",
            "Deliveries ignored as the same packet again (a provider retry)",
            transport_duplicates.clone(),
        );
        let effect_duplicates = Family::<StrategyLabels, Counter>::default();
        registry.register(
            "effect_duplicates",
            "Deliveries ignored as another packet for an effect that already exists",
            effect_duplicates.clone(),
        );
        let collisions = Family::<StrategyLabels, Counter>::default();
        registry.register(
            "collisions",
            "Key matches whose discriminants differed (quarantined)",
            collisions.clone(),
        );
        let rejected = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "rejected",
            "Receptions refused before identification, by reason",
            rejected.clone(),
        );
        let flags = Family::<FlagLabels, Counter>::default();
        registry.register(
            "decision_flags",
            "Decisions carrying a flag (possible_duplicate, breaker_open, takeover, …)",
            flags.clone(),
        );
        let resolutions = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "queue_resolutions",
            "Queue items resolved, by outcome (duplicate = a confirmed duplicate kept from running twice)",
            resolutions.clone(),
        );
        let effect_outcomes = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "effect_outcomes",
            "Effects completed or failed through the API",
            effect_outcomes.clone(),
        );
        let queue_depth = Family::<KindLabels, Gauge>::default();
        registry.register(
            "queue_depth",
            "Open queue items, by kind",
            queue_depth.clone(),
        );
        let queue_oldest =
            Family::<KindLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "queue_oldest_age_seconds",
            "Age of the oldest open queue item, by kind",
            queue_oldest.clone(),
        );
        let effects = Family::<StateLabels, Gauge>::default();
        registry.register(
            "effects",
            "Effects by outcome (best effort, from the report over all stored deliveries)",
            effects.clone(),
        );
        let unexplained_gap = Gauge::default();
        registry.register(
            "unexplained_gap",
            "Deliveries received without a documented decision: the report's unexplained gap over all stored deliveries (0 when every delivery is explained; read with the effects gauges)",
            unexplained_gap.clone(),
        );
        let store_up = Gauge::default();
        registry.register(
            "store_up",
            "1 when the store answered the last scrape's ping",
            store_up.clone(),
        );
        let breaker_open = Family::<StrategyLabels, Gauge>::default();
        registry.register(
            "breaker_open",
            "1 while a strategy's collision breaker is open (its ignores become reconcile), 0 once closed",
            breaker_open.clone(),
        );
        let latency = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "decision_latency_seconds",
            "Time from a delivery's arrival to its recorded decision",
            latency.clone(),
        );
        let reconcile = ReconcileMetrics::register(&mut registry);
        let shadow = ShadowMetrics::register(&mut registry);
        let forward = ForwardMetrics::register(&mut registry);
        Metrics {
            reconcile,
            shadow,
            forward,
            registry,
            decisions: DecisionCounters::new(deliveries, keys),
            transport_duplicates,
            effect_duplicates,
            collisions,
            rejected,
            flags,
            resolutions,
            effect_outcomes,
            queue_depth,
            queue_oldest,
            effects,
            unexplained_gap,
            store_up,
            breaker_open,
            latency,
            effects_refreshed: Mutex::new(None),
        }
    }

    /// Counts one recorded decision.
    pub(crate) fn decision(
        &self,
        labels: &DecisionLabels<'_>,
        decision: &Decision,
        elapsed: Duration,
    ) {
        self.latency.observe(elapsed.as_secs_f64());
        self.decisions.count(labels);
        // The label sets are built only for the counters a decision moves: most decisions
        // (`process`) move none of these, and each set is three or four owned strings.
        let by_strategy = || StrategyLabels {
            provider: labels.provider.to_owned(),
            env: labels.env.to_owned(),
            event_type: labels.event_type.to_owned(),
            strategy: labels.strategy_label(),
        };
        match (decision.action, decision.layer) {
            (Action::Ignore, Some(Layer::Transport)) => {
                let by_type = TypeLabels {
                    provider: labels.provider.to_owned(),
                    env: labels.env.to_owned(),
                    event_type: labels.event_type.to_owned(),
                };
                self.transport_duplicates.get_or_create(&by_type).inc();
            }
            (Action::Ignore, _) => {
                self.effect_duplicates.get_or_create(&by_strategy()).inc();
            }
            (Action::Quarantine, _) => {
                self.collisions.get_or_create(&by_strategy()).inc();
            }
            _ => {}
        }
        for f in &decision.flags {
            self.flag(*f);
        }
    }

    fn flag(&self, f: Flag) {
        self.flags
            .get_or_create(&FlagLabels {
                flag: f.as_str().to_owned(),
            })
            .inc();
    }

    pub(crate) fn rejected(&self, reason: &str) {
        self.rejected
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts a queue resolution by its outcome (`duplicate`, `distinct`).
    pub(crate) fn resolution(&self, outcome: &str) {
        self.resolutions
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    pub(crate) fn effect_outcome(&self, outcome: &str) {
        self.effect_outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Sets a strategy's breaker gauge (1 open, 0 closed).
    pub(crate) fn breaker(&self, scope: &BreakerScope, open: bool) {
        self.breaker_open
            .get_or_create(&StrategyLabels {
                provider: scope.provider.clone(),
                env: scope.env.clone(),
                event_type: scope.event_type.clone(),
                strategy: scope.strategy_label(),
            })
            .set(i64::from(open));
    }

    /// Counts an item a person resolved (how long it waited, by whom it was settled).
    pub(crate) fn settled_by_person(&self, item: &oncegate_store::QueueItem, now: OffsetDateTime) {
        self.reconcile.settled("person", item, now);
    }

    /// Reads the shared gauges from the store. A store that does not answer leaves the last
    /// values in place and sets `oncegate_store_up` to 0.
    pub(crate) async fn refresh(&self, store: &Store, now: OffsetDateTime) {
        if store.ping().await.is_err() {
            self.store_up.set(0);
            return;
        }
        self.store_up.set(1);
        self.forward.refresh(store).await;
        // Breakers are shared state: another instance may have opened or closed one. Their
        // state does not depend on the window, so any rule lists them.
        if let Ok(breakers) = store.breakers(&BreakerRule::new(0.0, 0), now).await {
            for b in &breakers {
                if b.opened_at.is_some() {
                    self.breaker(&b.scope, b.is_open());
                }
            }
        }
        for kind in [QueueKind::Quarantine, QueueKind::Reconcile] {
            let filter = QueueFilter {
                tenants: TenantFilter::All,
                status: Some(QueueStatus::Open),
                kind: Some(kind),
                provider: None,
                limit: QUEUE_SCAN_LIMIT,
                ..QueueFilter::default()
            };
            if let Ok(items) = store.queue_list(&filter).await {
                let labels = KindLabels {
                    kind: kind.as_str().to_owned(),
                };
                self.queue_depth
                    .get_or_create(&labels)
                    .set(items.len() as i64);
                let oldest = items
                    .iter()
                    .map(|i| (now - i.created_at).as_seconds_f64().max(0.0))
                    .fold(0.0, f64::max);
                self.queue_oldest.get_or_create(&labels).set(oldest);
            }
        }
        let due = {
            let mut last = self.effects_refreshed.lock().expect("metrics lock");
            let due = match *last {
                None => true,
                Some(t) => t.elapsed() >= EFFECT_GAUGE_INTERVAL,
            };
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        if due {
            if let Ok(report) = store
                .report(&TenantFilter::All, OffsetDateTime::UNIX_EPOCH)
                .await
            {
                let t = report.total;
                self.unexplained_gap.set(t.unexplained_gap);
                for (state, n) in [
                    ("completed", t.effects_completed),
                    ("failed", t.effects_failed),
                    ("unknown", t.effects_unknown),
                ] {
                    self.effects
                        .get_or_create(&StateLabels {
                            state: state.to_owned(),
                        })
                        .set(n as i64);
                }
            }
        }
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
