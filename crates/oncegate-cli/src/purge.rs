//! `oncegate purge [--dry-run | --archive DIR]`: applies the contract's retention to the store
//! now, through the store's one purge path, and prints what was (or, dry, would be) removed.
//! With `--archive`, what the purge removes is first exported to a new archive and verified,
//! and nothing is removed unless it verified. Durable effect identities are never purged; the
//! count of those kept is printed too.

use anyhow::Result;
use oncegate::store::{ArchiveVerified, PurgeCounts};
use oncegate::Gate;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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
    /// The archive written and verified before anything was removed (`--archive`).
    #[serde(skip_serializing_if = "Option::is_none")]
    archive: Option<crate::archive::ArchiveDoc>,
}

/// The purge, archived first when `archive` names a directory.
async fn purge(
    gate: &Gate,
    dry_run: bool,
    archive: Option<&Path>,
) -> Result<(Option<(PathBuf, ArchiveVerified)>, PurgeCounts)> {
    Ok(match archive {
        Some(dir) => {
            let (verified, counts) = gate.purge_archived(dir).await?;
            (Some((dir.to_owned(), verified)), counts)
        }
        None => (None, gate.purge(dry_run).await?),
    })
}

pub async fn run(gate: &Gate, dry_run: bool, archive: Option<&Path>) -> Result<String> {
    let settings = &gate.contract().settings;
    let (archived, c) = purge(gate, dry_run, archive).await?;
    let mut out = String::new();
    let w = &mut out;
    if let Some((dir, verified)) = &archived {
        writeln!(w, "{}", crate::archive::summary(dir, &verified.manifest))?;
    }
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
    #[arg(long, conflicts_with = "archive")]
    dry_run: bool,
    /// First export what the purge removes to a new archive in this directory and verify it
    /// (as `oncegate archive export` and `verify` do); nothing is removed unless it verified.
    #[arg(long, value_name = "DIR")]
    archive: Option<PathBuf>,
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
        let archive = args.archive.as_deref();
        if !args.json {
            out!("{}", run(&gate, args.dry_run, archive).await?)?;
            return Ok(());
        }
        let (archived, c) = purge(&gate, args.dry_run, archive).await?;
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
            archive: archived.map(|(dir, v)| crate::archive::doc(&dir, &v.manifest)),
        })
    })
}
