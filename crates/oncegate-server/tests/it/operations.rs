//! Operator-facing routes: health, readiness, metrics, proofs and the report.

use serde_json::json;

use crate::harness::*;

pub async fn health_metrics_and_unknown_routes(kind: Kind) {
    let s = Service::start(kind).await;
    let h = s.get("/healthz", None).await;
    assert_eq!(h.status, 200, "{}", h.text);
    let r = s.get("/readyz", None).await;
    assert_eq!(r.status, 200, "{}", r.text);

    // Metrics are private unless configured open.
    let m = s.get("/metrics", None).await;
    assert_eq!(m.status, 401);
    assert_eq!(m.error_code(), "unauthorized");
    let m = s.get("/metrics", Some(INGEST)).await;
    assert_eq!(m.status, 403);
    assert_eq!(m.error_code(), "forbidden");

    // Some traffic, so every family has samples.
    let a = s
        .payflow(
            "acme",
            &capture("pay_m1", "cap_m1", "1000", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(a.str("action"), "process");
    let b = s
        .payflow(
            "acme",
            &capture("pay_m1", "cap_m1", "1000", "2024-05-01T10:05:00Z"),
        )
        .await;
    assert_eq!(b.str("action"), "ignore");
    s.payflow("acme", &refund("pay_m1", "100", "2024-05-01T11:00:00Z"))
        .await;
    let r2 = s
        .payflow("acme", &refund("pay_m1", "100", "2024-05-01T11:03:00Z"))
        .await;
    assert_eq!(r2.str("action"), "reconcile");
    let bad = s
        .payflow_signed("acme", "{}", b"wrong", s.now().unix_timestamp())
        .await;
    assert_eq!(bad.status, 401);

    let m = s.get("/metrics", Some(OPERATOR)).await;
    assert_eq!(m.status, 200);
    let text = &m.text;
    for needle in [
        "oncegate_deliveries_total{provider=\"payflow\",env=\"live\",event_type=\"payment.captured\",strategy=\"capture-id@1\",level=\"business_ref\",action=\"process\"} 1",
        "oncegate_effect_duplicates_total{provider=\"payflow\",env=\"live\",event_type=\"payment.captured\",strategy=\"capture-id@1\"} 1",
        "oncegate_rejected_total{reason=\"bad_signature\"} 1",
        "oncegate_queue_depth{kind=\"reconcile\"} 1",
        "oncegate_queue_oldest_age_seconds{kind=\"reconcile\"}",
        "oncegate_keys_total{provider=\"payflow\",event_type=\"refund.created\",confidence=\"weak\"} 2",
        "oncegate_decision_latency_seconds_bucket",
        "oncegate_effects{state=\"completed\"}",
        "oncegate_store_up 1",
        "oncegate_unexplained_gap 0",
    ] {
        assert!(text.contains(needle), "metrics lack {needle:?}:\n{text}");
    }
    assert!(!text.contains(PAYFLOW_SECRET) && !text.contains("ada@example.com"));
    // The store's group commits: every call the traffic above made ran in one, so there were
    // batches, holding at least one call each, every one of them in the `+Inf` bucket.
    let sample = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("metrics lack {name}:\n{text}"))
    };
    let batches = sample("oncegate_store_batch_calls_count");
    let calls = sample("oncegate_store_batch_calls_sum");
    assert!(
        batches >= 1.0 && calls >= batches,
        "{batches} batches, {calls} calls"
    );
    assert_eq!(
        sample("oncegate_store_batch_calls_bucket{le=\"+Inf\"}"),
        batches
    );
    assert!(sample("oncegate_store_batch_calls_bucket{le=\"1.0\"}") <= batches);
    // Their round trips to the database: one or two per batch on PostgreSQL (a batch with a
    // decision reads its view, then writes), none for SQLite, in process.
    let trips = sample("oncegate_store_round_trips_total");
    match kind {
        Kind::Sqlite => assert_eq!(trips, 0.0),
        Kind::Postgres => assert!(
            trips >= batches && trips <= 2.0 * batches,
            "{trips} round trips for {batches} batches"
        ),
    }

    // Unknown routes and methods answer in the error shape too.
    let nf = s.get("/v1/nothing-here", Some(ADMIN)).await;
    assert_eq!(nf.status, 404);
    assert_eq!(nf.error_code(), "not_found");
    let mna = s.get("/v1/work/claim", Some(ADMIN)).await;
    assert_eq!(mna.status, 405);
    assert_eq!(mna.error_code(), "method_not_allowed");
    s.stop().await;

    // Open metrics need no token.
    let open = Service::start_with(kind, |c| c.metrics_public = true).await;
    let m = open.get("/metrics", None).await;
    assert_eq!(m.status, 200);
    assert!(m.text.contains("oncegate_store_up 1"), "{}", m.text);
    open.stop().await;
}

pub async fn report_gap_is_zero_after_a_mixed_run(kind: Kind) {
    let s = Service::start(kind).await;
    let t = "mixed";
    let mut posted = 0;
    // process, then complete
    let a = s
        .payflow(
            t,
            &capture("pay_r1", "cap_r1", "1000", "2024-05-01T10:00:00Z"),
        )
        .await;
    posted += 1;
    let eff = a.body["effect"]["id"].as_str().unwrap().to_owned();
    let token = a.body["reservation"]["token"].as_str().unwrap().to_owned();
    let c = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": {"ledger": "tx_1"}}),
        )
        .await;
    assert_eq!(c.status, 200, "{}", c.text);
    // effect-layer ignore
    assert_eq!(
        s.payflow(
            t,
            &capture("pay_r1", "cap_r1", "1000.0", "2024-05-01T10:09:00Z")
        )
        .await
        .str("action"),
        "ignore"
    );
    posted += 1;
    // transport-layer ignore (shopline replay)
    let order = r#"{"event_id":"evt_r1","order":{"id":"o_r1","total":"10.00","currency":"EUR","payment_ref":"p1"}}"#;
    let ts = s.now().unix_timestamp();
    assert_eq!(
        s.shopline(t, "orders/paid", "msg_r1", order, SHOPLINE_KEY, ts)
            .await
            .str("action"),
        "process"
    );
    let replay = s
        .shopline(t, "orders/paid", "msg_r1", order, SHOPLINE_KEY, ts)
        .await;
    assert_eq!(replay.str("action"), "ignore");
    assert_eq!(replay.str("layer"), "transport");
    posted += 2;
    // quarantine
    assert_eq!(
        s.payflow(
            t,
            &capture("pay_r1", "cap_r1", "999", "2024-05-01T10:10:00Z")
        )
        .await
        .str("action"),
        "quarantine"
    );
    posted += 1;
    // reconcile (seed refunds) and no contract
    s.payflow(t, &refund("pay_r1", "10", "2024-05-01T11:00:00Z"))
        .await;
    s.payflow(t, &refund("pay_r1", "10", "2024-05-01T11:04:00Z"))
        .await;
    s.deliver(
        t,
        "payflow",
        "live",
        INGEST,
        br#"{"type":"payout.sent","data":{}}"#,
    )
    .await;
    posted += 3;
    // rejections: bad signature, malformed, too deep
    assert_eq!(
        s.payflow_signed(t, "{}", b"nope", s.now().unix_timestamp())
            .await
            .status,
        401
    );
    assert_eq!(
        s.deliver(t, "payflow", "live", INGEST, b"{\"a\":1,\"a\":2}")
            .await
            .status,
        400
    );
    assert_eq!(
        s.deliver(t, "payflow", "live", INGEST, "[".repeat(300).as_bytes())
            .await
            .status,
        400
    );
    posted += 3;

    let report = s
        .get(&format!("/v1/report?tenant={t}"), Some(OPERATOR))
        .await;
    assert_no_gap(&report);
    let total = &report.body["total"];
    assert_eq!(total["received"], posted, "{}", report.text);
    assert_eq!(total["rejected"], 3, "{}", report.text);
    assert_eq!(total["processed"], 3, "{}", report.text);
    assert_eq!(total["ignored_transport"], 1, "{}", report.text);
    assert_eq!(total["ignored_effect"], 1, "{}", report.text);
    assert_eq!(total["quarantined"], 1, "{}", report.text);
    assert_eq!(total["effects_completed"], 1, "{}", report.text);
    let rows = report.body["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["tenant"] == t), "{}", report.text);
    let captures = rows
        .iter()
        .find(|r| r["event_type"] == "payment.captured")
        .expect("a capture row");
    assert_eq!(captures["received"], 3);
    assert_eq!(captures["collisions"], 1);
    for field in [
        "tenant",
        "provider",
        "env",
        "event_type",
        "received",
        "rejected",
        "processed",
        "ignored_transport",
        "ignored_effect",
        "quarantined",
        "reconcile_pending",
        "effects_completed",
        "collisions",
        "unexplained_gap",
    ] {
        assert!(
            captures.get(field).is_some(),
            "report rows lack {field}: {captures}"
        );
    }

    // `since` narrows; a bad `since` is a 400 in the error shape.
    let later = (s.now() + time::Duration::hours(1))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let empty = s
        .get(&format!("/v1/report?since={later}"), Some(OPERATOR))
        .await;
    assert_eq!(empty.status, 200, "{}", empty.text);
    assert_eq!(empty.body["total"]["received"], 0, "{}", empty.text);
    let bad = s.get("/v1/report?since=yesterday", Some(OPERATOR)).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.error_code(), "invalid_request");
    s.stop().await;
}

pub async fn proofs_show_why_and_guard_the_payload(kind: Kind) {
    let s = Service::start(kind).await;
    // Without capture_id the first strategy is skipped and the semantic one makes the key.
    let body = r#"{"type":"payment.captured","sent_at":"2024-05-01T10:00:00Z","data":{"payment_id":"pay_p1","amount":1000,"currency":"EUR","customer_email":"ada@example.com"}}"#;
    let a = s.payflow("acme", body).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.body["strategy"]["name"], "capture-per-payment");
    assert_eq!(a.body["strategy"]["level"], "semantic");
    assert_eq!(a.body["strategy"]["confidence"], "medium");
    let id = a.str("delivery_id").to_owned();

    let p = s.proof(&id).await;
    assert_eq!(p.status, 200, "{}", p.text);
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
        "received_at",
        "tenant",
        "provider",
        "env",
        "event_type",
        "transport_key",
        "raw_sha256",
        "skipped_strategies",
        "linked_deliveries",
        "resolution",
        "rule_version",
    ] {
        assert!(
            p.body.get(field).is_some(),
            "the proof lacks {field}: {}",
            p.text
        );
    }
    assert_eq!(p.body["action"], "process");
    assert_eq!(p.body["tenant"], "acme");
    assert_eq!(p.body["event_type"], "payment.captured");
    assert_eq!(p.body["effect"]["state"], "in_progress");
    let skipped = p.body["skipped_strategies"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{}", p.text);
    assert_eq!(skipped[0]["name"], "capture-id");
    assert_eq!(skipped[0]["version"], 1);
    assert!(
        skipped[0]["why"].as_str().unwrap().contains("capture_id"),
        "{}",
        p.text
    );
    assert_eq!(p.body["linked_deliveries"][0]["delivery_id"], id.as_str());
    assert!(p.body.get("payload").is_none(), "no payload unless asked");
    // The sensitive e-mail never appears in clear, in the proof or the decision.
    assert!(!p.text.contains("ada@example.com") && !a.text.contains("ada@example.com"));

    // The payload is for admins only.
    let denied = s
        .get(&format!("/v1/deliveries/{id}?payload=true"), Some(OPERATOR))
        .await;
    assert_eq!(denied.status, 403);
    assert_eq!(denied.error_code(), "forbidden");
    let full = s
        .get(&format!("/v1/deliveries/{id}?payload=true"), Some(ADMIN))
        .await;
    assert_eq!(full.status, 200, "{}", full.text);
    assert_eq!(full.body["payload"]["data"]["payment_id"], "pay_p1");

    // Unknown and malformed ids are 404 in the error shape; proofs need an operator.
    let missing = s.proof("dlv_00000000000000000000000000").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), "not_found");
    assert_eq!(s.proof("not-an-id").await.status, 404);
    assert_eq!(
        s.get(&format!("/v1/deliveries/{id}"), Some(INGEST))
            .await
            .status,
        403
    );
    assert_eq!(
        s.get(&format!("/v1/deliveries/{id}"), None).await.status,
        401
    );
    s.stop().await;
}
