//! `oncegate check`: validate a contract and print each event type's key hierarchy.

use anyhow::Result;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use oncegate_core::contract::{Contract, EventTypeSource};
use oncegate_core::strategy::Strategy;
use serde::Serialize;
use std::path::Path;

/// `check --json`: the contract as the checker read it.
#[derive(Serialize)]
struct CheckDoc {
    file: String,
    valid: bool,
    providers: Vec<ProviderDoc>,
}

#[derive(Serialize)]
struct ProviderDoc {
    name: String,
    /// Where the event type is read: `{"pointer": …}` or `{"header": …}`.
    event_type_source: serde_json::Value,
    /// The header holding the provider's delivery id (a strong transport key); `null` means
    /// the raw body hash is the (weak) transport key.
    delivery_id_header: Option<String>,
    types: Vec<TypeDoc>,
}

#[derive(Serialize)]
struct TypeDoc {
    name: String,
    /// The contract's reason for the type's resource and discriminants (empty when none).
    why: String,
    criticality: String,
    operation: String,
    resource: Option<String>,
    durable: bool,
    discriminants: Vec<String>,
    authority: bool,
    /// Gateway mode: where its effects are forwarded, when they are.
    forward: Option<ForwardDoc>,
    /// The hierarchy, in the order strategies are tried.
    strategies: Vec<StrategyDoc>,
    /// Shadow strategies: evaluated and counted, never making the key.
    shadow: Vec<StrategyDoc>,
    volatile: Vec<FieldNote>,
    unordered: Vec<FieldNote>,
}

#[derive(Serialize)]
struct ForwardDoc {
    url: String,
    timeout_ms: u64,
    max_attempts: u32,
    backoff_first_ms: u64,
    backoff_max_ms: u64,
    signed: bool,
}

#[derive(Serialize)]
struct StrategyDoc {
    /// `name@version`.
    label: String,
    level: String,
    confidence: String,
    /// Empty: the canonical body minus the volatile fields.
    fields: Vec<FieldDoc>,
    horizon_seconds: u64,
    scope: String,
    /// Values of its fields that identify nothing (test tools' reused ids).
    placeholders: Vec<String>,
    /// The contract's reason for the strategy (empty when it gives none).
    why: String,
}

#[derive(Serialize)]
struct FieldDoc {
    pointer: String,
    normalize: Vec<String>,
}

#[derive(Serialize)]
struct FieldNote {
    pointer: String,
    why: String,
}

fn doc(path: &Path, contract: &Contract) -> CheckDoc {
    let strategy = |s: &Strategy| StrategyDoc {
        label: s.label(),
        level: s.level.as_str().to_owned(),
        confidence: s.confidence.as_str().to_owned(),
        fields: s
            .fields
            .iter()
            .map(|f| FieldDoc {
                pointer: f.source.label(),
                normalize: f.normalize.iter().map(|n| n.as_str().to_owned()).collect(),
            })
            .collect(),
        horizon_seconds: s.horizon.as_secs(),
        scope: s.scope.as_str().to_owned(),
        placeholders: s.placeholders.clone(),
        why: s.why.clone(),
    };
    CheckDoc {
        file: path.display().to_string(),
        valid: true,
        providers: contract
            .providers
            .values()
            .map(|p| ProviderDoc {
                name: p.name.clone(),
                event_type_source: match &p.event_type {
                    EventTypeSource::Pointer(x) => serde_json::json!({"pointer": x.to_string()}),
                    EventTypeSource::Header(h) => serde_json::json!({"header": h.to_string()}),
                },
                delivery_id_header: p.delivery_id_header.as_ref().map(ToString::to_string),
                types: p
                    .types
                    .values()
                    .map(|t| TypeDoc {
                        name: t.name.clone(),
                        why: t.why.clone(),
                        criticality: t.criticality.as_str().to_owned(),
                        operation: t.operation.to_string(),
                        resource: t.resource.as_ref().map(ToString::to_string),
                        durable: t.durable,
                        discriminants: t
                            .discriminants
                            .iter()
                            .map(|d| d.as_str().to_owned())
                            .collect(),
                        authority: t.authority.is_some(),
                        forward: t.forward.as_ref().map(|f| ForwardDoc {
                            url: f.url.clone(),
                            timeout_ms: f.timeout.as_millis() as u64,
                            max_attempts: f.max_attempts,
                            backoff_first_ms: f.backoff_first.as_millis() as u64,
                            backoff_max_ms: f.backoff_max.as_millis() as u64,
                            signed: f.signing_secret.is_some(),
                        }),
                        strategies: t.strategies.iter().map(strategy).collect(),
                        shadow: t.shadow.iter().map(strategy).collect(),
                        volatile: t
                            .volatile
                            .iter()
                            .map(|v| FieldNote {
                                pointer: v.pointer.to_string(),
                                why: v.why.to_string(),
                            })
                            .collect(),
                        unordered: t
                            .unordered
                            .iter()
                            .map(|u| FieldNote {
                                pointer: u.pointer.to_string(),
                                why: u.why.to_string(),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub fn run(file: Option<&Path>, json: bool) -> Result<crate::exit::Status> {
    let (path, contract) = crate::contract::find_and_load(file, "FILE")?;
    let path = path.as_path();
    if json {
        crate::json::print(&doc(path, &contract))?;
        return Ok(crate::exit::Status::Success);
    }
    outln!("{}: valid", path.display())?;
    for provider in contract.providers.values() {
        let reads = match &provider.event_type {
            EventTypeSource::Pointer(p) => format!("event type at {p}"),
            EventTypeSource::Header(h) => format!("event type in header {h}"),
        };
        let transport = match &provider.delivery_id_header {
            Some(h) => format!("delivery id in {h} (strong transport key)"),
            None => "no delivery id: raw body hash (weak transport key)".to_owned(),
        };
        outln!("\nprovider {}: {reads}; {transport}", provider.name)?;
        for t in provider.types.values() {
            let mut facts = vec![
                t.criticality.as_str().to_owned(),
                format!("operation {}", t.operation),
            ];
            if let Some(r) = &t.resource {
                facts.push(format!("resource {r}"));
            }
            if t.durable {
                facts.push("durable".to_owned());
            }
            if !t.discriminants.is_empty() {
                let d: Vec<&str> = t.discriminants.iter().map(|p| p.as_str()).collect();
                facts.push(format!("discriminants {}", d.join(", ")));
            }
            facts.push(if t.authority.is_some() {
                "authority configured".to_owned()
            } else {
                "no authority".to_owned()
            });
            if let Some(f) = &t.forward {
                facts.push(format!(
                    "forwarded to {} ({} timeout, {} attempts, backoff {}..{}{})",
                    f.url,
                    humantime::format_duration(f.timeout),
                    f.max_attempts,
                    humantime::format_duration(f.backoff_first),
                    humantime::format_duration(f.backoff_max),
                    if f.signing_secret.is_some() {
                        ", signed"
                    } else {
                        ", unsigned"
                    }
                ));
            }
            outln!("  type {} ({})", t.name, facts.join("; "))?;
            let mut table = Table::new();
            table.load_preset(UTF8_BORDERS_ONLY);
            table.set_header(vec![
                "#",
                "strategy",
                "level",
                "confidence",
                "fields",
                "horizon",
                "scope",
            ]);
            // Shadows are listed after the hierarchy, numbered `shadow`: they never make the key.
            let listed = t
                .strategies
                .iter()
                .enumerate()
                .map(|(i, s)| ((i + 1).to_string(), s))
                .chain(t.shadow.iter().map(|s| ("shadow".to_owned(), s)));
            for (i, s) in listed {
                let fields = if s.fields.is_empty() {
                    "(canonical body minus volatile fields)".to_owned()
                } else {
                    s.fields
                        .iter()
                        .map(|f| {
                            if f.normalize.is_empty() {
                                f.source.label()
                            } else {
                                let ops: Vec<&str> =
                                    f.normalize.iter().map(|n| n.as_str()).collect();
                                format!("{} [{}]", f.source.label(), ops.join(", "))
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                table.add_row(vec![
                    i,
                    s.label(),
                    s.level.as_str().to_owned(),
                    s.confidence.as_str().to_owned(),
                    fields,
                    humantime::format_duration(s.horizon).to_string(),
                    s.scope.as_str().to_owned(),
                ]);
            }
            for line in table.to_string().lines() {
                outln!("    {line}")?;
            }
            if !t.why.is_empty() {
                outln!("    why: {}", t.why)?;
            }
            for s in t.strategies.iter().chain(&t.shadow) {
                if !s.why.is_empty() {
                    outln!("    why {}: {}", s.label(), s.why)?;
                }
                if !s.placeholders.is_empty() {
                    outln!(
                        "    placeholders {}: {} (not ids: the next strategy applies)",
                        s.label(),
                        s.placeholders.join(", ")
                    )?;
                }
            }
            for v in &t.volatile {
                outln!("    volatile {}: {}", v.pointer, v.why)?;
            }
            for u in &t.unordered {
                outln!("    unordered {}: {}", u.pointer, u.why)?;
            }
        }
    }
    Ok(crate::exit::Status::Success)
}
