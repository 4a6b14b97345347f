//! Data-shaped input never looks like an outage: NUL characters in a body's values and keys
//! are decided and their proof is readable on both stores, and path segments that are not
//! clean text are refused with a 400, never a 503.

use serde_json::Value;

use crate::harness::*;

pub async fn nul_in_values_and_keys_is_decided_and_provable(kind: Kind) {
    let s = Service::start(kind).await;
    let bodies = [
        // In a value the key is made of (the refund's payment id is its resource too).
        r#"{"type":"refund.created","sent_at":"2024-05-03T09:00:00Z","attempt":1,"data":{"payment_id":"pay\u0000x","amount":100,"currency":"EUR"}}"#,
        // In a member name.
        r#"{"type":"refund.created","sent_at":"2024-05-03T09:00:00Z","attempt":1,"data":{"payment_id":"pay_n2","amount":100,"currency":"EUR","no\u0000te":"x"}}"#,
        // In the event type itself (no contract for it: kept for reconciliation).
        r#"{"type":"refund.\u0000created","data":{"payment_id":"pay_n3","amount":100,"currency":"EUR"}}"#,
        // In a discriminant.
        r#"{"type":"refund.created","sent_at":"2024-05-03T09:00:00Z","attempt":1,"data":{"payment_id":"pay_n4","amount":100,"currency":"EU\u0000R"}}"#,
    ];
    for body in bodies {
        let a = s.payflow("acme", body).await;
        assert_eq!(a.status, 200, "{body}: {}", a.text);
        let id = a.str("delivery_id").to_owned();
        let proof = s.proof(&id).await;
        assert_eq!(proof.status, 200, "{body}: {}", proof.text);
        assert_eq!(proof.body["action"], a.body["action"], "{}", proof.text);
        assert_eq!(proof.body["delivery_id"], a.body["delivery_id"]);
        // The payload reads back byte for byte.
        let payload = proof.body["payload"].as_str().map(str::to_owned);
        if let Some(p) = payload {
            assert_eq!(p, body);
        }
    }
    // A retry of the first is recognised: the NUL made it into the key intact.
    let again = s.payflow("acme", bodies[0]).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_ne!(again.str("action"), "process", "{}", again.text);
    assert_no_gap(&s.report(OPERATOR).await);
    s.stop().await;
}

pub async fn unclean_path_segments_are_refused_with_400(kind: Kind) {
    let s = Service::start(kind).await;
    for path in [
        "/v1/deliveries/ac%00me/payflow/live",
        "/v1/deliveries/acme/pay%00flow/live",
        "/v1/deliveries/acme/payflow/li%00ve",
        "/v1/deliveries/acme/payflow/li%0Ave",
        "/v1/deliveries/acme/payflow/li%FFve",
    ] {
        let a = s
            .request(
                reqwest::Method::POST,
                path,
                Some(INGEST),
                &[("content-type", "application/json".to_owned())],
                Some(br#"{"type":"refund.created"}"#.to_vec()),
            )
            .await;
        assert_eq!(a.status, 400, "{path}: {}", a.text);
        assert!(!a.error_code().is_empty());
        let _: &Value = &a.body;
    }
    // The service still answers.
    let ok = s
        .payflow("acme", &refund("pay_after", "100", "2024-05-03T09:00:00Z"))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    s.stop().await;
}
