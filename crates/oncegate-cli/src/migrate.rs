//! `oncegate migrate`: after a cut-over to new strategy versions, records aliases from the
//! live effects of the old versions to the keys the new contract makes for them.
//!
//! Keys are scoped by strategy name+version, so a new version never reinterprets an old key;
//! the price is that a retry arriving after the cut-over computes a key no effect holds. The
//! migration path is: run the new version as a shadow for at least one horizon, then cut over
//! and run this command. For every effect whose key the new contract would make differently it
//! recomputes the new key with the core's identity over the effect's first delivery — the very
//! code the service runs — and records it as an alias the decision consults. When the payload
//! is gone (payload retention) or the new contract cannot key the event, it says so: those
//! effects are only protected while the old version's keys are still indexed.

use anyhow::{anyhow, Result};
use oncegate::{AliasOutcome, Gate};
use std::fmt::Write as _;

pub async fn run(gate: &Gate) -> Result<String> {
    let mut out = String::new();
    // Keys that operation-scoped strategies wrote under their event type first move to their
    // operation's scope (`serve` does the same at start), so the aliases below see one key per
    // effect.
    let moved = gate.rescope_operations().await?;
    if moved.effects > 0 || moved.doubled > 0 {
        let _ = writeln!(
            out,
            "operation scope: {} effect(s) moved to their operation's scope, {} reserved once per event type before (each may have run twice)",
            moved.effects, moved.doubled
        );
    }
    let sources = gate.migration_sources().await?;
    let (mut aliased, mut held, mut unchanged, mut not) = (0, 0, 0, 0);
    for s in &sources {
        let from = s
            .strategy
            .as_ref()
            .map(|(n, v)| format!("{n}@{v}"))
            .unwrap_or_else(|| "(no key)".to_owned());
        let what = format!(
            "{} {}/{}/{} {}",
            s.effect,
            s.provider,
            s.env,
            s.event_type.as_deref().unwrap_or("?"),
            from
        );
        match gate
            .migrate_effect(s)
            .await
            .map_err(|e| anyhow!("{what}: {e:#}"))?
        {
            AliasOutcome::Aliased { to } => {
                aliased += 1;
                let _ = writeln!(out, "aliased       {what} → {to}");
            }
            AliasOutcome::AlreadyHeld { to } => {
                held += 1;
                let _ = writeln!(
                    out,
                    "already held  {what} → {to}: the new key already names an effect"
                );
            }
            AliasOutcome::Unchanged => unchanged += 1,
            AliasOutcome::NotAliased { why } => {
                not += 1;
                let _ = writeln!(out, "NOT aliased   {what}: {why}");
            }
        }
    }
    let _ = writeln!(
        out,
        "{} effect(s): {aliased} aliased to their new key, {held} already held, {unchanged} keyed the same by the new contract, {not} could not be aliased",
        sources.len()
    );
    Ok(out)
}

/// The salt a migration keys with: the service's, which a contract declaring sensitive fields
/// needs (else the new keys would not match the service's); none otherwise.
pub fn salt(
    contract: &oncegate_core::contract::Contract,
    salt: Option<Vec<u8>>,
) -> Result<Vec<u8>> {
    let needs_salt = contract
        .providers
        .values()
        .flat_map(|p| p.types.values())
        .any(|t| !t.sensitive.is_empty());
    match salt {
        Some(s) => Ok(s),
        None if !needs_salt => Ok(Vec::new()),
        None => anyhow::bail!("the contract declares sensitive fields: set ONCEGATE_KEY_SALT or ONCEGATE_KEY_SALT_FILE to the service's salt, or the new keys would not match the service's"),
    }
}
