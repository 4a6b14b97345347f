//! `oncegate purge [--dry-run]`: applies the contract's retention to the store now, through the
//! store's one purge path, and prints what was (or, dry, would be) removed. Durable effect
//! identities are never purged; the count of those kept is printed too.

use anyhow::Result;
use oncegate_core::contract::Contract;
use oncegate_store::{PurgePolicy, Store};
use std::fmt::Write as _;
use time::OffsetDateTime;

/// Retentions are set in days; `400d` reads better than humantime's years and months.
fn days(d: std::time::Duration) -> String {
    match d.as_secs() {
        s if s > 0 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        _ => humantime::format_duration(d).to_string(),
    }
}

fn to_time(d: std::time::Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

pub async fn run(store: &dyn Store, contract: &Contract, dry_run: bool) -> Result<String> {
    let settings = &contract.settings;
    let policy = PurgePolicy {
        payload_retention: to_time(settings.payload_retention),
        proof_retention: to_time(settings.proof_retention),
    };
    let c = store
        .purge(&policy, OffsetDateTime::now_utc(), dry_run)
        .await?;
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
    /// `postgres://…` or a SQLite path (default: the contract's `settings.store`, else `oncegate.db`).
    #[arg(long, env = "ONCEGATE_STORE")]
    store: Option<String>,
    /// The contract whose retention settings apply.
    #[arg(
        long,
        env = "ONCEGATE_CONTRACT",
        default_value = "examples/oncegate.toml"
    )]
    contract: std::path::PathBuf,
}

pub fn main(args: PurgeArgs) -> Result<()> {
    let contract = crate::contract::load(&args.contract)?;
    crate::runtime()?.block_on(async {
        let url = crate::serve::store_url(args.store.as_deref(), Some(&contract));
        let store = oncegate_store::open(&url).await?;
        out!("{}", run(store.as_ref(), &contract, args.dry_run).await?)?;
        Ok(())
    })
}
