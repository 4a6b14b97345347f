//! Limits and faults: strict JSON (every `n_` file of JSONTestSuite), body size and depth, the
//! request timeout, and a store that goes away under a running service.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::*;

fn json_test_suite() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpora/JSONTestSuite/test_parsing")
}

pub async fn json_test_suite_n_files_are_refused_in_the_error_shape(kind: Kind) {
    let s = Service::start(kind).await;
    let dir = json_test_suite();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the JSONTestSuite corpus at {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("n_"))
        })
        .collect();
    files.sort();
    assert!(
        files.len() > 150,
        "expected the whole n_ set, found {}",
        files.len()
    );
    for file in &files {
        let body = std::fs::read(file).expect("read a test file");
        let a = s.deliver("acme", "payflow", "live", INGEST, &body).await;
        let name = file.file_name().unwrap().to_string_lossy();
        assert_eq!(a.status, 400, "{name}: {}", a.text);
        assert_eq!(a.error_code(), "malformed_json", "{name}: {}", a.text);
        let message = a.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("at byte"),
            "{name}: the message names the offset: {message}"
        );
    }
    // The service still answers, and decides genuine deliveries.
    assert_eq!(s.get("/healthz", None).await.status, 200);
    let ok = s
        .payflow(
            "acme",
            &capture("pay_j1", "cap_j1", "1", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.str("action"), "process");
    // Every refusal is journaled with its reason.
    let report = s.report(OPERATOR).await;
    assert_no_gap(&report);
    assert_eq!(
        report.body["total"]["rejected"],
        files.len(),
        "{}",
        report.text
    );
    s.stop().await;
}

pub async fn body_and_depth_limits_are_enforced(kind: Kind) {
    let s = Service::start_with(kind, |c| c.request_timeout = Duration::from_secs(2)).await;
    let limit = s.contract.settings.max_body_bytes;

    let big = format!(
        r#"{{"type":"payment.captured","pad":"{}"}}"#,
        "x".repeat(limit)
    );
    let a = s
        .deliver("acme", "payflow", "live", INGEST, big.as_bytes())
        .await;
    assert_eq!(a.status, 413, "{}", a.text);
    assert_eq!(a.error_code(), "too_large");
    let proof = s.proof(&journaled_id(&a)).await;
    assert_eq!(proof.body["action"], "reject", "{}", proof.text);
    assert_eq!(
        proof.body["size"],
        big.len(),
        "the journal keeps the real size"
    );
    assert_eq!(proof.body["details"]["rejection"], "too_large");

    let depth = s.contract.settings.max_depth;
    let deep = format!("{}{}", "[".repeat(depth + 1), "]".repeat(depth + 1));
    let d = s
        .deliver("acme", "payflow", "live", INGEST, deep.as_bytes())
        .await;
    assert_eq!(d.status, 400, "{}", d.text);
    assert_eq!(d.error_code(), "malformed_json");
    assert!(
        d.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deeper"),
        "{}",
        d.text
    );
    let fits = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let f = s
        .deliver("acme", "payflow", "live", INGEST, fits.as_bytes())
        .await;
    assert_eq!(
        f.status, 200,
        "at the limit the body is read (and has no type): {}",
        f.text
    );
    assert_eq!(f.str("action"), "reconcile");

    let dup = s
        .deliver(
            "acme",
            "payflow",
            "live",
            INGEST,
            br#"{"type":"refund.created","type":"x"}"#,
        )
        .await;
    assert_eq!(dup.status, 400);
    assert!(
        dup.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("duplicate"),
        "{}",
        dup.text
    );

    // A body that never finishes arriving is cut by the request timeout, in the error shape.
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /v1/deliveries/acme/payflow/live HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {INGEST}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"type\":"
    );
    conn.write_all(head.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
        .await
        .expect("the service answers before the client gives up")
        .expect("read");
    let response = String::from_utf8_lossy(&buf[..n]);
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    assert!(response.contains(r#""code":"timeout""#), "{response}");

    assert_no_gap(&s.report(OPERATOR).await);
    s.stop().await;
}

/// PostgreSQL stops accepting connections under a running service: readiness and deliveries
/// answer 503 `store_unavailable`; once it is back, the service recovers by itself and no
/// reception is left without a decision.
pub async fn store_unavailable_answers_503_and_recovers() {
    let s = Service::start(Kind::Postgres).await;
    let (admin_url, name) = s.backend.as_ref().unwrap().admin.clone().unwrap();
    let admin = pg_admin(&admin_url).await;
    let ok = s
        .payflow(
            "acme",
            &capture("pay_d1", "cap_d1", "1", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);

    admin
        .batch_execute(&format!(
            "ALTER DATABASE {name} ALLOW_CONNECTIONS false; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}';"
        ))
        .await
        .expect("take the database away");

    let ready = s.get("/readyz", None).await;
    assert_eq!(ready.status, 503, "{}", ready.text);
    assert_eq!(ready.error_code(), "store_unavailable");
    let down = s
        .payflow(
            "acme",
            &capture("pay_d2", "cap_d2", "1", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(down.status, 503, "{}", down.text);
    assert_eq!(down.error_code(), "store_unavailable");
    assert!(
        !down.text.contains("SQLSTATE") && !down.text.contains(&name),
        "never database text: {}",
        down.text
    );
    assert_eq!(
        s.get("/healthz", None).await.status,
        200,
        "alive while not ready"
    );

    admin
        .batch_execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
        .await
        .expect("bring the database back");
    let mut ready = false;
    for _ in 0..40 {
        if s.get("/readyz", None).await.status == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(ready, "ready again once the database is back");
    // The provider's retry is decided normally.
    let retry = s
        .payflow(
            "acme",
            &capture("pay_d2", "cap_d2", "1", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(retry.status, 200, "{}", retry.text);
    assert_eq!(retry.str("action"), "process");
    assert_no_gap(&s.report(OPERATOR).await);
    s.stop().await;
}

/// A delivery whose request is under way when shutdown is asked still gets its decision, and
/// the server returns once it is answered.
pub async fn shutdown_lets_in_flight_deliveries_finish(kind: Kind) {
    let mut s = Service::start(kind).await;
    let body = capture("pay_g1", "cap_g1", "1000", "2024-05-01T10:00:00Z");
    let (head, tail) = body.split_at(20);
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let start = format!(
        "POST /v1/deliveries/acme/payflow/live HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {INGEST}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{head}",
        body.len()
    );
    conn.write_all(start.as_bytes())
        .await
        .expect("write the first half");
    // Let the server start on the request before shutdown is asked.
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.signal_shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!s.stopped(), "the server waits for the request under way");
    conn.write_all(tail.as_bytes())
        .await
        .expect("write the rest");
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut response))
        .await
        .expect("answered in time")
        .expect("read");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains(r#""action":"process""#), "{response}");
    // New connections are no longer accepted.
    let refused = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match tokio::net::TcpStream::connect(&addr).await {
                Err(_) => break true,
                Ok(_) if s.stopped() => break true,
                Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .unwrap_or(false);
    assert!(refused, "the listener closes after the shutdown");
    s.stop().await;
}

/// A statement the database refuses for good (here a constraint every new reception breaks,
/// as a bad migration or a bug would) is a `500 internal` with a correlation id, never a 503
/// that providers would retry for days; the service answers normally once it is fixed.
pub async fn a_statement_the_database_refuses_is_internal_not_unavailable() {
    let s = Service::start(Kind::Postgres).await;
    let db = pg_admin(&s.backend.as_ref().unwrap().url).await;
    let ok = s
        .payflow(
            "acme",
            &capture("pay_i1", "cap_i1", "1", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);

    db.batch_execute("ALTER TABLE deliveries ADD CONSTRAINT refuse_all CHECK (size < 0) NOT VALID")
        .await
        .expect("add a constraint every reception breaks");
    let refused = s
        .payflow(
            "acme",
            &capture("pay_i2", "cap_i2", "1", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(refused.status, 500, "{}", refused.text);
    assert_eq!(refused.error_code(), "internal");
    let id = refused.body["error"]["correlation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a correlation id: {}", refused.text));
    assert!(id.starts_with("err_"), "{id}");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(id)),
        "{}",
        refused.text
    );
    assert!(
        !refused.text.contains("SQLSTATE")
            && !refused.text.contains("refuse_all")
            && !refused.text.contains("deliveries"),
        "never database text: {}",
        refused.text
    );

    db.batch_execute("ALTER TABLE deliveries DROP CONSTRAINT refuse_all")
        .await
        .expect("remove the constraint");
    let again = s
        .payflow(
            "acme",
            &capture("pay_i2", "cap_i2", "1", "2024-05-01T10:00:00Z"),
        )
        .await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.str("action"), "process", "{}", again.text);
    drop(db);
    s.stop().await;
}
