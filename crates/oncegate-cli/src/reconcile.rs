//! `oncegate reconcile --once`: one reconciler pass for cron-style runs (the same code `serve`
//! runs every 30 s), printing one line per queue item and per swept resource.

use anyhow::{bail, Result};
use oncegate_server::{reconcile_once, RunReport, ServiceConfig};
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::Arc;

/// `oncegate reconcile` arguments.
#[derive(clap::Args)]
pub struct ReconcileArgs {
    /// Run one pass and exit (the continuous worker runs inside `oncegate serve`).
    #[arg(long)]
    once: bool,
    /// Print the pass as one JSON line: `items` (one per queue item attempted) and `sweep`.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: crate::store::StoreArg,
    /// The contract whose authorities are asked
    /// (default: the file ONCEGATE_CONTRACT names, else ./oncegate.toml).
    #[arg(long)]
    contract: Option<std::path::PathBuf>,
    /// An extra CA certificate file (PEM) every authority's HTTPS connection trusts.
    #[arg(long, env = "ONCEGATE_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
}

/// Refuses to start when a CA file the authorities need cannot be used, before the store is
/// opened: the error names the file.
pub fn check_authorities(
    contract: &oncegate_core::contract::Contract,
    ca_file: Option<&std::path::Path>,
) -> Result<()> {
    Ok(oncegate_server::check_authorities(contract, ca_file)?)
}

pub fn main(args: ReconcileArgs) -> Result<()> {
    if !args.once {
        bail!("only `oncegate reconcile --once` exists: the continuous reconciler runs inside `oncegate serve`");
    }
    let contract = Arc::new(crate::contract::find(args.contract.as_deref())?);
    check_authorities(&contract, args.ca_file.as_deref())?;
    // Sensitive discriminants are compared as keyed hashes, so the authority's values must be
    // hashed under the service's salt to match.
    let Some(salt) = crate::salt::read()? else {
        bail!("set ONCEGATE_KEY_SALT (or ONCEGATE_KEY_SALT_FILE) to the salt the service uses: sensitive discriminants are compared under it");
    };
    crate::runtime()?.block_on(async {
        let store = args.store.open(Some(&contract)).await?;
        let mut config = ServiceConfig::new(contract.clone(), store, salt);
        config.ca_file = args.ca_file.clone();
        let report = reconcile_once(&config).await?;
        if args.json {
            return crate::json::print(&doc(&report));
        }
        out!("{}", render(&report))?;
        Ok(())
    })
}

/// `reconcile --once --json`; an item's names are the queue's (`queue_item_id`,
/// `delivery_id`, `authoritative_ref`, `effect_id`).
#[derive(Serialize)]
pub struct RunDoc {
    pub items: Vec<ItemDoc>,
    pub sweep: Vec<SweepDoc>,
}

#[derive(Serialize)]
pub struct ItemDoc {
    pub queue_item_id: String,
    pub delivery_id: String,
    /// `distinct`, `duplicate`, or `open` (left for a later attempt or a person).
    pub verdict: &'static str,
    pub authoritative_ref: Option<String>,
    /// The effect released (distinct) or linked (duplicate).
    pub effect_id: Option<String>,
    pub summary: String,
}

#[derive(Serialize)]
pub struct SweepDoc {
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: String,
    pub resource: String,
    /// References of authority operations with no local effect.
    pub missing: Vec<String>,
    /// Set when the authority could not be asked.
    pub error: Option<String>,
}

pub fn doc(report: &RunReport) -> RunDoc {
    RunDoc {
        items: report
            .items
            .iter()
            .map(|i| ItemDoc {
                queue_item_id: i.item.to_string(),
                delivery_id: i.delivery.to_string(),
                verdict: i.verdict,
                authoritative_ref: i.authoritative_ref.clone(),
                effect_id: i.effect.as_ref().map(ToString::to_string),
                summary: i.summary.clone(),
            })
            .collect(),
        sweep: report
            .sweep
            .iter()
            .map(|s| SweepDoc {
                tenant: s.scope.tenant.clone(),
                provider: s.scope.provider.clone(),
                env: s.scope.env.clone(),
                event_type: s.scope.event_type.clone(),
                resource: s.scope.resource.clone(),
                missing: s.missing.clone(),
                error: s.error.clone(),
            })
            .collect(),
    }
}

/// One line per item: delivery, verdict, reference, and what the authority said.
pub fn render(report: &RunReport) -> String {
    let mut out = String::new();
    if report.items.is_empty() {
        out.push_str("no open reconcile items\n");
    }
    for i in &report.items {
        let _ = writeln!(
            out,
            "{}  {}  ref={}  {}",
            i.delivery,
            i.verdict,
            i.authoritative_ref.as_deref().unwrap_or("-"),
            i.summary
        );
    }
    for s in &report.sweep {
        let scope = format!(
            "{}/{}/{}/{}/{}",
            s.scope.tenant, s.scope.provider, s.scope.env, s.scope.event_type, s.scope.resource
        );
        match &s.error {
            Some(e) => {
                let _ = writeln!(out, "sweep {scope}  error  {e}");
            }
            None if s.missing.is_empty() => {
                let _ = writeln!(out, "sweep {scope}  ok");
            }
            None => {
                let _ = writeln!(out, "sweep {scope}  missing  {}", s.missing.join(","));
            }
        }
    }
    out
}
