//! The background retention job `serve` runs: every `purge_every` it applies the contract's
//! retention (index entries past their horizon, payloads past `payload_retention`, proofs past
//! `proof_retention`; durable effect identities kept) through the store's one purge path.
//!
//! Purge is idempotent and each run is one store transaction, so several instances sharing a
//! database may run it at once: the second finds nothing left to remove.
//!
//! With an archive root, each run first exports what it removes into a new directory below
//! it, named for the run's cut, and verifies it; a run whose export or verification fails
//! removes nothing and is tried again next period. A run with no delivery to remove leaves no
//! directory behind (an archive of nothing is only clutter).

use std::path::{Path, PathBuf};
use std::time::Duration;

use oncegate_store::{PurgeCounts, PurgePolicy};

use crate::gate::{to_time, Gate};

/// How many days ahead the background job keeps the partitions of a partitioned store.
const DAYS_AHEAD: u32 = 14;

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
pub(crate) async fn run(gate: Gate, every: Duration, archive: Option<PathBuf>) {
    let every = every.max(Duration::from_secs(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // A store partitioned by day keeps its days ahead; one that is not is left as it is.
        match gate.store().extend_partitions(DAYS_AHEAD, gate.now()).await {
            Ok(made) if !made.created.is_empty() => {
                tracing::info!(created = ?made.created, "time partitions created ahead")
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "time partitions ahead not created (the default partition holds those days until they are)")
            }
        }
        let counts = match &archive {
            Some(root) => archived(&gate, root).await,
            None => gate.purge(false).await.map_err(|e| e.to_string()),
        };
        match counts {
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
            Err(error) => {
                tracing::warn!(%error, "retention purge skipped; it runs again next period")
            }
        }
    }
}

/// One archived run: the archive goes to `root/before-<cut>`; an archive that holds no
/// delivery is removed again (the purge then removes no delivery either).
async fn archived(gate: &Gate, root: &Path) -> Result<PurgeCounts, String> {
    let cut = (gate.now() - policy(gate).proof_retention).to_offset(time::UtcOffset::UTC);
    let dir = root.join(format!(
        "before-{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        cut.year(),
        u8::from(cut.month()),
        cut.day(),
        cut.hour(),
        cut.minute(),
        cut.second()
    ));
    let (verified, counts) = gate
        .purge_archived(&dir)
        .await
        .map_err(|e| format!("archive {}: {e}", dir.display()))?;
    if verified.manifest.tables.iter().all(|t| t.rows == 0) {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Ok(counts)
}
