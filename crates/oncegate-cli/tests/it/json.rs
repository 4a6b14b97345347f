//! `--json` as a script reads it: the real binary on both stores, each document parsed and
//! its values checked against what the service answered, and the names of `explain --json`,
//! `report --json`, `queue list --json` and `breaker list --json` compared with the HTTP API's
//! for the same data.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Output, Stdio};

use oncegate::store::testing::TestDatabase;
use serde_json::{json, Value};

use crate::service::CONTRACT;
const SALT: &str = "cli-json-salt";
const INGEST: &str = "ingest-token-cli-json";
const ADMIN: &str = "admin-token-cli-json";

fn oncegate(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(args)
        .env_remove("ONCEGATE_CONTRACT")
        .env_remove("ONCEGATE_STORE")
        .env_remove("ONCEGATE_KEY_SALT_FILE")
        .env("ONCEGATE_KEY_SALT", SALT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Runs the command, expects `code`, and parses its one line of standard output.
fn doc_with(args: &[&str], stdin: &str, code: i32) -> Value {
    let out = oncegate(args, stdin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(code),
        "oncegate {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), 1, "one compact line: {stdout}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn doc(args: &[&str]) -> Value {
    doc_with(args, "", 0)
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

/// The real service, in-process, on `url`, with this module's salt and tokens.
async fn start(url: &str) -> (String, tokio::sync::oneshot::Sender<()>) {
    crate::service::start(url, SALT, &format!("ingest:*:{INGEST};admin:*:{ADMIN}")).await
}

async fn post(base: &str, path: &str, body: String) -> Value {
    crate::service::post(base, INGEST, path, body).await
}

async fn get(base: &str, path: &str) -> Value {
    let r = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.unwrap()
}

fn refund(payment: &str, sent_at: &str) -> String {
    format!(
        r#"{{"type":"refund.created","sent_at":"{sent_at}","attempt":1,"data":{{"payment_id":"{payment}","amount":1500,"currency":"EUR"}}}}"#
    )
}

fn with_ref(payment: &str, request_ref: &str, sent_at: &str) -> String {
    format!(
        r#"{{"type":"refund.created","sent_at":"{sent_at}","data":{{"payment_id":"{payment}","amount":1500,"currency":"EUR","request_ref":"{request_ref}"}}}}"#
    )
}

async fn documents_match_the_api(url: &str) {
    let (base, stop) = start(url).await;
    let store = ["--store", url];
    let deliver = |body: String| post(&base, "/v1/deliveries/acme/payflow/live", body);

    let complete = |answer: Value, result: Value| {
        let effect = answer["effect"]["id"].as_str().unwrap().to_owned();
        let token = answer["reservation"]["token"].as_str().unwrap().to_owned();
        let base = base.clone();
        async move {
            post(
                &base,
                &format!("/v1/effects/{effect}/complete"),
                json!({"token": token, "result": result}).to_string(),
            )
            .await
        }
    };
    // A refund with its request reference, processed and completed, then retried (ignored on
    // its business key); and a refund of another payment without one, completed, followed by
    // a second one matching only the weak fingerprint (kept to reconcile).
    let first_body = with_ref("pay_j1", "rr-j1", "2024-05-01T10:00:00Z");
    let first = deliver(first_body.clone()).await;
    assert_eq!(first["action"], "process", "{first}");
    complete(first.clone(), json!({"refund": "r_1"})).await;
    let again = deliver(with_ref("pay_j1", "rr-j1", "2024-05-01T10:01:00Z")).await;
    assert_eq!(again["action"], "ignore", "{again}");
    let other = deliver(refund("pay_j2", "2024-05-01T10:02:00Z")).await;
    assert_eq!(other["action"], "process", "{other}");
    complete(other.clone(), json!({})).await;
    let weak = deliver(refund("pay_j2", "2024-05-01T10:04:00Z")).await;
    assert_eq!(weak["action"], "reconcile", "{weak}");
    let ids =
        [&first, &again, &weak, &other].map(|a| a["delivery_id"].as_str().unwrap().to_owned());

    // explain: the proof's names are the API's, and so are its values.
    for id in &ids {
        let cli = doc(&[&["explain", id.as_str(), "--json"][..], &store].concat());
        let api = get(&base, &format!("/v1/deliveries/{id}")).await;
        assert_eq!(keys(&cli), keys(&api), "explain --json names for {id}");
        for field in [
            "delivery_id",
            "action",
            "reason",
            "layer",
            "strategy",
            "effect_key",
            "reference_delivery_id",
            "effect",
            "differences",
            "flags",
            "rule",
            "queue_item_id",
            "received_at",
            "transport_key",
            "raw_sha256",
            "size",
            "skipped_strategies",
            "linked_deliveries",
            "rule_version",
        ] {
            assert_eq!(cli[field], api[field], "{field} of {id}");
        }
    }
    let ignored = doc(&[&["explain", ids[1].as_str(), "--json"][..], &store].concat());
    assert_eq!(ignored["action"], "ignore");
    assert_eq!(ignored["layer"], "effect");
    assert_eq!(ignored["strategy"]["name"], "refund-request-ref");
    assert_eq!(ignored["reference_delivery_id"], ids[0].as_str());
    assert_eq!(ignored["effect"]["state"], "completed");
    assert_eq!(ignored["effect"]["result"], json!({"refund": "r_1"}));

    // An error prints no JSON: the message is on stderr and the status is 2.
    let missing = oncegate(
        &[
            &["explain", "dlv_00000000000000000000000000", "--json"][..],
            &store,
        ]
        .concat(),
        "",
    );
    assert_eq!(missing.status.code(), Some(2));
    assert!(missing.stdout.is_empty(), "no JSON on stdout for an error");
    assert!(!missing.stderr.is_empty());

    // report: the same document as `GET /v1/report` for the same instant.
    let since = "2000-01-01T00:00:00Z";
    let report = doc(&[&["report", "--since", since, "--json"][..], &store].concat());
    let api = get(&base, &format!("/v1/report?since={since}")).await;
    assert_eq!(report, api, "report --json is GET /v1/report");
    assert_eq!(report["total"]["received"], 4, "{report}");
    assert_eq!(report["total"]["processed"], 2, "{report}");
    assert_eq!(report["total"]["ignored_effect"], 1, "{report}");
    assert_eq!(report["total"]["reconcile_pending"], 1, "{report}");
    assert_eq!(report["total"]["unexplained_gap"], 0, "{report}");
    assert_eq!(report["rows"][0]["event_type"], "refund.created");

    // queue list: the item the API lists, with the same names and values (its age aside,
    // which is counted at each reading).
    let page = doc(&[&["queue", "list", "--json"][..], &store].concat());
    let api = get(&base, "/v1/queue").await;
    assert_eq!(keys(&page), keys(&api));
    assert_eq!(page["counts"], api["counts"]);
    assert_eq!(page["counts"]["reconcile"]["open"], 1, "{page}");
    assert_eq!(page["next"], Value::Null);
    let (mut cli_item, mut api_item) = (page["items"][0].clone(), api["items"][0].clone());
    assert!(cli_item["age_seconds"].as_i64().unwrap() >= 0);
    cli_item.as_object_mut().unwrap().remove("age_seconds");
    api_item.as_object_mut().unwrap().remove("age_seconds");
    assert_eq!(
        cli_item, api_item,
        "queue list --json items are GET /v1/queue's"
    );
    assert_eq!(cli_item["delivery_id"], ids[2].as_str());
    assert_eq!(cli_item["reference_delivery_id"], ids[3].as_str());
    let item_id = cli_item["queue_item_id"].as_str().unwrap().to_owned();

    // queue show, by either id: the item, and both payloads as received.
    for by in [item_id.as_str(), ids[2].as_str()] {
        let shown = doc(&[&["queue", "show", by, "--json"][..], &store].concat());
        assert_eq!(shown["queue_item_id"], item_id.as_str(), "{shown}");
        assert_eq!(shown["delivery_id"], ids[2].as_str());
        assert_eq!(shown["proposed_action"], cli_item["proposed_action"]);
        assert_eq!(
            shown["payload"]["sent_at"], "2024-05-01T10:04:00Z",
            "{shown}"
        );
        assert_eq!(
            shown["reference_payload"]["sent_at"], "2024-05-01T10:02:00Z",
            "{shown}"
        );
    }

    // breaker list: the API's document.
    let breakers = doc(&[&["breaker", "list", "--json"][..], &store].concat());
    let api = get(&base, "/v1/breakers").await;
    assert_eq!(breakers, api, "breaker list --json is GET /v1/breakers");
    let fingerprint = breakers["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["strategy"] == "refund-fingerprint")
        .unwrap_or_else(|| panic!("the fingerprint matched once: {breakers}"));
    assert_eq!(fingerprint["state"], "closed", "{breakers}");
    assert_eq!(fingerprint["matches"], 1, "{breakers}");

    // purge: nothing is past its retention yet, so the dry run counts nothing and the real
    // run removes nothing; the proofs are still there after it.
    let purge = |extra: &[&str]| {
        doc(&[
            &["purge", "--contract", CONTRACT, "--json"][..],
            extra,
            &store,
        ]
        .concat())
    };
    let dry = purge(&["--dry-run"]);
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert_eq!(dry["payload_retention_seconds"], 30 * 86_400);
    assert_eq!(dry["proof_retention_seconds"], 400 * 86_400);
    assert_eq!(dry["deliveries"], 0, "{dry}");
    assert_eq!(dry["payloads"], 0, "{dry}");
    let applied = purge(&[]);
    assert_eq!(applied["dry_run"], false, "{applied}");
    assert_eq!(applied["proofs"], 0, "{applied}");
    let still = doc(&[&["explain", ids[0].as_str(), "--json"][..], &store].concat());
    assert_eq!(still["action"], "process");

    // key: the same effect key the service made for the first refund.
    let key = doc_with(
        &[
            "key",
            "--provider",
            "payflow",
            "--tenant",
            "acme",
            "--contract",
            CONTRACT,
            "--json",
        ],
        &first_body,
        0,
    );
    assert_eq!(key["effect_key"], first["effect_key"], "{key}");
    assert_eq!(key["strategy"]["name"], first["strategy"]["name"], "{key}");
    assert_eq!(key["event_type"], "refund.created");

    // A reception journaled with no decision: explain keeps every name of the proof, the
    // decision's fields null, and the report counts it in the gap yet still exits 0.
    let journal = oncegate::store::open(url).await.unwrap();
    let undecided = journal
        .journal(oncegate::store::NewReception {
            tenant: "acme".into(),
            provider: "payflow".into(),
            env: "live".into(),
            event_type: Some("refund.created".into()),
            received_at: time::OffsetDateTime::now_utc(),
            size: 2,
            body_sha256: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a".into(),
            headers_json: "{}".into(),
            payload: Some(b"{}".to_vec()),
            transport_key: None,
            correlation_id: None,
        })
        .await
        .unwrap()
        .to_string();
    drop(journal);
    let bare = doc(&[&["explain", undecided.as_str(), "--json"][..], &store].concat());
    let decided = get(&base, &format!("/v1/deliveries/{}", ids[0])).await;
    assert_eq!(keys(&bare), keys(&decided), "{bare}");
    assert_eq!(bare["delivery_id"], undecided.as_str());
    assert_eq!(bare["action"], Value::Null, "{bare}");
    assert_eq!(bare["decided_at"], Value::Null, "{bare}");
    let gap = doc(&[&["report", "--since", since, "--json"][..], &store].concat());
    assert_eq!(gap["total"]["unexplained_gap"], 1, "{gap}");
    assert_eq!(gap["total"]["received"], 5, "{gap}");
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_documents_match_the_api_on_sqlite() {
    let db = TestDatabase::sqlite();
    documents_match_the_api(&db.url).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_documents_match_the_api_on_postgres() {
    let db = TestDatabase::postgres("oncegate_cli_json").await;
    documents_match_the_api(&db.url).await;
    db.cleanup().await;
}

#[test]
fn check_json_lists_each_hierarchy_and_an_invalid_contract_prints_no_json() {
    let c = doc(&["check", CONTRACT, "--json"]);
    assert_eq!(c["valid"], true);
    let payflow = c["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "payflow")
        .unwrap_or_else(|| panic!("{c}"));
    let refund = payflow["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "refund.created")
        .unwrap_or_else(|| panic!("{payflow}"));
    let labels: Vec<&str> = refund["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["refund-request-ref@1", "refund-fingerprint@1"]);
    assert_eq!(refund["criticality"], "critical");
    assert_eq!(refund["strategies"][1]["level"], "fingerprint");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[settings]\nnot_a_setting = 1\n").unwrap();
    let out = oncegate(&["check", bad.to_str().unwrap(), "--json"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!out.stderr.is_empty());
}

#[test]
fn key_json_exits_1_with_a_null_key_when_no_strategy_applies() {
    let none = doc_with(
        &[
            "key",
            "--provider",
            "payflow",
            "--contract",
            CONTRACT,
            "--json",
        ],
        r#"{"type":"refund.created","data":{}}"#,
        1,
    );
    assert_eq!(none["effect_key"], Value::Null, "{none}");
    // The proofs' shape: name, version, why.
    let skipped: Vec<(&str, u64)> = none["skipped_strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            assert!(s["why"].is_string(), "{s}");
            (s["name"].as_str().unwrap(), s["version"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        skipped,
        [("refund-request-ref", 1), ("refund-fingerprint", 1)]
    );
    assert_eq!(none["transport_strength"], "weak");
}

#[test]
fn every_json_command_documents_its_exit_statuses() {
    for cmd in [
        &["report"][..],
        &["queue", "list"],
        &["queue", "show"],
        &["explain"],
        &["check"],
        &["key"],
        &["breaker", "list"],
        &["purge"],
        &["reconcile"],
    ] {
        let out = oncegate(&[cmd, &["--help"]].concat(), "");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{cmd:?}");
        for part in ["--json", "Exit status:", "  0 ", "  2 ", "  141 "] {
            assert!(
                help.contains(part),
                "{cmd:?} --help lacks {part:?}:\n{help}"
            );
        }
    }
}
