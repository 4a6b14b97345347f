//! Reconciliation against a real authority: a small axum app on 127.0.0.1:0 plays the
//! provider's refund-list API, and the example contract's authority URL is pointed at it.
//! Also the unknown outcomes of expired leases (critical: verify; reversible: takeover).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use oncegate_core::contract;
use oncegate_server::{reconcile_once, AuthorityPolicy, ServiceConfig};
use serde_json::{json, Value};

use crate::harness::*;

/// The token the authority expects in its `authorization` header (the contract names the
/// environment variable it comes from).
const API_TOKEN: &str = "payflow-api-test-token";

#[derive(Clone, Debug)]
enum Mode {
    Answer,
    Down,
    Hang,
}

#[derive(Clone)]
struct Fake {
    mode: Arc<Mutex<Mode>>,
    /// payment id → the refunds the provider knows.
    refunds: Arc<Mutex<HashMap<String, Vec<Value>>>>,
    asked: Arc<Mutex<u32>>,
}

async fn refunds(
    State(fake): State<Fake>,
    Path(payment): Path<String>,
    headers: HeaderMap,
) -> (StatusCode, Json<Value>) {
    *fake.asked.lock().unwrap() += 1;
    let mode = fake.mode.lock().unwrap().clone();
    match mode {
        Mode::Down => return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({}))),
        Mode::Hang => {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        Mode::Answer => {}
    }
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(API_TOKEN) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"error": "no token"})));
    }
    let list = fake
        .refunds
        .lock()
        .unwrap()
        .get(&payment)
        .cloned()
        .unwrap_or_default();
    (StatusCode::OK, Json(json!({ "refunds": list })))
}

/// Starts the fake authority and returns it with its base URL.
async fn authority() -> (Fake, String) {
    let fake = Fake {
        mode: Arc::new(Mutex::new(Mode::Answer)),
        refunds: Arc::new(Mutex::new(HashMap::new())),
        asked: Arc::new(Mutex::new(0)),
    };
    let app = Router::new()
        .route("/v1/payments/{payment}/refunds", get(refunds))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (fake, format!("http://{addr}"))
}

impl Fake {
    fn set(&self, payment: &str, refunds: Value) {
        self.refunds.lock().unwrap().insert(
            payment.to_owned(),
            refunds.as_array().cloned().unwrap_or_default(),
        );
    }

    fn mode(&self, m: Mode) {
        *self.mode.lock().unwrap() = m;
    }
}

/// A service whose contract asks the fake authority, with the periodic worker off (tests run
/// the reconciler themselves) unless `worker` is set; returns the config `reconcile_once` uses.
async fn start(kind: Kind, base: &str, worker: Option<Duration>) -> (Service, ServiceConfig) {
    start_text(
        kind,
        &CONTRACT.replace("http://127.0.0.1:8089", base),
        worker,
    )
    .await
}

async fn start_text(kind: Kind, text: &str, worker: Option<Duration>) -> (Service, ServiceConfig) {
    // Every test sets the same value, so concurrent tests never disagree about it.
    std::env::set_var("PAYFLOW_API_TOKEN", API_TOKEN);
    let contract = Arc::new(contract::parse("oncegate.toml", text).expect("the contract parses"));
    let mut captured = None;
    let s = Service::start_with(kind, |c| {
        c.contract = contract;
        c.reconciler.every = worker;
        // Short retry waits, so tests that bring an authority back see the next attempt soon.
        c.reconciler.retry_base = Duration::from_millis(100);
        c.reconciler.retry_cap = Duration::from_millis(400);
        c.reconciler.sweep_every = Duration::ZERO;
        c.reconciler.authority = AuthorityPolicy {
            timeout: Duration::from_millis(400),
            attempts: 2,
            backoff: Duration::from_millis(20),
            open_after: 50,
            cool_down: Duration::from_secs(1),
        };
        captured = Some(c.clone());
    })
    .await;
    (s, captured.expect("the config was built"))
}

async fn complete(s: &Service, answer: &Answer, result: Value) {
    let eff = answer.body["effect"]["id"].as_str().unwrap();
    let token = answer.body["reservation"]["token"].as_str().unwrap();
    let done = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": result}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);
}

async fn queue_item(s: &Service, delivery: &str) -> Value {
    let q = s.get("/v1/queue?status=all", Some(OPERATOR)).await;
    assert_eq!(q.status, 200, "{}", q.text);
    q.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["delivery_id"] == delivery)
        .cloned()
        .unwrap_or_else(|| panic!("no queue item for {delivery}: {}", q.text))
}

pub async fn the_authority_releases_the_second_refund_and_recognizes_retries(kind: Kind) {
    let (fake, base) = authority().await;
    fake.set(
        "pay_1",
        json!([
            {"id": "re_A", "amount": 1500, "currency": "EUR"},
            {"id": "re_B", "amount": 15e2, "currency": "EUR"},
        ]),
    );
    let (s, config) = start(kind, &base, None).await;

    let first = s
        .payflow("acme", &refund("pay_1", "1500", "2024-05-03T09:00:00Z"))
        .await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    complete(&s, &first, json!({"refund": "local_1"})).await;
    let second = s
        .payflow("acme", &refund("pay_1", "1500", "2024-05-03T09:04:00Z"))
        .await;
    assert_eq!(second.str("action"), "reconcile", "{}", second.text);
    let second_id = second.str("delivery_id").to_owned();

    // The authority lists two refunds of 1500 and one is applied: the second is released
    // carrying the unmatched reference.
    let run = reconcile_once(&config).await.expect("the reconciler runs");
    assert_eq!(run.items.len(), 1, "{run:?}");
    assert_eq!(run.items[0].delivery.to_string(), second_id);
    assert_eq!(run.items[0].verdict, "distinct");
    assert_eq!(run.items[0].authoritative_ref.as_deref(), Some("re_B"));
    let item = queue_item(&s, &second_id).await;
    assert_eq!(item["status"], "resolved", "{item}");
    assert_eq!(item["resolution"]["outcome"], "distinct", "{item}");
    assert_eq!(item["resolution"]["by"], "reconciler", "{item}");
    let evidence = &item["resolution_evidence"];
    assert_eq!(
        evidence["operations"].as_array().unwrap().len(),
        2,
        "{item}"
    );
    assert_eq!(evidence["authoritative_ref"], "re_B");

    // The released effect is claimable work carrying its reference, handed out once.
    let work = claim(&s).await;
    assert_eq!(work.len(), 1, "{work:?}");
    assert_eq!(work[0]["authoritative_ref"], "re_B");
    assert_eq!(work[0]["delivery_id"], second_id.as_str());
    let eff = work[0]["effect_id"].as_str().unwrap();
    let token = work[0]["reservation"]["token"].as_str().unwrap();
    let done = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": {"refund": "local_2"}}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);

    // A later retry of either refund (the provider resends the same body) is recognized: both
    // operations are accounted for, re_B by its reference, so it is a duplicate.
    let retry = s
        .payflow("acme", &refund("pay_1", "1500", "2024-05-03T09:30:00Z"))
        .await;
    assert_eq!(retry.str("action"), "reconcile", "{}", retry.text);
    let run = reconcile_once(&config).await.expect("the reconciler runs");
    assert_eq!(run.items.len(), 1, "{run:?}");
    assert_eq!(run.items[0].verdict, "duplicate", "{run:?}");
    assert!(claim(&s).await.is_empty(), "nothing is released twice");
    let item = queue_item(&s, retry.str("delivery_id")).await;
    assert_eq!(item["resolution"]["outcome"], "duplicate", "{item}");
    assert_eq!(item["resolution"]["by"], "reconciler");

    let report = s.report(OPERATOR).await;
    assert_no_gap(&report);
    assert_eq!(
        report.body["total"]["reconcile_resolved"], 2,
        "{}",
        report.text
    );
    assert_eq!(
        report.body["total"]["reconcile_pending"], 0,
        "{}",
        report.text
    );
    s.stop().await;
}

pub async fn a_dead_authority_leaves_the_item_open_and_never_slows_ingestion(kind: Kind) {
    let (fake, base) = authority().await;
    fake.mode(Mode::Down);
    let (s, config) = start(kind, &base, None).await;
    let first = s
        .payflow("acme", &refund("pay_2", "900", "2024-05-03T09:00:00Z"))
        .await;
    complete(&s, &first, json!({"refund": "local_1"})).await;
    let second = s
        .payflow("acme", &refund("pay_2", "900", "2024-05-03T09:04:00Z"))
        .await;
    assert_eq!(second.str("action"), "reconcile");
    let second_id = second.str("delivery_id").to_owned();

    let run = reconcile_once(&config).await.expect("the reconciler runs");
    assert_eq!(run.items[0].verdict, "open", "{run:?}");
    let item = queue_item(&s, &second_id).await;
    assert_eq!(item["status"], "open");
    assert!(
        item["last_error"].as_str().unwrap().contains("503"),
        "{item}"
    );
    assert!(item["last_attempt_at"].is_string(), "{item}");
    assert_eq!(item["reconcile_attempts"], 1);
    let report = s.report(OPERATOR).await;
    assert_eq!(
        report.body["total"]["reconcile_pending"], 1,
        "{}",
        report.text
    );

    // While the authority hangs, a reconciliation is under way and deliveries still post fast.
    fake.mode(Mode::Hang);
    let slow = tokio::spawn({
        let config = config.clone();
        async move { reconcile_once(&config).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let third = s
        .payflow("acme", &refund("pay_3", "100", "2024-05-03T09:05:00Z"))
        .await;
    assert_eq!(third.str("action"), "process", "{}", third.text);
    // The bound is far above a normal post and below the authority's 5 s timeout, so it tells
    // "did not wait for the authority" from "waited", without timing the machine.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "a post took {:?} while the authority hung",
        started.elapsed()
    );
    let run = slow.await.unwrap().expect("the reconciler runs");
    assert_eq!(run.items[0].verdict, "open");
    let item = queue_item(&s, &second_id).await;
    assert!(
        item["last_error"]
            .as_str()
            .unwrap()
            .contains("did not answer"),
        "{item}"
    );
    assert_eq!(item["reconcile_attempts"], 2);
    s.stop().await;
}

pub async fn the_worker_in_serve_reconciles_and_counts_attempts(kind: Kind) {
    let (fake, base) = authority().await;
    fake.mode(Mode::Down);
    let (s, _) = start(kind, &base, Some(Duration::from_millis(100))).await;
    let first = s
        .payflow("acme", &refund("pay_4", "300", "2024-05-03T09:00:00Z"))
        .await;
    complete(&s, &first, json!({})).await;
    let second = s
        .payflow("acme", &refund("pay_4", "300", "2024-05-03T09:04:00Z"))
        .await;
    let second_id = second.str("delivery_id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = s.get("/metrics", Some(OPERATOR)).await.text;
        if text.contains("oncegate_reconcile_attempts_total{outcome=\"error\"}") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no error attempt counted: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The authority comes back with the two refunds: the worker releases the second.
    fake.set(
        "pay_4",
        json!([{"id": "re_1", "amount": 300, "currency": "EUR"}, {"id": "re_2", "amount": 300, "currency": "EUR"}]),
    );
    fake.mode(Mode::Answer);
    loop {
        let item = queue_item(&s, &second_id).await;
        if item["status"] == "resolved" {
            assert_eq!(item["resolution"]["outcome"], "distinct", "{item}");
            assert_eq!(item["resolution"]["authoritative_ref"], "re_2", "{item}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker never resolved it: {item}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = s.get("/metrics", Some(OPERATOR)).await.text;
    assert!(
        text.contains("oncegate_reconcile_attempts_total{outcome=\"distinct\"} 1"),
        "{text}"
    );
    s.stop().await;
}

pub async fn expired_leases_verify_critical_and_release_reversible(kind: Kind) {
    let (fake, base) = authority().await;
    let (s, config) = start(kind, &base, None).await;

    // Critical: the worker crashed after the refund (no complete).
    let crashed = s
        .payflow("acme", &refund("pay_5", "700", "2024-05-03T09:00:00Z"))
        .await;
    assert_eq!(crashed.str("action"), "process");
    let eff = crashed.body["effect"]["id"].as_str().unwrap().to_owned();
    let token = crashed.body["reservation"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    s.advance(120);
    // The sweep `serve` runs every few seconds, run now (it is idempotent).
    config.store.expire_leases(s.now()).await.unwrap();
    let item = queue_item(&s, crashed.str("delivery_id")).await;
    assert_eq!(item["kind"], "reconcile", "{item}");
    assert_eq!(item["proposed_action"], "verify", "{item}");
    assert!(
        item["reason"]
            .as_str()
            .unwrap()
            .contains("verify before retry"),
        "{item}"
    );
    assert_eq!(item["existing_effect_id"], eff.as_str());
    let late = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": {}}),
        )
        .await;
    assert_eq!(late.status, 409, "{}", late.text);
    assert!(
        claim(&s).await.is_empty(),
        "a critical effect is never re-run blindly"
    );

    // The authority shows the refund at the provider, but whether the consumer applied its
    // effect only the consumer knows (this type declares no `verify`): a person decides, and
    // nothing is re-run meanwhile (`verify.rs` covers the consumer's answers).
    fake.set(
        "pay_5",
        json!([{"id": "re_5", "amount": 700, "currency": "EUR"}]),
    );
    let asked = *fake.asked.lock().unwrap();
    let run = reconcile_once(&config).await.unwrap();
    assert_eq!(run.items.len(), 1, "{run:?}");
    assert_eq!(run.items[0].verdict, "open", "{run:?}");
    assert_eq!(
        *fake.asked.lock().unwrap(),
        asked,
        "the authority is never asked about an unknown outcome"
    );
    let proof = s.proof(crashed.str("delivery_id")).await;
    assert_eq!(proof.body["effect"]["state"], "unknown", "{}", proof.text);
    assert!(claim(&s).await.is_empty());

    // Reversible: released for takeover under a new token; the late holder gets 409.
    let notify = r#"{"event_id":"evt_r1","customer":"c_1","sent_at":"2024-05-01T10:00:00Z"}"#;
    let n1 = s
        .shopline(
            "acme",
            "customers/notify",
            "msg_r1",
            notify,
            SHOPLINE_KEY,
            s.now().unix_timestamp(),
        )
        .await;
    assert_eq!(n1.str("action"), "process", "{}", n1.text);
    let n_eff = n1.body["effect"]["id"].as_str().unwrap().to_owned();
    let n_token = n1.body["reservation"]["token"].as_str().unwrap().to_owned();
    s.advance(120);
    config.store.expire_leases(s.now()).await.unwrap();
    let work = claim(&s).await;
    assert_eq!(work.len(), 1, "{work:?}");
    assert_eq!(work[0]["effect_id"], n_eff.as_str());
    assert_eq!(work[0]["reservation"]["fencing"], 3, "{work:?}");
    let stale = s
        .post_json(
            &format!("/v1/effects/{n_eff}/complete"),
            Some(INGEST),
            json!({"token": n_token, "result": {}}),
        )
        .await;
    assert_eq!(stale.status, 409, "{}", stale.text);
    assert_eq!(stale.error_code(), "stale_token");
    let token = work[0]["reservation"]["token"].as_str().unwrap();
    let done = s
        .post_json(
            &format!("/v1/effects/{n_eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": {}}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);
    s.stop().await;
}

pub async fn the_sweep_reports_operations_with_no_local_effect(kind: Kind) {
    let (fake, base) = authority().await;
    fake.set(
        "pay_7",
        json!([
            {"id": "re_1", "amount": 100, "currency": "EUR"},
            {"id": "re_2", "amount": 100, "currency": "EUR"},
            {"id": "re_3", "amount": 200, "currency": "EUR"},
        ]),
    );
    let text = CONTRACT
        .replace("http://127.0.0.1:8089", &base)
        .replace("# sweep_window = \"24h\"", "sweep_window = \"24h\"");
    assert!(
        text.contains("\n  sweep_window"),
        "the example names the setting"
    );
    let (s, config) = start_text(kind, &text, None).await;
    let first = s
        .payflow("acme", &refund("pay_7", "100", "2024-05-03T09:00:00Z"))
        .await;
    complete(&s, &first, json!({})).await;

    let run = reconcile_once(&config).await.unwrap();
    assert_eq!(run.sweep.len(), 1, "{run:?}");
    assert_eq!(run.sweep[0].scope.resource, "pay_7");
    assert_eq!(run.sweep[0].missing, vec!["re_2", "re_3"], "{run:?}");
    let report = s.report(OPERATOR).await;
    assert_no_gap(&report);
    assert_eq!(
        report.body["total"]["missing_at_source"], 2,
        "{}",
        report.text
    );

    // The provider's other refunds arrive and are applied: nothing is missing any more.
    fake.set(
        "pay_7",
        json!([{"id": "re_1", "amount": 100, "currency": "EUR"}]),
    );
    let run = reconcile_once(&config).await.unwrap();
    assert!(run.sweep[0].missing.is_empty(), "{run:?}");
    let report = s.report(OPERATOR).await;
    assert_eq!(
        report.body["total"]["missing_at_source"], 0,
        "{}",
        report.text
    );
    s.stop().await;
}

pub async fn the_worker_publishes_missing_effects(kind: Kind) {
    let (fake, base) = authority().await;
    fake.set(
        "pay_8",
        json!([
            {"id": "re_1", "amount": 100, "currency": "EUR"},
            {"id": "re_2", "amount": 100, "currency": "EUR"},
        ]),
    );
    let text = CONTRACT
        .replace("http://127.0.0.1:8089", &base)
        .replace("# sweep_window = \"24h\"", "sweep_window = \"24h\"");
    let (s, _) = start_text(kind, &text, Some(Duration::from_millis(100))).await;
    let first = s
        .payflow("acme", &refund("pay_8", "100", "2024-05-03T09:00:00Z"))
        .await;
    complete(&s, &first, json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let expected = "oncegate_missing_effects{provider=\"payflow\",env=\"live\",event_type=\"refund.created\"} 1";
    loop {
        let text = s.get("/metrics", Some(OPERATOR)).await.text;
        if text.contains(expected) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no missing effect published: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.stop().await;
}

/// A refund carrying the merchant's request reference (the strong key).
fn refund_ref(payment: &str, request_ref: &str, amount: &str) -> String {
    format!(
        r#"{{"type":"refund.created","sent_at":"2024-05-03T09:00:00Z","attempt":1,"data":{{"payment_id":"{payment}","request_ref":"{request_ref}","amount":{amount},"currency":"EUR"}}}}"#
    )
}

/// Polls the queue item of `delivery` until `done` says so, within a generous deadline.
async fn wait_for(s: &Service, delivery: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let item = queue_item(s, delivery).await;
        if done(&item) {
            return item;
        }
        assert!(Instant::now() < deadline, "{what}: {item}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The poll is an hour: only the wake-up of a queued item can settle it within the test.
pub async fn a_queued_item_is_attempted_as_soon_as_it_is_queued(kind: Kind) {
    let (fake, base) = authority().await;
    fake.set(
        "pay_w1",
        json!([{"id": "re_1", "amount": 300, "currency": "EUR"}, {"id": "re_2", "amount": 300, "currency": "EUR"}]),
    );
    let (s, _) = start(kind, &base, Some(Duration::from_secs(3600))).await;
    let first = s
        .payflow("acme", &refund("pay_w1", "300", "2024-05-03T09:00:00Z"))
        .await;
    complete(&s, &first, json!({"refund": "re_1"})).await;
    let second = s
        .payflow("acme", &refund("pay_w1", "300", "2024-05-03T09:04:00Z"))
        .await;
    assert_eq!(second.str("action"), "reconcile", "{}", second.text);
    let item = wait_for(
        &s,
        second.str("delivery_id"),
        "settled without the poll",
        |i| i["status"] == "resolved",
    )
    .await;
    assert_eq!(item["resolution"]["outcome"], "distinct", "{item}");
    assert_eq!(item["resolution"]["by"], "reconciler", "{item}");
    let text = s.get("/metrics", Some(OPERATOR)).await.text;
    assert!(
        text.contains("oncegate_queue_settled_total{by=\"service\",kind=\"reconcile\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("oncegate_queue_settle_seconds_count{by=\"service\"} 1"),
        "{text}"
    );
    s.stop().await;
}

/// A pass woken by a queued item attempts the new item only: an item waiting for its retry is
/// the poll's, however many wake-ups come meanwhile (under a burst of collisions each pass read
/// again every item attempted before).
pub async fn a_woken_pass_attempts_only_the_new_items(kind: Kind) {
    let (fake, base) = authority().await;
    fake.mode(Mode::Down);
    let (s, _) = start(kind, &base, Some(Duration::from_secs(3600))).await;
    let collision = |payment: &'static str| {
        let s = &s;
        async move {
            let first = s
                .payflow("acme", &refund(payment, "900", "2024-05-03T09:00:00Z"))
                .await;
            complete(s, &first, json!({"refund": "local_1"})).await;
            let second = s
                .payflow("acme", &refund(payment, "900", "2024-05-03T09:04:00Z"))
                .await;
            assert_eq!(second.str("action"), "reconcile", "{}", second.text);
            second.str("delivery_id").to_owned()
        }
    };
    let older = collision("pay_n1").await;
    wait_for(
        &s,
        &older,
        "the first item is attempted on its wake-up",
        |i| i["reconcile_attempts"] == 1,
    )
    .await;
    // Its retry is due after at most 100 ms (`retry_base`); the next wake-ups come later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for payment in ["pay_n2", "pay_n3"] {
        let newer = collision(payment).await;
        wait_for(
            &s,
            &newer,
            "the new item is attempted on its wake-up",
            |i| i["reconcile_attempts"] == 1,
        )
        .await;
    }
    let item = queue_item(&s, &older).await;
    assert_eq!(item["status"], "open", "{item}");
    assert_eq!(
        item["reconcile_attempts"], 1,
        "the wake-ups left the older item to the poll: {item}"
    );
    s.stop().await;
}

/// A provider reusing a refund request reference for a second refund of another amount: the
/// collision is quarantined, and the authority's list tells the two refunds apart.
pub async fn a_collision_is_settled_through_the_authority(kind: Kind) {
    let (fake, base) = authority().await;
    fake.set(
        "pay_q1",
        json!([{"id": "re_1", "amount": 300, "currency": "EUR"}, {"id": "re_2", "amount": 500, "currency": "EUR"}]),
    );
    let (s, _) = start(kind, &base, Some(Duration::from_secs(3600))).await;
    let first = s
        .payflow("acme", &refund_ref("pay_q1", "rr_1", "300"))
        .await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    complete(&s, &first, json!({"refund": "re_1"})).await;

    let reused = s
        .payflow("acme", &refund_ref("pay_q1", "rr_1", "500"))
        .await;
    assert_eq!(reused.str("action"), "quarantine", "{}", reused.text);
    let item = wait_for(
        &s,
        reused.str("delivery_id"),
        "the collision is released",
        |i| i["status"] == "resolved",
    )
    .await;
    assert_eq!(item["resolution"]["outcome"], "distinct", "{item}");
    assert_eq!(item["resolution"]["authoritative_ref"], "re_2", "{item}");
    assert_eq!(item["resolution"]["by"], "reconciler", "{item}");

    // A third amount the authority does not list stays open, with the attempt visible.
    let unknown = s
        .payflow("acme", &refund_ref("pay_q1", "rr_1", "700"))
        .await;
    assert_eq!(unknown.str("action"), "quarantine", "{}", unknown.text);
    let item = wait_for(
        &s,
        unknown.str("delivery_id"),
        "the attempt is recorded",
        |i| i["reconcile_attempts"].as_u64().unwrap_or(0) >= 1,
    )
    .await;
    assert_eq!(item["status"], "open", "{item}");
    assert!(
        item["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("none has these discriminants")),
        "{item}"
    );
    // One released effect per authority operation: re_2 is now accounted for, so a retry of
    // the 500 refund is a duplicate, never a second release.
    let retry = s
        .payflow("acme", &refund_ref("pay_q1", "rr_1", "500"))
        .await;
    let item = wait_for(&s, retry.str("delivery_id"), "the retry is settled", |i| {
        i["status"] == "resolved"
    })
    .await;
    assert_eq!(item["resolution"]["outcome"], "duplicate", "{item}");
    s.stop().await;
}

/// Two instances share one PostgreSQL store. The first (whose own worker is off) queues the
/// second refund; the second instance's reconciler, polling only hourly, settles it at once:
/// woken by the first one's NOTIFY.
pub async fn a_sibling_instance_is_woken_by_the_queue_hint() {
    let (fake, base) = authority().await;
    fake.set(
        "pay_n1",
        json!([{"id": "re_1", "amount": 300, "currency": "EUR"}, {"id": "re_2", "amount": 300, "currency": "EUR"}]),
    );
    let (s, config) = start(Kind::Postgres, &base, None).await;
    let url = s.backend.as_ref().unwrap().url.clone();
    let mut sibling = config.clone();
    sibling.store = oncegate::store::open(&url).await.unwrap();
    sibling.reconciler.every = Some(Duration::from_secs(3600));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(oncegate_server::serve(listener, sibling, async move {
        let _ = stopped.await;
    }));
    // The hint is only a hint: wait until the sibling listens, or it could be missed.
    let db = pg_admin(&url).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let n: i64 = db
            .query_one(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN oncegate_queue%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the sibling never listened");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    let first = s
        .payflow("acme", &refund("pay_n1", "300", "2024-05-03T09:00:00Z"))
        .await;
    complete(&s, &first, json!({"refund": "re_1"})).await;
    let second = s
        .payflow("acme", &refund("pay_n1", "300", "2024-05-03T09:04:00Z"))
        .await;
    assert_eq!(second.str("action"), "reconcile", "{}", second.text);
    let item = wait_for(
        &s,
        second.str("delivery_id"),
        "the sibling settles it",
        |i| i["status"] == "resolved",
    )
    .await;
    assert_eq!(item["resolution"]["outcome"], "distinct", "{item}");
    let _ = stop.send(());
    let _ = task.await;
    drop(db);
    s.stop().await;
}
