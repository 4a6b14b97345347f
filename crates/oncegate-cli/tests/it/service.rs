//! The real service in-process for the CLI tests that post deliveries over HTTP and then read
//! the same store with the binary.

use std::sync::Arc;

use oncegate_server::{ApiToken, ServiceConfig};
use serde_json::Value;

/// The example contract, by path (the binary reads it too).
pub(crate) const CONTRACT: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/oncegate.toml");

/// Serves the API on `url` with `salt` and the `tokens` list (reconciler off); returns the base
/// URL and the stop switch.
pub(crate) async fn start(
    url: &str,
    salt: &str,
    tokens: &str,
) -> (String, tokio::sync::oneshot::Sender<()>) {
    let store = oncegate::store::open(url).await.expect("the store opens");
    let text = std::fs::read_to_string(CONTRACT).unwrap();
    let contract = oncegate_core::contract::parse(CONTRACT, &text).unwrap();
    let mut config = ServiceConfig::new(Arc::new(contract), store, salt.as_bytes().to_vec());
    config.tokens = ApiToken::parse_list(tokens).unwrap();
    config.reconciler.every = None;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(oncegate_server::serve(listener, config, async move {
        let _ = rx.await;
    }));
    (base, tx)
}

/// POSTs a JSON body with a bearer token and returns the (successful) answer.
pub(crate) async fn post(base: &str, token: &str, path: &str, body: String) -> Value {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.unwrap()
}
