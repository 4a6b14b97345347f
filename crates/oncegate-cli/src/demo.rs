//! `oncegate demo`: the source story replayed against the real service, in-process, over real
//! HTTP on a temporary SQLite store. A payment event with no event id arrives twice, re-encoded;
//! two legitimate refunds of the same amount arrive minutes apart; one refund is retried. The
//! second refund is held for reconciliation instead of being dropped, the reconciler settles it
//! against payflow's refund list (a small local authority the demo starts), and the report
//! closes with a zero unexplained gap.

use anyhow::{bail, Context, Result};
use hmac::{Hmac, Mac};
use oncegate_core::contract;
use oncegate_server::{ApiToken, ProviderSecrets, Role, ServiceConfig};
use serde_json::{json, Value};
use sha2::Sha256;
use std::sync::Arc;
use time::OffsetDateTime;

const CONTRACT: &str = include_str!("../../../examples/oncegate.toml");
const SIGNING_SECRET: &str = "demo-signing-secret";
const ADMIN: &str = "demo-admin-token";

struct Demo {
    http: reqwest::Client,
    base: String,
}

impl Demo {
    /// Posts a payflow delivery signed as the provider signs it: HMAC-SHA-256 of
    /// `timestamp.body`, hex, prefixed `sha256=`.
    async fn deliver(&self, body: &str) -> Result<Value> {
        let ts = OffsetDateTime::now_utc().unix_timestamp().to_string();
        let mut mac =
            Hmac::<Sha256>::new_from_slice(SIGNING_SECRET.as_bytes()).expect("any key length");
        mac.update(ts.as_bytes());
        mac.update(b".");
        mac.update(body.as_bytes());
        let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        let response = self
            .http
            .post(format!("{}/v1/deliveries/acme/payflow/live", self.base))
            .header("x-payflow-timestamp", ts)
            .header("x-payflow-signature", signature)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await?;
        answer(response).await
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(ADMIN);
        if let Some(b) = body {
            request = request.json(&b);
        }
        answer(request.send().await?).await
    }
}

async fn answer(response: reqwest::Response) -> Result<Value> {
    let status = response.status();
    let value: Value = response
        .json()
        .await
        .context("the service answered something that is not JSON")?;
    if !status.is_success() {
        bail!("the service answered {status}: {value}");
    }
    Ok(value)
}

fn show(step: &str, d: &Value) -> Result<()> {
    let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let strategy = match d.get("strategy") {
        Some(Value::Object(st)) => format!(
            "{}@{} {} {}",
            st.get("name").and_then(Value::as_str).unwrap_or("?"),
            st.get("version")
                .map(ToString::to_string)
                .unwrap_or_default(),
            st.get("level").and_then(Value::as_str).unwrap_or("?"),
            st.get("confidence").and_then(Value::as_str).unwrap_or("?")
        ),
        _ => "no strategy".to_owned(),
    };
    outln!("{step}")?;
    outln!(
        "   → {:<10} {}  [{strategy}]",
        s("action").to_uppercase(),
        s("delivery_id")
    )?;
    outln!("     {}", s("reason"))?;
    if let Some(r) = d.get("reference_delivery_id").and_then(Value::as_str) {
        outln!("     reference delivery: {r}")?;
    }
    if let Some(result) = d
        .get("effect")
        .and_then(|e| e.get("result"))
        .filter(|r| !r.is_null())
    {
        outln!("     existing result: {result}")?;
    }
    if let Some(flags) = d
        .get("flags")
        .and_then(Value::as_array)
        .filter(|f| !f.is_empty())
    {
        let f: Vec<&str> = flags.iter().filter_map(Value::as_str).collect();
        outln!("     flags: {}", f.join(", "))?;
    }
    Ok(())
}

fn field<'v>(v: &'v Value, path: &str) -> Result<&'v Value> {
    v.pointer(path)
        .with_context(|| format!("the service's answer has no {path}: {v}"))
}

/// Waits (bounded) for the reconciler to settle a delivery's queue item, and tells how.
async fn settled(demo: &Demo, delivery: &str, who: &str, then: &str) -> Result<()> {
    let started = std::time::Instant::now();
    loop {
        let proof = demo
            .call(
                reqwest::Method::GET,
                &format!("/v1/deliveries/{delivery}"),
                None,
            )
            .await?;
        if let Some(r) = proof.get("resolution").filter(|r| !r.is_null()) {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
            let waited = started.elapsed().as_millis();
            outln!(
                "     {delivery}: resolved {} (authoritative ref {}) by the {} {waited} ms after it was answered: {who}, {then}",
                s("outcome"),
                s("authoritative_ref"),
                s("by"),
            )?;
            return Ok(());
        }
        if started.elapsed() > std::time::Duration::from_secs(10) {
            bail!("the reconciler did not settle {delivery} within 10 s");
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

async fn complete(demo: &Demo, decision: &Value, result: Value) -> Result<()> {
    let effect = field(decision, "/effect/id")?
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let token = field(decision, "/reservation/token")?.clone();
    demo.call(
        reqwest::Method::POST,
        &format!("/v1/effects/{effect}/complete"),
        Some(json!({ "token": token, "result": result })),
    )
    .await?;
    outln!("     the worker applies it and completes {effect} with {result}")?;
    Ok(())
}

/// payflow's refund list for pay_7Hq2, as its API would answer it: two refunds of 15.00 EUR.
const REFUNDS: &str = r#"{"refunds":[{"id":"re_1Fa2","amount":1500,"currency":"EUR","created":"2026-03-05T16:02:10Z"},{"id":"re_3Kd8","amount":1500,"currency":"EUR","created":"2026-03-05T16:06:39Z"}]}"#;

/// Starts a tiny stand-in for payflow's API on 127.0.0.1:0 that answers every request with
/// [`REFUNDS`], and returns its base URL.
async fn authority() -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                // A GET has no body: the request ends with its headers.
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{REFUNDS}",
                    REFUNDS.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    Ok(base)
}

pub async fn run() -> Result<()> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let db = dir.path().join("demo.db");
    let store =
        oncegate::store::open_at(&oncegate::store::StoreLocation::Sqlite(db.clone())).await?;
    let authority = authority().await?;
    // The example contract, with payflow's authority pointed at the local stand-in (which
    // needs no API token).
    let text = CONTRACT
        .replace("http://127.0.0.1:8089", &authority)
        .replace(
            "  auth_header = \"authorization\"\n  auth_secret_env = \"PAYFLOW_API_TOKEN\"\n",
            "",
        );
    let contract = Arc::new(
        contract::parse("examples/oncegate.toml", &text).map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let mut config = ServiceConfig::new(contract.clone(), store.clone(), b"demo-key-salt".to_vec());
    // What the demo reads back (the proof, the report) it reads through a gate of its own.
    let reader = oncegate::Gate::new(oncegate::GateConfig::new(
        contract.clone(),
        store,
        Vec::new(),
    ));
    let mut secrets = ProviderSecrets::default();
    secrets
        .insert_for(&contract, "payflow", SIGNING_SECRET)
        .map_err(anyhow::Error::msg)?;
    config.secrets = secrets;
    config.tokens = vec![ApiToken {
        secret: ADMIN.to_owned(),
        role: Role::Admin,
        tenants: None,
    }];
    // The reconciler runs inside the service, woken as soon as an item is queued; its
    // fallback poll is long so that what the demo shows is the wake-up, not the poll.
    config.reconciler.every = Some(std::time::Duration::from_secs(3600));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(oncegate_server::serve(listener, config, async {
        let _ = stopped.await;
    }));
    let demo = Demo {
        http: reqwest::Client::new(),
        base: base.clone(),
    };

    outln!(
        "oncegate demo: the service runs at {base} on a temporary SQLite store ({})",
        db.display()
    )?;
    outln!("provider payflow sends no event id; contract examples/oncegate.toml\n")?;

    let capture = r#"{"type":"payment.captured","sent_at":"2026-03-02T09:14:07Z","attempt":1,"data":{"payment_id":"pay_7Hq2","capture_id":"cap_91","amount":4990,"currency":"EUR","captured_at":"2026-03-02T10:14:05+01:00","customer_email":"jane@example.com"}}"#;
    let first = demo.deliver(capture).await?;
    show("1. payment.captured for pay_7Hq2 (49.90 EUR)", &first)?;
    complete(
        &demo,
        &first,
        json!({ "ledger_tx": "tx_5521", "rule": "capture-id@1" }),
    )
    .await?;

    let recoded = "{ \"data\": { \"currency\": \"EUR\", \"amount\": 4.99e3, \"capture_id\": \"cap_91\",\n  \"captured_at\": \"2026-03-02T09:14:05Z\", \"payment_id\": \"pay_7Hq2\", \"customer_email\": \"jane@example.com\" },\n  \"attempt\": 2, \"type\": \"payment.captured\", \"sent_at\": \"2026-03-02T09:19:12Z\" }";
    let second = demo.deliver(recoded).await?;
    show("\n2. the same capture again, re-encoded: members reordered, whitespace, 4990 written 4.99e3, the date in UTC, a new sent_at", &second)?;

    let refund = |sent_at: &str, attempt: u32| {
        format!(
            r#"{{"type":"refund.created","sent_at":"{sent_at}","attempt":{attempt},"data":{{"payment_id":"pay_7Hq2","amount":1500,"currency":"EUR","reason":"requested_by_customer"}}}}"#
        )
    };
    let r1 = demo.deliver(&refund("2026-03-05T16:02:11Z", 1)).await?;
    show(
        "\n3. refund.created: 15.00 EUR on pay_7Hq2, no request reference",
        &r1,
    )?;
    complete(
        &demo,
        &r1,
        json!({ "refund": "re_1Fa2", "rule": "refund-fingerprint@1" }),
    )
    .await?;

    let r2 = demo.deliver(&refund("2026-03-05T16:06:40Z", 1)).await?;
    show("\n4. four minutes later, a second refund of 15.00 EUR on pay_7Hq2: a legitimate second operation whose canonical body is identical", &r2)?;
    if r2.get("action").and_then(Value::as_str) == Some("ignore") {
        bail!("the second refund was ignored: that is the silent loss oncegate exists to prevent");
    }
    outln!("     A fingerprint-only dedup would have dropped this refund here. oncegate keeps it for reconciliation.")?;

    let id2 = field(&r2, "/delivery_id")?
        .as_str()
        .unwrap_or_default()
        .to_owned();
    outln!("     the reconciler is woken by the queueing and asks payflow's refund list for pay_7Hq2 ({authority}/v1/payments/pay_7Hq2/refunds): re_1Fa2 and re_3Kd8, 15.00 EUR each")?;
    settled(&demo, &id2, "the second refund", "released as a new effect").await?;

    let retry = "{\"attempt\":2,\"type\":\"refund.created\",\"data\":{\"currency\":\"EUR\",\"payment_id\":\"pay_7Hq2\",\"amount\":15e2,\"reason\":\"requested_by_customer\"},\"sent_at\":\"2026-03-05T16:07:02Z\"}";
    let r3 = demo.deliver(retry).await?;
    show(
        "\n5. the provider retries the first refund (attempt 2, re-encoded)",
        &r3,
    )?;
    let id3 = field(&r3, "/delivery_id")?
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // Both operations are accounted for now (re_1Fa2 by the first refund's discriminants,
    // re_3Kd8 by the released effect's reference), so the retry is a duplicate.
    settled(
        &demo,
        &id3,
        "the retry of the first refund",
        "linked to the effect that applied it",
    )
    .await?;

    let open = demo
        .call(reqwest::Method::GET, "/v1/queue?status=open", None)
        .await?;
    let open = field(&open, "/items")?.as_array().map_or(0, Vec::len);
    outln!("\n6. the queue: {open} open item(s); both refunds were settled by the service itself, with the authority's answer kept as evidence")?;
    if open != 0 {
        bail!("the reconciler left an item open");
    }

    let work = demo
        .call(
            reqwest::Method::POST,
            "/v1/work/claim",
            Some(json!({ "limit": 10, "lease_seconds": 30 })),
        )
        .await?;
    let claimed = field(&work, "/items")?
        .as_array()
        .cloned()
        .unwrap_or_default();
    outln!(
        "\n7. a worker claims released work: {} effect(s)",
        claimed.len()
    )?;
    for item in &claimed {
        let effect = item
            .get("effect_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let token = item
            .pointer("/reservation/token")
            .cloned()
            .unwrap_or(Value::Null);
        let reference = item
            .get("authoritative_ref")
            .cloned()
            .unwrap_or(Value::Null);
        let result = json!({ "refund": reference, "rule": "released by the reconciler" });
        demo.call(
            reqwest::Method::POST,
            &format!("/v1/effects/{effect}/complete"),
            Some(json!({ "token": token, "result": result })),
        )
        .await?;
        outln!("     applies the second refund and completes {effect} with {result}")?;
    }

    outln!("\n8. why was the second refund not dropped? `oncegate explain {id2}`:\n")?;
    out!("{}", crate::explain::render(&reader, &id2).await?)?;

    outln!("\n9. the report: received, applied, documented ignores and pending side by side\n")?;
    let since = OffsetDateTime::now_utc() - time::Duration::days(1);
    let report = crate::report::render(&reader, since).await?;
    out!("{report}")?;

    let _ = stop.send(());
    server.await.context("the service task")??;
    let totals = reader
        .report(&oncegate::store::TenantFilter::All, since)
        .await?;
    if totals.total.unexplained_gap != 0 {
        bail!(
            "the demo ended with an unexplained gap of {}",
            totals.total.unexplained_gap
        );
    }
    Ok(())
}
