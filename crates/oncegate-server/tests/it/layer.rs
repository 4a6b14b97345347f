//! The exactly-once layer in front of a consumer's own axum handler, served on 127.0.0.1:0 and
//! posted to with signed payflow deliveries: the handler runs only on `process`, its answer
//! completes or fails the effect, and retries are answered without running it again.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::routing::post;
use axum::{Extension, Router};
use oncegate::{Gate, GateConfig};
use oncegate_core::contract::Encoding;
use oncegate_server::layer::{Effect, OnceLayer};
use oncegate_server::ProviderSecrets;
use serde_json::Value;

use crate::harness::{self, Backend, Kind, PAYFLOW_SECRET};

/// The consumer's handler: counts its runs and answers with the next scripted status. With a
/// store in `elsewhere`, it first records an outcome for its own effect through that store, as
/// another holder would, so the layer's own record of the handler's answer finds it taken.
#[derive(Clone, Default)]
struct Handler {
    runs: Arc<Mutex<Vec<Effect>>>,
    script: Arc<Mutex<VecDeque<StatusCode>>>,
    elsewhere: Arc<Mutex<Option<Arc<oncegate::store::Store>>>>,
}

async fn apply_refund(
    Extension(handler): Extension<Handler>,
    Extension(effect): Extension<Effect>,
    body: String,
) -> (StatusCode, String) {
    let v: Value = serde_json::from_str(&body).expect("the layer passes the body as received");
    let elsewhere = handler.elsewhere.lock().unwrap().clone();
    if let Some(store) = elsewhere {
        store
            .complete(
                &effect.id,
                effect.fencing,
                r#"{"by":"elsewhere"}"#,
                time::OffsetDateTime::now_utc(),
            )
            .await
            .expect("the effect is completed elsewhere first");
    }
    let status = handler
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(StatusCode::OK);
    let mut runs = handler.runs.lock().unwrap();
    runs.push(effect);
    let n = runs.len();
    (
        status,
        format!(
            r#"{{"refund":"re_{n}","amount":{},"status":{}}}"#,
            v["data"]["amount"],
            status.as_u16()
        ),
    )
}

struct Consumer {
    base: String,
    handler: Handler,
    client: reqwest::Client,
    backend: Backend,
    server: tokio::task::JoinHandle<()>,
}

impl Consumer {
    async fn start(kind: Kind) -> Consumer {
        let backend = Backend::new(kind).await;
        let store = oncegate::store::open(&backend.url).await.unwrap();
        let contract = harness::contract();
        let gate = Gate::new(GateConfig::new(
            contract.clone(),
            store,
            b"layer-test-salt".to_vec(),
        ));
        let mut secrets = ProviderSecrets::default();
        secrets
            .insert_for(&contract, "payflow", PAYFLOW_SECRET)
            .unwrap();
        let handler = Handler::default();
        let app = Router::new()
            .route("/hooks/payflow", post(apply_refund))
            .route_layer(OnceLayer::new(gate, "acme", "payflow", "live").secrets(secrets))
            .layer(Extension(handler.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Consumer {
            base,
            handler,
            client: reqwest::Client::new(),
            backend,
            server,
        }
    }

    async fn post(&self, body: &str, secret: &str) -> (u16, Value, reqwest::header::HeaderMap) {
        let ts = time::OffsetDateTime::now_utc().unix_timestamp();
        let sig =
            oncegate_server::sign_hmac(secret.as_bytes(), Encoding::Hex, Some(ts), body.as_bytes());
        let r = self
            .client
            .post(format!("{}/hooks/payflow", self.base))
            .header("content-type", "application/json")
            .header("x-payflow-signature", format!("sha256={sig}"))
            .header("x-payflow-timestamp", ts.to_string())
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
            headers,
        )
    }

    fn runs(&self) -> usize {
        self.handler.runs.lock().unwrap().len()
    }

    async fn stop(self) {
        self.server.abort();
        self.backend.cleanup().await;
    }
}

fn refund(reference: &str, amount: &str, attempt: u32) -> String {
    format!(
        r#"{{"type":"refund.created","sent_at":"2026-03-05T16:0{attempt}:11Z","attempt":{attempt},"data":{{"payment_id":"pay_7Hq2","request_ref":"{reference}","amount":{amount},"currency":"EUR"}}}}"#
    )
}

pub async fn the_layer_runs_the_handler_once_and_answers_retries_with_its_result(kind: Kind) {
    let c = Consumer::start(kind).await;

    // A first refund runs the handler; its answer is the provider's answer.
    let (status, body, headers) = c.post(&refund("RR-1", "1500", 1), PAYFLOW_SECRET).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["refund"], "re_1");
    assert_eq!(headers["oncegate-action"], "process");
    assert_eq!(c.runs(), 1);

    // The provider retries it re-encoded (15e2): the handler does not run again, and the
    // answer carries the first run's result.
    let (status, body, headers) = c.post(&refund("RR-1", "15e2", 2), PAYFLOW_SECRET).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["action"], "ignore");
    assert_eq!(body["effect"]["result"]["refund"], "re_1");
    assert_eq!(headers["oncegate-action"], "ignore");
    assert_eq!(c.runs(), 1);

    // Fifty concurrent retries: none runs the handler.
    let retry = refund("RR-1", "1500", 3);
    let retries: Vec<_> = (0..50).map(|_| c.post(&retry, PAYFLOW_SECRET)).collect();
    for (status, body, _) in futures_util::future::join_all(retries).await {
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["action"], "ignore");
    }
    assert_eq!(c.runs(), 1);

    // A reused reference with another amount is a collision: kept, not run, 202.
    let (status, body, _) = c.post(&refund("RR-1", "900", 4), PAYFLOW_SECRET).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["action"], "quarantine");
    assert_eq!(c.runs(), 1);

    // A forged signature is refused before the handler, and journaled.
    let (status, body, _) = c.post(&refund("RR-9", "100", 1), "not-the-secret").await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "bad_signature");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("journaled as dlv_"));
    assert_eq!(c.runs(), 1);
    c.stop().await;
}

pub async fn a_failing_handler_is_retried_and_a_permanent_failure_is_kept(kind: Kind) {
    let c = Consumer::start(kind).await;
    // The handler fails with a 500: the effect fails retryably, so the provider's retry runs
    // it again, under a newer fencing token.
    c.handler
        .script
        .lock()
        .unwrap()
        .extend([StatusCode::INTERNAL_SERVER_ERROR]);
    let (status, body, _) = c.post(&refund("RR-5", "500", 1), PAYFLOW_SECRET).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(c.runs(), 1);
    let (status, body, _) = c.post(&refund("RR-5", "500", 2), PAYFLOW_SECRET).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["refund"], "re_2");
    {
        let runs = c.handler.runs.lock().unwrap();
        assert_eq!(
            runs[0].id, runs[1].id,
            "one effect, run twice after a failure"
        );
        assert!(runs[1].fencing > runs[0].fencing);
    }
    // Completed now: a third delivery is answered with the second run's result.
    let (_, body, _) = c.post(&refund("RR-5", "500", 3), PAYFLOW_SECRET).await;
    assert_eq!(body["action"], "ignore");
    assert_eq!(body["effect"]["result"]["refund"], "re_2");

    // A 422 is the handler refusing for good: the effect fails permanently and a retry is
    // answered with that failure, without running the handler again.
    c.handler
        .script
        .lock()
        .unwrap()
        .extend([StatusCode::UNPROCESSABLE_ENTITY]);
    let (status, _, _) = c.post(&refund("RR-6", "600", 1), PAYFLOW_SECRET).await;
    assert_eq!(status, 422);
    let runs = c.runs();
    let (status, body, _) = c.post(&refund("RR-6", "600", 2), PAYFLOW_SECRET).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["action"], "ignore");
    assert_eq!(body["effect"]["state"], "failed", "{body}");
    assert_eq!(c.runs(), runs);
    c.stop().await;
}

/// When the handler's outcome cannot be recorded, the layer answers what the error is, from
/// the service's one error mapping: an effect whose outcome another holder already recorded is
/// a 409 (`outcome_recorded`), which no retry would cure, never the 503 that a provider retries for
/// days; and on PostgreSQL a statement the database refuses is a 500 with a correlation id.
pub async fn an_outcome_the_store_refuses_is_answered_as_its_error(kind: Kind) {
    let c = Consumer::start(kind).await;
    let other = oncegate::store::open(&c.backend.url).await.unwrap();
    *c.handler.elsewhere.lock().unwrap() = Some(other);
    let (status, body, _) = c.post(&refund("RR-8", "800", 1), PAYFLOW_SECRET).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "outcome_recorded", "{body}");
    assert_eq!(c.runs(), 1);
    *c.handler.elsewhere.lock().unwrap() = None;
    // The outcome recorded first stands: a retry is answered with it.
    let (status, body, _) = c.post(&refund("RR-8", "800", 2), PAYFLOW_SECRET).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["effect"]["result"]["by"], "elsewhere", "{body}");
    assert_eq!(c.runs(), 1);

    if c.backend.admin.is_some() {
        let admin = harness::pg_admin(&c.backend.url).await;
        admin
            .batch_execute(
                "CREATE FUNCTION refuse_result() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF NEW.result LIKE '%\"amount\":900%' THEN \
                 RAISE EXCEPTION 'refused by a trigger' USING ERRCODE = 'P0001'; END IF; RETURN NEW; END $$; \
                 CREATE TRIGGER refuse_result BEFORE UPDATE ON effects FOR EACH ROW EXECUTE FUNCTION refuse_result()",
            )
            .await
            .unwrap();
        let (status, body, _) = c.post(&refund("RR-9", "900", 1), PAYFLOW_SECRET).await;
        assert_eq!(status, 500, "{body}");
        assert_eq!(body["error"]["code"], "internal", "{body}");
        assert!(body["error"]["correlation_id"].is_string(), "{body}");
    }
    c.stop().await;
}
