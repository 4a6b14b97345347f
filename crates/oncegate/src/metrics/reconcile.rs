//! The reconciler's own metrics: attempts by outcome, missing effects per type, and how long
//! the items it and people settled had waited.

use oncegate_store::QueueItem;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use time::OffsetDateTime;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    provider: String,
    env: String,
    event_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SettledLabel {
    /// `service` (the reconciler, the verifier) or `person`.
    by: String,
    kind: String,
}

/// `oncegate_reconcile_attempts_total{outcome}`, `oncegate_missing_effects{provider,env,event_type}`,
/// `oncegate_queue_settled_total{by,kind}` and `oncegate_queue_settle_seconds{by}` (from queued
/// to settled).
pub(crate) struct ReconcileMetrics {
    attempts: Family<OutcomeLabel, Counter>,
    missing: Family<TypeLabel, Gauge>,
    settled: Family<SettledLabel, Counter>,
    settle_seconds: Family<SettledBy, Histogram>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SettledBy {
    by: String,
}

impl ReconcileMetrics {
    pub fn register(registry: &mut Registry) -> ReconcileMetrics {
        let attempts = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "reconcile_attempts",
            "Reconciler attempts on queue items, by outcome (distinct, duplicate, inconclusive, no_authority, error)",
            attempts.clone(),
        );
        let missing = Family::<TypeLabel, Gauge>::default();
        registry.register(
            "missing_effects",
            "Operations the authority lists for recently seen resources that have no local effect",
            missing.clone(),
        );
        let settled = Family::<SettledLabel, Counter>::default();
        registry.register(
            "queue_settled",
            "Queue items settled, by who settled them (service: the reconciler or the verifier; person) and kind",
            settled.clone(),
        );
        // 0.1 s … about 7 days: a reconciler settles in a second, a person in hours.
        let settle_seconds = Family::<SettledBy, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.1, 4.0, 13))
        });
        registry.register(
            "queue_settle_seconds",
            "Time from an item's queueing to its resolution, by who settled it",
            settle_seconds.clone(),
        );
        ReconcileMetrics {
            attempts,
            missing,
            settled,
            settle_seconds,
        }
    }

    /// Counts one settled item: `by` is `service` or `person`.
    pub(crate) fn settled(&self, by: &str, item: &QueueItem, now: OffsetDateTime) {
        self.settled
            .get_or_create(&SettledLabel {
                by: by.to_owned(),
                kind: item.kind.as_str().to_owned(),
            })
            .inc();
        let waited = (now - item.created_at).as_seconds_f64().max(0.0);
        self.settle_seconds
            .get_or_create(&SettledBy { by: by.to_owned() })
            .observe(waited);
    }

    pub(crate) fn attempt(&self, outcome: &str) {
        self.attempts
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    pub(crate) fn set_missing(&self, provider: &str, env: &str, event_type: &str, n: u64) {
        self.missing
            .get_or_create(&TypeLabel {
                provider: provider.to_owned(),
                env: env.to_owned(),
                event_type: event_type.to_owned(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}
