//! HTTPS authorities: a refund-list API served over real TLS on 127.0.0.1:0 with a leaf
//! certificate signed by a private CA the test makes. The reconciler reaches it when the CA is
//! named (the authority's `ca_file`, or the config's `ca_file` as `ONCEGATE_CA_FILE` sets it),
//! and without it the item stays open with the certificate error as its `last_error`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use oncegate_core::contract;
use oncegate_server::{check_authorities, reconcile_once, AuthorityPolicy, ServiceConfig};
use serde_json::{json, Value};
use tokio_rustls::rustls;

use crate::harness::*;

/// The same value reconcile.rs sets, so tests running at once never disagree about it.
const API_TOKEN: &str = "payflow-api-test-token";

/// A private CA and a `127.0.0.1`/`localhost` leaf it signed, written to a directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca_pem: PathBuf,
    leaf: rustls::pki_types::CertificateDer<'static>,
    key: Vec<u8>,
}

pub fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "oncegate test provider CA");
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca = ca.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_pem = dir.path().join("provider-ca.pem");
    std::fs::write(&ca_pem, ca.pem()).unwrap();
    Pki {
        dir,
        ca_pem,
        leaf: leaf.der().clone(),
        key: leaf_key.serialize_der(),
    }
}

/// Serves the refund list of every payment (`re_A` and `re_B`, both 1500 EUR) over TLS and
/// returns the base URL.
async fn https_authority(pki: &Pki) -> String {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![pki.leaf.clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(pki.key.clone().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let app = Router::new().route(
        "/v1/payments/{payment}/refunds",
        get(|| async {
            Json(json!({"refunds": [
                {"id": "re_A", "amount": 1500, "currency": "EUR"},
                {"id": "re_B", "amount": 1500, "currency": "EUR"},
            ]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake: nothing to serve.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                    .await;
            });
        }
    });
    format!("https://{addr}")
}

/// The example contract pointed at `base`, the refund authority naming `ca_file` if given.
fn contract_text(base: &str, ca_file: Option<&Path>) -> String {
    let text = CONTRACT.replace("http://127.0.0.1:8089", base);
    match ca_file {
        None => text,
        Some(ca) => text.replacen(
            "  auth_header = \"authorization\"\n",
            &format!(
                "  auth_header = \"authorization\"\n  ca_file = \"{}\"\n",
                ca.display()
            ),
            1,
        ),
    }
}

async fn start(kind: Kind, text: &str, shared_ca: Option<&Path>) -> (Service, ServiceConfig) {
    std::env::set_var("PAYFLOW_API_TOKEN", API_TOKEN);
    let contract = Arc::new(contract::parse("oncegate.toml", text).expect("the contract parses"));
    let mut captured = None;
    let s = Service::start_with(kind, |c| {
        c.contract = contract;
        c.ca_file = shared_ca.map(Path::to_owned);
        c.reconciler.every = None;
        c.reconciler.sweep_every = Duration::ZERO;
        c.reconciler.authority = AuthorityPolicy {
            timeout: Duration::from_secs(2),
            attempts: 1,
            backoff: Duration::from_millis(20),
            open_after: 50,
            cool_down: Duration::from_secs(1),
        };
        captured = Some(c.clone());
    })
    .await;
    (s, captured.expect("the config was built"))
}

/// Posts the seed's two identical refunds of `payment` (the first completed), and returns the
/// second's delivery id, queued for reconciliation.
async fn two_refunds(s: &Service, payment: &str) -> String {
    let first = s
        .payflow("acme", &refund(payment, "1500", "2024-05-03T09:00:00Z"))
        .await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    let eff = first.body["effect"]["id"].as_str().unwrap();
    let token = first.body["reservation"]["token"].as_str().unwrap();
    let done = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": {"refund": "local_1"}}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);
    let second = s
        .payflow("acme", &refund(payment, "1500", "2024-05-03T09:04:00Z"))
        .await;
    assert_eq!(second.str("action"), "reconcile", "{}", second.text);
    second.str("delivery_id").to_owned()
}

async fn queue_item(s: &Service, delivery: &str) -> Value {
    let q = s.get("/v1/queue?status=all", Some(OPERATOR)).await;
    assert_eq!(q.status, 200, "{}", q.text);
    q.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["delivery_id"] == delivery)
        .cloned()
        .unwrap_or_else(|| panic!("no queue item for {delivery}: {}", q.text))
}

pub async fn an_https_authority_signed_by_a_private_ca_needs_that_ca(kind: Kind) {
    let pki = pki();
    let base = https_authority(&pki).await;

    // Without the CA, the system's roots refuse the certificate: the item stays open and says why.
    let (s, config) = start(kind, &contract_text(&base, None), None).await;
    let second = two_refunds(&s, "pay_tls_1").await;
    let run = reconcile_once(&config).await.expect("the reconciler runs");
    assert_eq!(run.items.len(), 1, "{run:?}");
    assert_eq!(run.items[0].verdict, "open", "{run:?}");
    let item = queue_item(&s, &second).await;
    assert_eq!(item["status"], "open", "{item}");
    let error = item["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("certificate was refused") && error.contains("UnknownIssuer"),
        "{item}"
    );
    assert!(
        error.contains("ca_file"),
        "the error says what to do: {item}"
    );
    s.stop().await;

    // The authority's own `ca_file`: the second refund is released with the unmatched reference.
    let (s, config) = start(kind, &contract_text(&base, Some(&pki.ca_pem)), None).await;
    let second = two_refunds(&s, "pay_tls_2").await;
    let run = reconcile_once(&config).await.expect("the reconciler runs");
    assert_eq!(run.items.len(), 1, "{run:?}");
    assert_eq!(run.items[0].verdict, "distinct", "{run:?}");
    assert_eq!(run.items[0].authoritative_ref.as_deref(), Some("re_B"));
    let item = queue_item(&s, &second).await;
    assert_eq!(item["resolution"]["by"], "reconciler", "{item}");
    s.stop().await;

    // The CA every authority trusts (`ONCEGATE_CA_FILE`) does the same.
    let (s, config) = start(kind, &contract_text(&base, None), Some(&pki.ca_pem)).await;
    let second = two_refunds(&s, "pay_tls_3").await;
    let run = reconcile_once(&config).await.expect("the reconciler runs");
    assert_eq!(run.items[0].verdict, "distinct", "{run:?}");
    assert_eq!(queue_item(&s, &second).await["status"], "resolved");
    s.stop().await;
}

/// A CA file that cannot be used stops `serve` and `reconcile_once` before anything runs, and
/// names the file; no store is involved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_ca_file_is_a_startup_error_naming_it() {
    let pki = pki();
    let missing = pki.dir.path().join("missing-ca.pem");
    let not_pem = pki.dir.path().join("not-a-ca.pem");
    std::fs::write(&not_pem, "this is not a certificate\n").unwrap();
    let store = oncegate::store::open(&format!(
        "sqlite://{}",
        pki.dir.path().join("s.db").display()
    ))
    .await
    .unwrap();
    let base = "https://127.0.0.1:9";
    for (ca, what) in [
        (&missing, "cannot be read"),
        (&not_pem, "no PEM certificate"),
    ] {
        // As the authority's own `ca_file`…
        let text = contract_text(base, Some(ca));
        let c = Arc::new(contract::parse("oncegate.toml", &text).unwrap());
        let config = ServiceConfig::new(c, store.clone(), b"salt".to_vec());
        let e = check_authorities(&config.contract, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&ca.display().to_string()) && e.contains(what),
            "{e}"
        );
        assert!(e.contains("payflow/refund.created"), "{e}");
        let e = reconcile_once(&config).await.unwrap_err().to_string();
        assert!(e.contains(&ca.display().to_string()), "{e}");
        // … and as the CA of every authority, which `serve` refuses before serving.
        let c = Arc::new(contract::parse("oncegate.toml", &contract_text(base, None)).unwrap());
        let mut config = ServiceConfig::new(c, store.clone(), b"salt".to_vec());
        config.ca_file = Some(ca.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let e = tokio::time::timeout(
            Duration::from_secs(10),
            oncegate_server::serve(listener, config, std::future::pending()),
        )
        .await
        .expect("serve returns at once")
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        let e = e.to_string();
        assert!(
            e.contains(&ca.display().to_string()) && e.contains("ONCEGATE_CA_FILE"),
            "{e}"
        );
    }
}
