//! The decisions' counters, found from borrowed labels: a decision's labels are read from its
//! reception, its contract and its outcome, and the counters of a label set seen before are
//! found with them alone, without building the set's owned strings or hashing them twice.
//!
//! `prometheus-client`'s `Family` looks a series up by its owned label set, so every decision
//! would allocate six strings (and three more for the key's confidence) only to find a counter
//! that exists after the first decision of its kind. The counters it hands out share their
//! value with the family's, so a map from the label set to them counts into the same series
//! the registry encodes; the map is looked up with a borrowed view of the set (`hashbrown`'s
//! `Equivalent`), hashed the same way as the owned key it stands for.

use std::hash::{Hash, Hasher, RandomState};
use std::sync::RwLock;

use hashbrown::{Equivalent, HashMap};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// A decision's labels, borrowed.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub(crate) struct DecisionLabels<'a> {
    /// The provider, or `(unknown)` when the contract has no such provider.
    pub provider: &'a str,
    pub env: &'a str,
    /// The event type, or the word that says why there is none (`(no contract)`,
    /// `(rejected)`).
    pub event_type: &'a str,
    /// The strategy that made the key: its name and version.
    pub strategy: Option<(&'a str, u32)>,
    /// The strategy's level, empty without one.
    pub level: &'a str,
    pub action: &'a str,
    /// The key's confidence, when a strategy made one (`oncegate_keys_total`).
    pub confidence: Option<&'a str>,
}

impl DecisionLabels<'_> {
    /// The strategy label: `name@version`, empty without a strategy.
    pub(crate) fn strategy_label(&self) -> String {
        self.strategy
            .map(|(name, version)| format!("{name}@{version}"))
            .unwrap_or_default()
    }

    fn owned(&self) -> Key {
        Key {
            provider: self.provider.to_owned(),
            env: self.env.to_owned(),
            event_type: self.event_type.to_owned(),
            strategy: self.strategy.map(|(n, v)| (n.to_owned(), v)),
            level: self.level.to_owned(),
            action: self.action.to_owned(),
            confidence: self.confidence.map(str::to_owned),
        }
    }
}

/// The labels of `oncegate_deliveries_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DeliveryLabels {
    pub provider: String,
    pub env: String,
    pub event_type: String,
    pub strategy: String,
    pub level: String,
    pub action: String,
}

/// The labels of `oncegate_keys_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KeyLabels {
    provider: String,
    event_type: String,
    confidence: String,
}

/// A label set as the map keeps it: the owned form of `DecisionLabels`.
#[derive(Debug, PartialEq, Eq)]
struct Key {
    provider: String,
    env: String,
    event_type: String,
    strategy: Option<(String, u32)>,
    level: String,
    action: String,
    confidence: Option<String>,
}

impl Key {
    fn view(&self) -> DecisionLabels<'_> {
        DecisionLabels {
            provider: &self.provider,
            env: &self.env,
            event_type: &self.event_type,
            strategy: self.strategy.as_ref().map(|(n, v)| (n.as_str(), *v)),
            level: &self.level,
            action: &self.action,
            confidence: self.confidence.as_deref(),
        }
    }
}

/// Hashed through its borrowed view, so a `DecisionLabels` finds it (`Equivalent`).
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.view().hash(state);
    }
}

impl Equivalent<Key> for DecisionLabels<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        *self == key.view()
    }
}

/// The counters one label set moves.
#[derive(Clone)]
struct Counters {
    deliveries: Counter,
    keys: Option<Counter>,
}

/// The decisions' families and the counters already handed out, by label set.
pub(crate) struct DecisionCounters {
    deliveries: Family<DeliveryLabels, Counter>,
    keys: Family<KeyLabels, Counter>,
    known: RwLock<HashMap<Key, Counters, RandomState>>,
}

impl DecisionCounters {
    /// Counts into `deliveries` and `keys`, the families the registry encodes.
    pub(crate) fn new(
        deliveries: Family<DeliveryLabels, Counter>,
        keys: Family<KeyLabels, Counter>,
    ) -> DecisionCounters {
        DecisionCounters {
            deliveries,
            keys,
            known: RwLock::default(),
        }
    }

    /// Counts one decision with `labels`: its delivery, and its key's confidence when it has
    /// one.
    pub(crate) fn count(&self, labels: &DecisionLabels<'_>) {
        let known = self
            .known
            .read()
            .expect("decision counters lock")
            .get(labels)
            .cloned();
        let counters = match known {
            Some(c) => c,
            None => self.first(labels),
        };
        counters.deliveries.inc();
        if let Some(keys) = &counters.keys {
            keys.inc();
        }
    }

    /// The counters of a label set not seen before, from the families, kept for the next.
    fn first(&self, labels: &DecisionLabels<'_>) -> Counters {
        let counters = Counters {
            deliveries: self
                .deliveries
                .get_or_create(&DeliveryLabels {
                    provider: labels.provider.to_owned(),
                    env: labels.env.to_owned(),
                    event_type: labels.event_type.to_owned(),
                    strategy: labels.strategy_label(),
                    level: labels.level.to_owned(),
                    action: labels.action.to_owned(),
                })
                .clone(),
            keys: labels.confidence.map(|c| {
                self.keys
                    .get_or_create(&KeyLabels {
                        provider: labels.provider.to_owned(),
                        event_type: labels.event_type.to_owned(),
                        confidence: c.to_owned(),
                    })
                    .clone()
            }),
        };
        self.known
            .write()
            .expect("decision counters lock")
            .entry(labels.owned())
            .or_insert(counters)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels<'a>(action: &'a str, confidence: Option<&'a str>) -> DecisionLabels<'a> {
        DecisionLabels {
            provider: "payflow",
            env: "live",
            event_type: "refund.created",
            strategy: Some(("refund_request", 2)),
            level: "business",
            action,
            confidence,
        }
    }

    /// Each label set counts into its own series of the families, the first decision of a set
    /// and every later one alike; a set that differs in one label only is another series.
    #[test]
    fn each_label_set_counts_into_its_own_series() {
        let (deliveries, keys) = (Family::default(), Family::default());
        let counters = DecisionCounters::new(deliveries.clone(), keys.clone());
        for _ in 0..3 {
            counters.count(&labels("process", Some("strong")));
        }
        counters.count(&labels("ignore", Some("strong")));
        counters.count(&DecisionLabels {
            strategy: Some(("refund_request", 3)),
            ..labels("process", None)
        });
        let series = |action: &str, strategy: &str| {
            deliveries
                .get_or_create(&DeliveryLabels {
                    provider: "payflow".into(),
                    env: "live".into(),
                    event_type: "refund.created".into(),
                    strategy: strategy.into(),
                    level: "business".into(),
                    action: action.into(),
                })
                .get()
        };
        assert_eq!(series("process", "refund_request@2"), 3);
        assert_eq!(series("ignore", "refund_request@2"), 1);
        assert_eq!(series("process", "refund_request@3"), 1);
        let strong = keys
            .get_or_create(&KeyLabels {
                provider: "payflow".into(),
                event_type: "refund.created".into(),
                confidence: "strong".into(),
            })
            .get();
        assert_eq!(strong, 4, "the decision without a key counts no confidence");
    }

    /// The borrowed view finds the owned key it stands for: same hash, equal.
    #[test]
    fn the_view_hashes_as_its_key() {
        let view = labels("quarantine", Some("medium"));
        let key = view.owned();
        let hash = |h: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
            let mut s = std::collections::hash_map::DefaultHasher::new();
            h(&mut s);
            s.finish()
        };
        assert_eq!(hash(&|s| view.hash(s)), hash(&|s| key.hash(s)));
        assert!(view.equivalent(&key));
        assert!(!labels("process", Some("medium")).equivalent(&key));
    }
}
