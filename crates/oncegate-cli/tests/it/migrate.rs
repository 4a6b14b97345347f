//! `oncegate migrate`: a versioned cut-over that never applies an old event twice.

use crate::corpus::{contract, serve_with, EXPORT_SALT};
use serde_json::Value;
use std::process::Command;

const CAPTURE: &str = r#"{"type":"payment.captured","sent_at":"2026-03-02T09:14:07Z","attempt":1,"data":{"payment_id":"pay_7Hq2","capture_id":"CAP_91","amount":4990,"currency":"EUR"}}"#;
const RETRY: &str = r#"{"attempt":2,"data":{"currency":"EUR","amount":4.99e3,"capture_id":"CAP_91","payment_id":"pay_7Hq2"},"type":"payment.captured","sent_at":"2026-03-02T09:19:12Z"}"#;

/// The example contract with `capture-id` cut over to version 2 (capture ids compared without
/// case): a new version, so new keys.
fn v2(dir: &std::path::Path) -> String {
    let v1 = std::fs::read_to_string(contract("oncegate.toml")).unwrap();
    let from = "  name = \"capture-id\"\n  version = 1\n  level = \"business_ref\"\n  fields = [\"/data/payment_id\", \"/data/capture_id\"]\n";
    assert!(
        v1.contains(from),
        "the example contract still defines capture-id@1"
    );
    let to = "  name = \"capture-id\"\n  version = 2\n  level = \"business_ref\"\n  fields = [\"/data/payment_id\", \"/data/capture_id\"]\n  normalize = { \"/data/capture_id\" = [\"trim\", \"lowercase\"] }\n";
    let path = dir.join("v2.toml");
    std::fs::write(&path, v1.replace(from, to)).unwrap();
    path.display().to_string()
}

async fn post(base: &str, body: &'static str) -> Value {
    reqwest::Client::new()
        .post(format!("{base}/v1/deliveries/acme/payflow/live"))
        .bearer_auth("ingest-token")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Processes the capture under v1 on a fresh store, completes it, and stops the service.
async fn processed_under_v1(db: &str) -> String {
    let served = serve_with(db, &contract("oncegate.toml"));
    let first = post(&served.base, CAPTURE).await;
    assert_eq!(first["action"], "process", "{first}");
    assert_eq!(first["strategy"]["version"], 1);
    let effect = first["effect"]["id"].as_str().unwrap().to_owned();
    let done = reqwest::Client::new()
        .post(format!("{}/v1/effects/{effect}/complete", served.base))
        .bearer_auth("ingest-token")
        .json(&serde_json::json!({"token": first["reservation"]["token"], "result": {"ledger_tx": "tx_1"}}))
        .send()
        .await
        .unwrap();
    assert!(done.status().is_success());
    effect
}

fn migrate(db: &str, contract: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["migrate", "--contract", contract, "--store", db])
        .env("ONCEGATE_KEY_SALT", EXPORT_SALT)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_cut_over_is_ignored_once_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let new = v2(dir.path());

    // Without the migration, the cut-over would apply the capture a second time: the v2 key
    // is new, so nothing holds it. This is what `migrate` exists to prevent.
    let control = format!("sqlite://{}", dir.path().join("control.db").display());
    processed_under_v1(&control).await;
    let served = serve_with(&control, &new);
    let twice = post(&served.base, RETRY).await;
    assert_eq!(twice["action"], "process", "{twice}");
    assert_eq!(twice["strategy"]["version"], 2);
    drop(served);

    let db = format!("sqlite://{}", dir.path().join("migrated.db").display());
    let effect = processed_under_v1(&db).await;
    let out = migrate(&db, &new);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("aliased       {effect}")),
        "{stdout}"
    );
    assert!(stdout.contains("capture-id@1 → capture-id@2"), "{stdout}");
    assert!(stdout.contains("1 aliased"), "{stdout}");
    // Running it again records nothing new.
    let again = String::from_utf8_lossy(&migrate(&db, &new).stdout).into_owned();
    assert!(again.contains("0 aliased"), "{again}");

    let served = serve_with(&db, &new);
    let retry = post(&served.base, RETRY).await;
    assert_eq!(retry["action"], "ignore", "{retry}");
    assert_eq!(retry["strategy"]["version"], 2);
    assert_eq!(retry["effect"]["id"], effect.as_str());
    assert_eq!(retry["effect"]["result"]["ledger_tx"], "tx_1");
}

#[test]
fn migrate_needs_the_service_salt_for_sensitive_fields() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("empty.db").display());
    let out = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args([
            "migrate",
            "--contract",
            &contract("oncegate.toml"),
            "--store",
            &db,
        ])
        .env_remove("ONCEGATE_KEY_SALT")
        .env_remove("ONCEGATE_KEY_SALT_FILE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ONCEGATE_KEY_SALT"));
}
