//! `oncegate reconcile --once`: the real binary settles the seed's second refund against a
//! small authority server, after the service (in-process, same SQLite file) queued it.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;

use oncegate_server::{ApiToken, ServiceConfig};
use serde_json::{json, Value};

const CONTRACT: &str = include_str!("../../../../examples/oncegate.toml");
const SALT: &str = "reconcile-cli-test-salt";
const API_TOKEN: &str = "payflow-api-cli-token";

/// A one-thread HTTP authority that answers every request with the same refund list, and
/// `401` when the contract's auth header is missing.
fn authority(body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
            let authorized = request.contains(&format!(
                "authorization: {}",
                API_TOKEN.to_ascii_lowercase()
            ));
            let (status, body) = if authorized {
                ("200 OK", body)
            } else {
                ("401 Unauthorized", "{}")
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
}

fn refund(sent_at: &str) -> String {
    format!(
        r#"{{"type":"refund.created","sent_at":"{sent_at}","data":{{"payment_id":"pay_1","amount":1500,"currency":"EUR"}}}}"#
    )
}

/// A service (in-process, on a SQLite file the binary then opens too) that has queued the
/// seed's second refund, its contract asking the authority at `base`.
struct Queued {
    dir: tempfile::TempDir,
    db: std::path::PathBuf,
    contract: std::path::PathBuf,
    second: String,
    service: String,
    http: reqwest::Client,
}

async fn queue_second_refund(base: &str) -> Queued {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("reconcile.db");
    let contract_path = dir.path().join("oncegate.toml");
    let text = CONTRACT.replace("http://127.0.0.1:8089", base);
    std::fs::write(&contract_path, &text).unwrap();

    let contract = Arc::new(oncegate_core::contract::parse("oncegate.toml", &text).unwrap());
    let store = oncegate::store::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let mut config = ServiceConfig::new(contract, store, SALT.as_bytes().to_vec());
    config.tokens = ApiToken::parse_list("ingest:*:ingest-1;operator:*:operator-1").unwrap();
    config.reconciler.every = None;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let service = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(oncegate_server::serve(
        listener,
        config,
        std::future::pending(),
    ));
    let http = reqwest::Client::new();
    let post = |body: String| {
        http.post(format!("{service}/v1/deliveries/acme/payflow/live"))
            .bearer_auth("ingest-1")
            .body(body)
            .send()
    };
    let first: Value = post(refund("2026-01-01T00:00:00Z"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first["action"], "process", "{first}");
    let done = http
        .post(format!(
            "{service}/v1/effects/{}/complete",
            first["effect"]["id"].as_str().unwrap()
        ))
        .bearer_auth("ingest-1")
        .json(&json!({"token": first["reservation"]["token"], "result": {"refund": "local_1"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 200);
    let second: Value = post(refund("2026-01-01T00:04:00Z"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(second["action"], "reconcile", "{second}");
    let second = second["delivery_id"].as_str().unwrap().to_owned();
    Queued {
        dir,
        db,
        contract: contract_path,
        second,
        service,
        http,
    }
}

impl Queued {
    /// Runs `oncegate reconcile` with `extra` arguments and environment.
    fn run(&self, extra: &[&str], env: &[(&str, &std::path::Path)]) -> std::process::Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_oncegate"));
        cmd.arg("reconcile")
            .args(extra)
            .args(["--store", &format!("sqlite://{}", self.db.display())])
            .args(["--contract", self.contract.to_str().unwrap()])
            .env("ONCEGATE_KEY_SALT", SALT)
            .env("PAYFLOW_API_TOKEN", API_TOKEN)
            .env_remove("ONCEGATE_CA_FILE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    /// The `reconcile --once` line of the queued delivery.
    fn line(&self, out: &std::process::Output) -> String {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .find(|l| l.starts_with(&self.second))
            .unwrap_or_else(|| panic!("no line for {}: {stdout}", self.second))
            .to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_once_releases_the_second_refund() {
    let base = authority(
        r#"{"refunds":[{"id":"re_A","amount":1500,"currency":"EUR"},{"id":"re_B","amount":1500,"currency":"EUR"}]}"#,
    );
    let q = queue_second_refund(&base).await;
    let refused = q.run(&[], &[]);
    assert_eq!(refused.status.code(), Some(2), "only --once exists");

    let line = q.line(&q.run(&["--once"], &[]));
    assert!(line.contains(" distinct "), "{line}");
    assert!(line.contains("ref=re_B"), "{line}");

    // The item is resolved by the reconciler: a second run has nothing left to do.
    let out = q.run(&["--once"], &[]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no open reconcile items"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let queue: Value = q
        .http
        .get(format!("{}/v1/queue?status=all", q.service))
        .bearer_auth("operator-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let item = &queue["items"][0];
    assert_eq!(item["resolution"]["by"], "reconciler", "{queue}");
    assert_eq!(item["resolution"]["authoritative_ref"], "re_B", "{queue}");
    drop(q.dir);
}

/// The same refund list served over TLS by a certificate a private CA signed: `reconcile
/// --once` leaves the item open with the certificate error until `ONCEGATE_CA_FILE` names the
/// CA, then releases the second refund.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_once_trusts_the_ca_named_by_oncegate_ca_file() {
    let (base, ca_pem) = https_authority(
        r#"{"refunds":[{"id":"re_A","amount":1500,"currency":"EUR"},{"id":"re_B","amount":1500,"currency":"EUR"}]}"#,
    );
    let q = queue_second_refund(&base).await;
    let ca = q.dir.path().join("provider-ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();

    let line = q.line(&q.run(&["--once"], &[]));
    assert!(line.contains(" open "), "{line}");
    assert!(
        line.contains("certificate was refused") && line.contains("UnknownIssuer"),
        "{line}"
    );

    let line = q.line(&q.run(&["--once"], &[("ONCEGATE_CA_FILE", &ca)]));
    assert!(line.contains(" distinct "), "{line}");
    assert!(line.contains("ref=re_B"), "{line}");
}

/// `authority` over TLS: a private CA (returned as PEM) signs a `127.0.0.1` certificate.
fn https_authority(body: &'static str) -> (String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "payflow test CA");
    let ca = params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
            )
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(tcp) = stream else { continue };
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut buf = [0u8; 4096];
            // A client that refuses the certificate fails the handshake inside this read.
            let Ok(n) = tls.read(&mut buf) else { continue };
            let request = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
            let authorized = request.contains(&format!(
                "authorization: {}",
                API_TOKEN.to_ascii_lowercase()
            ));
            let (status, body) = if authorized {
                ("200 OK", body)
            } else {
                ("401 Unauthorized", "{}")
            };
            let _ = write!(
                tls,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    (format!("https://{addr}"), ca.pem())
}

/// `reconcile --once --json`: one document naming the item, its verdict, the authority's
/// reference and the effect it released; the second pass's document has no items.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_once_json_names_the_item_its_verdict_and_the_released_effect() {
    let base = authority(
        r#"{"refunds":[{"id":"re_A","amount":1500,"currency":"EUR"},{"id":"re_B","amount":1500,"currency":"EUR"}]}"#,
    );
    let q = queue_second_refund(&base).await;
    let out = q.run(&["--once", "--json"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "one compact line: {stdout}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let items = doc["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{doc}");
    let item = &items[0];
    assert_eq!(item["delivery_id"], q.second.as_str(), "{doc}");
    assert_eq!(item["verdict"], "distinct", "{doc}");
    assert_eq!(item["authoritative_ref"], "re_B", "{doc}");
    assert!(item["queue_item_id"].as_str().unwrap().starts_with("q_"));
    let effect = item["effect_id"].as_str().unwrap().to_owned();
    assert!(doc["sweep"].is_array(), "{doc}");

    // The API's queue shows the same item, resolved with the same effect.
    let queue: Value = q
        .http
        .get(format!("{}/v1/queue?status=all", q.service))
        .bearer_auth("operator-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = queue["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["queue_item_id"] == item["queue_item_id"])
        .unwrap_or_else(|| panic!("{queue}"));
    assert_eq!(
        listed["resolution"]["effect_id"],
        effect.as_str(),
        "{queue}"
    );

    let again: Value = serde_json::from_slice(&q.run(&["--once", "--json"], &[]).stdout).unwrap();
    assert_eq!(again["items"], json!([]), "{again}");
    drop(q.dir);
}
