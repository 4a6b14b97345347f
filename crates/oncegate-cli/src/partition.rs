//! `oncegate partition [--days-ahead N]`: PostgreSQL's journal (the deliveries and their
//! proofs, one row each) partitioned by day, so retention drops a day whole instead of deleting
//! its rows. The first run converts the table (its rows so far become the partition
//! `deliveries_history`);
//! every run creates the days ahead that are missing (the background purge of `serve` also
//! keeps 14 days ahead). Run it with the tables' owner.

use anyhow::Result;
use oncegate::store::Partitions;
use serde::Serialize;

/// `oncegate partition` arguments.
#[derive(clap::Args)]
pub struct PartitionArgs {
    /// How many days ahead of today to create partitions for.
    #[arg(long, default_value_t = 14)]
    days_ahead: u32,
    /// Print what was done as one JSON line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: crate::store::StoreArg,
}

#[derive(Serialize)]
struct PartitionDoc<'a> {
    converted: bool,
    created: &'a [String],
    skipped: &'a [String],
}

fn render(made: &Partitions) -> String {
    let mut out = String::new();
    if made.converted {
        out.push_str("deliveries (with their proofs) are now partitioned by day; their rows so far are deliveries_history\n");
    } else {
        out.push_str("deliveries (with their proofs) were already partitioned by day\n");
    }
    match (made.created.first(), made.created.last()) {
        (Some(first), Some(last)) => out.push_str(&format!(
            "created {} partitions, {first} to {last}\n",
            made.created.len()
        )),
        _ => out.push_str("every day asked for already has its partition\n"),
    }
    if !made.skipped.is_empty() {
        out.push_str(&format!(
            "not created, their rows already in the default partition (kept, purged row by row): {}\n",
            made.skipped.join(", ")
        ));
    }
    out
}

pub fn main(args: PartitionArgs) -> Result<()> {
    crate::runtime()?.block_on(async {
        let gate = args.store.gate(None, Vec::new()).await?;
        let made = gate.partition(args.days_ahead).await?;
        if args.json {
            crate::json::print(&PartitionDoc {
                converted: made.converted,
                created: &made.created,
                skipped: &made.skipped,
            })
        } else {
            out!("{}", render(&made))?;
            Ok(())
        }
    })
}
