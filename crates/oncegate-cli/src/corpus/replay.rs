//! `oncegate corpus replay`: a contract replayed over a labeled corpus through the real service.
//!
//! Replay does not imitate the decision pipeline: it starts `oncegate_server::serve` in-process
//! on a temporary SQLite store, posts every record over real HTTP (the body bytes as recorded,
//! the recorded headers, an ingest bearer token) and completes each `process` reservation, so a
//! later retry meets a completed effect exactly as in production. The answers are then tallied
//! per strategy name+version against the labels (`oncegate_core::corpus::tally`).

use super::Corpus;
use anyhow::{anyhow, bail, Context, Result};
use comfy_table::{presets::UTF8_BORDERS_ONLY, CellAlignment, Table};
use oncegate_core::contract::{Contract, EventTypeSource};
use oncegate_core::corpus::{tally, ReplayOutcome, ReplayTally};
use oncegate_core::matrix::Action;
use oncegate_server::{ApiToken, Role, ServiceConfig};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

const INGEST_TOKEN: &str = "corpus-replay-ingest";
/// Keys only need to agree within one replay, so a fixed salt is enough (and keeps the replay
/// deterministic).
const SALT: &[u8] = b"oncegate corpus replay";

/// What one contract's replay found.
pub struct Replay {
    pub contract: String,
    pub per_strategy: BTreeMap<String, ReplayTally>,
    pub total: ReplayTally,
}

fn action_of(s: &str) -> Option<Action> {
    Some(match s {
        "process" => Action::Process,
        "ignore" => Action::Ignore,
        "quarantine" => Action::Quarantine,
        "reconcile" => Action::Reconcile,
        "reject" => Action::Reject,
        _ => return None,
    })
}

/// Replays the corpus against one contract and tallies the answers.
pub async fn replay(name: &str, contract: Contract, corpus: &Corpus) -> Result<Replay> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let db = dir.path().join("replay.db");
    let store = oncegate::store::open_at(&oncegate::store::StoreLocation::Sqlite(db)).await?;
    let contract = Arc::new(contract);
    // The service reads the time from the record being replayed, so horizons and leases
    // behave as they did when the deliveries were received.
    let now = Arc::new(Mutex::new(OffsetDateTime::now_utc()));
    let clock_now = now.clone();
    let mut config = ServiceConfig::new(contract.clone(), store, SALT.to_vec());
    config.clock = Arc::new(move || *clock_now.lock().unwrap_or_else(|e| e.into_inner()));
    // Only the decision pipeline is replayed: no reconciler asking real authorities, no
    // retention job running on the replayed clock.
    config.reconciler.every = None;
    config.purge_every = None;
    config.tokens = vec![ApiToken {
        secret: INGEST_TOKEN.to_owned(),
        role: Role::Ingest,
        tenants: None,
    }];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(oncegate_server::serve(listener, config, async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let bar = super::progress_items(corpus.records.len() as u64, 1_000, "replaying");
    let mut outcomes = Vec::with_capacity(corpus.records.len());
    let mut last = OffsetDateTime::UNIX_EPOCH;
    for record in &corpus.records {
        bar.inc(1);
        let at = record
            .received_at
            .as_deref()
            .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
            .unwrap_or(last + time::Duration::milliseconds(1));
        // Time never goes backwards in a replay: out-of-order captures keep their order.
        last = at.max(last + time::Duration::milliseconds(1));
        *now.lock().unwrap_or_else(|e| e.into_inner()) = last;

        let mut request = http
            .post(format!(
                "{base}/v1/deliveries/{}/{}/{}",
                record.tenant, record.provider, record.env
            ))
            .bearer_auth(INGEST_TOKEN)
            .header("content-type", "application/json")
            .body(super::body_bytes(record)?);
        for (name, value) in &record.headers {
            if name != "content-type" && name != "authorization" && name != "content-length" {
                request = request.header(name.as_str(), value.as_str());
            }
        }
        // A recorded event type for a provider that names its types in a header is sent in
        // that header when the capture did not keep it.
        if let (Some(t), Some(p)) = (&record.event_type, contract.provider(&record.provider)) {
            if let EventTypeSource::Header(h) = &p.event_type {
                if record.header(h).is_none() {
                    request = request.header(h.as_str(), t.as_str());
                }
            }
        }
        let response = request.send().await.context("posting a delivery")?;
        let status = response.status();
        let answer: Value = response.json().await.context("reading the decision")?;
        let label = record.label.as_ref().map(|l| l.operation.clone());
        if !status.is_success() {
            if status.is_server_error() {
                bail!("the service answered {status}: {answer}");
            }
            outcomes.push(ReplayOutcome {
                strategy: "(rejected)".to_owned(),
                strong: false,
                action: Action::Reject,
                effect: None,
                label,
            });
            continue;
        }
        let action = answer
            .get("action")
            .and_then(Value::as_str)
            .and_then(action_of)
            .ok_or_else(|| anyhow!("the decision has no known action: {answer}"))?;
        let strategy = match answer.get("strategy").filter(|s| !s.is_null()) {
            Some(s) => format!(
                "{}@{}",
                s.get("name").and_then(Value::as_str).unwrap_or("?"),
                s.get("version")
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ),
            None => "(no key)".to_owned(),
        };
        let strong = answer
            .pointer("/strategy/confidence")
            .and_then(Value::as_str)
            == Some("strong");
        let effect = answer
            .pointer("/effect/id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if action == Action::Process {
            if let (Some(e), Some(token)) = (&effect, answer.pointer("/reservation/token")) {
                let done = http
                    .post(format!("{base}/v1/effects/{e}/complete"))
                    .bearer_auth(INGEST_TOKEN)
                    .json(&json!({ "token": token, "result": { "replayed": label } }))
                    .send()
                    .await
                    .context("completing an effect")?;
                if !done.status().is_success() {
                    bail!(
                        "completing {e} answered {}: {}",
                        done.status(),
                        done.text().await.unwrap_or_default()
                    );
                }
            }
        }
        outcomes.push(ReplayOutcome {
            strategy,
            strong,
            action,
            effect,
            label,
        });
    }
    bar.finish_and_clear();
    let _ = stop.send(());
    server.await.context("the service task")??;
    let per_strategy = tally(&outcomes);
    let mut total = ReplayTally::default();
    for t in per_strategy.values() {
        total.deliveries += t.deliveries;
        total.strong += t.strong;
        total.weak += t.weak;
        total.processed += t.processed;
        total.ignored += t.ignored;
        total.collisions += t.collisions;
        total.reconciled += t.reconciled;
        total.rejected += t.rejected;
        total.false_positives += t.false_positives;
        total.false_negatives += t.false_negatives;
    }
    Ok(Replay {
        contract: name.to_owned(),
        per_strategy,
        total,
    })
}

fn tally_json(t: &ReplayTally) -> Value {
    json!({
        "deliveries": t.deliveries,
        "strong_keys": t.strong,
        "weak_keys": t.weak,
        "processed": t.processed,
        "ignored": t.ignored,
        "collisions": t.collisions,
        "reconciled": t.reconciled,
        "rejected": t.rejected,
        "queue_rate": t.queue_rate(),
        "false_positives": t.false_positives,
        "false_negatives": t.false_negatives,
    })
}

pub fn as_json(replays: &[Replay]) -> Value {
    Value::Array(
        replays
            .iter()
            .map(|r| {
                json!({
                    "contract": r.contract,
                    "strategies": r.per_strategy.iter().map(|(s, t)| {
                        let mut v = tally_json(t);
                        v["strategy"] = json!(s);
                        v
                    }).collect::<Vec<_>>(),
                    "total": tally_json(&r.total),
                })
            })
            .collect(),
    )
}

pub fn as_text(replays: &[Replay]) -> String {
    let mut table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY);
    let mut header = vec![
        "strategy",
        "deliveries",
        "strong",
        "weak",
        "processed",
        "ignored",
        "collisions",
        "reconcile",
        "queue rate",
        "false pos",
        "false neg",
    ];
    if replays.len() > 1 {
        header.insert(0, "contract");
    }
    table.set_header(header);
    let row = |contract: &str, name: &str, t: &ReplayTally| {
        let mut cells = vec![
            name.to_owned(),
            t.deliveries.to_string(),
            t.strong.to_string(),
            t.weak.to_string(),
            t.processed.to_string(),
            t.ignored.to_string(),
            t.collisions.to_string(),
            t.reconciled.to_string(),
            format!("{:.1}%", t.queue_rate() * 100.0),
            t.false_positives.to_string(),
            t.false_negatives.to_string(),
        ];
        if replays.len() > 1 {
            cells.insert(0, contract.to_owned());
        }
        cells
    };
    // Side by side: each strategy's rows from every contract next to each other.
    let mut names: Vec<&String> = replays.iter().flat_map(|r| r.per_strategy.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        for r in replays {
            if let Some(t) = r.per_strategy.get(name) {
                table.add_row(row(&r.contract, name, t));
            }
        }
    }
    for r in replays {
        table.add_row(row(&r.contract, "total", &r.total));
    }
    let first = usize::from(replays.len() > 1) + 1;
    for c in first..first + 10 {
        if let Some(col) = table.column_mut(c) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = format!("{table}\n");
    for r in replays {
        let _ = writeln!(
            out,
            "{}: {} false positive(s) (distinct operations merged: silent loss), {} false negative(s) (one operation applied more than once)",
            r.contract, r.total.false_positives, r.total.false_negatives
        );
    }
    out
}
