//! Shadow strategies on live traffic: computed beside the hierarchy, never acting, shown in
//! the answer and the proof when they would have decided otherwise, and counted.

use crate::corpus::{contract, serve_with};
use serde_json::Value;

/// The example contract with a strong "payment + amount" key running as a refund shadow:
/// what a fingerprint-like v2 would do, observed before anyone cuts over to it.
fn with_shadow(dir: &std::path::Path) -> String {
    let mut text = std::fs::read_to_string(contract("oncegate.toml")).unwrap();
    text.push_str(
        r#"
[[providers.payflow.types."refund.created".shadow]]
name = "refund-amount"
version = 1
level = "semantic"
fields = ["/data/payment_id", "/data/amount", "/data/currency"]
confidence = "strong"
"#,
    );
    let path = dir.join("shadow.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shadow_reports_what_it_would_have_done_and_never_acts() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("shadow.db").display());
    let served = serve_with(&db, &with_shadow(dir.path()));
    let http = reqwest::Client::new();
    let post = |body: &'static str| {
        http.post(format!("{}/v1/deliveries/acme/payflow/live", served.base))
            .bearer_auth("ingest-token")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let first: Value = post(r#"{"type":"refund.created","sent_at":"2026-03-05T16:02:11Z","data":{"payment_id":"pay_7Hq2","amount":1500,"currency":"EUR"}}"#)
        .await.unwrap().json().await.unwrap();
    assert_eq!(first["action"], "process", "{first}");
    // The shadow agrees on a first delivery (it would process too), so nothing is shown.
    assert!(first.get("shadow").is_none(), "{first}");
    let done = http
        .post(format!("{}/v1/effects/{}/complete", served.base, first["effect"]["id"].as_str().unwrap()))
        .bearer_auth("ingest-token")
        .json(&serde_json::json!({"token": first["reservation"]["token"], "result": {"refund": "re_1"}}))
        .send()
        .await
        .unwrap();
    assert!(done.status().is_success());

    // A legitimate second refund of the same amount: the hierarchy keeps it (reconcile), the
    // shadow would have ignored it — a silent loss, shown before any cut-over.
    let second: Value = post(r#"{"type":"refund.created","sent_at":"2026-03-05T16:06:40Z","data":{"payment_id":"pay_7Hq2","amount":1500,"currency":"EUR"}}"#)
        .await.unwrap().json().await.unwrap();
    assert_eq!(second["action"], "reconcile", "{second}");
    let shadow = &second["shadow"][0];
    assert_eq!(shadow["strategy"], "refund-amount@1");
    assert_eq!(shadow["action"], "ignore");
    assert_eq!(shadow["reference_delivery_id"], first["delivery_id"]);

    let id = second["delivery_id"].as_str().unwrap();
    let proof: Value = http
        .get(format!("{}/v1/deliveries/{id}", served.base))
        .bearer_auth("admin-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(proof["shadow"][0]["action"], "ignore", "{proof}");
    assert_eq!(
        proof["details"]["shadow"][0]["strategy"], "refund-amount@1",
        "{proof}"
    );

    // `explain` shows the shadow's verdict beside the real one.
    let explained = std::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["explain", id, "--store", &db])
        .output()
        .unwrap();
    let explained = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.contains("shadow     refund-amount@1 would ignore"),
        "{explained}"
    );

    let metrics = http
        .get(format!("{}/metrics", served.base))
        .bearer_auth("admin-token")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("oncegate_shadow_disagreements_total{") && l.contains("refund-amount@1")
        })
        .unwrap_or_else(|| panic!("the disagreement is counted:\n{metrics}"));
    assert!(line.ends_with(" 1"), "{line}");
    assert!(line.contains("event_type=\"refund.created\""), "{line}");

    let report: Value = http
        .get(format!("{}/v1/report", served.base))
        .bearer_auth("admin-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let refunds = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["event_type"] == "refund.created")
        .unwrap_or_else(|| panic!("a refund row: {report}"));
    assert_eq!(refunds["shadow_disagreements"], 1, "{report}");
    assert_eq!(refunds["unexplained_gap"], 0, "{report}");
}
