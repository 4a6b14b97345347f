//! The alerting rules (`docs/alerts.yml`, their unit tests `docs/alerts.test.yml`) and the
//! Grafana dashboard (`docs/grafana-dashboard.json`) name only metrics the service exports:
//! every `oncegate_…` name they use is read off a live server's `/metrics`, on each backend.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::harness::*;

fn docs(name: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, text)
}

/// The sample names a scrape can hold: each family's `# TYPE` line (present before its first
/// sample) with the suffixes its type adds, and every sample name seen.
fn exported(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                panic!("a TYPE line without a name and a type: {line}");
            };
            match kind {
                "counter" => {
                    names.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    names.insert(name.to_owned());
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

/// Every `oncegate_…` identifier in `text` (PromQL or a series selector).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("oncegate_") {
        let preceded = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !preceded {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The YAML's text without its comments (a comment may speak of a metric in passing).
fn without_comments(yaml: &str) -> String {
    yaml.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `expr` of the dashboard's panels.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("each panel has targets") {
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("a target without an expr in {}", panel["title"]));
            queries.push(expr.to_owned());
        }
    }
    queries
}

pub async fn alerts_and_dashboard_name_exported_metrics(kind: Kind) {
    let s = Service::start(kind).await;
    // One decision, so the families with samples show them too.
    let a = s
        .payflow(
            "acme",
            &capture("pay_mon", "cap_mon", "1000", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(a.str("action"), "process");
    let m = s.get("/metrics", Some(OPERATOR)).await;
    assert_eq!(m.status, 200, "{}", m.text);
    let live = exported(&m.text);
    assert!(
        live.contains("oncegate_deliveries_total") && live.contains("oncegate_store_up"),
        "the scrape was not read: {live:?}"
    );

    let (alerts_path, alerts) = docs("alerts.yml");
    let (tests_path, alert_tests) = docs("alerts.test.yml");
    let (dashboard_path, dashboard) = docs("grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&dashboard)
        .unwrap_or_else(|e| panic!("{}: {e}", dashboard_path.display()));
    let queries = dashboard_queries(&dashboard);

    let mut unknown = Vec::new();
    let mut check = |path: &Path, names: BTreeSet<String>, at_least: usize| {
        assert!(
            names.len() >= at_least,
            "{} names only {} metrics: {names:?}",
            path.display(),
            names.len()
        );
        for name in names.difference(&live) {
            unknown.push(format!("{}: {name}", path.display()));
        }
    };
    check(&alerts_path, metric_names(&without_comments(&alerts)), 7);
    check(
        &tests_path,
        metric_names(&without_comments(&alert_tests)),
        7,
    );
    check(&dashboard_path, metric_names(&queries.join("\n")), 15);
    assert!(
        unknown.is_empty(),
        "metrics named but not exported by the service (its /metrics on {kind:?}):\n{}\n\nexported: {live:#?}",
        unknown.join("\n")
    );

    // The alerts the operations guide promises.
    for alert in [
        "OncegateUnexplainedGap",
        "OncegateQueueItemWaiting",
        "OncegateBreakerOpen",
        "OncegateForwardDeadLetters",
        "OncegateStoreUnavailable",
        "OncegateReconciliationFailing",
    ] {
        assert!(
            alerts.contains(&format!("- alert: {alert}\n")),
            "{} has no alert {alert}",
            alerts_path.display()
        );
        assert!(
            alert_tests.contains(&format!("alertname: {alert}\n")),
            "{} does not test {alert}",
            tests_path.display()
        );
    }
    s.stop().await;
}

#[test]
fn metric_names_are_read_whole_and_only_with_their_prefix() {
    let names = metric_names(
        "sum by (kind) (rate(oncegate_deliveries_total[5m])) / x_oncegate_no + oncegate_store_up",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["oncegate_deliveries_total", "oncegate_store_up"]
    );
    let live = exported(
        "# HELP oncegate_keys Keys.\n# TYPE oncegate_keys counter\n\
         # TYPE oncegate_decision_latency_seconds histogram\n\
         # TYPE oncegate_store_up gauge\noncegate_store_up 1\n",
    );
    for name in [
        "oncegate_keys_total",
        "oncegate_decision_latency_seconds_bucket",
        "oncegate_decision_latency_seconds_count",
        "oncegate_store_up",
    ] {
        assert!(live.contains(name), "{name} missing from {live:?}");
    }
    assert!(!live.contains("oncegate_keys"));
}
