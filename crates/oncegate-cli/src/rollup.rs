//! `oncegate rollup`: counts the report's minute totals now, every minute that ended more than
//! two minutes ago and is not counted yet, and the stale ones again. `serve` counts them in
//! the background; a large store counted once up front (after an upgrade, say) leaves the
//! service only the new minutes to count.

use anyhow::{bail, Result};
use serde::Serialize;

/// `oncegate rollup` arguments.
#[derive(clap::Args)]
pub struct RollupArgs {
    /// Print what was counted as one JSON line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: crate::store::StoreArg,
}

#[derive(Serialize)]
struct RollupDoc {
    minutes: u64,
    recounted: u64,
    deliveries: u64,
}

pub fn main(args: RollupArgs) -> Result<()> {
    crate::runtime()?.block_on(async {
        let gate = args.store.gate(None, Vec::new()).await?;
        let counted = gate.count_report_totals().await?;
        if counted.busy {
            bail!(
                "another instance is counting, or a transaction in progress did not end within the wait: run it again"
            );
        }
        if args.json {
            crate::json::print(&RollupDoc {
                minutes: counted.minutes,
                recounted: counted.recounted,
                deliveries: counted.deliveries,
            })
        } else {
            out!(
                "counted {} minutes for the first time and {} stale minutes again ({} deliveries read); every minute that ended more than two minutes ago is counted\n",
                counted.minutes,
                counted.recounted,
                counted.deliveries
            )?;
            Ok(())
        }
    })
}
