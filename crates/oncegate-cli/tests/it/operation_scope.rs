//! Operation scope through the real binary: two event types of one operation make one effect,
//! and `explain` shows the shared scope and the types that share it.

use crate::corpus::{contract, serve_with};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn explain_shows_the_scope_two_types_share() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("shared.db").display());
    let served = serve_with(&db, &contract("operation-scope.toml"));
    let http = reqwest::Client::new();
    let post = |body: &'static str| {
        http.post(format!("{}/v1/deliveries/acme/pay/live", served.base))
            .bearer_auth("ingest-token")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let first: Value =
        post(r#"{"type":"payment.succeeded","data":{"payment_id":"p1","amount":5}}"#)
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(first["action"], "process", "{first}");
    let second: Value = post(r#"{"type":"charge.captured","data":{"payment_id":"p1","amount":5}}"#)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(second["action"], "ignore", "{second}");
    assert_eq!(second["effect"]["id"], first["effect"]["id"], "{second}");

    let id = second["delivery_id"].as_str().unwrap();
    let explained = std::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["explain", id, "--store", &db])
        .output()
        .expect("explain runs");
    assert!(explained.status.success(), "{explained:?}");
    let explained = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.contains("scope      acme/pay/live/operation:capture/p1"),
        "{explained}"
    );
    assert!(
        explained
            .contains("shared     one effect for the types charge.captured, payment.succeeded"),
        "{explained}"
    );
    assert!(
        explained.contains(first["delivery_id"].as_str().unwrap()),
        "{explained}"
    );
}
