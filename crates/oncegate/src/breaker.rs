//! The collision breaker as the service runs it: count a keyed delivery's match after its
//! decision, and say loudly (a log line, a metric) when a breaker opens. The counting and the
//! opening live in the store, shared by every instance; a decision reads its strategy's breaker
//! in its own view (`PriorView::breaker_open`), in the same snapshot as its key.
//!
//! Counting is grouped: every match of a strategy is one more count on the same stored row, so
//! counted one transaction each, matches queue on that row's lock, one commit after the other
//! (measured on PostgreSQL: 2.5 ms per count under load, the largest single cost of a delivery).
//! The matches waiting while a count is written are written together in the next one
//! ([`Tallies`](crate::tally::Tallies)), and each caller returns once the write holding its match committed, so the
//! next decision reads a breaker its match may have opened, or after `TALLY_WAIT` at most: the
//! count is not on the answer's path past that.

use oncegate_core::matrix::{Action, Prior};
use oncegate_store::{
    BreakerRecord, BreakerRule, BreakerScope, BreakerTally, DecideOutcome, StoreError, StrategyRef,
};

use crate::gate::Gate;

/// The rule from the contract's settings and the service's window.
pub(crate) fn rule(gate: &Gate) -> BreakerRule {
    let settings = &gate.contract().settings;
    BreakerRule {
        threshold: settings.breaker_threshold,
        min_sample: settings.breaker_min_sample,
        window: gate.breaker_window(),
    }
}

pub(crate) fn scope(
    provider: &str,
    env: &str,
    event_type: &str,
    strategy: &StrategyRef,
) -> BreakerScope {
    BreakerScope {
        provider: provider.to_owned(),
        env: env.to_owned(),
        event_type: event_type.to_owned(),
        strategy: strategy.name.clone(),
        version: strategy.version,
    }
}

/// Counts the decision in the breaker's window when it was a key match (a prior was found),
/// and reports the breaker opening when this match tripped it. Returns once the match is
/// written (with the others waiting at the same moment, see [`Tallies`](crate::tally::Tallies)), or after `TALLY_WAIT`.
pub(crate) async fn count(gate: &Gate, scope: &BreakerScope, outcome: &DecideOutcome) {
    if !counts(outcome) {
        return;
    }
    let quarantined = outcome.decision.action == Action::Quarantine;
    let written = gate.tallies().add(scope, quarantined);
    if gate.tallies().claim() {
        let gate = gate.clone();
        tokio::spawn(async move { flush(&gate).await });
    }
    // A flush that never answers (its runtime stopped) drops the sender: nothing to wait for.
    // The decision itself has committed: the wait only lets the next decision read a breaker
    // this match opened, and is bounded so that a slow database (a remote zone, a lossy
    // network) never holds an answer for its tally; a match written later still counts.
    let _ = tokio::time::timeout(TALLY_WAIT, written).await;
}

/// Whether a decision counts in its breaker's window: a key match (a prior was found) that
/// was not refused.
pub(crate) fn counts(outcome: &DecideOutcome) -> bool {
    outcome.prior != Prior::None && outcome.decision.action != Action::Reject
}

/// The longest an answer waits for its match to be counted.
const TALLY_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// Writes what waits, scope by scope (concurrently), until nothing does. A match added while
/// the flush ends is either seen by its last look or finds the flush released and starts one.
async fn flush(gate: &Gate) {
    let tallies = gate.tallies();
    loop {
        let batch = tallies.take();
        if batch.is_empty() {
            tallies.release();
            if tallies.is_empty() || !tallies.claim() {
                return;
            }
            continue;
        }
        let rule = rule(gate);
        let now = gate.now();
        let mut writes = tokio::task::JoinSet::new();
        for (scope, waiting) in batch {
            let gate = gate.clone();
            writes.spawn(async move {
                let recorded = gate
                    .store()
                    .breaker_record(&scope, &waiting.tally, &rule, now)
                    .await;
                report(&gate, &scope, &waiting.tally, recorded);
                for caller in waiting.callers {
                    let _ = caller.send(());
                }
            });
        }
        while writes.join_next().await.is_some() {}
    }
}

fn report(
    gate: &Gate,
    scope: &BreakerScope,
    tally: &BreakerTally,
    recorded: Result<BreakerRecord, StoreError>,
) {
    match recorded {
        Ok(record) if record.opened_now => {
            gate.metrics().breaker(scope, true);
            tracing::warn!(
                provider = %scope.provider,
                env = %scope.env,
                event_type = %scope.event_type,
                strategy = %scope.strategy_label(),
                matches = record.breaker.opened_matches,
                collisions = record.breaker.opened_collisions,
                reason = record.breaker.reason.as_deref().unwrap_or(""),
                "collision breaker opened: ignores of this strategy become reconcile until an operator closes it"
            );
        }
        Ok(record) => {
            if record.breaker.is_open() {
                gate.metrics().breaker(scope, true);
            }
        }
        Err(e) => {
            tracing::warn!(
                error = %e,
                breaker = %scope,
                matches = tally.matches(),
                collisions = tally.collisions(),
                "key matches could not be counted in their breaker window"
            );
        }
    }
}
