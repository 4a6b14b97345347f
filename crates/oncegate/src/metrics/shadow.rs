//! The shadow strategies' metric: deliveries on which a shadow would have decided otherwise
//! than the active hierarchy.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    provider: String,
    env: String,
    event_type: String,
    strategy: String,
}

/// `oncegate_shadow_disagreements_total{provider,env,event_type,strategy}`.
#[derive(Debug, Clone, Default)]
pub struct ShadowMetrics {
    disagreements: Family<Labels, Counter>,
}

impl ShadowMetrics {
    pub fn register(registry: &mut Registry) -> ShadowMetrics {
        let disagreements = Family::<Labels, Counter>::default();
        registry.register(
            "shadow_disagreements",
            "Deliveries for which a shadow strategy would have decided otherwise than the active hierarchy",
            disagreements.clone(),
        );
        ShadowMetrics { disagreements }
    }

    /// Counts one delivery on which the shadow `strategy` (`name@version`) disagreed.
    pub(crate) fn disagreement(&self, provider: &str, env: &str, event_type: &str, strategy: &str) {
        self.disagreements
            .get_or_create(&Labels {
                provider: provider.to_owned(),
                env: env.to_owned(),
                event_type: event_type.to_owned(),
                strategy: strategy.to_owned(),
            })
            .inc();
    }
}
