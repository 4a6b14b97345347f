//! `oncegate forward list|resend`: gateway mode's forwards read and a dead letter re-sent
//! through the gate. A re-send holds the effect again under its next fencing token, for the
//! contract's lease, and starts a fresh attempt series; a running service's forwarder sends it
//! at its next look.

use anyhow::{anyhow, bail, Result};
use comfy_table::{presets::UTF8_FULL, ContentArrangement, Table};
use oncegate::store::{ForwardFilter, ForwardState, StoreError, TenantFilter};
use oncegate::Gate;
use oncegate_core::ids::EffectId;
use time::format_description::well_known::Rfc3339;

fn state(raw: Option<&str>) -> Result<Option<ForwardState>> {
    raw.map(|s| {
        ForwardState::parse(s).ok_or_else(|| {
            anyhow!("--state {s:?} is not one of pending, sending, delivered, dead, interrupted, superseded")
        })
    })
    .transpose()
}

pub async fn list(gate: &Gate, wanted: Option<&str>, limit: u32) -> Result<String> {
    let filter = ForwardFilter {
        tenants: TenantFilter::All,
        state: state(wanted)?,
        limit,
    };
    let forwards = gate.forwards(&filter).await?;
    if forwards.is_empty() {
        return Ok("no forward matches this filter\n".to_owned());
    }
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header([
            "effect",
            "delivery",
            "tenant/provider/env/type",
            "state",
            "series.attempts",
            "last",
            "updated",
        ]);
    for f in &forwards {
        table.add_row([
            f.effect.to_string(),
            f.delivery.to_string(),
            format!(
                "{}/{}/{}/{}",
                f.tenant,
                f.provider,
                f.env,
                f.event_type.as_deref().unwrap_or("-")
            ),
            f.state.as_str().to_owned(),
            format!("{}.{}", f.series, f.attempts),
            match (f.last_status, &f.last_error) {
                (_, Some(e)) => e.clone(),
                (Some(s), None) => format!("HTTP {s}"),
                (None, None) => "-".to_owned(),
            },
            f.updated_at
                .format(&Rfc3339)
                .unwrap_or_else(|_| f.updated_at.to_string()),
        ]);
    }
    Ok(format!("{table}\n"))
}

pub async fn resend(gate: &Gate, raw: &str) -> Result<String> {
    let effect: EffectId = raw
        .parse()
        .map_err(|_| anyhow!("{raw:?} is not an effect id (eff_…)"))?;
    match gate.resend_forward(&effect).await {
        Ok(f) => Ok(format!(
            "re-sent {effect}: series {} is pending under fencing token {}; a running service's forwarder sends it at its next look\n",
            f.series, f.fencing_token
        )),
        Err(StoreError::NotFound { .. }) => bail!("the effect {effect} has no forward"),
        Err(StoreError::Conflict(why)) => bail!("{why}"),
        Err(e) => Err(e.into()),
    }
}

/// `oncegate forward …`
#[derive(clap::Subcommand)]
pub enum ForwardCommand {
    /// Gateway mode's forwards, most recently changed first: `forward list --state dead` lists the dead letters.
    List {
        /// Only forwards in this state: pending, sending, delivered, dead, interrupted, superseded.
        #[arg(long)]
        state: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        store: crate::store::StoreArg,
    },
    /// Re-send a dead letter: a fresh attempt series under the effect's next fencing token.
    Resend {
        /// The effect's id (`eff_…`), as `forward list` shows it.
        effect_id: String,
        #[command(flatten)]
        store: crate::store::StoreArg,
    },
}

pub fn main(command: ForwardCommand) -> Result<()> {
    crate::runtime()?.block_on(async {
        let out = match &command {
            ForwardCommand::List {
                state,
                limit,
                store,
            } => {
                let gate = store.gate(None, Vec::new()).await?;
                list(&gate, state.as_deref(), *limit).await?
            }
            ForwardCommand::Resend { effect_id, store } => {
                let gate = store.gate(None, Vec::new()).await?;
                resend(&gate, effect_id).await?
            }
        };
        out!("{out}")?;
        Ok(())
    })
}
