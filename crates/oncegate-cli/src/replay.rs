//! `oncegate replay <delivery-id>`: a deliberate late replay through the gate, decided by the
//! same code as `POST /v1/deliveries/{id}/replay` (`Gate::replay`).

use anyhow::{anyhow, Result};
use oncegate::store::StoreError;
use oncegate::{Gate, GateError};
use oncegate_core::ids::DeliveryId;
use std::fmt::Write as _;

pub async fn run(gate: &Gate, raw: &str) -> Result<String> {
    let id: DeliveryId = raw
        .parse()
        .map_err(|e| anyhow!("{raw:?} is not a delivery id: {e}"))?;
    let o = gate.replay(&id).await.map_err(|e| match e {
        GateError::Store(StoreError::NotFound { .. }) => anyhow!(
            "no delivery {id} in this store (past the proof retention nothing is left to replay)"
        ),
        other => other.into(),
    })?;
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "replay of {} journaled as {}", o.original, o.delivery)?;
    writeln!(
        w,
        "  → {}  (rule {})",
        o.action.as_str().to_uppercase(),
        o.rule
    )?;
    writeln!(w, "  {}", o.reason)?;
    if let Some(e) = &o.effect {
        writeln!(w, "  effect     {e}")?;
    }
    if let Some(r) = &o.result {
        writeln!(w, "  result     {r}")?;
    }
    if let Some(q) = &o.queue_item {
        writeln!(
            w,
            "  queue      {q}: approve it with `oncegate queue resolve {}`",
            o.delivery
        )?;
    }
    Ok(out)
}

/// `oncegate replay` arguments.
#[derive(clap::Args)]
pub struct ReplayArgs {
    delivery_id: String,
    #[command(flatten)]
    store: crate::store::StoreArg,
    /// The contract holding the strategy version the proof names
    /// (default: the file ONCEGATE_CONTRACT names, else ./oncegate.toml).
    #[arg(long)]
    contract: Option<std::path::PathBuf>,
}

pub fn main(args: ReplayArgs) -> Result<()> {
    let contract = crate::contract::find(args.contract.as_deref())?;
    let Some(salt) = crate::salt::read()? else {
        anyhow::bail!("set ONCEGATE_KEY_SALT (or ONCEGATE_KEY_SALT_FILE) to the salt the service uses: the key is recomputed under it");
    };
    crate::runtime()?.block_on(async {
        let gate = args.store.gate(Some(&contract), salt).await?;
        out!("{}", run(&gate, &args.delivery_id).await?)?;
        Ok(())
    })
}
