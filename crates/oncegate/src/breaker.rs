//! The collision breaker as the service runs it: read a strategy's breaker before deciding a
//! keyed delivery, count the match after, and say loudly (a log line, a metric) when a breaker
//! opens. The counting and the opening live in the store, shared by every instance.
//!
//! The state is read before the decision transaction, not inside it, so a delivery decided
//! while a sibling instance is opening the breaker may still be ignored. That staleness is one
//! decision wide and accepted on purpose: the breaker is a statistical safety net over many
//! matches, and reading it inside the transaction would serialize every decision of a strategy
//! on one row.

use oncegate_core::matrix::{Action, Prior};
use oncegate_store::{BreakerRule, BreakerScope, DecideOutcome, StrategyRef};

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

/// Whether the scope's breaker is open. A store that cannot answer leaves it closed: the
/// decision that follows needs the same store and fails on its own if it is really gone.
pub(crate) async fn is_open(gate: &Gate, scope: &BreakerScope) -> bool {
    match gate.store().breaker_is_open(scope).await {
        Ok(open) => open,
        Err(e) => {
            tracing::warn!(error = %e, breaker = %scope, "breaker state unreadable; deciding as closed");
            false
        }
    }
}

/// Counts the decision in the breaker's window when it was a key match (a prior was found),
/// and reports the breaker opening when this match tripped it.
pub(crate) async fn count(gate: &Gate, scope: &BreakerScope, outcome: &DecideOutcome) {
    let action = outcome.decision.action;
    if outcome.prior == Prior::None || action == Action::Reject {
        return;
    }
    let collision = action == Action::Quarantine;
    match gate
        .store()
        .breaker_record(scope, collision, &rule(gate), gate.now())
        .await
    {
        Ok(record) if record.opened_now => {
            gate.metrics().breaker(scope, true);
            tracing::warn!(
                provider = %scope.provider,
                env = %scope.env,
                event_type = %scope.event_type,
                strategy = %scope.strategy_label(),
                matches = record.breaker.matches,
                collisions = record.breaker.collisions,
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
            tracing::warn!(error = %e, breaker = %scope, "a key match could not be counted in its breaker window");
        }
    }
}
