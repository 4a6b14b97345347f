//! `oncegate breaker list|close`: the collision breakers of every strategy, read and closed
//! through the gate. Closing is an operator's act and needs a note and a name; it is the
//! only way a breaker closes.

use anyhow::{anyhow, bail, Result};
use comfy_table::{presets::UTF8_FULL, ContentArrangement, Table};
use oncegate::store::{BreakerRule, BreakerScope, StoreError};
use oncegate::Gate;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

fn when(t: Option<OffsetDateTime>) -> String {
    t.map(|t| t.format(&Rfc3339).unwrap_or_else(|_| t.to_string()))
        .unwrap_or_else(|| "-".to_owned())
}

/// The rule the listing counts the window with; only the window matters for a listing.
pub fn rule(window: std::time::Duration) -> BreakerRule {
    BreakerRule {
        window: time::Duration::try_from(window).unwrap_or(time::Duration::days(1)),
        ..BreakerRule::new(0.005, 200)
    }
}

/// `breaker list --json`: the breakers as `GET /v1/breakers` serves them.
pub async fn list_doc(gate: &Gate, window: std::time::Duration) -> Result<impl serde::Serialize> {
    let breakers = gate.breakers(&rule(window)).await?;
    Ok(oncegate_server::document::breakers(&breakers))
}

pub async fn list(gate: &Gate, window: std::time::Duration) -> Result<String> {
    let breakers = gate.breakers(&rule(window)).await?;
    if breakers.is_empty() {
        return Ok(
            "no strategy has key matches in the window, and no breaker ever opened\n".to_owned(),
        );
    }
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header([
            "provider/env/type",
            "strategy",
            "state",
            "matches",
            "collisions",
            "opened",
            "closed",
        ]);
    let mut reasons = Vec::new();
    for b in &breakers {
        table.add_row([
            format!(
                "{}/{}/{}",
                b.scope.provider, b.scope.env, b.scope.event_type
            ),
            b.scope.strategy_label(),
            b.state.as_str().to_owned(),
            b.matches.to_string(),
            b.collisions.to_string(),
            when(b.opened_at),
            match (&b.closed_by, b.closed_at) {
                (Some(by), at) => format!("{} by {by}", when(at)),
                _ => "-".to_owned(),
            },
        ]);
        if b.is_open() {
            if let Some(r) = &b.reason {
                reasons.push(format!("open: {} — {r}", b.scope));
            }
        } else if let Some(n) = &b.note {
            reasons.push(format!("closed: {} — {n}", b.scope));
        }
    }
    let mut out = format!("{table}\n");
    for r in reasons {
        out.push_str(&r);
        out.push('\n');
    }
    Ok(out)
}

/// Splits `name@version`.
fn strategy(raw: &str) -> Result<(String, u32)> {
    let (name, version) = raw.rsplit_once('@').ok_or_else(|| {
        anyhow!("strategy {raw:?} must be written name@version, e.g. refund-fingerprint@1")
    })?;
    let version = version
        .parse()
        .map_err(|_| anyhow!("strategy {raw:?} has no numeric version after @"))?;
    if name.is_empty() {
        bail!("strategy {raw:?} has no name before @");
    }
    Ok((name.to_owned(), version))
}

pub struct CloseArgs<'a> {
    pub provider: &'a str,
    pub env: &'a str,
    pub event_type: &'a str,
    pub strategy: &'a str,
    pub note: &'a str,
    pub by: &'a str,
}

pub async fn close(gate: &Gate, a: CloseArgs<'_>) -> Result<String> {
    let (name, version) = strategy(a.strategy)?;
    let (note, by) = (a.note.trim(), a.by.trim());
    if note.is_empty() {
        bail!("--note must say what was checked before closing the breaker");
    }
    if by.is_empty() {
        bail!("--by must name who closes the breaker");
    }
    let scope = BreakerScope {
        provider: a.provider.to_owned(),
        env: a.env.to_owned(),
        event_type: a.event_type.to_owned(),
        strategy: name,
        version,
    };
    match gate.close_breaker(&scope, note, by).await {
        Ok(_) => Ok(format!(
            "closed the breaker of {scope}: ignores of this strategy are automatic again\n"
        )),
        Err(StoreError::Conflict(_)) => bail!("the breaker of {scope} is not open"),
        Err(StoreError::NotFound { .. }) => bail!("the breaker of {scope} never opened"),
        Err(e) => Err(e.into()),
    }
}

/// `oncegate breaker …`
#[derive(clap::Subcommand)]
pub enum BreakerCommand {
    /// Every strategy's breaker: state, matches and collisions in the window, who closed it.
    List {
        /// How far back matches count.
        #[arg(long, value_parser = crate::duration, default_value = "24h")]
        window: std::time::Duration,
        #[command(flatten)]
        store: crate::store::StoreArg,
        /// Print the breakers as one JSON line, with the field names of `GET /v1/breakers`.
        #[arg(long)]
        json: bool,
    },
    /// Close an open breaker after checking its collisions: `breaker close payflow live refund.created refund-fingerprint@1 --note … --by …`.
    Close {
        provider: String,
        env: String,
        event_type: String,
        /// `name@version`.
        strategy: String,
        #[arg(long)]
        note: String,
        #[arg(long)]
        by: String,
        #[command(flatten)]
        store: crate::store::StoreArg,
    },
}

pub fn main(command: BreakerCommand) -> Result<()> {
    crate::runtime()?.block_on(async {
        let out = match &command {
            BreakerCommand::List {
                window,
                store,
                json,
            } => {
                let gate = store.gate(None, Vec::new()).await?;
                if *json {
                    return crate::json::print(&list_doc(&gate, *window).await?);
                }
                list(&gate, *window).await?
            }
            BreakerCommand::Close {
                provider,
                env,
                event_type,
                strategy,
                note,
                by,
                store,
            } => {
                let gate = store.gate(None, Vec::new()).await?;
                close(
                    &gate,
                    CloseArgs {
                        provider,
                        env,
                        event_type,
                        strategy,
                        note,
                        by,
                    },
                )
                .await?
            }
        };
        out!("{out}")?;
        Ok(())
    })
}
