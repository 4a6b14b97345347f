//! `oncegate corpus analyze`: per provider/type, every field path with its presence and
//! distinct-value rates, how it behaves across deliveries of one event, candidate keys ranked
//! against the labels, and a contract fragment to review.

use super::Corpus;
use anyhow::{bail, Result};
use comfy_table::{presets::UTF8_BORDERS_ONLY, CellAlignment, Table};
use oncegate_core::contract::Contract;
use oncegate_core::corpus::{analyze, Analysis, Candidate, Observation, Record, Stability};
use oncegate_core::identity::{identify, Origin};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What makes two deliveries "the same event" for the stability columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    /// The provider's delivery id header (the contract's `delivery_id_header`, else a header
    /// named like one).
    Transport,
    /// `label.operation`: deliveries of one labeled operation.
    Label,
    /// The effect key the contract's hierarchy makes (needs `--contract`).
    Strategy,
}

impl GroupBy {
    fn as_str(self) -> &'static str {
        match self {
            GroupBy::Transport => "transport",
            GroupBy::Label => "label",
            GroupBy::Strategy => "strategy",
        }
    }
}

pub struct Options<'a> {
    pub contract: Option<&'a Contract>,
    pub group_by: Option<GroupBy>,
    pub json: bool,
    /// Paths printed per type in the terminal table (all of them in `--json`).
    pub max_paths: usize,
}

/// Header names that carry a delivery id when no contract says which one does.
fn looks_like_delivery_id(name: &str) -> bool {
    name.ends_with("-delivery")
        || name.ends_with("-delivery-id")
        || matches!(name, "webhook-id" | "svix-id" | "x-request-id")
}

fn group_of(
    record: &Record,
    by: GroupBy,
    contract: Option<&Contract>,
    type_name: &str,
) -> Option<String> {
    match by {
        GroupBy::Label => record.label.as_ref().map(|l| l.operation.clone()),
        GroupBy::Transport => {
            let declared = contract
                .and_then(|c| c.provider(&record.provider))
                .and_then(|p| p.delivery_id_header.clone());
            let value = match declared {
                Some(h) => record.header(&h).map(str::to_owned),
                None => record
                    .headers
                    .iter()
                    .find(|(k, _)| looks_like_delivery_id(k))
                    .map(|(_, v)| v.clone()),
            };
            // The environment is part of the scope: providers reuse delivery ids across them.
            value.map(|v| format!("{}/{}/{v}", record.tenant, record.env))
        }
        GroupBy::Strategy => {
            let t = contract?.event_type(&record.provider, type_name)?;
            let origin = Origin {
                tenant: &record.tenant,
                provider: &record.provider,
                env: &record.env,
            };
            // Keys are only compared within this run, so any salt groups consistently.
            let id = identify(
                t,
                origin,
                record.json()?,
                &record.headers,
                b"oncegate corpus analyze",
            );
            id.effect
                .map(|k| format!("{}@{}:{}", k.strategy, k.version, k.key))
        }
    }
}

struct TypeReport {
    provider: String,
    event_type: String,
    non_json: usize,
    analysis: Analysis,
}

pub fn run(corpus: &Corpus, options: &Options<'_>) -> Result<String> {
    let labeled = corpus.records.iter().any(|r| r.label.is_some());
    let by = options.group_by.unwrap_or(if labeled {
        GroupBy::Label
    } else {
        GroupBy::Transport
    });
    if by == GroupBy::Strategy && options.contract.is_none() {
        bail!("--group-by strategy needs --contract: the groups are the keys a contract makes");
    }
    let mut by_type: BTreeMap<(String, String), Vec<&Record>> = BTreeMap::new();
    for r in &corpus.records {
        let t = super::event_type(r, options.contract);
        by_type.entry((r.provider.clone(), t)).or_default().push(r);
    }
    let bar = super::progress_items(corpus.records.len() as u64, 10_000, "analyzing");
    let mut reports = Vec::new();
    for ((provider, event_type), records) in by_type {
        let groups: Vec<Option<String>> = records
            .iter()
            .map(|r| group_of(r, by, options.contract, &event_type))
            .collect();
        let observations: Vec<Observation> = records
            .iter()
            .zip(&groups)
            .filter_map(|(r, g)| {
                Some(Observation {
                    doc: r.json()?,
                    group: g.as_deref(),
                    label: r.label.as_ref().map(|l| l.operation.as_str()),
                })
            })
            .collect();
        let non_json = records.len() - observations.len();
        reports.push(TypeReport {
            analysis: analyze(&observations),
            provider,
            event_type,
            non_json,
        });
        bar.inc(records.len() as u64);
    }
    bar.finish_and_clear();
    Ok(if options.json {
        let mut doc = serde_json::to_string_pretty(&as_json(corpus, by, &reports))?;
        doc.push('\n');
        doc
    } else {
        as_text(corpus, by, &reports, options.max_paths)
    })
}

fn rate(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

fn ops_list(ops: &[oncegate_core::strategy::Normalization]) -> Vec<&'static str> {
    ops.iter().map(|o| o.as_str()).collect()
}

fn as_json(corpus: &Corpus, by: GroupBy, reports: &[TypeReport]) -> Value {
    json!({
        "deliveries": corpus.records.len(),
        "bad_lines": corpus.bad_lines.iter().map(|(l, e)| json!({"line": l, "error": e})).collect::<Vec<_>>(),
        "group_by": by.as_str(),
        "types": reports.iter().map(|r| {
            let a = &r.analysis;
            json!({
                "provider": r.provider,
                "event_type": r.event_type,
                "deliveries": a.deliveries + r.non_json,
                "non_json_bodies": r.non_json,
                "repeated_events": a.repeated_events,
                "operations": a.operations,
                "scored_against": a.scored_against,
                "paths": a.paths.iter().map(|p| json!({
                    "path": p.path,
                    "kinds": p.kinds,
                    "presence": p.presence,
                    "distinct_rate": p.distinct_rate,
                    "stability": p.stability.as_str(),
                    "normalize": match &p.stability { Stability::StableAfter(ops) => ops_list(ops), _ => Vec::new() },
                    "events_seen": p.events_seen,
                    "events_changed": p.events_changed,
                    "keyable": p.key_ops.is_some(),
                })).collect::<Vec<_>>(),
                "candidates": a.candidates.iter().take(20).map(|c| json!({
                    "fields": c.fields,
                    "normalize": c.normalize.iter().map(|(f, ops)| (f.clone(), json!(ops_list(ops)))).collect::<serde_json::Map<_, _>>(),
                    "coverage": c.coverage,
                    "merges": c.merges,
                    "splits": c.splits,
                })).collect::<Vec<_>>(),
                "suggestion": suggestion(&r.provider, &r.event_type, a),
            })
        }).collect::<Vec<_>>(),
    })
}

fn as_text(corpus: &Corpus, by: GroupBy, reports: &[TypeReport], max_paths: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} deliveries in {} provider/type(s); same event = same {}",
        corpus.records.len(),
        reports.len(),
        by.as_str()
    );
    for (line, e) in &corpus.bad_lines {
        let _ = writeln!(out, "line {line} skipped: {e}");
    }
    for r in reports {
        let a = &r.analysis;
        let _ = writeln!(
            out,
            "\n{}/{}: {} deliveries, {} labeled operations, {} events seen more than once{}",
            r.provider,
            r.event_type,
            a.deliveries + r.non_json,
            a.operations,
            a.repeated_events,
            if r.non_json > 0 {
                format!(", {} bodies not JSON (left out)", r.non_json)
            } else {
                String::new()
            }
        );
        let mut table = Table::new();
        table.load_preset(UTF8_BORDERS_ONLY);
        table.set_header(vec![
            "path",
            "kinds",
            "present",
            "distinct",
            "across one event",
            "changed",
        ]);
        for p in a.paths.iter().take(max_paths) {
            table.add_row(vec![
                p.path.clone(),
                p.kinds.clone(),
                rate(p.presence),
                rate(p.distinct_rate),
                p.stability.to_string(),
                format!("{}/{}", p.events_changed, p.events_seen),
            ]);
        }
        for c in 2..6 {
            if let Some(col) = table.column_mut(c) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        let _ = writeln!(out, "{table}");
        if a.paths.len() > max_paths {
            let _ = writeln!(
                out,
                "  … {} more paths (--max-paths, or --json for all)",
                a.paths.len() - max_paths
            );
        }
        if a.candidates.is_empty() {
            let _ = writeln!(out, "candidate keys: none (no field is stable across retries and varies between events)");
        } else {
            let _ = writeln!(
                out,
                "candidate keys, fewest distinct operations merged first, then fewest retries left ungrouped (scored against each {}):",
                a.scored_against
            );
            let mut t = Table::new();
            t.load_preset(UTF8_BORDERS_ONLY);
            t.set_header(vec!["#", "fields", "merges", "splits", "coverage"]);
            for (i, c) in a.candidates.iter().take(8).enumerate() {
                t.add_row(vec![
                    (i + 1).to_string(),
                    describe(c),
                    c.merges.to_string(),
                    c.splits.to_string(),
                    rate(c.coverage),
                ]);
            }
            let _ = writeln!(out, "{t}");
        }
        let _ = writeln!(
            out,
            "suggested contract fragment (review every line before using it):"
        );
        out.push_str(&suggestion(&r.provider, &r.event_type, a));
    }
    out
}

fn describe(c: &Candidate) -> String {
    c.fields
        .iter()
        .map(|f| match c.normalize.iter().find(|(p, _)| p == f) {
            Some((_, ops)) => format!("{f} ({})", ops_list(ops).join("+")),
            None => f.clone(),
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// A contract fragment for one type: volatile and unordered fields with the evidence, then a
/// key hierarchy from the best candidates (each covering deliveries the previous ones do not),
/// ending on a fingerprint. Every line says why, so a reviewer can disagree with it.
fn suggestion(provider: &str, event_type: &str, a: &Analysis) -> String {
    let mut out = String::new();
    let table = format!(
        "providers.{}.types.{}",
        quoted_key(provider),
        quoted(event_type)
    );
    let _ = writeln!(out, "[{table}]");
    let declarable = |p: &&oncegate_core::corpus::PathStats| !p.path.contains("/*");
    let volatile: Vec<_> = a
        .paths
        .iter()
        .filter(declarable)
        .filter(|p| p.stability == Stability::Volatile)
        .collect();
    // A parent removed as volatile takes its children with it: list only the outermost.
    let outermost = |p: &&&oncegate_core::corpus::PathStats,
                     all: &[&oncegate_core::corpus::PathStats]| {
        !all.iter()
            .any(|q| q.path != p.path && p.path.starts_with(&format!("{}/", q.path)))
    };
    let volatile: Vec<_> = volatile
        .iter()
        .filter(|p| outermost(p, &volatile))
        .copied()
        .collect();
    if a.repeated_events == 0 {
        let _ = writeln!(out, "# no event was seen more than once in this corpus, so no field could be shown volatile: review before declaring none");
    }
    let _ = writeln!(out, "volatile = [");
    for p in &volatile {
        let _ = writeln!(
            out,
            "  {{ field = {}, why = {} }},",
            quoted(&p.path),
            quoted(&format!(
                "changed between deliveries of one event in {} of {} events seen more than once",
                p.events_changed, p.events_seen
            ))
        );
    }
    let _ = writeln!(out, "]");
    let reordered: Vec<_> = a
        .paths
        .iter()
        .filter(declarable)
        .filter(|p| p.stability == Stability::Reordered)
        .collect();
    if !reordered.is_empty() {
        let _ = writeln!(out, "# review: declare unordered only if order means nothing (lines of an invoice do mean something)");
        let _ = writeln!(out, "unordered = [");
        for p in reordered {
            let _ = writeln!(
                out,
                "  {{ field = {}, why = {} }},",
                quoted(&p.path),
                quoted(&format!(
                    "same elements in another order in {} of {} events seen more than once",
                    p.events_changed, p.events_seen
                ))
            );
        }
        let _ = writeln!(out, "]");
    }
    // The hierarchy: the best candidate, then the best that covers more, and so on.
    let mut chosen: Vec<&Candidate> = Vec::new();
    for c in a.candidates.iter().filter(|c| c.merges == 0) {
        let best_coverage = chosen.iter().map(|c| c.coverage).fold(0.0, f64::max);
        if chosen.len() < 3 && c.coverage > best_coverage {
            chosen.push(c);
        }
    }
    for (i, c) in chosen.iter().enumerate() {
        let _ = writeln!(
            out,
            "\n  # why: merges {} distinct operations, leaves {} retries ungrouped, present in {} of deliveries",
            c.merges,
            c.splits,
            rate(c.coverage)
        );
        write_strategy(&mut out, &table, i + 1, c);
    }
    if let (true, Some(c)) = (chosen.is_empty(), a.candidates.first()) {
        let _ = writeln!(
            out,
            "\n  # why: the best candidate, but it merges {} distinct operations (leaves {} retries ungrouped, present in {} of deliveries):\n  # declare the fields that tell those operations apart as discriminants, so such a match is quarantined rather than ignored",
            c.merges,
            c.splits,
            rate(c.coverage)
        );
        write_strategy(&mut out, &table, 1, c);
    } else if chosen.is_empty() {
        let _ = writeln!(
            out,
            "\n  # why: no field is stable across retries and varies between operations"
        );
    }
    let _ = writeln!(out, "\n  # why: last resort for deliveries the keys above cannot identify; a fingerprint is weak, so a match on a critical type is reconciled, never ignored");
    let _ = writeln!(out, "  [[{table}.strategies]]");
    let _ = writeln!(out, "  name = \"suggested-fingerprint\"");
    let _ = writeln!(out, "  version = 1");
    let _ = writeln!(out, "  level = \"fingerprint\"");
    out
}

fn write_strategy(out: &mut String, table: &str, n: usize, c: &Candidate) {
    {
        let _ = writeln!(out, "  [[{table}.strategies]]");
        let _ = writeln!(out, "  name = \"suggested-{n}\"");
        let _ = writeln!(out, "  version = 1");
        let _ = writeln!(out, "  level = \"semantic\"   # review: business_ref or provider_id if the provider guarantees these references");
        let fields: Vec<String> = c.fields.iter().map(|f| quoted(f)).collect();
        let _ = writeln!(out, "  fields = [{}]", fields.join(", "));
        if !c.normalize.is_empty() {
            let n: Vec<String> = c
                .normalize
                .iter()
                .map(|(f, ops)| {
                    let ops: Vec<String> = ops_list(ops).iter().map(|o| quoted(o)).collect();
                    format!("{} = [{}]", quoted(f), ops.join(", "))
                })
                .collect();
            let _ = writeln!(out, "  normalize = {{ {} }}", n.join(", "));
        }
    }
}

/// A TOML key: bare when it can be, quoted otherwise.
fn quoted_key(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        s.to_owned()
    } else {
        quoted(s)
    }
}
