//! The forwarder's metrics (gateway mode): attempts by outcome, their latency, dead letters
//! and the backlog read from the store at each scrape.

use std::time::Duration;

use oncegate_store::ForwardRecord;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    provider: String,
    event_type: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

/// The forwarder's metrics: attempts by outcome, their latency, dead letters and the backlog.
pub(crate) struct ForwardMetrics {
    attempts: Family<AttemptLabels, Counter>,
    latency: Histogram,
    dead: Family<AttemptLabels, Counter>,
    backlog: Family<StateLabel, Gauge>,
}

impl ForwardMetrics {
    pub fn register(registry: &mut Registry) -> ForwardMetrics {
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "forward_attempts",
            "Forward attempts to the consumer's endpoint, by outcome (delivered, retry, dead, stale, unknown)",
            attempts.clone(),
        );
        // 1 ms … about 65 s.
        let latency = Histogram::new(exponential_buckets(0.001, 2.0, 17));
        registry.register(
            "forward_latency_seconds",
            "Time from a forward attempt's start to its answer (or its timeout)",
            latency.clone(),
        );
        let dead = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "forward_dead_letters",
            "Forwards whose attempts ran out (dead letters, re-sendable)",
            dead.clone(),
        );
        let backlog = Family::<StateLabel, Gauge>::default();
        registry.register(
            "forward_backlog",
            "Forwards waiting (pending), in flight (sending) and dead, read from the store",
            backlog.clone(),
        );
        ForwardMetrics {
            attempts,
            latency,
            dead,
            backlog,
        }
    }

    pub(crate) fn attempt(&self, f: &ForwardRecord, outcome: &str, latency: Option<Duration>) {
        let labels = AttemptLabels {
            provider: f.provider.clone(),
            event_type: f.event_type.clone().unwrap_or_default(),
            outcome: outcome.to_owned(),
        };
        self.attempts.get_or_create(&labels).inc();
        if outcome == "dead" {
            self.dead.get_or_create(&labels).inc();
        }
        if let Some(l) = latency {
            self.latency.observe(l.as_secs_f64());
        }
    }

    /// Reads the backlog from the store (at each scrape).
    pub(crate) async fn refresh(&self, store: &oncegate_store::Store) {
        if let Ok(c) = store
            .forward_counts(&oncegate_store::TenantFilter::All)
            .await
        {
            for (state, n) in [
                ("pending", c.pending),
                ("sending", c.sending),
                ("dead", c.dead),
            ] {
                self.backlog
                    .get_or_create(&StateLabel {
                        state: state.to_owned(),
                    })
                    .set(n as i64);
            }
        }
    }
}
