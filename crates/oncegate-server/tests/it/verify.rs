//! Unknown outcomes verified with the consumer: a small axum app on 127.0.0.1:0 plays the
//! consumer's own `GET /effects/{effect_id}`, named by the refund type's `verify` table. The
//! consumer's answer completes the effect, releases it under a new fencing token, or leaves
//! the item to a person; the provider's authority is never asked about an unknown outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use oncegate_core::contract;
use oncegate_server::{reconcile_once, ServiceConfig};
use serde_json::{json, Value};

use crate::harness::*;

const CONSUMER_TOKEN: &str = "consumer-verify-token";

/// effect id → (status, body) the consumer answers.
type Answers = Arc<Mutex<HashMap<String, (u16, Value)>>>;

async fn effect(
    State(answers): State<Answers>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> (StatusCode, Json<Value>) {
    if headers.get("x-verify-token").and_then(|v| v.to_str().ok()) != Some(CONSUMER_TOKEN) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"error": "no token"})));
    }
    let (status, body) = answers
        .lock()
        .unwrap()
        .get(&id)
        .cloned()
        .unwrap_or((404, json!({"error": "unknown effect"})));
    (StatusCode::from_u16(status).unwrap(), Json(body))
}

async fn consumer() -> (Answers, String) {
    let answers: Answers = Arc::new(Mutex::new(HashMap::new()));
    let app = Router::new()
        .route("/effects/{id}", get(effect))
        .with_state(answers.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (answers, format!("http://{addr}"))
}

async fn start(kind: Kind, consumer: &str) -> (Service, ServiceConfig) {
    std::env::set_var("ONCEGATE_TEST_VERIFY_TOKEN", CONSUMER_TOKEN);
    // The authority points at a port nothing listens on: were it asked, the items would say so.
    let text = CONTRACT.replace("http://127.0.0.1:8089", "http://127.0.0.1:9").replace(
        "[providers.payflow.types.\"refund.created\".authority]",
        &format!(
            "[providers.payflow.types.\"refund.created\".verify]\nurl = \"{consumer}/effects/{{effect_id}}\"\nauth_header = \"x-verify-token\"\nauth_secret_env = \"ONCEGATE_TEST_VERIFY_TOKEN\"\n\n[providers.payflow.types.\"refund.created\".authority]"
        ),
    );
    let contract = Arc::new(contract::parse("oncegate.toml", &text).expect("the contract parses"));
    assert!(contract
        .event_type("payflow", "refund.created")
        .unwrap()
        .verify
        .is_some());
    let mut captured = None;
    let s = Service::start_with(kind, |c| {
        c.contract = contract;
        c.reconciler.every = None;
        c.reconciler.authority.timeout = Duration::from_millis(400);
        c.reconciler.authority.attempts = 1;
        captured = Some(c.clone());
    })
    .await;
    (s, captured.expect("the config was built"))
}

/// A refund processed and never completed: the holder crashed, its lease passes.
async fn crashed_refund(
    s: &Service,
    config: &ServiceConfig,
    payment: &str,
) -> (String, String, String) {
    let a = s
        .payflow("acme", &refund(payment, "700", "2024-05-03T09:00:00Z"))
        .await;
    assert_eq!(a.str("action"), "process", "{}", a.text);
    let eff = a.body["effect"]["id"].as_str().unwrap().to_owned();
    let token = a.body["reservation"]["token"].as_str().unwrap().to_owned();
    s.advance(120);
    config.store.expire_leases(s.now()).await.unwrap();
    (a.str("delivery_id").to_owned(), eff, token)
}

async fn items_of(s: &Service, effect: &str) -> Vec<Value> {
    let q = s.get("/v1/queue?status=all", Some(OPERATOR)).await;
    assert_eq!(q.status, 200, "{}", q.text);
    q.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["existing_effect_id"] == effect)
        .cloned()
        .collect()
}

pub async fn the_consumer_settles_unknown_outcomes(kind: Kind) {
    let (answers, base) = consumer().await;
    let (s, config) = start(kind, &base).await;

    // Applied: the verify item and a retry's item waiting on the same effect are both settled.
    let (_, applied, old_token) = crashed_refund(&s, &config, "pay_v1").await;
    let retry = s
        .payflow("acme", &refund("pay_v1", "700", "2024-05-03T09:01:00Z"))
        .await;
    assert_eq!(retry.str("action"), "reconcile", "{}", retry.text);
    assert_eq!(items_of(&s, &applied).await.len(), 2);
    answers.lock().unwrap().insert(
        applied.clone(),
        (
            200,
            json!({"applied": true, "result": {"ledger_tx": "tx_9"}}),
        ),
    );

    // Not applied: released as claimable work under a new token.
    let (_, not_applied, stale_token) = crashed_refund(&s, &config, "pay_v2").await;
    answers
        .lock()
        .unwrap()
        .insert(not_applied.clone(), (200, json!({"applied": false})));

    // The consumer does not know the effect (404): a person decides.
    let (_, unknown, _) = crashed_refund(&s, &config, "pay_v3").await;

    let run = reconcile_once(&config).await.unwrap();
    // Three questions to the consumer: the retry's item was settled with the verify item.
    assert_eq!(run.items.len(), 3, "{run:?}");
    let verdicts: Vec<&str> = run.items.iter().map(|i| i.verdict).collect();
    assert_eq!(verdicts, ["duplicate", "released", "open"], "{run:?}");

    for item in items_of(&s, &applied).await {
        assert_eq!(item["status"], "resolved", "{item}");
        assert_eq!(item["resolution"]["outcome"], "duplicate", "{item}");
        assert_eq!(item["resolution"]["by"], "verifier", "{item}");
    }
    let proof = s.proof(retry.str("delivery_id")).await;
    assert_eq!(proof.body["effect"]["state"], "completed", "{}", proof.text);
    assert_eq!(
        proof.body["effect"]["result"],
        json!({"ledger_tx": "tx_9"}),
        "{}",
        proof.text
    );
    let late = s
        .post_json(
            &format!("/v1/effects/{applied}/complete"),
            Some(INGEST),
            json!({"token": old_token, "result": {}}),
        )
        .await;
    assert_eq!(late.status, 409, "{}", late.text);

    let [item] = &items_of(&s, &not_applied).await[..] else {
        panic!("one item for the effect not applied");
    };
    assert_eq!(item["status"], "resolved", "{item}");
    assert_eq!(item["resolution"]["by"], "verifier", "{item}");
    let work = claim(&s).await;
    assert_eq!(
        work.len(),
        1,
        "only the effect not applied is claimable: {work:?}"
    );
    assert_eq!(work[0]["effect_id"], not_applied.as_str());
    assert_eq!(work[0]["reservation"]["fencing"], 3, "{work:?}");
    let stale = s
        .post_json(
            &format!("/v1/effects/{not_applied}/complete"),
            Some(INGEST),
            json!({"token": stale_token, "result": {}}),
        )
        .await;
    assert_eq!(stale.status, 409, "{}", stale.text);
    assert_eq!(stale.error_code(), "stale_token");

    let [item] = &items_of(&s, &unknown).await[..] else {
        panic!("one item for the effect the consumer does not know");
    };
    assert_eq!(item["status"], "open", "{item}");
    assert!(
        item["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("answered 404")),
        "the item shows the consumer's answer: {item}"
    );
    s.stop().await;
}

/// Without a `verify` API an unknown outcome waits for a person, even when the provider's
/// authority would list the operation: only the consumer knows whether its effect ran.
pub async fn without_a_verifier_an_unknown_outcome_waits_for_a_person(kind: Kind) {
    let (s, config) = Service::without_the_poll(kind).await;
    let (_, eff, _) = crashed_refund(&s, &config, "pay_v4").await;
    reconcile_once(&config).await.unwrap();
    let [item] = &items_of(&s, &eff).await[..] else {
        panic!("one verify item");
    };
    assert_eq!(item["status"], "open", "{item}");
    assert!(
        item["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("only the consumer can say")),
        "{item}"
    );
    assert!(claim(&s).await.is_empty(), "never re-run blindly");
    s.stop().await;
}

/// A pass over many items writes their attempts once: each item left to a person takes its
/// attempt, and on PostgreSQL all of them commit in one transaction (one `xmin` on their rows),
/// not one transaction each (a burst of collisions would otherwise cost the database a commit
/// per item on every pass).
pub async fn a_pass_writes_its_attempts_in_one_transaction(kind: Kind) {
    let (s, config) = Service::without_the_poll(kind).await;
    let mut effects = Vec::new();
    for n in 0..6 {
        let (_, effect, _) = crashed_refund(&s, &config, &format!("pay_p{n}")).await;
        effects.push(effect);
    }
    let run = reconcile_once(&config).await.unwrap();
    assert_eq!(run.items.len(), 6, "{run:?}");
    assert!(run.items.iter().all(|i| i.verdict == "open"), "{run:?}");
    let mut ids = Vec::new();
    for effect in &effects {
        let [item] = &items_of(&s, effect).await[..] else {
            panic!("one verify item for {effect}");
        };
        assert_eq!(item["status"], "open", "{item}");
        assert_eq!(item["reconcile_attempts"], 1, "{item}");
        assert!(
            item["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("only the consumer can say")),
            "{item}"
        );
        ids.push(item["queue_item_id"].as_str().unwrap().to_owned());
    }
    if kind == Kind::Postgres {
        let url = &s.backend.as_ref().unwrap().url;
        let client = oncegate::store::testing::pg_admin(url).await;
        let row = client
            .query_one(
                "SELECT count(DISTINCT xmin::text) FROM queue_items WHERE id = ANY($1)",
                &[&ids],
            )
            .await
            .unwrap();
        let transactions: i64 = row.get(0);
        assert_eq!(
            transactions, 1,
            "the pass's attempts were written by one transaction"
        );
    }
    s.stop().await;
}
