//! `oncegate key`: the keys the service would compute for one event, without a store.

use anyhow::{anyhow, bail, Context, Result};
use oncegate_core::identity::{self, event_type_of, Origin};
use oncegate_core::json::{parse, Limits};
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

pub fn run(
    contract: &Path,
    tenant: &str,
    provider: &str,
    env: &str,
    event_type: Option<&str>,
    raw_headers: &[String],
) -> Result<ExitCode> {
    let contract = crate::contract::load(contract)?;
    let p = contract
        .provider(provider)
        .ok_or_else(|| anyhow!("provider {provider:?} is not in the contract"))?;
    let mut headers = Vec::new();
    for h in raw_headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| anyhow!("header {h:?} is not `name: value`"))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let mut body = Vec::new();
    std::io::stdin()
        .read_to_end(&mut body)
        .context("reading the event on stdin")?;
    let limits = Limits {
        max_bytes: contract.settings.max_body_bytes,
        max_depth: contract.settings.max_depth,
    };
    let doc = parse(&body, &limits).map_err(|e| anyhow!("the event is not accepted: {e}"))?;
    let type_name = match event_type {
        Some(t) => t.to_owned(),
        None => event_type_of(p, &headers, &doc).map_err(|e| anyhow!("{e}; pass --type"))?,
    };
    let t = p.types.get(&type_name).ok_or_else(|| anyhow!("type {type_name:?} of provider {provider:?} is not in the contract: the service would answer `reconcile`"))?;
    let salt = match crate::salt::read()? {
        Some(s) => s,
        None if t.sensitive.is_empty() => Vec::new(),
        None => bail!("type {type_name:?} declares sensitive fields: set ONCEGATE_KEY_SALT or ONCEGATE_KEY_SALT_FILE to the service's salt"),
    };
    let origin = Origin {
        tenant,
        provider,
        env,
    };
    let delivery_id = p
        .delivery_id_header
        .as_ref()
        .and_then(|h| headers.iter().find(|(k, _)| k == h))
        .map(|(_, v)| v.as_str());
    let transport = identity::transport_key(origin, delivery_id, &body);
    let id = identity::identify(t, origin, &doc, &salt);
    outln!(
        "provider:   {provider}  env: {env}  tenant: {tenant}  type: {type_name} ({})",
        t.criticality.as_str()
    )?;
    outln!(
        "transport:  {} ({}, {})",
        transport.key,
        if transport.strong { "strong" } else { "weak" },
        transport.source
    )?;
    for s in &id.skipped {
        outln!("skipped:    {} ({}): {}", s.strategy, s.level, s.why)?;
    }
    let code = match &id.effect {
        Some(k) => {
            outln!(
                "strategy:   {}@{} level {} confidence {}",
                k.strategy,
                k.version,
                k.level,
                k.confidence.as_str()
            )?;
            outln!("scope:      {}", k.scope)?;
            outln!("key:        {}", k.key)?;
            for f in &k.fields {
                let at = if f.pointer.is_empty() {
                    "(canonical body)"
                } else {
                    f.pointer.as_str()
                };
                outln!("field:      {at} = {}", f.shown)?;
            }
            ExitCode::SUCCESS
        }
        None => {
            outln!("key:        none: no strategy applies; the service would answer `reconcile` on a critical type")?;
            ExitCode::from(1)
        }
    };
    for (field, value) in &id.discriminants {
        outln!(
            "discriminant: {field} = {}",
            value.as_deref().unwrap_or("(absent)")
        )?;
    }
    for n in &id.notes {
        outln!("note:       {n}")?;
    }
    Ok(code)
}
