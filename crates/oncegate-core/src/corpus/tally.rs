//! The tally of a contract replayed over a labeled corpus: per strategy, the operations merged
//! wrongly (false positives) and the retries not recognized (false negatives).

use crate::matrix::Action;
use std::collections::{BTreeMap, HashMap, HashSet};

/// One delivery's outcome in a replay, as the service answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// `name@version` of the strategy that made the key, or a placeholder of the caller's
    /// choosing when none did (`(no key)`, `(rejected)`): the figures are tallied under it.
    pub strategy: String,
    /// True when the key's confidence was strong.
    pub strong: bool,
    /// The action the service answered.
    pub action: Action,
    /// The effect the delivery was attached to, if any.
    pub effect: Option<String>,
    /// The delivery's labeled operation, if it has one; unlabeled deliveries count in every
    /// figure but the false positives and negatives.
    pub label: Option<String>,
}

/// The replay figures of one strategy name+version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayTally {
    /// Deliveries replayed under the strategy.
    pub deliveries: usize,
    /// Of those, with a strong key.
    pub strong: usize,
    /// Of those, with a key that was not strong (medium or weak), or no key.
    pub weak: usize,
    /// Answered `process`.
    pub processed: usize,
    /// Answered `ignore`.
    pub ignored: usize,
    /// Quarantines: a key matched but a discriminant differed.
    pub collisions: usize,
    /// Sent to reconciliation (a weak key on a critical type, no key, …).
    pub reconciled: usize,
    /// Refused (`reject`).
    pub rejected: usize,
    /// Distinct labeled operations merged into another's effect by an `ignore`: silent loss.
    pub false_positives: usize,
    /// Extra applications of one labeled operation (it got `process` more than once).
    pub false_negatives: usize,
}

impl ReplayTally {
    /// Quarantined and reconciled deliveries over all deliveries.
    pub fn queue_rate(&self) -> f64 {
        (self.collisions + self.reconciled) as f64 / self.deliveries.max(1) as f64
    }
}

/// Tallies a replay per strategy, in the order outcomes happened.
///
/// A false positive is an `ignore` attached to an effect first processed for another label; a
/// false negative is a second (third…) `process` for one label. Both are charged to the
/// strategy of the delivery that suffered them.
///
/// ```
/// use oncegate_core::corpus::{tally, ReplayOutcome};
/// use oncegate_core::matrix::Action;
///
/// let outcome = |action, effect: &str, label: &str| ReplayOutcome {
///     strategy: "refund-fingerprint@1".into(),
///     strong: false,
///     action,
///     effect: Some(effect.into()),
///     label: Some(label.into()),
/// };
/// let figures = tally(&[
///     outcome(Action::Process, "eff_1", "refund-1"),
///     outcome(Action::Ignore, "eff_1", "refund-1"), // a retry: rightly ignored
///     outcome(Action::Ignore, "eff_1", "refund-2"), // the second refund, merged: silent loss
/// ]);
/// let t = &figures["refund-fingerprint@1"];
/// assert_eq!((t.deliveries, t.processed, t.ignored), (3, 1, 2));
/// assert_eq!((t.false_positives, t.false_negatives), (1, 0));
/// ```
pub fn tally(outcomes: &[ReplayOutcome]) -> BTreeMap<String, ReplayTally> {
    let mut out: BTreeMap<String, ReplayTally> = BTreeMap::new();
    let mut effect_label: HashMap<&str, Option<&str>> = HashMap::new();
    let mut processed_labels: HashSet<&str> = HashSet::new();
    for o in outcomes {
        let t = out.entry(o.strategy.clone()).or_default();
        t.deliveries += 1;
        if o.strong {
            t.strong += 1;
        } else {
            t.weak += 1;
        }
        match o.action {
            Action::Process => {
                t.processed += 1;
                if let Some(e) = &o.effect {
                    effect_label.entry(e.as_str()).or_insert(o.label.as_deref());
                }
                if let Some(l) = &o.label {
                    if !processed_labels.insert(l.as_str()) {
                        t.false_negatives += 1;
                    }
                }
            }
            Action::Ignore => {
                t.ignored += 1;
                let first = o
                    .effect
                    .as_deref()
                    .and_then(|e| effect_label.get(e).copied().flatten());
                if let (Some(first), Some(mine)) = (first, o.label.as_deref()) {
                    if first != mine {
                        t.false_positives += 1;
                    }
                }
            }
            Action::Quarantine => t.collisions += 1,
            Action::Reconcile => t.reconciled += 1,
            Action::Reject => t.rejected += 1,
        }
    }
    out
}
