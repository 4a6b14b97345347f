//! Effects: complete, fail and heartbeat with the reservation token; fencing and leases.

use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::harness::*;

pub async fn effect_outcomes_need_the_current_token(kind: Kind) {
    let s = Service::start(kind).await;
    let body = capture("pay_f1", "cap_f1", "1000", "2024-05-01T10:00:00Z");
    let first = s.payflow("acme", &body).await;
    assert_eq!(first.str("action"), "process");
    let eff = first.body["effect"]["id"].as_str().unwrap().to_owned();
    let t1 = first.body["reservation"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(t1.starts_with("1."), "{t1}");

    let hb = s
        .post_json(
            &format!("/v1/effects/{eff}/heartbeat"),
            Some(INGEST),
            json!({"token": t1}),
        )
        .await;
    assert_eq!(hb.status, 200, "{}", hb.text);
    OffsetDateTime::parse(hb.str("lease_expires_at"), &Rfc3339).expect("an RFC 3339 lease");

    // Tokens are bound to their effect and fencing number.
    let forged = format!("2.{}", &t1[2..]);
    let f = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": forged, "result": {}}),
        )
        .await;
    assert_eq!(f.status, 400, "{}", f.text);
    assert_eq!(f.error_code(), "invalid_token");
    let other = s
        .payflow(
            "acme",
            &capture("pay_f2", "cap_f2", "5", "2024-05-01T10:00:00Z"),
        )
        .await;
    let other_eff = other.body["effect"]["id"].as_str().unwrap().to_owned();
    let wrong = s
        .post_json(
            &format!("/v1/effects/{other_eff}/complete"),
            Some(INGEST),
            json!({"token": t1, "result": {}}),
        )
        .await;
    assert_eq!(wrong.status, 400);

    // A retryable failure lets the next delivery take over under fencing 2.
    let failed = s
        .post_json(
            &format!("/v1/effects/{eff}/fail"),
            Some(INGEST),
            json!({"token": t1, "retryable": true, "error": "gateway timeout"}),
        )
        .await;
    assert_eq!(failed.status, 200, "{}", failed.text);
    let retry = s.payflow("acme", &body).await;
    assert_eq!(retry.str("action"), "process", "{}", retry.text);
    assert_eq!(retry.body["effect"]["id"], eff.as_str());
    assert_eq!(retry.body["reservation"]["fencing"], 2);
    assert!(
        retry.body["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "retry_after_failure"),
        "{}",
        retry.text
    );
    let t2 = retry.body["reservation"]["token"]
        .as_str()
        .unwrap()
        .to_owned();

    // The superseded holder is refused: 409.
    let stale = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": t1, "result": {"x": 1}}),
        )
        .await;
    assert_eq!(stale.status, 409, "{}", stale.text);
    assert_eq!(stale.error_code(), "stale_token");
    let stale_hb = s
        .post_json(
            &format!("/v1/effects/{eff}/heartbeat"),
            Some(INGEST),
            json!({"token": t1}),
        )
        .await;
    assert_eq!(stale_hb.status, 409);
    let stale_fail = s
        .post_json(
            &format!("/v1/effects/{eff}/fail"),
            Some(INGEST),
            json!({"token": t1, "retryable": false, "error": "x"}),
        )
        .await;
    assert_eq!(stale_fail.status, 409);

    let done = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": t2, "result": {"ledger": "tx_9"}}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert_eq!(done.body["state"], "completed");
    let twice = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": t2, "result": {"ledger": "tx_9"}}),
        )
        .await;
    // A complete retried after it committed (its answer lost) is done again;
    // the same token with another result is refused: the outcome stands.
    assert_eq!(twice.status, 200, "{}", twice.text);
    assert_eq!(twice.body["state"], "completed");
    let other_result = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": t2, "result": {"ledger": "tx_10"}}),
        )
        .await;
    assert_eq!(other_result.status, 409, "{}", other_result.text);
    assert_eq!(other_result.error_code(), "outcome_recorded");

    // A permanent failure is returned to later deliveries instead of re-running.
    let t_other = other.body["reservation"]["token"].as_str().unwrap();
    let perm = s
        .post_json(
            &format!("/v1/effects/{other_eff}/fail"),
            Some(INGEST),
            json!({"token": t_other, "retryable": false, "error": {"code": "card_declined"}}),
        )
        .await;
    assert_eq!(perm.status, 200, "{}", perm.text);
    let after = s
        .payflow(
            "acme",
            &capture("pay_f2", "cap_f2", "5", "2024-05-01T10:30:00Z"),
        )
        .await;
    assert_eq!(after.str("action"), "ignore", "{}", after.text);
    assert_eq!(after.body["effect"]["state"], "failed");

    // Unknown effects, bad JSON and missing fields answer in the error shape.
    let missing = s
        .post_json(
            "/v1/effects/eff_00000000000000000000000000/complete",
            Some(INGEST),
            json!({"token": t2, "result": {}}),
        )
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), "not_found");
    let garbage = s
        .request(
            reqwest::Method::POST,
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            &[],
            Some(b"{not json".to_vec()),
        )
        .await;
    assert_eq!(garbage.status, 400);
    assert_eq!(garbage.error_code(), "invalid_request");
    let no_token = s
        .post_json(
            &format!("/v1/effects/{eff}/fail"),
            Some(INGEST),
            json!({"retryable": true}),
        )
        .await;
    assert_eq!(no_token.status, 400);
    let anon = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            None,
            json!({"token": t2}),
        )
        .await;
    assert_eq!(anon.status, 401);

    let proof = s.proof(first.str("delivery_id")).await;
    assert_eq!(proof.body["effect"]["state"], "completed", "{}", proof.text);
    assert_eq!(proof.body["effect"]["result"]["ledger"], "tx_9");
    s.stop().await;
}

pub async fn an_expired_lease_is_lost_not_rerun(kind: Kind) {
    // The background sweep is off so it cannot expire the lease between the clock's jump and
    // the next post: this test is about what happens on access.
    let s = Service::start_with(kind, |c| {
        c.lease = Some(std::time::Duration::from_secs(5));
        c.lease_sweep = false;
    })
    .await;
    let body = capture("pay_l1", "cap_l1", "1000", "2024-05-01T10:00:00Z");
    let first = s.payflow("acme", &body).await;
    assert_eq!(first.str("action"), "process");
    let lease = OffsetDateTime::parse(
        first.body["reservation"]["lease_expires_at"]
            .as_str()
            .unwrap(),
        &Rfc3339,
    )
    .unwrap();
    let ahead = (lease - s.now()).whole_seconds();
    assert!(
        (3..=6).contains(&ahead),
        "the configured 5 s lease, got {ahead} s"
    );
    let eff = first.body["effect"]["id"].as_str().unwrap().to_owned();
    let token = first.body["reservation"]["token"]
        .as_str()
        .unwrap()
        .to_owned();

    s.advance(60);
    let hb = s
        .post_json(
            &format!("/v1/effects/{eff}/heartbeat"),
            Some(INGEST),
            json!({"token": token}),
        )
        .await;
    assert_eq!(hb.status, 409, "{}", hb.text);
    let late = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": {}}),
        )
        .await;
    assert_eq!(late.status, 409, "{}", late.text);
    // A critical effect whose outcome is unknown is verified before any new attempt.
    let retry = s.payflow("acme", &body).await;
    assert_eq!(retry.str("action"), "reconcile", "{}", retry.text);
    assert_eq!(retry.body["effect"]["state"], "unknown");

    // A reversible one is taken over under a new fencing token.
    let notify = r#"{"event_id":"evt_n1","customer":"c_1","sent_at":"2024-05-01T10:00:00Z"}"#;
    let n1 = s
        .shopline(
            "acme",
            "customers/notify",
            "msg_n1",
            notify,
            SHOPLINE_KEY,
            s.now().unix_timestamp(),
        )
        .await;
    assert_eq!(n1.str("action"), "process", "{}", n1.text);
    s.advance(60);
    let n2 = s
        .shopline(
            "acme",
            "customers/notify",
            "msg_n2",
            &notify.replace("10:00:00", "10:01:00"),
            SHOPLINE_KEY,
            s.now().unix_timestamp(),
        )
        .await;
    assert_eq!(n2.str("action"), "process", "{}", n2.text);
    assert_eq!(n2.body["effect"]["id"], n1.body["effect"]["id"]);
    assert_eq!(n2.body["reservation"]["fencing"], 2);
    assert!(
        n2.body["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "takeover"),
        "{}",
        n2.text
    );
    s.stop().await;
}
