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

use anyhow::{anyhow, bail, Result};
use oncegate::store::{KeyScope, MigrationSource, NewAlias, Store};
use oncegate_core::contract::Contract;
use oncegate_core::identity::{identify, Origin};
use oncegate_core::json::{self, Limits};
use std::fmt::Write as _;
use time::OffsetDateTime;

/// What happened to one effect.
enum Outcome {
    Aliased { to: String },
    AlreadyHeld { to: String },
    Unchanged,
    NotAliased { why: String },
}

async fn one(
    store: &dyn Store,
    contract: &Contract,
    salt: &[u8],
    s: &MigrationSource,
    now: OffsetDateTime,
) -> Result<Outcome> {
    let Some((name, version)) = &s.strategy else {
        return Ok(Outcome::NotAliased {
            why: "the effect has no strategy key (it was released from the queue)".to_owned(),
        });
    };
    let Some(event_type) = &s.event_type else {
        return Ok(Outcome::NotAliased {
            why: "the effect records no event type".to_owned(),
        });
    };
    let Some(t) = contract.event_type(&s.provider, event_type) else {
        return Ok(Outcome::NotAliased {
            why: format!("{}/{event_type} is not in the new contract", s.provider),
        });
    };
    let Some(payload) = &s.payload else {
        return Ok(Outcome::NotAliased {
            why: format!(
                "the payload of its first delivery {} is no longer retained, so the new key cannot be computed; keep {name}@{version} indexed until its horizon passes",
                s.first_delivery
            ),
        });
    };
    let limits = Limits {
        max_bytes: payload.len().max(contract.settings.max_body_bytes),
        max_depth: contract.settings.max_depth,
    };
    let doc = match json::parse(payload, &limits) {
        Ok(doc) => doc,
        Err(e) => {
            return Ok(Outcome::NotAliased {
                why: format!("its first delivery is not strict JSON: {e}"),
            })
        }
    };
    let origin = Origin {
        tenant: &s.tenant,
        provider: &s.provider,
        env: &s.env,
    };
    // Only the payload is retained with an effect's first delivery, not its headers: a
    // strategy keyed on a header makes no key here, and the old key stays indexed instead.
    let identity = identify(t, origin, &doc, &[], salt);
    let Some(key) = identity.effect else {
        let skipped: Vec<String> = identity
            .skipped
            .iter()
            .map(|k| format!("{}: {}", k.label(), k.why))
            .collect();
        return Ok(Outcome::NotAliased {
            why: format!(
                "no strategy of the new contract makes a key for it ({})",
                skipped.join("; ")
            ),
        });
    };
    if &key.strategy == name && key.version == *version {
        return Ok(Outcome::Unchanged);
    }
    let to = format!("{}@{}", key.strategy, key.version);
    let recorded = store
        .record_alias(&NewAlias {
            effect: s.effect.clone(),
            tenant: s.tenant.clone(),
            provider: s.provider.clone(),
            env: s.env.clone(),
            event_type: s.event_type.clone(),
            scope: KeyScope::of(&key),
            strategy: key.strategy,
            version: key.version,
            key: key.key,
            now,
        })
        .await?;
    Ok(if recorded {
        Outcome::Aliased { to }
    } else {
        Outcome::AlreadyHeld { to }
    })
}

pub async fn run(store: &dyn Store, contract: &Contract, salt: Option<Vec<u8>>) -> Result<String> {
    let needs_salt = contract
        .providers
        .values()
        .flat_map(|p| p.types.values())
        .any(|t| !t.sensitive.is_empty());
    let salt = match salt {
        Some(s) => s,
        None if !needs_salt => Vec::new(),
        None => bail!("the contract declares sensitive fields: set ONCEGATE_KEY_SALT or ONCEGATE_KEY_SALT_FILE to the service's salt, or the new keys would not match the service's"),
    };
    let now = OffsetDateTime::now_utc();
    let mut out = String::new();
    // Keys that operation-scoped strategies wrote under their event type first move to their
    // operation's scope (`serve` does the same at start), so the aliases below see one key per
    // effect.
    let moved = store
        .rescope(&oncegate::store::OperationScope::from_contract(contract))
        .await?;
    if moved.effects > 0 || moved.doubled > 0 {
        let _ = writeln!(
            out,
            "operation scope: {} effect(s) moved to their operation's scope, {} reserved once per event type before (each may have run twice)",
            moved.effects, moved.doubled
        );
    }
    let sources = store.migration_sources().await?;
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
        match one(store, contract, &salt, s, now)
            .await
            .map_err(|e| anyhow!("{what}: {e:#}"))?
        {
            Outcome::Aliased { to } => {
                aliased += 1;
                let _ = writeln!(out, "aliased       {what} → {to}");
            }
            Outcome::AlreadyHeld { to } => {
                held += 1;
                let _ = writeln!(
                    out,
                    "already held  {what} → {to}: the new key already names an effect"
                );
            }
            Outcome::Unchanged => unchanged += 1,
            Outcome::NotAliased { why } => {
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
