//! `oncegate purge [--dry-run]`: applies the contract's retention to the store now, through the
//! store's one purge path, and prints what was (or, dry, would be) removed. Durable effect
//! identities are never purged; the count of those kept is printed too.

use anyhow::Result;
use oncegate::store::PurgeCounts;
use oncegate::Gate;
use serde::Serialize;
use std::fmt::Write as _;

/// Retentions are set in days; `400d` reads better than humantime's years and months.
fn days(d: std::time::Duration) -> String {
    match d.as_secs() {
        s if s > 0 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        _ => humantime::format_duration(d).to_string(),
    }
}

/// `purge --json`: what was (or, dry, would be) removed, with the store's count names. The
/// HTTP API has no purge, so these names are the CLI's own.
#[derive(Serialize)]
struct PurgeDoc {
    dry_run: bool,
    payload_retention_seconds: u64,
    proof_retention_seconds: u64,
    index_entries: u64,
    payloads: u64,
    proofs: u64,
    deliveries: u64,
    effects: u64,
    queue_items: u64,
    /// Breaker counters and settled missing-operation records.
    observations: u64,
    /// Effects of durable types kept without their proofs (never purged).
    durable_identities_kept: u64,
}

async fn purge(gate: &Gate, dry_run: bool) -> Result<PurgeCounts> {
    Ok(gate.purge(dry_run).await?)
}

pub async fn run(gate: &Gate, dry_run: bool) -> Result<String> {
    let settings = &gate.contract().settings;
    let c = purge(gate, dry_run).await?;
    let mut out = String::new();
    let w = &mut out;
    writeln!(
        w,
        "{} (payload retention {}, proof retention {})",
        if dry_run {
            "purge dry run: nothing was removed; this is what a purge would remove now"
        } else {
            "purge applied"
        },
        days(settings.payload_retention),
        days(settings.proof_retention),
    )?;
    writeln!(w, "  index rows expired     {}", c.index_entries)?;
    writeln!(w, "  payloads dropped       {}", c.payloads)?;
    writeln!(w, "  proofs removed         {}", c.proofs)?;
    writeln!(w, "  deliveries removed     {}", c.deliveries)?;
    writeln!(w, "  effects removed        {}", c.effects)?;
    writeln!(w, "  queue items removed    {}", c.queue_items)?;
    writeln!(
        w,
        "  observations removed   {} (breaker counters, settled missing-operation records)",
        c.observations
    )?;
    writeln!(
        w,
        "  durable identities     {} kept without their proofs (effects of durable types are never purged)",
        c.durable_identities_kept
    )?;
    Ok(out)
}

/// `oncegate purge` arguments.
#[derive(clap::Args)]
pub struct PurgeArgs {
    /// Count what would be removed, remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the counts as one JSON line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: crate::store::StoreArg,
    /// The contract whose retention settings apply
    /// (default: the file ONCEGATE_CONTRACT names, else ./oncegate.toml).
    #[arg(long)]
    contract: Option<std::path::PathBuf>,
}

pub fn main(args: PurgeArgs) -> Result<()> {
    let contract = crate::contract::find(args.contract.as_deref())?;
    crate::runtime()?.block_on(async {
        let gate = args.store.gate(Some(&contract), Vec::new()).await?;
        if !args.json {
            out!("{}", run(&gate, args.dry_run).await?)?;
            return Ok(());
        }
        let c = purge(&gate, args.dry_run).await?;
        let s = &contract.settings;
        crate::json::print(&PurgeDoc {
            dry_run: args.dry_run,
            payload_retention_seconds: s.payload_retention.as_secs(),
            proof_retention_seconds: s.proof_retention.as_secs(),
            index_entries: c.index_entries,
            payloads: c.payloads,
            proofs: c.proofs,
            deliveries: c.deliveries,
            effects: c.effects,
            queue_items: c.queue_items,
            observations: c.observations,
            durable_identities_kept: c.durable_identities_kept,
        })
    })
}
