//! Where each scenario gets its running service: a real HTTP server on 127.0.0.1:0 over a
//! temporary SQLite file or a fresh PostgreSQL database (dropped afterwards), the shipped
//! example contract, test secrets and tokens, and a clock the test can move forward.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

pub use oncegate::store::testing::pg_admin;
use oncegate::store::testing::TestDatabase;
use oncegate_core::contract::{self, Contract, Encoding};
use oncegate_server::{ApiToken, ProviderSecrets, ServiceConfig};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const CONTRACT: &str = include_str!("../../../../examples/oncegate.toml");

pub const PAYFLOW_SECRET: &str = "payflow-test-signing-secret";
/// `whsec_` + base64("shopline-test-signing-secret").
pub const SHOPLINE_SECRET: &str = "whsec_c2hvcGxpbmUtdGVzdC1zaWduaW5nLXNlY3JldA==";
pub const SHOPLINE_KEY: &[u8] = b"shopline-test-signing-secret";

pub const ADMIN: &str = "admin-token-0001";
pub const INGEST: &str = "ingest-token-0001";
pub const OPERATOR: &str = "operator-token-0001";
pub const INGEST_ACME: &str = "ingest-acme-0001";
pub const OPERATOR_ACME: &str = "operator-acme-0001";
pub const INGEST_BETA: &str = "ingest-beta-0001";
pub const OPERATOR_BETA: &str = "operator-beta-0001";

const TOKENS: &str =
    "admin:*:admin-token-0001; ingest:*:ingest-token-0001; operator:*:operator-token-0001; \
    ingest:acme:ingest-acme-0001; operator:acme:operator-acme-0001; \
    ingest:beta:ingest-beta-0001; operator:beta:operator-beta-0001";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// One backend instance for one test.
pub struct Backend {
    pub url: String,
    db: TestDatabase,
    /// (admin URL, database name) for PostgreSQL.
    pub admin: Option<(String, String)>,
}

impl Backend {
    pub async fn new(kind: Kind) -> Backend {
        let db = match kind {
            Kind::Sqlite => TestDatabase::sqlite(),
            Kind::Postgres => TestDatabase::postgres("oncegate_server_test").await,
        };
        Backend {
            url: db.url.clone(),
            admin: db.admin.clone(),
            db,
        }
    }

    /// Drops the test database.
    pub async fn cleanup(self) {
        self.db.cleanup().await;
    }
}

pub fn contract() -> Arc<Contract> {
    Arc::new(
        contract::parse("examples/oncegate.toml", CONTRACT).expect("the example contract is valid"),
    )
}

/// A running service and a client for it.
pub struct Service {
    pub base: String,
    pub http: reqwest::Client,
    /// Seconds added to the real time by the service's clock.
    pub offset: Arc<AtomicI64>,
    pub contract: Arc<Contract>,
    pub backend: Option<Backend>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

/// A response: status and JSON body (`Value::Null` when the body is not JSON).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub text: String,
}

impl Answer {
    /// Asserts the contract's error shape and returns the code.
    pub fn error_code(&self) -> &str {
        let e = &self.body["error"];
        assert!(
            e["code"].is_string() && e["message"].is_string(),
            "not the error shape: {} {}",
            self.status,
            self.text
        );
        e["code"].as_str().unwrap()
    }

    pub fn str(&self, field: &str) -> &str {
        self.body[field]
            .as_str()
            .unwrap_or_else(|| panic!("{field} is not a string in {}", self.text))
    }
}

impl Service {
    pub async fn start(kind: Kind) -> Service {
        Service::start_with(kind, |_| {}).await
    }

    /// A service with the periodic reconciler off (nothing resolves behind the test's back;
    /// `reconcile_once` runs the passes), and its config, whose store the test reaches directly.
    pub async fn without_the_poll(kind: Kind) -> (Service, ServiceConfig) {
        let mut captured = None;
        let s = Service::start_with(kind, |c| {
            c.reconciler.every = None;
            captured = Some(c.clone());
        })
        .await;
        (s, captured.expect("the config was built"))
    }

    pub async fn start_with(kind: Kind, tweak: impl FnOnce(&mut ServiceConfig)) -> Service {
        let backend = Backend::new(kind).await;
        let url = backend.url.clone();
        Service::start_on(backend, &url, tweak).await
    }

    /// A service on `backend`'s database reached through `store` (a proxy in front of it, say).
    pub async fn start_on(
        backend: Backend,
        store: &str,
        tweak: impl FnOnce(&mut ServiceConfig),
    ) -> Service {
        let store = oncegate::store::open(store)
            .await
            .unwrap_or_else(|e| panic!("opening {store}: {e}"));
        let contract = contract();
        let mut secrets = ProviderSecrets::default();
        secrets
            .insert_for(&contract, "payflow", PAYFLOW_SECRET)
            .expect("payflow secret");
        secrets
            .insert_for(&contract, "shopline", SHOPLINE_SECRET)
            .expect("shopline secret");
        let offset = Arc::new(AtomicI64::new(0));
        let clock_offset = offset.clone();
        let mut config = ServiceConfig::new(contract.clone(), store, b"test-salt".to_vec());
        config.tokens = ApiToken::parse_list(TOKENS).expect("test tokens");
        config.secrets = secrets;
        config.clock = Arc::new(move || {
            OffsetDateTime::now_utc() + time::Duration::seconds(clock_offset.load(Ordering::SeqCst))
        });
        tweak(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(oncegate_server::serve(listener, config, async move {
            let _ = rx.await;
        }));
        Service {
            base: format!("http://{addr}"),
            http: reqwest::Client::new(),
            offset,
            contract,
            backend: Some(backend),
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// The service's clock.
    pub fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc() + time::Duration::seconds(self.offset.load(Ordering::SeqCst))
    }

    pub fn advance(&self, seconds: i64) {
        self.offset.fetch_add(seconds, Ordering::SeqCst);
    }

    /// Asks the server to stop accepting connections; `stop` then waits for it.
    pub fn signal_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Whether the server task has returned.
    pub fn stopped(&self) -> bool {
        match &self.task {
            None => true,
            Some(t) => t.is_finished(),
        }
    }

    /// Shuts the server down gracefully (it must return cleanly) and drops the database.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let result = tokio::time::timeout(std::time::Duration::from_secs(20), task)
                .await
                .expect("the server stops within 20 s of the shutdown signal")
                .expect("the server task does not panic");
            result.expect("serve returns Ok after a graceful shutdown");
        }
        if let Some(b) = self.backend.take() {
            b.cleanup().await;
        }
    }

    async fn answer(response: reqwest::Response) -> Answer {
        let status = response.status().as_u16();
        let text = response.text().await.expect("a response body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer { status, body, text }
    }

    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> Answer {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        Service::answer(req.send().await.expect("the request is sent")).await
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Answer {
        self.request(reqwest::Method::GET, path, token, &[], None)
            .await
    }

    pub async fn post_json(&self, path: &str, token: Option<&str>, body: Value) -> Answer {
        self.request(
            reqwest::Method::POST,
            path,
            token,
            &[("content-type", "application/json".to_owned())],
            Some(serde_json::to_vec(&body).unwrap()),
        )
        .await
    }

    /// Posts a raw delivery with a bearer token.
    pub async fn deliver(
        &self,
        tenant: &str,
        provider: &str,
        env: &str,
        token: &str,
        body: &[u8],
    ) -> Answer {
        self.request(
            reqwest::Method::POST,
            &format!("/v1/deliveries/{tenant}/{provider}/{env}"),
            Some(token),
            &[("content-type", "application/json".to_owned())],
            Some(body.to_vec()),
        )
        .await
    }

    /// Posts a payflow delivery signed as payflow does (HMAC-SHA-256 of `timestamp.body`).
    pub async fn payflow(&self, tenant: &str, body: &str) -> Answer {
        self.payflow_signed(
            tenant,
            body,
            PAYFLOW_SECRET.as_bytes(),
            self.now().unix_timestamp(),
        )
        .await
    }

    pub async fn payflow_signed(&self, tenant: &str, body: &str, secret: &[u8], ts: i64) -> Answer {
        let sig = oncegate_server::sign_hmac(secret, Encoding::Hex, Some(ts), body.as_bytes());
        self.request(
            reqwest::Method::POST,
            &format!("/v1/deliveries/{tenant}/payflow/live"),
            None,
            &[
                ("content-type", "application/json".to_owned()),
                ("x-payflow-signature", format!("sha256={sig}")),
                ("x-payflow-timestamp", ts.to_string()),
            ],
            Some(body.as_bytes().to_vec()),
        )
        .await
    }

    /// Posts a shopline delivery signed with Standard Webhooks.
    pub async fn shopline(
        &self,
        tenant: &str,
        topic: &str,
        msg_id: &str,
        body: &str,
        key: &[u8],
        ts: i64,
    ) -> Answer {
        let sig = oncegate_server::sign_standard_webhooks(key, msg_id, ts, body.as_bytes());
        self.request(
            reqwest::Method::POST,
            &format!("/v1/deliveries/{tenant}/shopline/live"),
            None,
            &[
                ("content-type", "application/json".to_owned()),
                ("x-shopline-topic", topic.to_owned()),
                ("x-shopline-delivery", format!("dl-{msg_id}")),
                ("webhook-id", msg_id.to_owned()),
                ("webhook-timestamp", ts.to_string()),
                ("webhook-signature", sig),
            ],
            Some(body.as_bytes().to_vec()),
        )
        .await
    }

    pub async fn proof(&self, delivery: &str) -> Answer {
        self.get(&format!("/v1/deliveries/{delivery}"), Some(OPERATOR))
            .await
    }

    pub async fn report(&self, token: &str) -> Answer {
        self.get("/v1/report", Some(token)).await
    }
}

/// Claims released work (up to 10 effects, 30 s leases) as an ingest caller.
pub async fn claim(s: &Service) -> Vec<Value> {
    let c = s
        .post_json(
            "/v1/work/claim",
            Some(INGEST),
            serde_json::json!({"limit": 10, "lease_seconds": 30}),
        )
        .await;
    assert_eq!(c.status, 200, "{}", c.text);
    c.body["items"].as_array().unwrap().clone()
}

/// A payflow capture; `amount` is written as given so tests can vary its spelling.
pub fn capture(payment: &str, capture: &str, amount: &str, sent_at: &str) -> String {
    format!(
        r#"{{"type":"payment.captured","sent_at":"{sent_at}","attempt":1,"data":{{"payment_id":"{payment}","capture_id":"{capture}","amount":{amount},"currency":"EUR","captured_at":"2024-05-01T10:00:00Z","customer_email":"ada@example.com"}}}}"#
    )
}

/// A payflow refund with no request reference (the seed's case).
pub fn refund(payment: &str, amount: &str, sent_at: &str) -> String {
    format!(
        r#"{{"type":"refund.created","sent_at":"{sent_at}","attempt":1,"data":{{"payment_id":"{payment}","amount":{amount},"currency":"EUR","customer_email":"ada@example.com"}}}}"#
    )
}

/// The delivery id a refusal's message names ("… (journaled as dlv_…).").
pub fn journaled_id(a: &Answer) -> String {
    let msg = a.body["error"]["message"].as_str().unwrap_or_default();
    let at = msg
        .find("journaled as ")
        .unwrap_or_else(|| panic!("no journaled id in {msg:?}"));
    msg[at + "journaled as ".len()..]
        .trim_end_matches(").")
        .trim_end_matches('.')
        .to_owned()
}

/// Report rows for a tenant, asserting every row's gap is zero.
pub fn assert_no_gap(report: &Answer) {
    assert_eq!(report.status, 200, "{}", report.text);
    let rows = report.body["rows"].as_array().expect("rows");
    for r in rows {
        assert_eq!(r["unexplained_gap"], 0, "a row has an unexplained gap: {r}");
    }
    assert_eq!(
        report.body["total"]["unexplained_gap"], 0,
        "{}",
        report.text
    );
}
