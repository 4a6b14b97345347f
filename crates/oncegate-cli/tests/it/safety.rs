//! `queue`, `breaker`, `purge` and `replay` as an operator runs them: the real binary on the
//! SQLite file a running service writes to.

use std::process::Output;
use std::sync::Arc;

use oncegate_server::{ApiToken, ServiceConfig};
use serde_json::{json, Value};

const CONTRACT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/oncegate.toml");
const SALT: &str = "cli-safety-salt";
const INGEST: &str = "ingest-token-cli";

struct Running {
    base: String,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The real service, in-process, on `url`, with a breaker that trips on 4 matches over 20 %.
async fn start(url: &str) -> Running {
    let store = oncegate::store::open(url).await.expect("the store opens");
    let text = std::fs::read_to_string(CONTRACT).unwrap();
    let mut contract = oncegate_core::contract::parse(CONTRACT, &text).unwrap();
    contract.settings.breaker_min_sample = 4;
    contract.settings.breaker_threshold = 0.2;
    let mut config = ServiceConfig::new(Arc::new(contract), store, SALT.as_bytes().to_vec());
    config.tokens = ApiToken::parse_list(&format!("ingest:*:{INGEST}")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(oncegate_server::serve(listener, config, async move {
        let _ = rx.await;
    }));
    Running {
        base,
        http: reqwest::Client::new(),
        stop: Some(tx),
    }
}

impl Running {
    async fn post(&self, path: &str, body: String) -> Value {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(INGEST)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        r.json().await.unwrap()
    }

    async fn deliver(&self, body: String) -> Value {
        self.post("/v1/deliveries/acme/payflow/live", body).await
    }
}

fn oncegate(args: &[&str]) -> Output {
    crate::binary::run(Some(SALT), args)
}

fn ok(args: &[&str]) -> String {
    crate::binary::ok(Some(SALT), args)
}

fn fails(args: &[&str]) -> String {
    crate::binary::fails_with(Some(SALT), args, 2)
}

fn refund(sent_at: &str) -> String {
    format!(
        r#"{{"type":"refund.created","sent_at":"{sent_at}","attempt":1,"data":{{"payment_id":"pay_c1","amount":1500,"currency":"EUR"}}}}"#
    )
}

fn capture(amount: u32, minute: u32) -> String {
    format!(
        r#"{{"type":"payment.captured","sent_at":"2024-05-01T10:{minute:02}:00Z","attempt":1,"data":{{"payment_id":"pay_c2","capture_id":"cap_c2","amount":{amount},"currency":"EUR","captured_at":"2024-05-01T10:00:00Z"}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_breaker_purge_and_replay_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    let mut service = start(&url).await;
    let store = ["--store", url.as_str()];

    // The seed's second refund: kept for reconciliation.
    let first = service.deliver(refund("2024-05-01T10:00:00Z")).await;
    assert_eq!(first["action"], "process");
    let effect = first["effect"]["id"].as_str().unwrap();
    let token = first["reservation"]["token"].as_str().unwrap();
    service
        .post(
            &format!("/v1/effects/{effect}/complete"),
            json!({"token": token, "result": {"refund": "re_1"}}).to_string(),
        )
        .await;
    let second = service.deliver(refund("2024-05-01T10:04:00Z")).await;
    assert_eq!(second["action"], "reconcile");
    let first_id = first["delivery_id"].as_str().unwrap();
    let second_id = second["delivery_id"].as_str().unwrap();

    let listed = ok(&[&["queue", "list"][..], &store].concat());
    assert!(listed.contains(second_id), "{listed}");
    assert!(listed.contains("reconcile"), "{listed}");
    assert!(
        ok(&[&["queue", "list", "--kind", "quarantine"][..], &store].concat()).contains("no item")
    );
    let bad = fails(&[&["queue", "list", "--kind", "nope"][..], &store].concat());
    assert!(bad.contains("--kind"), "{bad}");

    let shown = ok(&[&["queue", "show", second_id][..], &store].concat());
    for part in [
        second_id,
        first_id,
        "reference",
        "differences (reference ↔ this delivery)",
        "payloads side by side",
        r#"{"refund":"re_1"}"#,
        "proposed   verify",
        "pay_c1",
    ] {
        assert!(
            shown.contains(part),
            "`queue show` lacks {part:?}:\n{shown}"
        );
    }
    let not_queued = fails(&[&["queue", "show", first_id][..], &store].concat());
    assert!(not_queued.contains("not in the queue"), "{not_queued}");

    let resolve = |outcome: &str| {
        oncegate(
            &[
                &[
                    "queue",
                    "resolve",
                    second_id,
                    "--outcome",
                    outcome,
                    "--ref",
                    "re_2",
                    "--note",
                    "two refunds in the dashboard",
                    "--by",
                    "sam",
                ][..],
                &store,
            ]
            .concat(),
        )
    };
    let done = resolve("distinct");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(String::from_utf8_lossy(&done.stdout).contains("released as effect"));
    let again = resolve("duplicate");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already resolved"));
    let resolved = ok(&[&["queue", "list", "--status", "resolved"][..], &store].concat());
    assert!(resolved.contains(second_id), "{resolved}");

    // The breaker: one collision in four matches opens it (threshold 20 %, sample 4).
    assert_eq!(service.deliver(capture(4990, 0)).await["action"], "process");
    assert_eq!(
        service.deliver(capture(5990, 1)).await["action"],
        "quarantine"
    );
    for minute in 2..5 {
        assert_eq!(
            service.deliver(capture(4990, minute)).await["action"],
            "ignore"
        );
    }
    let held = service.deliver(capture(4990, 6)).await;
    assert_eq!(held["action"], "reconcile", "{held}");
    let breakers = ok(&[&["breaker", "list"][..], &store].concat());
    assert!(breakers.contains("capture-id@1"), "{breakers}");
    assert!(breakers.contains("open"), "{breakers}");
    let close = |note: &str| {
        oncegate(
            &[
                &[
                    "breaker",
                    "close",
                    "payflow",
                    "live",
                    "payment.captured",
                    "capture-id@1",
                    "--note",
                    note,
                    "--by",
                    "sam",
                ][..],
                &store,
            ]
            .concat(),
        )
    };
    let closed = close("the amount change was a correction");
    assert!(
        closed.status.success(),
        "{}",
        String::from_utf8_lossy(&closed.stderr)
    );
    let twice = close("again");
    assert!(String::from_utf8_lossy(&twice.stderr).contains("not open"));
    let bad = fails(
        &[
            &[
                "breaker",
                "close",
                "payflow",
                "live",
                "payment.captured",
                "capture-id",
            ][..],
            &["--note", "n", "--by", "sam"],
            &store,
        ]
        .concat(),
    );
    assert!(bad.contains("name@version"), "{bad}");
    assert_eq!(service.deliver(capture(4990, 7)).await["action"], "ignore");

    // Retention: nothing is old enough yet; a dry run says so and removes nothing.
    let purge = ok(&[&["purge", "--dry-run", "--contract", CONTRACT][..], &store].concat());
    for part in [
        "dry run",
        "index rows expired     0",
        "payloads dropped       0",
        "proofs removed         0",
        "durable identities     0 kept",
    ] {
        assert!(purge.contains(part), "`purge` lacks {part:?}:\n{purge}");
    }

    // A late replay of the first refund finds its result through the proof.
    let replayed = ok(&[&["replay", first_id, "--contract", CONTRACT][..], &store].concat());
    assert!(replayed.contains("IGNORE"), "{replayed}");
    assert!(replayed.contains("through the proof"), "{replayed}");
    assert!(replayed.contains(r#"{"refund":"re_1"}"#), "{replayed}");
    // The replay has its own proof, which says what it replayed.
    let replay_id = replayed
        .split_whitespace()
        .skip_while(|w| *w != "as")
        .nth(1)
        .expect("the replay's delivery id")
        .to_owned();
    let explained = ok(&[&["explain", replay_id.as_str()][..], &store].concat());
    assert!(
        explained.contains(&format!("replay of  {first_id}")),
        "{explained}"
    );
    let missing = fails(
        &[
            &[
                "replay",
                "dlv_00000000000000000000000000",
                "--contract",
                CONTRACT,
            ][..],
            &store,
        ]
        .concat(),
    );
    assert!(missing.contains("no delivery"), "{missing}");

    if let Some(stop) = service.stop.take() {
        let _ = stop.send(());
    }
}
