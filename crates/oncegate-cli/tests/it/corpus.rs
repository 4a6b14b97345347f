//! `oncegate corpus analyze|replay` on the generated sample corpus and on the GitHub webhook
//! payload examples, as a user runs them.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sample() -> String {
    root()
        .join("examples/corpus/sample.jsonl")
        .display()
        .to_string()
}

pub(crate) fn contract(name: &str) -> String {
    root().join("examples").join(name).display().to_string()
}

fn oncegate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(args)
        .env_remove("ONCEGATE_CONTRACT")
        .env_remove("ONCEGATE_KEY_SALT")
        .env_remove("ONCEGATE_KEY_SALT_FILE")
        .output()
        .expect("the binary starts")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success() || out.status.code() == Some(1),
        "{}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

fn type_of<'v>(analysis: &'v Value, provider: &str, event_type: &str) -> &'v Value {
    analysis["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["provider"] == provider && t["event_type"] == event_type)
        .unwrap_or_else(|| panic!("{provider}/{event_type} is analyzed"))
}

fn path_of<'v>(t: &'v Value, path: &str) -> &'v Value {
    t["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == path)
        .unwrap_or_else(|| panic!("{path} has statistics"))
}

#[test]
fn the_sample_corpus_is_what_the_script_generates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sample.jsonl");
    let status = crate::programs::program("python3", "python3", "to run scripts/gen-corpus.py")
        .arg(root().join("scripts/gen-corpus.py"))
        .arg("--out")
        .arg(&out)
        .status()
        .expect("python3 runs the generator");
    assert!(status.success());
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(sample()).unwrap(),
        "examples/corpus/sample.jsonl differs from scripts/gen-corpus.py's output: regenerate it"
    );
}

#[test]
fn analyze_finds_volatile_fields_and_ranks_keys_by_merges() {
    let out = oncegate(&[
        "corpus",
        "analyze",
        &sample(),
        "--contract",
        &contract("oncegate.toml"),
        "--json",
    ]);
    let a = json_of(&out);
    assert_eq!(a["group_by"], "label");
    assert_eq!(a["bad_lines"].as_array().unwrap().len(), 0);
    let refunds = type_of(&a, "payflow", "refund.created");
    assert_eq!(path_of(refunds, "/sent_at")["stability"], "volatile");
    assert_eq!(path_of(refunds, "/attempt")["stability"], "volatile");
    assert_eq!(path_of(refunds, "/data/payment_id")["stability"], "stable");
    let request_ref = path_of(refunds, "/data/request_ref");
    assert_eq!(request_ref["stability"], "conditional");
    assert_eq!(request_ref["keyable"], true);
    // The legitimate repeats make payment+amount merge distinct refunds; the best key merges none.
    let candidates = refunds["candidates"].as_array().unwrap();
    assert_eq!(candidates[0]["merges"], 0);
    assert!(candidates[0]["fields"]
        .as_array()
        .unwrap()
        .contains(&Value::from("/data/request_ref")));
    let pay_amount = candidates
        .iter()
        .find(|c| c["fields"] == serde_json::json!(["/data/amount", "/data/payment_id"]))
        .expect("payment + amount is a candidate");
    assert!(pay_amount["merges"].as_u64().unwrap() > 0);
    let suggestion = refunds["suggestion"].as_str().unwrap();
    assert!(suggestion.contains("field = \"/sent_at\""), "{suggestion}");
    assert!(suggestion.contains("# why:"), "{suggestion}");
    // Tags arrive shuffled between retries of one product update; invoice lines never do.
    let products = type_of(&a, "shopline", "products/update");
    assert_eq!(path_of(products, "/product/tags")["stability"], "reordered");
    assert_eq!(
        path_of(products, "/product/updated_at")["stability"],
        "stable-normalized"
    );
    let invoices = type_of(&a, "ledgerly", "invoice.finalized");
    assert_eq!(path_of(invoices, "/invoice/lines")["stability"], "stable");
    assert_eq!(path_of(invoices, "/invoice/lines/*/sku")["presence"], 1.0);

    let table = oncegate(&["corpus", "analyze", &sample()]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    assert!(
        table.contains("payflow/refund.created: 60 deliveries"),
        "{table}"
    );
    assert!(table.contains("suggested contract fragment"), "{table}");
}

#[test]
fn analyze_groups_by_transport_or_strategy() {
    let by_transport = json_of(&oncegate(&[
        "corpus",
        "analyze",
        &sample(),
        "--contract",
        &contract("oncegate.toml"),
        "--json",
        "--group-by",
        "transport",
    ]));
    assert_eq!(by_transport["group_by"], "transport");
    let by_key = json_of(&oncegate(&[
        "corpus",
        "analyze",
        &sample(),
        "--contract",
        &contract("oncegate.toml"),
        "--json",
        "--group-by",
        "strategy",
    ]));
    let captures = type_of(&by_key, "payflow", "payment.captured");
    assert!(captures["repeated_events"].as_u64().unwrap() > 0);
    let refused = oncegate(&["corpus", "analyze", &sample(), "--group-by", "strategy"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("needs --contract"));
}

#[test]
fn replay_of_the_example_contract_loses_nothing() {
    let out = oncegate(&[
        "corpus",
        "replay",
        &sample(),
        "--contract",
        &contract("oncegate.toml"),
        "--fail-on-loss",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = json_of(&out);
    let total = &r[0]["total"];
    assert_eq!(total["deliveries"], 224);
    assert_eq!(total["false_positives"], 0);
    // The same refund request reference with another amount is a collision, kept aside.
    let by_ref = r[0]["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["strategy"] == "refund-request-ref@1")
        .unwrap();
    assert!(by_ref["collisions"].as_u64().unwrap() > 0);
    // The two refunds of the same amount are reconciled, never ignored.
    let fingerprint = r[0]["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["strategy"] == "refund-fingerprint@1")
        .unwrap();
    assert_eq!(fingerprint["ignored"], 0);
    assert!(fingerprint["reconciled"].as_u64().unwrap() > 0);
}

#[test]
fn replay_of_a_fingerprint_only_contract_detects_silent_loss_and_fails() {
    let out = oncegate(&[
        "corpus",
        "replay",
        &sample(),
        "--contract",
        &contract("corpus/fingerprint-only.toml"),
        "--against",
        &contract("oncegate.toml"),
        "--fail-on-loss",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("false positive"));
    let r = json_of(&out);
    assert!(r[0]["total"]["false_positives"].as_u64().unwrap() > 0);
    assert_eq!(r[1]["total"]["false_positives"], 0);
    let table = oncegate(&[
        "corpus",
        "replay",
        &sample(),
        "--contract",
        &contract("corpus/fingerprint-only.toml"),
        "--against",
        &contract("oncegate.toml"),
    ]);
    assert!(
        table.status.success(),
        "without --fail-on-loss the replay only reports"
    );
    let table = text(&table.stdout);
    assert!(table.contains("refund-body@1"), "{table}");
    assert!(table.contains("refund-request-ref@1"), "{table}");
}

/// Every payload example of the GitHub webhooks corpus, as a capture from outside would
/// bring it: provider `github`, event type from the directory name.
#[test]
fn analyze_runs_clean_on_the_github_webhook_corpus() {
    let corpus = root().join("../shared/corpora/github-webhooks");
    let mut files = Vec::new();
    let mut stack = vec![corpus.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("the GitHub corpus is present") {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "json")
                && path.parent() != Some(corpus.join("payload-examples").as_path())
            {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() > 400, "{} payload files", files.len());
    let mut lines = String::new();
    let mut types = std::collections::BTreeSet::new();
    for path in &files {
        let event_type = path
            .parent()
            .and_then(Path::file_name)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let bytes = std::fs::read(path).unwrap();
        let mut record = serde_json::json!({
            "tenant": "acme", "provider": "github", "env": "live", "event_type": event_type, "headers": {},
        });
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(body) => record["body"] = body,
            Err(e) => {
                use std::fmt::Write as _;
                let mut b64 = String::new();
                for chunk in bytes.chunks(3) {
                    let _ = write!(b64, "{}", base64_chunk(chunk));
                }
                record["body_base64"] = Value::from(b64);
                record["body_reason"] = Value::from(e.to_string());
            }
        }
        types.insert(event_type);
        lines.push_str(&serde_json::to_string(&record).unwrap());
        lines.push('\n');
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("github.jsonl");
    std::fs::write(&file, lines).unwrap();
    let file = file.display().to_string();
    let out = oncegate(&["corpus", "analyze", &file, "--json"]);
    let a = json_of(&out);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(a["deliveries"], files.len());
    assert_eq!(a["bad_lines"], serde_json::json!([]));
    assert_eq!(a["types"].as_array().unwrap().len(), types.len());
    let table = oncegate(&["corpus", "analyze", &file]);
    assert!(table.status.success(), "{}", text(&table.stderr));
}

/// Standard base64 of up to three bytes (the test builds its captures without the CLI's code).
fn base64_chunk(chunk: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = [
        chunk[0],
        *chunk.get(1).unwrap_or(&0),
        *chunk.get(2).unwrap_or(&0),
    ];
    let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
    let mut out = String::new();
    for i in 0..4 {
        if i <= chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        } else {
            out.push('=');
        }
    }
    out
}

/// `oncegate serve` on a temporary SQLite file, until dropped.
pub(crate) struct Served {
    child: std::process::Child,
    pub(crate) base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) const EXPORT_SALT: &str = "export-test-salt";

pub(crate) fn serve(db: &str) -> Served {
    serve_with(db, &contract("oncegate.toml"))
}

/// Serves `contract` on `db` with the test salt and tokens (`admin-token`, `ingest-token`).
pub(crate) fn serve_with(db: &str, contract: &str) -> Served {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args([
            "serve",
            "--contract",
            contract,
            "--store",
            db,
            "--listen",
            "127.0.0.1:0",
            "--log-json",
        ])
        .env("ONCEGATE_KEY_SALT", EXPORT_SALT)
        .env(
            "ONCEGATE_TOKENS",
            "admin:*:admin-token;ingest:acme:ingest-token",
        )
        .env_remove("ONCEGATE_TOKENS_FILE")
        .env_remove("PAYFLOW_SIGNING_SECRET")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the binary starts");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let address = loop {
        let line = lines.next().expect("serve logs until it listens").unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["message"] == "oncegate serving" {
            break v["address"].as_str().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Served {
        child,
        base: format!("http://{address}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn export_masks_sensitive_fields_and_labels_resolutions() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("export.db").display());
    let served = serve(&db);
    let http = reqwest::Client::new();
    let post = |body: &'static str| {
        http.post(format!("{}/v1/deliveries/acme/payflow/live", served.base))
            .bearer_auth("ingest-token")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let refund1 = r#"{"type":"refund.created","sent_at":"2026-03-05T16:02:11Z","data":{"payment_id":"pay_7Hq2","amount":1500,"currency":"EUR","customer_email":"jane@example.com"}}"#;
    let refund2 = r#"{"type":"refund.created","sent_at":"2026-03-05T16:06:40Z","data":{"payment_id":"pay_7Hq2","amount":1500,"currency":"EUR","customer_email":"jane@example.com"}}"#;
    let first: Value = post(refund1).await.unwrap().json().await.unwrap();
    assert_eq!(first["action"], "process", "{first}");
    let effect = first["effect"]["id"].as_str().unwrap();
    let done = http
        .post(format!("{}/v1/effects/{effect}/complete", served.base))
        .bearer_auth("ingest-token")
        .json(&serde_json::json!({"token": first["reservation"]["token"], "result": {"refund": "re_1"}}))
        .send()
        .await
        .unwrap();
    assert!(done.status().is_success());
    let second: Value = post(refund2).await.unwrap().json().await.unwrap();
    assert_eq!(second["action"], "reconcile", "{second}");
    let id2 = second["delivery_id"].as_str().unwrap();
    let resolved = http
        .post(format!("{}/v1/queue/{id2}/resolve", served.base))
        .bearer_auth("admin-token")
        .json(&serde_json::json!({"outcome": "distinct", "authoritative_ref": "re_2", "note": "two refunds", "by": "sam"}))
        .send()
        .await
        .unwrap();
    assert!(
        resolved.status().is_success(),
        "{}",
        resolved.text().await.unwrap()
    );
    let capture = r#"{"type":"payment.captured","sent_at":"2026-03-02T09:14:07Z","data":{"payment_id":"pay_7Hq2","capture_id":"cap_91","amount":4990,"currency":"EUR"}}"#;
    let c: Value = post(capture).await.unwrap().json().await.unwrap();
    assert_eq!(c["action"], "process");

    let export = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_oncegate"))
            .args([
                "corpus",
                "export",
                "--store",
                &db,
                "--contract",
                &contract("oncegate.toml"),
            ])
            .args(args)
            .env("ONCEGATE_KEY_SALT", EXPORT_SALT)
            .output()
            .unwrap()
    };
    let all = export(&[]);
    assert!(all.status.success(), "{}", text(&all.stderr));
    let lines: Vec<Value> = text(&all.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let masked = oncegate_core::identity::mask(EXPORT_SALT.as_bytes(), "\"jane@example.com\"");
    assert_eq!(lines[0]["body"]["data"]["customer_email"], masked.as_str());
    assert!(!text(&all.stdout).contains("jane@example.com"));
    assert_eq!(lines[0]["decision"], "process");
    assert_eq!(lines[2]["event_type"], "payment.captured");
    assert!(lines[2].get("label").is_none());

    let out = dir.path().join("resolved.jsonl");
    let regression = export(&["--resolved", "--out", &out.display().to_string()]);
    assert!(regression.status.success(), "{}", text(&regression.stderr));
    let cases: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(cases.len(), 2, "{cases:?}");
    assert_eq!(cases[1]["delivery_id"], id2);
    assert_eq!(cases[1]["label"]["resolution"], "distinct");
    assert_eq!(cases[1]["label"]["reference"], first["delivery_id"]);
    assert_eq!(cases[0]["label"]["operation"], effect);
    assert_ne!(
        cases[0]["label"]["operation"],
        cases[1]["label"]["operation"]
    );

    // The regression cases replay: the example contract must keep both refunds.
    let replayed = oncegate(&[
        "corpus",
        "replay",
        &out.display().to_string(),
        "--contract",
        &contract("oncegate.toml"),
        "--fail-on-loss",
        "--json",
    ]);
    assert!(replayed.status.success(), "{}", text(&replayed.stderr));
    assert_eq!(json_of(&replayed)[0]["total"]["false_positives"], 0);
}
