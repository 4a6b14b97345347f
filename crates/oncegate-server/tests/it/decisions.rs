//! Decisions over HTTP: concurrency, re-encoded retries, the seed's two refunds, deliveries
//! without a contract, collisions; and the queue and claimable work they lead to.

use serde_json::{json, Value};

use crate::harness::*;

async fn fifty_at_once(
    s: &Service,
    post: impl Fn(reqwest::Client, String) -> tokio::task::JoinHandle<Answer>,
) -> Vec<Answer> {
    let handles: Vec<_> = (0..50)
        .map(|_| post(s.http.clone(), s.base.clone()))
        .collect();
    let mut answers = Vec::new();
    for h in handles {
        answers.push(h.await.expect("a posting task"));
    }
    answers
}

async fn send(req: reqwest::RequestBuilder) -> Answer {
    let r = req.send().await.expect("sent");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    Answer {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

pub async fn fifty_identical_deliveries_make_one_effect(kind: Kind) {
    let s = Service::start(kind).await;

    // A provider with no delivery id: identical bodies meet at the effect layer.
    let body = capture("pay_c1", "cap_c1", "1000", "2024-05-01T10:00:00Z");
    let answers = fifty_at_once(&s, |http, base| {
        let body = body.clone();
        tokio::spawn(async move {
            send(
                http.post(format!("{base}/v1/deliveries/acme/payflow/live"))
                    .header("authorization", format!("Bearer {INGEST}"))
                    .body(body),
            )
            .await
        })
    })
    .await;
    assert!(
        answers.iter().all(|a| a.status == 200),
        "{:?}",
        answers.iter().find(|a| a.status != 200)
    );
    let processed: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.body["action"] == "process")
        .collect();
    assert_eq!(processed.len(), 1, "exactly one process");
    let first = processed[0];
    assert!(first.body["reservation"]["token"].is_string());
    let ignored: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.body["action"] == "ignore")
        .collect();
    assert_eq!(ignored.len(), 49, "49 ignores");
    for a in &ignored {
        assert_eq!(
            a.body["reference_delivery_id"], first.body["delivery_id"],
            "{}",
            a.text
        );
        assert_eq!(
            a.body["effect"]["id"], first.body["effect"]["id"],
            "{}",
            a.text
        );
        assert_eq!(a.body["layer"], "effect");
        assert!(
            a.body.get("reservation").is_none(),
            "only process carries a reservation: {}",
            a.text
        );
    }
    let proof = s.proof(first.str("delivery_id")).await;
    assert_eq!(
        proof.body["linked_deliveries"].as_array().unwrap().len(),
        50,
        "{}",
        proof.text
    );

    // A provider with a delivery id: the same packet 50 times meets at the transport layer.
    let order = r#"{"event_id":"evt_c2","order":{"id":"o_c2","total":"99.00","currency":"EUR","payment_ref":"pr"}}"#;
    let ts = s.now().unix_timestamp();
    let sig = oncegate_server::sign_standard_webhooks(SHOPLINE_KEY, "msg_c2", ts, order.as_bytes());
    let answers = fifty_at_once(&s, |http, base| {
        let sig = sig.clone();
        tokio::spawn(async move {
            send(
                http.post(format!("{base}/v1/deliveries/acme/shopline/live"))
                    .header("x-shopline-topic", "orders/paid")
                    .header("x-shopline-delivery", "dl-c2")
                    .header("webhook-id", "msg_c2")
                    .header("webhook-timestamp", ts.to_string())
                    .header("webhook-signature", sig)
                    .body(order),
            )
            .await
        })
    })
    .await;
    assert!(answers.iter().all(|a| a.status == 200));
    let processed: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.body["action"] == "process")
        .collect();
    assert_eq!(processed.len(), 1, "exactly one process");
    let first = processed[0];
    let ignored: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.body["action"] == "ignore")
        .collect();
    assert_eq!(ignored.len(), 49);
    for a in &ignored {
        assert_eq!(
            a.body["effect"]["id"], first.body["effect"]["id"],
            "{}",
            a.text
        );
        // Most meet at the transport layer; a few that raced the first one's commit meet
        // at the effect layer. Either way they are linked to the processed delivery.
        assert!(
            a.body["layer"] == "transport" || a.body["layer"] == "effect",
            "{}",
            a.text
        );
        assert_eq!(
            a.body["reference_delivery_id"], first.body["delivery_id"],
            "{}",
            a.text
        );
        let proof = s.proof(a.str("delivery_id")).await;
        assert_eq!(
            proof.body["reference_delivery_id"], first.body["delivery_id"],
            "{}",
            proof.text
        );
    }
    assert_no_gap(&s.report(OPERATOR).await);
    s.stop().await;
}

pub async fn a_reencoded_retry_is_ignored_with_the_first_result(kind: Kind) {
    let s = Service::start(kind).await;
    let first = s
        .payflow(
            "acme",
            &capture("pay_e1", "cap_e1", "1000", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.str("action"), "process");
    assert_eq!(first.body["effect"]["state"], "in_progress");
    let fencing = first.body["reservation"]["fencing"].as_u64().unwrap();
    assert_eq!(fencing, 1);
    assert!(first.str("effect_key").len() >= 32);

    // Key order, whitespace, number spelling, time zone spelling and a new sent_at: the same capture.
    let reencoded = r#"{ "data" : { "currency" : "EUR", "amount" : 1e3, "capture_id" : "cap_e1",
        "payment_id" : "pay_e1", "customer_email" : "ada@example.com",
        "captured_at" : "2024-05-01T12:00:00+02:00" },
      "attempt" : 2, "type" : "payment.captured", "sent_at" : "2024-05-01T10:07:31Z" }"#;

    // While the effect runs, the retry is ignored as in progress.
    let during = s.payflow("acme", reencoded).await;
    assert_eq!(during.str("action"), "ignore", "{}", during.text);
    assert_eq!(during.body["effect"]["state"], "in_progress");
    assert_eq!(during.body["effect"]["result"], Value::Null);

    let eff = first.body["effect"]["id"].as_str().unwrap();
    let token = first.body["reservation"]["token"].as_str().unwrap();
    let result = json!({"ledger_tx": "tx_42", "rule": "capture-id@1"});
    let done = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": result}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);

    let after = s
        .payflow("acme", &reencoded.replace("10:07:31", "10:19:02"))
        .await;
    assert_eq!(after.status, 200, "{}", after.text);
    assert_eq!(after.str("action"), "ignore");
    assert_eq!(after.str("layer"), "effect");
    assert_eq!(
        after.body["reference_delivery_id"],
        first.body["delivery_id"]
    );
    assert_eq!(after.body["effect"]["id"], first.body["effect"]["id"]);
    assert_eq!(after.body["effect"]["state"], "completed");
    assert_eq!(after.body["effect"]["result"], result);
    assert_eq!(after.body["effect_key"], first.body["effect_key"]);
    assert!(after.body["differences"].as_array().unwrap().is_empty());
    assert_eq!(after.body["strategy"]["name"], "capture-id");
    s.stop().await;
}

pub async fn the_seed_second_refund_is_reconciled_not_dropped(kind: Kind) {
    let s = Service::start(kind).await;
    let first = s
        .payflow("acme", &refund("pay_9", "2500", "2024-05-03T09:00:00Z"))
        .await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    assert_eq!(first.body["strategy"]["level"], "fingerprint");
    let eff = first.body["effect"]["id"].as_str().unwrap().to_owned();
    let token = first.body["reservation"]["token"].as_str().unwrap();
    let result = json!({"refund": "rf_1"});
    s.post_json(
        &format!("/v1/effects/{eff}/complete"),
        Some(INGEST),
        json!({"token": token, "result": result}),
    )
    .await;

    // Minutes later: same amount, same payment, no request reference, another sent_at.
    let second = s
        .payflow("acme", &refund("pay_9", "2500", "2024-05-03T09:04:00Z"))
        .await;
    assert_eq!(second.status, 200, "{}", second.text);
    assert_eq!(
        second.str("action"),
        "reconcile",
        "the second refund must not be ignored: {}",
        second.text
    );
    assert_ne!(second.body["action"], "ignore");
    assert_eq!(
        second.body["reference_delivery_id"],
        first.body["delivery_id"]
    );
    assert!(
        second.str("reason").contains("second legitimate operation"),
        "{}",
        second.text
    );
    let second_id = second.str("delivery_id").to_owned();

    // It waits, visible, in the queue.
    let q = s
        .get("/v1/queue?kind=reconcile&status=open", Some(OPERATOR))
        .await;
    assert_eq!(q.status, 200, "{}", q.text);
    let items = q.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{}", q.text);
    let item = &items[0];
    assert_eq!(item["delivery_id"], second_id.as_str());
    assert_eq!(item["kind"], "reconcile");
    assert_eq!(item["effect_key"], first.body["effect_key"]);
    assert_eq!(item["reference_delivery_id"], first.body["delivery_id"]);
    assert_eq!(item["existing_result"], result);
    assert_eq!(item["proposed_action"], "verify");
    assert!(item["age_seconds"].as_i64().unwrap() >= 0);
    assert!(item["differences"].as_array().unwrap().is_empty());
    assert!(s
        .get("/v1/queue?kind=quarantine", Some(OPERATOR))
        .await
        .body["items"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(
        s.get("/v1/queue?kind=sideways", Some(OPERATOR))
            .await
            .status,
        400
    );

    // An operator confirms it is a distinct refund: it becomes claimable work.
    let bad = s
        .post_json(
            &format!("/v1/queue/{second_id}/resolve"),
            Some(OPERATOR),
            json!({"outcome": "maybe"}),
        )
        .await;
    assert_eq!(bad.status, 400);
    let res = s
        .post_json(
            &format!("/v1/queue/{second_id}/resolve"),
            Some(OPERATOR),
            json!({"outcome": "distinct", "authoritative_ref": "re_2", "note": "refund list shows two refunds", "by": "alice"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.body["resolution"]["outcome"], "distinct");
    assert_eq!(res.body["resolution"]["by"], "alice");
    let released = res.body["resolution"]["effect_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let again = s
        .post_json(
            &format!("/v1/queue/{second_id}/resolve"),
            Some(OPERATOR),
            json!({"outcome": "duplicate", "note": "", "by": "bob"}),
        )
        .await;
    assert_eq!(again.status, 409);
    assert_eq!(again.error_code(), "already_resolved");
    // Resolving something that is not queued is a 404.
    let not_queued = s
        .post_json(
            &format!("/v1/queue/{}/resolve", first.str("delivery_id")),
            Some(OPERATOR),
            json!({"outcome": "duplicate"}),
        )
        .await;
    assert_eq!(not_queued.status, 404);

    let claim = s
        .post_json(
            "/v1/work/claim",
            Some(INGEST),
            json!({"limit": 5, "lease_seconds": 60}),
        )
        .await;
    assert_eq!(claim.status, 200, "{}", claim.text);
    let items = claim.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{}", claim.text);
    let work = &items[0];
    assert_eq!(work["effect_id"], released.as_str());
    assert_eq!(work["delivery_id"], second_id.as_str());
    assert_eq!(work["event_type"], "refund.created");
    assert_eq!(work["payload"]["data"]["amount"], 2500);
    assert_eq!(work["authoritative_ref"], "re_2");
    let claim_token = work["reservation"]["token"].as_str().unwrap();
    assert!(work["reservation"]["lease_expires_at"].is_string());
    let nothing = s
        .post_json(
            "/v1/work/claim",
            Some(INGEST),
            json!({"limit": 5, "lease_seconds": 60}),
        )
        .await;
    assert!(
        nothing.body["items"].as_array().unwrap().is_empty(),
        "claimed work is exclusive: {}",
        nothing.text
    );
    let done = s
        .post_json(
            &format!("/v1/effects/{released}/complete"),
            Some(INGEST),
            json!({"token": claim_token, "result": {"refund": "re_2"}}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);

    let proof = s.proof(&second_id).await;
    assert_eq!(
        proof.body["resolution"]["outcome"], "distinct",
        "{}",
        proof.text
    );
    assert_eq!(proof.body["resolution"]["authoritative_ref"], "re_2");
    assert!(s.get("/v1/queue", Some(OPERATOR)).await.body["items"]
        .as_array()
        .unwrap()
        .is_empty());
    let resolved = s.get("/v1/queue?status=resolved", Some(OPERATOR)).await;
    assert_eq!(
        resolved.body["items"].as_array().unwrap().len(),
        1,
        "{}",
        resolved.text
    );

    // A retry of the first refund is held too (a weak key never ignores a critical effect);
    // the operator links it as a duplicate.
    let retry = s
        .payflow("acme", &refund("pay_9", "2500", "2024-05-03T09:00:00Z"))
        .await;
    assert_eq!(retry.str("action"), "reconcile", "{}", retry.text);
    let dup = s
        .post_json(
            &format!("/v1/queue/{}/resolve", retry.str("delivery_id")),
            Some(OPERATOR),
            json!({"outcome": "duplicate", "note": "same refund", "by": "alice"}),
        )
        .await;
    assert_eq!(dup.status, 200, "{}", dup.text);
    assert_eq!(dup.body["resolution"]["effect_id"], eff.as_str());

    let report = s.report(OPERATOR).await;
    assert_no_gap(&report);
    let row = report.body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["event_type"] == "refund.created")
        .cloned()
        .unwrap();
    assert_eq!(row["received"], 3, "{row}");
    assert_eq!(row["reconcile_pending"], 0, "{row}");
    s.stop().await;
}

pub async fn unknown_types_and_providers_are_reconciled(kind: Kind) {
    let s = Service::start(kind).await;
    let unknown_type = s
        .deliver(
            "acme",
            "payflow",
            "live",
            INGEST,
            br#"{"type":"payout.sent","data":{"amount":1}}"#,
        )
        .await;
    assert_eq!(unknown_type.status, 200, "{}", unknown_type.text);
    assert_eq!(unknown_type.str("action"), "reconcile");
    assert_eq!(unknown_type.body["strategy"], Value::Null);
    assert_eq!(unknown_type.body["effect_key"], Value::Null);
    assert!(
        unknown_type.str("reason").contains("no contract"),
        "{}",
        unknown_type.text
    );

    let no_type = s
        .deliver("acme", "payflow", "live", INGEST, br#"{"data":{}}"#)
        .await;
    assert_eq!(no_type.status, 200, "{}", no_type.text);
    assert_eq!(no_type.str("action"), "reconcile");

    let unknown_provider = s
        .deliver("acme", "nobody", "live", INGEST, br#"{"anything":true}"#)
        .await;
    assert_eq!(unknown_provider.status, 200, "{}", unknown_provider.text);
    assert_eq!(unknown_provider.str("action"), "reconcile");
    // An unknown provider has no signature to check: anonymous posts are refused.
    let anon = s
        .request(
            reqwest::Method::POST,
            "/v1/deliveries/acme/nobody/live",
            None,
            &[],
            Some(b"{}".to_vec()),
        )
        .await;
    assert_eq!(anon.status, 401);

    // An environment the contract does not declare is refused (and journaled).
    let env = s
        .deliver(
            "acme",
            "payflow",
            "staging",
            INGEST,
            br#"{"type":"payout.sent"}"#,
        )
        .await;
    assert_eq!(env.status, 400);
    assert_eq!(env.error_code(), "unknown_environment");

    let q = s.get("/v1/queue?kind=reconcile", Some(OPERATOR)).await;
    assert_eq!(q.body["items"].as_array().unwrap().len(), 3, "{}", q.text);
    assert_no_gap(&s.report(OPERATOR).await);
    s.stop().await;
}

pub async fn a_differing_discriminant_is_quarantined(kind: Kind) {
    let s = Service::start(kind).await;
    let first = s
        .payflow(
            "acme",
            &capture("pay_q1", "cap_q1", "1000", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(first.str("action"), "process");
    let other = s
        .payflow(
            "acme",
            &capture("pay_q1", "cap_q1", "2000", "2024-05-01T10:01:00Z"),
        )
        .await;
    assert_eq!(other.status, 200, "{}", other.text);
    assert_eq!(other.str("action"), "quarantine");
    let diffs = other.body["differences"].as_array().unwrap();
    assert_eq!(diffs.len(), 1, "{}", other.text);
    assert_eq!(diffs[0]["field"], "/data/amount");
    assert_eq!(diffs[0]["reference"], 1000);
    assert_eq!(diffs[0]["this"], 2000);
    assert_eq!(
        other.body["reference_delivery_id"],
        first.body["delivery_id"]
    );
    assert!(other.body.get("reservation").is_none());

    let q = s
        .get("/v1/queue?kind=quarantine&status=open", Some(OPERATOR))
        .await;
    let items = q.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{}", q.text);
    assert_eq!(items[0]["proposed_action"], "distinct");
    assert_eq!(items[0]["differences"][0]["field"], "/data/amount");
    let proof = s.proof(other.str("delivery_id")).await;
    assert_eq!(proof.body["differences"][0]["this"], 2000, "{}", proof.text);
    s.stop().await;
}
