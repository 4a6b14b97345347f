//! Two event types declared as one operation (`scope = "operation"`): one business effect,
//! whichever type announces it — ignored, quarantined, raced, reported and explained as one.

use std::sync::Arc;

use oncegate_core::contract;
use serde_json::{json, Value};

use crate::harness::*;

/// A provider announcing one capture through two types, both keyed by the payment id and
/// scoped by the shared operation.
const CONTRACT: &str = include_str!("../../../../examples/operation-scope.toml");

async fn start(kind: Kind) -> Service {
    Service::start_with(kind, |c| {
        c.contract = Arc::new(contract::parse("shared.toml", CONTRACT).expect("a valid contract"));
    })
    .await
}

fn body(event_type: &str, payment: &str, amount: u64) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"type": event_type, "data": {"payment_id": payment, "amount": amount}}),
    )
    .unwrap()
}

async fn post(s: &Service, event_type: &str, payment: &str, amount: u64) -> Answer {
    let a = s
        .deliver(
            "acme",
            "pay",
            "live",
            INGEST,
            &body(event_type, payment, amount),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    a
}

pub async fn the_second_type_of_one_operation_is_ignored_with_the_first_result(kind: Kind) {
    let s = start(kind).await;
    let first = post(&s, "payment.succeeded", "p1", 5).await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    let eff = first.body["effect"]["id"].as_str().unwrap().to_owned();
    let token = first.body["reservation"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let result = json!({"ledger_tx": "tx_1"});
    let done = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": result}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);

    let second = post(&s, "charge.captured", "p1", 5).await;
    assert_eq!(second.str("action"), "ignore", "{}", second.text);
    assert_eq!(second.body["effect_key"], first.body["effect_key"]);
    assert_eq!(second.body["effect"]["id"], first.body["effect"]["id"]);
    assert_eq!(
        second.body["reference_delivery_id"],
        first.body["delivery_id"]
    );
    assert_eq!(second.body["effect"]["result"], result);

    // The proof of the second names the shared scope and links both deliveries.
    let proof = s.proof(second.str("delivery_id")).await;
    assert_eq!(proof.status, 200, "{}", proof.text);
    let details = &proof.body["details"];
    assert!(
        details["scope"]
            .as_str()
            .is_some_and(|v| v.ends_with("/operation:capture/p1")),
        "{}",
        proof.text
    );
    assert_eq!(
        details["shared_by"],
        json!(["charge.captured", "payment.succeeded"])
    );
    let linked: Vec<&str> = proof.body["linked_deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["delivery_id"].as_str())
        .collect();
    assert!(linked.contains(&first.str("delivery_id")), "{}", proof.text);
    assert!(
        linked.contains(&second.str("delivery_id")),
        "{}",
        proof.text
    );

    // The report counts one effect for two deliveries, and no gap.
    let report = s.report(OPERATOR).await;
    assert_no_gap(&report);
    let total = &report.body["total"];
    assert_eq!(total["received"], 2, "{}", report.text);
    assert_eq!(total["processed"], 1, "{}", report.text);
    assert_eq!(total["ignored_effect"], 1, "{}", report.text);
    assert_eq!(total["effects_completed"], 1, "{}", report.text);
    s.stop().await;
}

pub async fn a_differing_discriminant_across_the_two_types_is_quarantined(kind: Kind) {
    let s = start(kind).await;
    let first = post(&s, "payment.succeeded", "p2", 5).await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    let other = post(&s, "charge.captured", "p2", 7).await;
    assert_eq!(other.str("action"), "quarantine", "{}", other.text);
    assert_eq!(other.body["effect"]["id"], first.body["effect"]["id"]);
    let fields: Vec<&str> = other.body["differences"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["field"].as_str())
        .collect();
    assert_eq!(fields, ["/data/amount"], "{}", other.text);
    s.stop().await;
}

pub async fn thirty_two_racers_across_the_two_types_make_one_process(kind: Kind) {
    let s = start(kind).await;
    let handles: Vec<_> = (0..32)
        .map(|i| {
            let http = s.http.clone();
            let url = format!("{}/v1/deliveries/acme/pay/live", s.base);
            let t = if i % 2 == 0 {
                "payment.succeeded"
            } else {
                "charge.captured"
            };
            let b = body(t, "p3", 9);
            tokio::spawn(async move {
                let r = http
                    .post(url)
                    .header("authorization", format!("Bearer {INGEST}"))
                    .body(b)
                    .send()
                    .await
                    .expect("sent");
                let status = r.status().as_u16();
                let v: Value = r.json().await.expect("a JSON answer");
                (status, v)
            })
        })
        .collect();
    let mut answers = Vec::new();
    for h in handles {
        answers.push(h.await.expect("a posting task"));
    }
    assert!(answers.iter().all(|(st, _)| *st == 200), "{answers:?}");
    let actions: Vec<&str> = answers
        .iter()
        .map(|(_, v)| v["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions.iter().filter(|a| **a == "process").count(),
        1,
        "{actions:?}"
    );
    assert_eq!(
        actions.iter().filter(|a| **a == "ignore").count(),
        31,
        "{actions:?}"
    );
    let effects: std::collections::BTreeSet<&str> = answers
        .iter()
        .map(|(_, v)| v["effect"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(effects.len(), 1, "one effect for all 32: {effects:?}");
    let report = s.report(OPERATOR).await;
    assert_no_gap(&report);
    assert_eq!(report.body["total"]["processed"], 1, "{}", report.text);
    s.stop().await;
}
