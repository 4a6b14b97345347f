//! The upkeep a gate needs beside its deliveries: expired leases turned `unknown` (critical:
//! verify before retry; reversible: takeover), missed decisions recorded once the store is
//! back, the reconciler (woken as soon as an item is queued, here or — through the store's
//! hint — in a sibling instance), and the retention purge. Every part is idempotent, so
//! several instances sharing a store may run it at once.

use std::path::PathBuf;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::authority::AuthorityClient;
use crate::forwarder::{self, ForwarderSettings};
use crate::gate::Gate;
use crate::reconciler::{self, ReconcilerSettings};
use crate::trust::TrustError;

/// What the upkeep runs.
#[derive(Debug, Clone)]
pub struct UpkeepSettings {
    /// Sweep expired leases (every half lease, 1–15 s). Leases are also read as expired on
    /// access, so turning the sweep off changes only when an abandoned effect turns `unknown`.
    pub lease_sweep: bool,
    /// How often the retention rules are applied; `None` never does. The first purge runs one
    /// period after the start.
    pub purge_every: Option<Duration>,
    /// Where the background purge archives what it removes: each run that removes deliveries
    /// first writes and verifies an archive in a new directory below this one (see
    /// [`Gate::purge_archived`]); `None` purges without archiving.
    pub purge_archive: Option<PathBuf>,
    /// How often the report's minute totals are counted (see
    /// [`oncegate_store::Store::roll_up`]); `None` never does, and every report counts its
    /// whole period from the rows.
    pub report_totals: Option<Duration>,
    /// The reconciler worker and its authority policy (`every: None` turns it off).
    pub reconciler: ReconcilerSettings,
    /// An extra CA certificate file (PEM) every authority's HTTPS connection trusts, and the
    /// forwarder's too.
    pub ca_file: Option<PathBuf>,
    /// Gateway mode's forwarder (runs only when the contract declares a forward).
    pub forwarder: ForwarderSettings,
}

impl Default for UpkeepSettings {
    /// Lease sweep on, an hourly purge, the report's totals counted every 10 s, the
    /// reconciler polling every 30 s.
    fn default() -> Self {
        UpkeepSettings {
            lease_sweep: true,
            purge_every: Some(Duration::from_secs(3600)),
            purge_archive: None,
            report_totals: Some(Duration::from_secs(10)),
            reconciler: ReconcilerSettings::default(),
            ca_file: None,
            forwarder: ForwarderSettings::default(),
        }
    }
}

/// The running upkeep of a gate: its tasks stop when this is dropped.
#[derive(Debug)]
pub struct Upkeep {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Gate {
    /// Starts the upkeep on the current tokio runtime. A CA file that cannot be used is an
    /// error before anything starts.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use oncegate::{Gate, UpkeepSettings};
    ///
    /// let contract = oncegate_core::contract::parse(
    ///     "oncegate.toml",
    ///     include_str!("../../../examples/oncegate.toml"),
    /// )
    /// .unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    /// let gate = Gate::open(contract, &url, b"salt".to_vec()).await.unwrap();
    /// let upkeep = gate.upkeep(UpkeepSettings::default()).unwrap();
    /// // … deliveries …
    /// drop(upkeep); // stops the sweep, the reconciler and the purge
    /// # });
    /// ```
    pub fn upkeep(&self, settings: UpkeepSettings) -> Result<Upkeep, TrustError> {
        let client = AuthorityClient::new(
            settings.reconciler.authority,
            self.contract(),
            settings.ca_file.as_deref(),
        )?;
        let mut tasks = vec![tokio::spawn(leases(self.clone(), settings.lease_sweep))];
        if !forwarder::forward_types(self.contract()).is_empty() {
            let ca = match settings.ca_file.as_deref() {
                Some(path) => crate::trust::read(&crate::trust::CaFile {
                    path: path.to_owned(),
                    origin: "ONCEGATE_CA_FILE".to_owned(),
                })?,
                None => Vec::new(),
            };
            let http = forwarder::client(&ca)?;
            tasks.push(tokio::spawn(forwarder::run_forever(
                self.clone(),
                settings.forwarder,
                http,
            )));
        }
        // Reconciliation runs beside the deliveries, never inside one: an authority that is
        // slow or down delays only the queue.
        tasks.push(tokio::spawn(reconciler::run_forever(
            self.clone(),
            settings.reconciler,
            client,
        )));
        // Items queued by other instances sharing the store wake this one's reconciler too (a
        // hint, where the backend has one; the poll remains the guarantee).
        if settings.reconciler.every.is_some() {
            tasks.extend(self.store().listen_for_queued(self.wake().clone()));
        }
        if let Some(every) = settings.report_totals {
            tasks.push(tokio::spawn(report_totals(self.clone(), every)));
        }
        if let Some(every) = settings.purge_every {
            tasks.push(tokio::spawn(crate::purge::run(
                self.clone(),
                every,
                settings.purge_archive.clone(),
            )));
        }
        Ok(Upkeep { tasks })
    }
}

/// Reads every CA file the authorities of `contract` need (`ca_file`, the CA of every
/// authority, and each authority's own `ca_file`) and builds their HTTPS clients, as
/// [`Gate::upkeep`] and [`crate::reconcile_once`] do before anything else, so a caller can
/// refuse to start before it opens anything.
pub fn check_authorities(
    contract: &oncegate_core::contract::Contract,
    ca_file: Option<&std::path::Path>,
) -> Result<(), TrustError> {
    AuthorityClient::new(
        crate::reconciler::ReconcilerSettings::default().authority,
        contract,
        ca_file,
    )
    .map(drop)
}

/// The report's minute totals, counted every `every` until caught up.
async fn report_totals(gate: Gate, every: Duration) {
    let mut tick = tokio::time::interval(every.max(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(error) = gate.count_report_totals().await {
            tracing::debug!(%error, "report totals not counted");
        }
    }
}

/// Expired leases become `unknown` and missed decisions are recorded.
async fn leases(gate: Gate, sweep: bool) {
    let period = (gate.lease() / 2).clamp(Duration::from_secs(1), Duration::from_secs(15));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if sweep {
            match gate.store().expire_leases(gate.now()).await {
                // A critical effect whose lease passed has a "verify before retry" item now.
                Ok(expired) if !expired.is_empty() => gate.wake().notify_one(),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "lease sweep skipped");
                    continue;
                }
            }
        }
        gate.settle_undecided().await;
    }
}
