//! `oncegate key`: the keys the service would compute for one event, without a store.

use anyhow::{anyhow, bail, Context, Result};
use oncegate_core::identity::{self, event_type_of, Origin};
use oncegate_core::json::{parse, Limits};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// Where the event read on stdin comes from, as the command line names it.
pub struct Event<'a> {
    pub tenant: &'a str,
    pub provider: &'a str,
    pub env: &'a str,
    /// Read from the body or headers as the contract says when `None`.
    pub event_type: Option<&'a str>,
    /// `name: value` lines.
    pub headers: &'a [String],
}

/// `key --json`: the keys the service would compute, with the names its proofs use
/// (`effect_key`, `transport_key`, `transport_strength`, `skipped_strategies`).
#[derive(Serialize)]
struct KeyDoc<'a> {
    tenant: &'a str,
    provider: &'a str,
    env: &'a str,
    event_type: &'a str,
    criticality: &'a str,
    transport_key: &'a str,
    /// `strong` (provider delivery id) or `weak` (raw body hash).
    transport_strength: &'static str,
    transport_source: &'a str,
    /// `null` when no strategy applies (exit status 1).
    effect_key: Option<&'a str>,
    strategy: Option<KeyStrategy<'a>>,
    scope: Option<&'a str>,
    fields: Vec<KeyField<'a>>,
    skipped_strategies: &'a [identity::Skipped],
    /// Each discriminant's canonical value (a keyed hash when sensitive), `null` when absent.
    discriminants: BTreeMap<&'a str, Option<&'a str>>,
    notes: &'a [String],
}

#[derive(Serialize)]
struct KeyStrategy<'a> {
    name: &'a str,
    version: u32,
    level: String,
    confidence: &'static str,
}

#[derive(Serialize)]
struct KeyField<'a> {
    pointer: &'a str,
    shown: &'a str,
}

pub fn run(contract: Option<&Path>, event: Event<'_>, json: bool) -> Result<crate::exit::Status> {
    let Event {
        tenant,
        provider,
        env,
        event_type,
        headers: raw_headers,
    } = event;
    let contract = crate::contract::find(contract)?;
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
    let Some(batch) = &p.batch else {
        let transport = identity::transport_key(origin, delivery_id, &body);
        let item = Item {
            p,
            origin,
            headers: &headers,
            event_type,
            transport: &transport,
        };
        let (keyed, printed) = item.keys(&doc, json)?;
        if json {
            outln!("{printed}")?;
        }
        return Ok(if keyed {
            crate::exit::Status::Success
        } else {
            crate::exit::Status::Found
        });
    };
    // A batch: every item is its own delivery, keyed on its own (its transport key is its
    // own canonical bytes' hash, as the service journals it).
    let items = batch
        .items_of(&doc)
        .map_err(|e| anyhow!("the event is not accepted as a batch: {e}"))?;
    if !json {
        outln!(
            "batch:      {} items at {}; the service answers {:?}",
            items.len(),
            batch.items,
            batch.reply
        )?;
    }
    let mut all_keyed = true;
    let mut printed = Vec::new();
    for (i, doc) in items.iter().enumerate() {
        if !json {
            outln!("item {i}:")?;
        }
        let bytes = oncegate_core::canon::to_key_form(doc).into_bytes();
        let transport = identity::transport_key(origin, delivery_id, &bytes);
        let item = Item {
            p,
            origin,
            headers: &headers,
            event_type,
            transport: &transport,
        };
        let (keyed, one) = item.keys(doc, json)?;
        all_keyed &= keyed;
        printed.push(one);
    }
    if json {
        // The items' documents keep their members' order (`serde_json::Value` would sort them).
        outln!(
            "{{\"reply\":{},\"items\":[{}]}}",
            serde_json::to_string(&batch.reply)?,
            printed.join(",")
        )?;
    }
    Ok(if all_keyed {
        crate::exit::Status::Success
    } else {
        crate::exit::Status::Found
    })
}

/// One document to key (a whole delivery, or one item of a batch).
struct Item<'a> {
    p: &'a oncegate_core::contract::Provider,
    origin: Origin<'a>,
    headers: &'a [(String, String)],
    event_type: Option<&'a str>,
    transport: &'a identity::TransportKey,
}

impl Item<'_> {
    /// Computes the document's keys; prints them unless `json`, in which case the `--json`
    /// document is returned, one compact line. `true` when a strategy made the effect key.
    fn keys(&self, doc: &oncegate_core::json::Value, json: bool) -> Result<(bool, String)> {
        let Item {
            p,
            origin,
            headers,
            event_type,
            transport,
        } = *self;
        let Origin {
            tenant,
            provider,
            env,
        } = origin;
        let type_name = match event_type {
            Some(t) => t.to_owned(),
            None => event_type_of(p, headers, doc).map_err(|e| anyhow!("{e}; pass --type"))?,
        };
        let t = p.types.get(&type_name).ok_or_else(|| anyhow!("type {type_name:?} of provider {provider:?} is not in the contract: the service would answer `reconcile`"))?;
        let salt = match crate::salt::read()? {
            Some(s) => s,
            None if t.sensitive.is_empty() => Vec::new(),
            None => bail!("type {type_name:?} declares sensitive fields: set ONCEGATE_KEY_SALT or ONCEGATE_KEY_SALT_FILE to the service's salt"),
        };
        let id = identity::identify(t, origin, doc, headers, &salt);
        let keyed = id.effect.is_some();
        if json {
            let k = id.effect.as_ref();
            let printed = serde_json::to_string(&KeyDoc {
                tenant,
                provider,
                env,
                event_type: &type_name,
                criticality: t.criticality.as_str(),
                transport_key: &transport.key,
                transport_strength: if transport.strong { "strong" } else { "weak" },
                transport_source: &transport.source,
                effect_key: k.map(|k| k.key.as_str()),
                strategy: k.map(|k| KeyStrategy {
                    name: &k.strategy,
                    version: k.version,
                    level: k.level.to_string(),
                    confidence: k.confidence.as_str(),
                }),
                scope: k.map(|k| k.scope.as_str()),
                fields: k
                    .map(|k| {
                        k.fields
                            .iter()
                            .map(|f| KeyField {
                                pointer: &f.pointer,
                                shown: &f.shown,
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                skipped_strategies: &id.skipped,
                discriminants: id
                    .discriminants
                    .iter()
                    .map(|(f, v)| (f.as_str(), v.as_deref()))
                    .collect(),
                notes: &id.notes,
            })?;
            return Ok((keyed, printed));
        }
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
            let level = t
                .strategies
                .iter()
                .find(|d| d.name == s.name && d.version == s.version)
                .map(|d| d.level.to_string())
                .unwrap_or_default();
            outln!("skipped:    {} ({level}): {}", s.label(), s.why)?;
        }
        match &id.effect {
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
            }
            None => {
                outln!("key:        none: no strategy applies; the service would answer `reconcile` on a critical type")?;
            }
        }
        for (field, value) in &id.discriminants {
            outln!(
                "discriminant: {field} = {}",
                value.as_deref().unwrap_or("(absent)")
            )?;
        }
        for n in &id.notes {
            outln!("note:       {n}")?;
        }
        Ok((keyed, String::new()))
    }
}
