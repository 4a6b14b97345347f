//! Authentication: provider signatures (Standard Webhooks, HMAC-SHA-256 headers), bearer
//! tokens with roles, and tenant isolation.

use serde_json::json;

use crate::harness::*;

pub async fn signatures_are_verified_and_failures_journaled(kind: Kind) {
    let s = Service::start(kind).await;
    let now = s.now().unix_timestamp();

    // HMAC-SHA-256 header scheme (payflow: hex, "sha256=" prefix, timestamp header).
    let body = capture("pay_s1", "cap_s1", "1000", "2024-05-01T10:00:00Z");
    let ok = s.payflow("acme", &body).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.str("action"), "process");

    let wrong = s
        .payflow_signed("acme", &body, b"not-the-secret", now)
        .await;
    assert_eq!(wrong.status, 401, "{}", wrong.text);
    assert_eq!(wrong.error_code(), "bad_signature");
    // The refused reception is journaled with its reason, and its proof says so.
    let refused = journaled_id(&wrong);
    let proof = s.proof(&refused).await;
    assert_eq!(proof.status, 200, "{}", proof.text);
    assert_eq!(proof.body["action"], "reject");
    assert_eq!(proof.body["details"]["rejection"], "bad_signature");
    assert!(proof.str("reason").contains("signature"), "{}", proof.text);
    assert!(!proof.text.contains(PAYFLOW_SECRET));

    let stale = s
        .payflow_signed("acme", &body, PAYFLOW_SECRET.as_bytes(), now - 3600)
        .await;
    assert_eq!(stale.status, 401, "{}", stale.text);
    assert_eq!(stale.error_code(), "bad_signature");
    assert!(
        stale.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tolerance"),
        "{}",
        stale.text
    );

    let unsigned = s
        .request(
            reqwest::Method::POST,
            "/v1/deliveries/acme/payflow/live",
            None,
            &[],
            Some(body.clone().into_bytes()),
        )
        .await;
    assert_eq!(unsigned.status, 401);
    assert_eq!(unsigned.error_code(), "bad_signature");

    // A tampered body under a genuine signature is refused.
    let sig = oncegate_server::sign_hmac(
        PAYFLOW_SECRET.as_bytes(),
        oncegate_core::contract::Encoding::Hex,
        Some(now),
        body.as_bytes(),
    );
    let tampered = s
        .request(
            reqwest::Method::POST,
            "/v1/deliveries/acme/payflow/live",
            None,
            &[
                ("x-payflow-signature", format!("sha256={sig}")),
                ("x-payflow-timestamp", now.to_string()),
            ],
            Some(body.replace("1000", "9000").into_bytes()),
        )
        .await;
    assert_eq!(tampered.status, 401);

    // Standard Webhooks (shopline).
    let order = r#"{"event_id":"evt_s1","order":{"id":"o_s1","total":"25.00","currency":"EUR","payment_ref":"pr_1"}}"#;
    let first = s
        .shopline("acme", "orders/paid", "msg_s1", order, SHOPLINE_KEY, now)
        .await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.str("action"), "process");
    assert_eq!(first.body["strategy"]["level"], "provider_id");
    assert_eq!(first.body["strategy"]["confidence"], "strong");

    // The same signed message replayed is not an auth failure: a transport duplicate.
    let replay = s
        .shopline("acme", "orders/paid", "msg_s1", order, SHOPLINE_KEY, now)
        .await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert_eq!(replay.str("action"), "ignore");
    assert_eq!(replay.str("layer"), "transport");
    assert_eq!(
        replay.body["reference_delivery_id"],
        first.body["delivery_id"]
    );
    assert_eq!(replay.body["effect"]["id"], first.body["effect"]["id"]);

    let wrong = s
        .shopline("acme", "orders/paid", "msg_s2", order, b"another-key", now)
        .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.error_code(), "bad_signature");
    let stale = s
        .shopline(
            "acme",
            "orders/paid",
            "msg_s3",
            order,
            SHOPLINE_KEY,
            now - 3600,
        )
        .await;
    assert_eq!(stale.status, 401);
    assert_eq!(stale.error_code(), "bad_signature");

    // A provider without a configured secret (ledgerly) accepts bearer tokens only.
    let invoice = r#"{"event":"invoice.finalized","invoice":{"number":"INV-1","total":100,"currency":"EUR","lines":[{"sku":"a","qty":1}]}}"#;
    let unsigned = s
        .request(
            reqwest::Method::POST,
            "/v1/deliveries/acme/ledgerly/live",
            None,
            &[],
            Some(invoice.as_bytes().to_vec()),
        )
        .await;
    assert_eq!(unsigned.status, 401);
    let with_token = s
        .deliver("acme", "ledgerly", "live", INGEST, invoice.as_bytes())
        .await;
    assert_eq!(with_token.status, 200, "{}", with_token.text);
    assert_eq!(with_token.str("action"), "process");

    // A bad bearer token is refused even with a valid signature elsewhere in the request.
    let bad_token = s
        .deliver(
            "acme",
            "payflow",
            "live",
            "not-a-token-at-all",
            body.as_bytes(),
        )
        .await;
    assert_eq!(bad_token.status, 401);
    assert_eq!(bad_token.error_code(), "unauthorized");

    // Every refusal above is in the report, none is an unexplained gap.
    let report = s.report(OPERATOR).await;
    assert_no_gap(&report);
    assert_eq!(report.body["total"]["rejected"], 8, "{}", report.text);
    s.stop().await;
}

pub async fn tenants_are_isolated(kind: Kind) {
    let s = Service::start(kind).await;
    // acme: a processed capture and a reconcile item.
    let cap = s
        .deliver(
            "acme",
            "payflow",
            "live",
            INGEST_ACME,
            capture("pay_t1", "cap_t1", "1000", "2024-05-01T10:00:00Z").as_bytes(),
        )
        .await;
    assert_eq!(cap.status, 200, "{}", cap.text);
    s.deliver(
        "acme",
        "payflow",
        "live",
        INGEST_ACME,
        refund("pay_t1", "5", "2024-05-01T11:00:00Z").as_bytes(),
    )
    .await;
    let held = s
        .deliver(
            "acme",
            "payflow",
            "live",
            INGEST_ACME,
            refund("pay_t1", "5", "2024-05-01T11:02:00Z").as_bytes(),
        )
        .await;
    assert_eq!(held.str("action"), "reconcile");
    // beta: its own delivery.
    let beta = s
        .deliver(
            "beta",
            "payflow",
            "live",
            INGEST_BETA,
            capture("pay_t2", "cap_t2", "1000", "2024-05-01T10:00:00Z").as_bytes(),
        )
        .await;
    assert_eq!(beta.status, 200);

    // An acme token cannot post for beta.
    let cross = s
        .deliver(
            "beta",
            "payflow",
            "live",
            INGEST_ACME,
            capture("pay_t3", "cap_t3", "1", "2024-05-01T10:00:00Z").as_bytes(),
        )
        .await;
    assert_eq!(cross.status, 401);
    assert_eq!(cross.error_code(), "unauthorized");

    let acme_id = cap.str("delivery_id");
    // beta's operator gets 404 for acme's delivery; acme's operator sees it.
    let hidden = s
        .get(&format!("/v1/deliveries/{acme_id}"), Some(OPERATOR_BETA))
        .await;
    assert_eq!(hidden.status, 404);
    assert_eq!(hidden.error_code(), "not_found");
    assert_eq!(
        s.get(&format!("/v1/deliveries/{acme_id}"), Some(OPERATOR_ACME))
            .await
            .status,
        200
    );

    // Lists: beta's operator never sees acme's queue items or report rows.
    let q = s.get("/v1/queue", Some(OPERATOR_BETA)).await;
    assert_eq!(q.status, 200);
    assert!(q.body["items"].as_array().unwrap().is_empty(), "{}", q.text);
    let q = s.get("/v1/queue", Some(OPERATOR_ACME)).await;
    assert_eq!(q.body["items"].as_array().unwrap().len(), 1, "{}", q.text);
    let r = s.report(OPERATOR_BETA).await;
    let rows = r.body["rows"].as_array().unwrap();
    assert!(
        !rows.is_empty() && rows.iter().all(|row| row["tenant"] == "beta"),
        "{}",
        r.text
    );
    assert_eq!(
        r.body["total"]["received"], 2,
        "beta's own delivery and the refused cross-tenant post: {}",
        r.text
    );
    let r = s.get("/v1/report?tenant=acme", Some(OPERATOR_BETA)).await;
    assert_eq!(r.status, 404);

    // Resolving or completing another tenant's work is a 404.
    let held_id = held.str("delivery_id");
    let res = s
        .post_json(
            &format!("/v1/queue/{held_id}/resolve"),
            Some(OPERATOR_BETA),
            json!({"outcome": "distinct", "note": "n", "by": "eve"}),
        )
        .await;
    assert_eq!(res.status, 404);
    let eff = cap.body["effect"]["id"].as_str().unwrap();
    let token = cap.body["reservation"]["token"].as_str().unwrap();
    let done = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST_BETA),
            json!({"token": token, "result": {}}),
        )
        .await;
    assert_eq!(done.status, 404);
    // ... and the rightful tenant can.
    let done = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST_ACME),
            json!({"token": token, "result": {"ref": "t1"}}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);

    // A claim by beta never hands out acme's released work.
    let res = s
        .post_json(
            &format!("/v1/queue/{held_id}/resolve"),
            Some(OPERATOR_ACME),
            json!({"outcome": "distinct", "note": "second refund is real", "by": "ops"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let none = s
        .post_json(
            "/v1/work/claim",
            Some(INGEST_BETA),
            json!({"limit": 5, "lease_seconds": 30}),
        )
        .await;
    assert_eq!(none.status, 200);
    assert!(
        none.body["items"].as_array().unwrap().is_empty(),
        "{}",
        none.text
    );
    let mine = s
        .post_json(
            "/v1/work/claim",
            Some(INGEST_ACME),
            json!({"limit": 5, "lease_seconds": 30}),
        )
        .await;
    assert_eq!(
        mine.body["items"].as_array().unwrap().len(),
        1,
        "{}",
        mine.text
    );
    s.stop().await;
}

pub async fn roles_guard_the_routes(kind: Kind) {
    let s = Service::start(kind).await;
    // Operator routes refuse ingest tokens and anonymous callers.
    for path in [
        "/v1/queue",
        "/v1/report",
        "/v1/deliveries/dlv_00000000000000000000000000",
    ] {
        let anon = s.get(path, None).await;
        assert_eq!(anon.status, 401, "{path}: {}", anon.text);
        assert_eq!(anon.error_code(), "unauthorized");
        let ingest = s.get(path, Some(INGEST)).await;
        assert_eq!(ingest.status, 403, "{path}: {}", ingest.text);
    }
    let resolve = s
        .post_json(
            "/v1/queue/dlv_00000000000000000000000000/resolve",
            Some(INGEST),
            json!({"outcome": "duplicate", "note": "", "by": "x"}),
        )
        .await;
    assert_eq!(resolve.status, 403);
    // Worker routes refuse operator tokens.
    let claim = s
        .post_json(
            "/v1/work/claim",
            Some(OPERATOR),
            json!({"limit": 1, "lease_seconds": 10}),
        )
        .await;
    assert_eq!(claim.status, 403);
    assert_eq!(claim.error_code(), "forbidden");
    let zero = s
        .post_json(
            "/v1/work/claim",
            Some(INGEST),
            json!({"limit": 1, "lease_seconds": 0}),
        )
        .await;
    assert_eq!(zero.status, 400);
    assert_eq!(zero.error_code(), "invalid_request");
    let complete = s
        .post_json(
            "/v1/effects/eff_00000000000000000000000000/complete",
            Some(OPERATOR),
            json!({"token": "1.00", "result": {}}),
        )
        .await;
    assert_eq!(complete.status, 403);
    // An operator cannot post deliveries; the refusal is journaled like any other.
    let post = s.deliver("acme", "payflow", "live", OPERATOR, b"{}").await;
    assert_eq!(post.status, 403);
    assert_eq!(post.error_code(), "forbidden");
    assert_no_gap(&s.report(ADMIN).await);
    s.stop().await;
}
