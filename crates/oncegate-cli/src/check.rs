//! `oncegate check`: validate a contract and print each event type's key hierarchy.

use anyhow::Result;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use oncegate_core::contract::EventTypeSource;
use std::path::Path;
use std::process::ExitCode;

pub fn run(path: &Path) -> Result<ExitCode> {
    let contract = crate::contract::load(path)?;
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
                                f.pointer.as_str().to_owned()
                            } else {
                                let ops: Vec<&str> =
                                    f.normalize.iter().map(|n| n.as_str()).collect();
                                format!("{} [{}]", f.pointer, ops.join(", "))
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
            for v in &t.volatile {
                outln!("    volatile {}: {}", v.pointer, v.why)?;
            }
            for u in &t.unordered {
                outln!("    unordered {}: {}", u.pointer, u.why)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
