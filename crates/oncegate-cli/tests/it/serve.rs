//! `oncegate serve` as an operator runs it: the real binary on 127.0.0.1:0, on SQLite and on
//! PostgreSQL, answering the contract and stopping gracefully on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const CONTRACT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/oncegate.toml");
const TOKENS: &str = "admin:*:admin-token-1;ingest:acme:ingest-token-1";

pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) base: String,
    /// Which store the start-up line says is in use.
    store: String,
    /// How many threads the start-up line says answer requests.
    workers: u64,
}

fn start(store: &str) -> Server {
    start_with(store, &[])
}

pub(crate) fn start_with(store: &str, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args([
            "serve",
            "--contract",
            CONTRACT,
            "--store",
            store,
            "--listen",
            "127.0.0.1:0",
            "--log-json",
        ])
        .args(extra)
        .env_remove("ONCEGATE_WORKERS")
        .env_remove("TOKIO_WORKER_THREADS")
        .env("ONCEGATE_KEY_SALT", "serve-test-salt")
        .env("ONCEGATE_TOKENS", TOKENS)
        .env_remove("ONCEGATE_TOKENS_FILE")
        .env_remove("PAYFLOW_SIGNING_SECRET")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let (address, store, workers) = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!(
                "serve stopped before listening; it printed:\n{}",
                seen.join("\n")
            );
        };
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("a JSON log line: {line}"));
        if v["message"] == "oncegate serving" {
            break (
                v["address"]
                    .as_str()
                    .expect("the address is logged")
                    .to_owned(),
                v["store"].as_str().expect("the store is logged").to_owned(),
                v["workers"].as_u64().expect("the threads are logged"),
            );
        }
        seen.push(line);
    };
    // Keep draining the logs so the service never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server {
        child,
        base: format!("http://{address}"),
        store,
        workers,
    }
}

async fn exercise(server: &Server) {
    let http = reqwest::Client::new();
    let health = http
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ready = http
        .get(format!("{}/readyz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let body = r#"{"type":"refund.created","sent_at":"2026-01-01T00:00:00Z","data":{"payment_id":"pay_1","amount":1500,"currency":"EUR","request_ref":"rr-1"}}"#;
    let post = || {
        http.post(format!("{}/v1/deliveries/acme/payflow/live", server.base))
            .bearer_auth("ingest-token-1")
            .body(body)
            .send()
    };
    let first: serde_json::Value = post().await.unwrap().json().await.unwrap();
    assert_eq!(first["action"], "process", "{first}");
    assert_eq!(first["strategy"]["name"], "refund-request-ref");
    let second: serde_json::Value = post().await.unwrap().json().await.unwrap();
    assert_eq!(second["action"], "ignore", "{second}");
    assert_eq!(second["reference_delivery_id"], first["delivery_id"]);
    let proof = http
        .get(format!(
            "{}/v1/deliveries/{}",
            server.base,
            second["delivery_id"].as_str().unwrap()
        ))
        .bearer_auth("admin-token-1")
        .send()
        .await
        .unwrap();
    assert_eq!(proof.status(), 200);
    // An ingest token is not an operator.
    let denied = http
        .get(format!("{}/v1/queue", server.base))
        .bearer_auth("ingest-token-1")
        .send()
        .await
        .unwrap();
    assert!(
        denied.status() == 401 || denied.status() == 403,
        "{}",
        denied.status()
    );
    // No signature secret is configured for payflow: an unsigned post without a token is refused.
    let unsigned = http
        .post(format!("{}/v1/deliveries/acme/payflow/live", server.base))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
}

pub(crate) fn stop(mut server: Server) {
    crate::signal::terminate(&server.child);
    for _ in 0..100 {
        if let Some(exit) = server.child.try_wait().unwrap() {
            assert!(exit.success(), "serve exits cleanly on SIGTERM: {exit}");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = server.child.kill();
    panic!("serve did not stop within 10 s of SIGTERM");
}

/// A supervisor may stop the service the moment it says it listens: from that line on, SIGTERM
/// is a graceful stop, never the default action that kills the process mid-start.
#[test]
fn serve_stops_gracefully_on_sigterm_sent_as_soon_as_it_listens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("early.db");
    for _ in 0..5 {
        stop(start(&format!("sqlite://{}", db.display())));
    }
}

#[tokio::test]
async fn serve_answers_on_sqlite_and_stops_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("serve.db");
    let server = start(&format!("sqlite://{}", db.display()));
    assert_eq!(server.store, format!("SQLite file {}", db.display()));
    exercise(&server).await;
    stop(server);
    assert!(db.exists(), "the SQLite file is where it was asked to be");
}

/// `--workers` sets the threads that answer requests; by default there is one per core.
#[tokio::test]
async fn serve_answers_on_the_threads_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("workers.db").display());
    let server = start(&store);
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(server.workers, cores, "one thread per core by default");
    stop(server);
    for n in [1, 3] {
        // A store of its own each: `exercise` expects its delivery to be new.
        let store = format!("sqlite://{}", dir.path().join(format!("{n}.db")).display());
        let server = start_with(&store, &["--workers", &n.to_string()]);
        assert_eq!(server.workers, n);
        exercise(&server).await;
        stop(server);
    }
    // Zero threads would answer nothing: refused before anything starts.
    let out = refused_start(&store, &["--workers", "0"], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a usage error: {err}");
    assert!(err.contains("--workers"), "names the option: {err}");
}

/// Runs `serve` on `store` with `extra` in `dir`, for a start that must be refused (it would
/// otherwise serve until killed).
fn refused_start(store: &str, extra: &[&str], dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["serve", "--contract", CONTRACT, "--store", store])
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .current_dir(dir)
        .env_remove("ONCEGATE_WORKERS")
        .env("ONCEGATE_KEY_SALT", "serve-test-salt")
        .env("ONCEGATE_TOKENS", TOKENS)
        .output()
        .unwrap()
}

#[test]
fn a_store_string_that_names_no_store_is_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    // A libpq string with a typo, and a bare file name: neither may become a SQLite file.
    for store in ["hots=127.0.0.1 port=5432 dbname=og", "oncegate.db"] {
        let out = refused_start(store, &[], dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{store}: a usage error: {err}");
        assert!(
            err.contains(&format!("{store:?}")),
            "names the string: {err}"
        );
        assert!(
            err.contains("sqlite://PATH")
                && err.contains("postgres://")
                && err.contains("key=value"),
            "lists the accepted forms: {err}"
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was created in the working directory"
    );
}

#[tokio::test]
async fn serve_answers_on_postgresql() {
    let db = oncegate::store::testing::TestDatabase::postgres("oncegate_cli_test").await;
    let server = start(&db.url);
    assert!(
        server
            .store
            .starts_with("PostgreSQL database oncegate_cli_test"),
        "{}",
        server.store
    );
    exercise(&server).await;
    stop(server);
    db.cleanup().await;
}

#[test]
fn serve_refuses_to_start_without_a_salt() {
    let out = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["serve", "--contract", CONTRACT, "--listen", "127.0.0.1:0"])
        .env_remove("ONCEGATE_KEY_SALT")
        .env_remove("ONCEGATE_KEY_SALT_FILE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("set ONCEGATE_KEY_SALT"));
}

#[tokio::test]
async fn serve_flags_override_the_contracts_limits() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("limits.db");
    let server = start_with(
        &format!("sqlite://{}", db.display()),
        &["--max-body-bytes", "200", "--max-depth", "3"],
    );
    let http = reqwest::Client::new();
    let post = |body: String| {
        http.post(format!("{}/v1/deliveries/acme/payflow/live", server.base))
            .bearer_auth("ingest-token-1")
            .body(body)
            .send()
    };
    let big = format!(r#"{{"type":"refund.created","pad":"{}"}}"#, "x".repeat(300));
    let answer = post(big).await.unwrap();
    assert_eq!(answer.status(), 413);
    let deep = r#"{"type":"refund.created","data":{"a":{"b":[1]}}}"#.to_owned();
    let answer = post(deep).await.unwrap();
    assert_eq!(answer.status(), 400);
    let error: serde_json::Value = answer.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deeper than 3"),
        "{error}"
    );
    stop(server);
}

/// `--header-timeout` reaches the connections: a client that connects and sends nothing is
/// cut well within ten times the deadline.
#[tokio::test]
async fn serve_timeout_flags_bound_the_connections() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("deadlines.db");
    let server = start_with(
        &format!("sqlite://{}", db.display()),
        &["--header-timeout", "300ms", "--idle-timeout", "300ms"],
    );
    let mut silent = tokio::net::TcpStream::connect(server.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(3), silent.read(&mut buf))
        .await
        .expect("the silent connection is closed within 3 s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // A normal request is still answered.
    let health = reqwest::get(format!("{}/healthz", server.base))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    stop(server);
}

#[test]
fn serve_refuses_a_body_deadline_the_request_timeout_would_pre_empt() {
    let out = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["serve", "--contract", CONTRACT, "--listen", "127.0.0.1:0"])
        .args(["--body-timeout", "10s", "--request-timeout", "10s"])
        .env("ONCEGATE_KEY_SALT", "serve-test-salt")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--body-timeout (10s) must be shorter than --request-timeout (10s)"),
        "{err}"
    );
}

/// A CA file that cannot be used stops `serve` and `reconcile --once` before they open the
/// store or listen, and the message names the file.
#[test]
fn an_unusable_ca_file_stops_serve_and_reconcile_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing-ca.pem");
    let not_pem = dir.path().join("not-pem.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let db = dir.path().join("ca.db");
    for (ca, what) in [
        (&missing, "cannot be read"),
        (&not_pem, "no PEM certificate"),
    ] {
        for args in [
            vec!["serve", "--listen", "127.0.0.1:0"],
            vec!["reconcile", "--once"],
        ] {
            let out = Command::new(env!("CARGO_BIN_EXE_oncegate"))
                .args(&args)
                .args(["--contract", CONTRACT])
                .arg("--store")
                .arg(format!("sqlite://{}", db.display()))
                .env("ONCEGATE_KEY_SALT", "serve-test-salt")
                .env("ONCEGATE_CA_FILE", ca)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(&ca.display().to_string())
                    && err.contains(what)
                    && err.contains("ONCEGATE_CA_FILE"),
                "{args:?}: {err}"
            );
            assert!(
                !String::from_utf8_lossy(&out.stdout).contains("oncegate serving"),
                "{args:?}"
            );
        }
    }
    assert!(!db.exists(), "the store was never opened");
}
