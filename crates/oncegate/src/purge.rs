//! The background retention job `serve` runs: every `purge_every` it applies the contract's
//! retention (index entries past their horizon, payloads past `payload_retention`, proofs past
//! `proof_retention`; durable effect identities kept) through the store's one purge path.
//!
//! Purge is idempotent and each run is one store transaction, so several instances sharing a
//! database may run it at once: the second finds nothing left to remove.

use std::time::Duration;

use oncegate_store::PurgePolicy;

use crate::gate::{to_time, Gate};

/// The policy the contract's settings describe.
pub(crate) fn policy(gate: &Gate) -> PurgePolicy {
    let settings = &gate.contract().settings;
    PurgePolicy {
        payload_retention: to_time(settings.payload_retention),
        proof_retention: to_time(settings.proof_retention),
    }
}

/// Runs forever, one purge per period; the first runs one period after start, so a restart
/// loop never turns into a purge loop.
pub(crate) async fn run(gate: Gate, every: Duration) {
    let every = every.max(Duration::from_secs(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match gate.purge(false).await {
            Ok(c) => tracing::info!(
                index_entries = c.index_entries,
                payloads = c.payloads,
                proofs = c.proofs,
                deliveries = c.deliveries,
                effects = c.effects,
                queue_items = c.queue_items,
                durable_identities_kept = c.durable_identities_kept,
                observations = c.observations,
                "retention purge applied"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "retention purge skipped; it runs again next period")
            }
        }
    }
}
