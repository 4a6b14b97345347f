//! The safety nets, over real HTTP on both backends: the collision breaker (opens exactly past
//! its threshold once the minimum sample is reached, turns ignores into reconcile, closes only
//! by an operator with a note), the background retention purge, and late replay (found through
//! the proof past the index horizon; sent for approval once the payload was purged).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{
    assert_no_gap, capture, Answer, Kind, Service, ADMIN, INGEST, OPERATOR, OPERATOR_ACME,
    SHOPLINE_KEY,
};

/// Four matches make a sample, and more than a fifth of them colliding opens the breaker.
async fn start_with_small_breaker(kind: Kind) -> Service {
    Service::start_with(kind, |config| {
        let mut contract = (*config.contract).clone();
        contract.settings.breaker_min_sample = 4;
        contract.settings.breaker_threshold = 0.2;
        config.contract = Arc::new(contract);
    })
    .await
}

async fn breaker_of(s: &Service, event_type: &str) -> Value {
    let list = s.get("/v1/breakers", Some(OPERATOR)).await;
    assert_eq!(list.status, 200, "{}", list.text);
    list.body["breakers"]
        .as_array()
        .expect("breakers")
        .iter()
        .find(|b| b["event_type"] == event_type)
        .cloned()
        .unwrap_or(Value::Null)
}

pub async fn the_breaker_opens_past_its_threshold_and_closes_only_by_an_operator(kind: Kind) {
    let s = start_with_small_breaker(kind).await;
    let sent = |minute: u32| format!("2024-05-01T10:{minute:02}:00Z");
    let first = s
        .payflow("acme", &capture("pay_b1", "cap_b1", "4990", &sent(0)))
        .await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    complete(&s, &first, json!({"ledger_tx": "tx_b1"})).await;

    // A collision first: one match, and it is one, but one match is not a sample.
    let collision = s
        .payflow("acme", &capture("pay_b1", "cap_b1", "5990", &sent(1)))
        .await;
    assert_eq!(collision.str("action"), "quarantine", "{}", collision.text);
    let b = breaker_of(&s, "payment.captured").await;
    assert_eq!(
        (
            b["state"].as_str(),
            b["matches"].as_u64(),
            b["collisions"].as_u64()
        ),
        (Some("closed"), Some(1), Some(1)),
        "{b}"
    );

    // Two retries: 1 collision in 3 matches, still under the minimum sample.
    for minute in 2..4 {
        let retry = s
            .payflow("acme", &capture("pay_b1", "cap_b1", "4990", &sent(minute)))
            .await;
        assert_eq!(retry.str("action"), "ignore", "{}", retry.text);
    }
    assert_eq!(breaker_of(&s, "payment.captured").await["state"], "closed");

    // The fourth match completes the sample at 25 % > 20 %: it is still ignored (the breaker
    // was read closed before it), and it opens the breaker.
    let fourth = s
        .payflow("acme", &capture("pay_b1", "cap_b1", "4990", &sent(4)))
        .await;
    assert_eq!(fourth.str("action"), "ignore", "{}", fourth.text);
    let b = breaker_of(&s, "payment.captured").await;
    assert_eq!(b["state"], "open", "{b}");
    assert_eq!(b["strategy"], "capture-id");
    assert_eq!(b["version"], 1);
    assert!(
        b["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("1 of the last 4"),
        "{b}"
    );
    let metrics = s.get("/metrics", Some(OPERATOR)).await;
    assert!(
        metrics.text.contains(
            r#"oncegate_breaker_open{provider="payflow",env="live",event_type="payment.captured",strategy="capture-id@1"} 1"#
        ),
        "{}",
        metrics.text
    );

    // While open, what would be ignored is reconciled, with the flag; and it stays open.
    for minute in 5..7 {
        let held = s
            .payflow("acme", &capture("pay_b1", "cap_b1", "4990", &sent(minute)))
            .await;
        assert_eq!(held.str("action"), "reconcile", "{}", held.text);
        assert!(
            held.body["flags"]
                .as_array()
                .unwrap()
                .contains(&json!("breaker_open")),
            "{}",
            held.text
        );
    }
    // A late replay of the first capture is not ignored either while the breaker is open.
    let replayed = replay(&s, first.str("delivery_id"), OPERATOR).await;
    assert_eq!(replayed.str("action"), "reconcile", "{}", replayed.text);
    assert!(
        replayed.str("reason").contains("breaker"),
        "{}",
        replayed.text
    );
    // Another strategy is not affected.
    let other = s
        .payflow("acme", &capture("pay_b2", "cap_b2", "100", &sent(7)))
        .await;
    assert_eq!(other.str("action"), "process");

    // Closing: a tenant-restricted operator cannot, a note is required, then it closes.
    let close = |token: &'static str, note: &'static str| {
        s.post_json(
            "/v1/breakers/close",
            Some(token),
            json!({"provider": "payflow", "env": "live", "event_type": "payment.captured",
                   "strategy": "capture-id", "version": 1, "note": note, "by": "sam@ops"}),
        )
    };
    let restricted = close(OPERATOR_ACME, "checked").await;
    assert_eq!(restricted.status, 403, "{}", restricted.text);
    let no_note = close(OPERATOR, "  ").await;
    assert_eq!(no_note.status, 400, "{}", no_note.text);
    assert_eq!(no_note.error_code(), "invalid_request");
    let closed = close(
        OPERATOR,
        "the amount change was a provider correction, not a second capture",
    )
    .await;
    assert_eq!(closed.status, 200, "{}", closed.text);
    assert_eq!(closed.body["state"], "closed");
    assert_eq!(closed.body["closed_by"], "sam@ops");
    let again = close(OPERATOR, "twice").await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert_eq!(again.error_code(), "not_open");
    let never = s
        .post_json(
            "/v1/breakers/close",
            Some(OPERATOR),
            json!({"provider": "payflow", "env": "live", "event_type": "refund.created",
                   "strategy": "nothing", "version": 9, "note": "n"}),
        )
        .await;
    assert_eq!(never.status, 404, "{}", never.text);

    let metrics = s.get("/metrics", Some(OPERATOR)).await;
    assert!(
        metrics.text.contains(
            r#"oncegate_breaker_open{provider="payflow",env="live",event_type="payment.captured",strategy="capture-id@1"} 0"#
        ),
        "{}",
        metrics.text
    );
    // Closed, the window starts afresh: the next retry is an ordinary ignore.
    let after = s
        .payflow("acme", &capture("pay_b1", "cap_b1", "4990", &sent(8)))
        .await;
    assert_eq!(after.str("action"), "ignore", "{}", after.text);
    assert_eq!(breaker_of(&s, "payment.captured").await["matches"], 1);
    assert_no_gap(&s.report(ADMIN).await);
    s.stop().await;
}

pub async fn the_breaker_waits_for_its_minimum_sample(kind: Kind) {
    let s = start_with_small_breaker(kind).await;
    let body = |amount: &str, minute: u32| {
        capture(
            "pay_m1",
            "cap_m1",
            amount,
            &format!("2024-05-01T11:{minute:02}:00Z"),
        )
    };
    assert_eq!(
        s.payflow("acme", &body("100", 0)).await.str("action"),
        "process"
    );
    // Three collisions in three matches: 100 %, but under the minimum sample of four.
    for (i, amount) in ["101", "102", "103"].iter().enumerate() {
        let a = s.payflow("acme", &body(amount, i as u32 + 1)).await;
        assert_eq!(a.str("action"), "quarantine", "{}", a.text);
    }
    assert_eq!(breaker_of(&s, "payment.captured").await["state"], "closed");
    let retry = s.payflow("acme", &body("100", 5)).await;
    assert_eq!(retry.str("action"), "ignore", "{}", retry.text);
    assert_eq!(breaker_of(&s, "payment.captured").await["state"], "open");
    s.stop().await;
}

/// Matches decided at the same moment are counted together, and exactly: 40 concurrent
/// retries and 5 concurrent collisions make 45 matches and 5 collisions in the window, no
/// match lost and none counted twice, each visible once its delivery is answered.
pub async fn concurrent_matches_are_each_counted_once(kind: Kind) {
    let s = start_with_small_breaker(kind).await;
    let body = |amount: &str, minute: u32| {
        capture(
            "pay_c1",
            "cap_c1",
            amount,
            &format!("2024-05-01T12:{minute:02}:{:02}Z", minute % 60),
        )
    };
    let first = s.payflow("acme", &body("700", 0)).await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    complete(&s, &first, json!({"ledger_tx": "tx_c1"})).await;
    let retries = (1..=40).map(|i| body("700", i)).collect();
    all_at_once(&s, retries, "ignore").await;
    let b = breaker_of(&s, "payment.captured").await;
    assert_eq!(
        (
            b["state"].as_str(),
            b["matches"].as_u64(),
            b["collisions"].as_u64()
        ),
        (Some("closed"), Some(40), Some(0)),
        "{b}"
    );
    let collisions = (1..=5).map(|i| body(&format!("70{i}"), 40 + i)).collect();
    all_at_once(&s, collisions, "quarantine").await;
    let b = breaker_of(&s, "payment.captured").await;
    assert_eq!(
        (
            b["state"].as_str(),
            b["matches"].as_u64(),
            b["collisions"].as_u64()
        ),
        (Some("closed"), Some(45), Some(5)),
        "5 of 45 is 11 %, under the threshold of 20 %: {b}"
    );
    s.stop().await;
}

/// Sends every body at once, and checks each was decided `action`.
async fn all_at_once(s: &Service, bodies: Vec<String>, action: &str) {
    let sent = bodies.iter().map(|b| s.payflow("acme", b));
    for answer in futures_util::future::join_all(sent).await {
        assert_eq!(answer.str("action"), action, "{}", answer.text);
    }
}

fn order(event: &str, id: &str) -> String {
    format!(
        r#"{{"event_id":"{event}","order":{{"id":"{id}","total":"42.00","currency":"EUR","payment_ref":"pr_{id}"}}}}"#
    )
}

async fn complete(s: &Service, decision: &Answer, result: Value) {
    let eff = decision.body["effect"]["id"].as_str().unwrap();
    let token = decision.body["reservation"]["token"].as_str().unwrap();
    let done = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": result}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);
}

async fn replay(s: &Service, delivery: &str, token: &str) -> Answer {
    s.post_json(
        &format!("/v1/deliveries/{delivery}/replay"),
        Some(token),
        json!({}),
    )
    .await
}

pub async fn a_late_replay_finds_the_result_through_the_proof(kind: Kind) {
    let s = Service::start(kind).await;
    let body = order("evt_lr1", "o_lr1");
    let first = s
        .shopline(
            "acme",
            "orders/paid",
            "msg_lr1",
            &body,
            SHOPLINE_KEY,
            s.now().unix_timestamp(),
        )
        .await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    let delivery = first.str("delivery_id").to_owned();
    let effect = first.body["effect"]["id"].as_str().unwrap().to_owned();
    complete(
        &s,
        &first,
        json!({"order_tx": "ot_1", "rule": "event-id@1"}),
    )
    .await;

    // Five days later the 72-hour horizon has passed: the fast index no longer answers.
    s.advance(5 * 86_400);
    let unknown = replay(&s, "dlv_00000000000000000000000000", OPERATOR).await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
    let forbidden = replay(&s, &delivery, INGEST).await;
    assert_eq!(forbidden.status, 403, "{}", forbidden.text);

    let r = replay(&s, &delivery, OPERATOR).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.str("action"), "ignore", "{}", r.text);
    assert_eq!(r.str("rule"), "RP1");
    assert!(r.str("reason").contains("through the proof"), "{}", r.text);
    assert!(r.str("reason").contains("event-id@1"), "{}", r.text);
    assert_eq!(r.str("effect_id"), effect);
    assert_eq!(
        r.body["result"],
        json!({"order_tx": "ot_1", "rule": "event-id@1"})
    );
    assert_eq!(r.str("replay_of"), delivery);

    // The replay is its own reception, explained by its own proof that names the original.
    let proof = s.proof(r.str("delivery_id")).await;
    assert_eq!(proof.status, 200, "{}", proof.text);
    assert_eq!(
        proof.body["details"]["replay_of"],
        delivery.as_str(),
        "{}",
        proof.text
    );
    assert_no_gap(&s.report(ADMIN).await);
    s.stop().await;
}

pub async fn a_replay_after_the_payload_purge_asks_for_approval(kind: Kind) {
    let s = Service::start_with(kind, |config| {
        config.purge_every = Some(Duration::from_millis(200));
    })
    .await;
    let body = order("evt_lr2", "o_lr2");
    let first = s
        .shopline(
            "acme",
            "orders/paid",
            "msg_lr2",
            &body,
            SHOPLINE_KEY,
            s.now().unix_timestamp(),
        )
        .await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    let delivery = first.str("delivery_id").to_owned();
    complete(&s, &first, json!({"order_tx": "ot_2"})).await;

    // Past the 30-day payload retention, the background purge drops the body (the proof and
    // the delivery row stay for the proof retention).
    s.advance(31 * 86_400);
    let mut purged = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let p = s
            .get(
                &format!("/v1/deliveries/{delivery}?payload=true"),
                Some(ADMIN),
            )
            .await;
        assert_eq!(p.status, 200, "{}", p.text);
        if p.body["payload"].is_null() {
            purged = true;
            break;
        }
    }
    assert!(purged, "the background purge dropped the payload");

    let r = replay(&s, &delivery, ADMIN).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.str("action"), "reconcile", "{}", r.text);
    assert_eq!(r.str("rule"), "RP2");
    assert!(r.str("reason").contains("payload was purged"), "{}", r.text);
    assert!(r.body["queue_item_id"].is_string(), "{}", r.text);

    // An operator approves it as the duplicate it is: linked, never run again.
    let replayed = r.str("delivery_id");
    let resolved = s
        .post_json(
            &format!("/v1/queue/{replayed}/resolve"),
            Some(OPERATOR),
            json!({"outcome": "duplicate", "note": "a deliberate replay", "by": "sam"}),
        )
        .await;
    assert_eq!(resolved.status, 200, "{}", resolved.text);
    assert_eq!(
        resolved.body["existing_effect_id"], first.body["effect"]["id"],
        "{}",
        resolved.text
    );
    assert_no_gap(&s.report(ADMIN).await);
    s.stop().await;
}
