//! A full disk under the SQLite store: `oncegate serve` on a 6 MiB tmpfs the test mounts, once
//! with its log on another disk and once with its log on the same full disk. Every delivery is
//! answered (200 or 503, never a closed connection), the cause is logged where the log can be
//! written, nothing is half written (`PRAGMA integrity_check`), every acknowledged decision is
//! kept, and the service recovers by itself when space returns.
//!
//! Mounting needs root: run as a plain user, the test runs itself again in a user and mount
//! namespace (`unshare --user --map-root-user --mount`), where it is root of its own mounts.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CONTRACT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/oncegate.toml");
const TOKEN: &str = "ingest-token-full-disk";

fn is_root() -> bool {
    tempfile::tempfile()
        .and_then(|f| f.metadata())
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// True when this process may mount; otherwise runs `test` again in a namespace where it may,
/// asserts that run passed, and returns false.
fn mounting_here(test: &str) -> bool {
    if is_root() {
        return true;
    }
    assert!(
        std::env::var_os("ONCEGATE_TEST_NAMESPACE").is_none(),
        "not root even in a user namespace"
    );
    let status = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "--"])
        .arg(std::env::current_exe().expect("the test binary"))
        .args([test, "--exact", "--nocapture"])
        .env("ONCEGATE_TEST_NAMESPACE", "1")
        .status()
        .expect("unshare (util-linux) runs; mounting a small filesystem needs root or it");
    assert!(status.success(), "{test} in its own namespace: {status}");
    false
}

/// A size-limited tmpfs, unmounted when dropped.
struct SmallDisk {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        // Others may pass through (PostgreSQL runs as its own user).
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let path = dir.path().join("disk");
        std::fs::create_dir(&path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "mount a tmpfs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk { path, _dir: dir }
    }

    /// Fills the disk to its last byte; the filler is removed to give the space back.
    fn fill(&self) -> PathBuf {
        let filler = self.path.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.flush();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Where the service's log goes.
enum Log {
    /// A pipe the test reads (another disk).
    Pipe(Arc<Mutex<Vec<String>>>),
    /// A file on the full disk, stdout and stderr both.
    OnTheDisk(PathBuf),
}

fn serve(store: &Path, port: u16, log: &Log) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_oncegate"));
    c.args(["serve", "--contract", CONTRACT, "--log-json", "--store"])
        .arg(format!("sqlite://{}", store.display()))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("ONCEGATE_KEY_SALT", "full-disk-test-salt")
        .env("ONCEGATE_TOKENS", format!("ingest:*:{TOKEN}"))
        .env_remove("ONCEGATE_TOKENS_FILE");
    match log {
        Log::Pipe(_) => {
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        Log::OnTheDisk(file) => {
            let f = std::fs::File::create(file).unwrap();
            c.stdout(f.try_clone().unwrap()).stderr(f);
        }
    }
    let mut child = c.spawn().expect("serve starts");
    if let Log::Pipe(lines) = log {
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
    }
    child
}

fn capture(payment: &str, pad: usize) -> String {
    format!(
        r#"{{"type":"payment.captured","sent_at":"2026-03-02T09:14:07Z","pad":"{}","data":{{"payment_id":"{payment}","capture_id":"cap_{payment}","amount":4990,"currency":"EUR","captured_at":"2026-03-02T10:14:05+01:00"}}}}"#,
        "x".repeat(pad)
    )
}

/// Every answer must come: a closed connection is a failure of the test, not a 503.
async fn deliver(http: &reqwest::Client, base: &str, payment: &str) -> (u16, serde_json::Value) {
    let answer = http
        .post(format!("{base}/v1/deliveries/acme/payflow/live"))
        .bearer_auth(TOKEN)
        .body(capture(payment, 20_000))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{payment}: the delivery got no answer: {e}"));
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or_default())
}

async fn full_disk(log_on_the_disk: bool) {
    let disk = SmallDisk::mount("6m");
    let store = disk.path.join("oncegate.db");
    let port = oncegate::store::testing::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let log = if log_on_the_disk {
        Log::OnTheDisk(disk.path.join("oncegate.log"))
    } else {
        Log::Pipe(Arc::default())
    };
    let mut child = serve(&store, port, &log);
    let http = reqwest::Client::new();
    let started = Instant::now();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "serve never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut answers: Vec<(String, u16, serde_json::Value)> = Vec::new();
    let payments: Vec<String> = (0..30).map(|i| format!("pay_disk_{i}")).collect();
    for p in &payments[..3] {
        let (status, body) = deliver(&http, &base, p).await;
        assert_eq!(status, 200, "{p} before the disk fills: {body}");
        answers.push((p.clone(), status, body));
    }

    let filler = disk.fill();
    for p in &payments[3..] {
        let (status, body) = deliver(&http, &base, p).await;
        assert!(
            status == 200 || status == 503,
            "{p} on a full disk: {status} {body}"
        );
        if status == 503 {
            assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
        }
        answers.push((p.clone(), status, body));
    }
    let refused = answers.iter().filter(|(_, s, _)| *s == 503).count();
    assert!(
        refused > 0,
        "the disk filled: some deliveries were answered 503"
    );
    if let Log::Pipe(lines) = &log {
        let lines = lines.lock().unwrap();
        assert!(
            lines.iter().any(|l| l.contains("the disk is full")),
            "the log names the cause"
        );
    }

    // Space returns: the provider's retries are decided, with no restart.
    std::fs::remove_file(&filler).unwrap();
    let healed = Instant::now();
    for p in &payments[3..] {
        if answers.iter().any(|(q, s, _)| q == p && *s == 200) {
            continue;
        }
        loop {
            let (status, body) = deliver(&http, &base, p).await;
            answers.push((p.clone(), status, body));
            if status == 200 {
                break;
            }
            assert!(
                healed.elapsed() < Duration::from_secs(30),
                "{p}: no recovery 30 s after space returned"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    eprintln!(
        "full disk (log {}): {refused} answered 503, all decided {:?} after space returned",
        if log_on_the_disk {
            "on the same disk"
        } else {
            "elsewhere"
        },
        healed.elapsed()
    );
    assert!(child.try_wait().unwrap().is_none(), "serve kept running");
    let _ = child.kill();
    let _ = child.wait();

    // Nothing half written, every acknowledged decision kept, one effect per payment.
    let db = rusqlite::Connection::open(&store).unwrap();
    let integrity: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    for (p, status, body) in &answers {
        if *status != 200 {
            continue;
        }
        let id = body["delivery_id"].as_str().expect("a delivery id");
        let proofs: i64 = db
            .query_row(
                "SELECT count(*) FROM proofs WHERE delivery_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(proofs, 1, "{p}: acknowledged delivery {id} is kept");
    }
    let effects: i64 = db
        .query_row("SELECT count(*) FROM effects", [], |r| r.get(0))
        .unwrap();
    assert_eq!(effects as usize, payments.len(), "one effect per payment");
}

#[tokio::test]
async fn a_full_disk_under_the_store_loses_nothing_and_recovers_by_itself() {
    if mounting_here("full_disk::a_full_disk_under_the_store_loses_nothing_and_recovers_by_itself")
    {
        full_disk(false).await;
    }
}

#[tokio::test]
async fn a_full_disk_under_the_store_and_its_log_still_answers_every_delivery() {
    if mounting_here(
        "full_disk::a_full_disk_under_the_store_and_its_log_still_answers_every_delivery",
    ) {
        full_disk(true).await;
    }
}

/// PostgreSQL's data directory on a small disk that fills. Run as root only: PostgreSQL runs as
/// its own user, which a user namespace cannot map for a plain user; run otherwise, the test
/// says so and checks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_postgresql_loses_nothing_and_the_service_recovers() {
    use oncegate::store::testing::cluster::Cluster;
    if !is_root() {
        eprintln!("skipped: PostgreSQL on a small disk needs root (mount, and the postgres user)");
        return;
    }
    let disk = SmallDisk::mount("64m");
    let mut cluster = Cluster::primary_at(
        Some(&disk.path),
        None,
        "max_wal_size = '8MB'\nmin_wal_size = '4MB'\nrestart_after_crash = on",
    )
    .await;
    let port = oncegate::store::testing::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let log = Log::Pipe(Arc::default());
    let mut c = Command::new(env!("CARGO_BIN_EXE_oncegate"));
    c.args(["serve", "--contract", CONTRACT, "--log-json", "--store"])
        .arg(cluster.url())
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("ONCEGATE_KEY_SALT", "full-disk-test-salt")
        .env("ONCEGATE_TOKENS", format!("ingest:*:{TOKEN}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().expect("serve starts");
    drop(log);
    let http = reqwest::Client::new();
    let started = Instant::now();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "serve never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut answers: Vec<(String, u16, serde_json::Value)> = Vec::new();
    let payments: Vec<String> = (0..40).map(|i| format!("pay_pgdisk_{i}")).collect();
    for p in &payments[..3] {
        let (status, body) = deliver(&http, &base, p).await;
        assert_eq!(status, 200, "{p} before the disk fills: {body}");
        answers.push((p.clone(), status, body));
    }
    let filler = disk.fill();
    for p in &payments[3..] {
        let (status, body) = deliver(&http, &base, p).await;
        assert!(
            status == 200 || status == 503,
            "{p} on a full disk: {status} {body}"
        );
        answers.push((p.clone(), status, body));
    }
    let refused = answers.iter().filter(|(_, s, _)| *s == 503).count();
    assert!(
        refused > 0,
        "the disk filled: some deliveries were answered 503"
    );

    std::fs::remove_file(&filler).unwrap();
    let healed = Instant::now();
    let restarted = cluster.restart_if_stopped().await;
    for p in &payments[3..] {
        if answers.iter().any(|(q, s, _)| q == p && *s == 200) {
            continue;
        }
        loop {
            let (status, body) = deliver(&http, &base, p).await;
            answers.push((p.clone(), status, body));
            if status == 200 {
                break;
            }
            assert!(
                healed.elapsed() < Duration::from_secs(60),
                "{p}: no recovery 60 s after space returned"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    eprintln!(
        "full disk (PostgreSQL): {refused} answered 503, all decided {:?} after space returned; PostgreSQL {}",
        healed.elapsed(),
        if restarted { "had stopped and was started again" } else { "kept running" }
    );
    assert!(child.try_wait().unwrap().is_none(), "serve kept running");
    let _ = child.kill();
    let _ = child.wait();

    let db = cluster.client().await;
    db.batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        .await
        .expect("amcheck (PostgreSQL's contrib)");
    let tables = db
        .query(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'public' AND c.relkind = 'r'",
            &[],
        )
        .await
        .unwrap();
    for t in tables {
        let table: String = t.get(0);
        let damaged = db
            .query(&format!("SELECT * FROM verify_heapam('{table}')"), &[])
            .await
            .unwrap();
        assert!(
            damaged.is_empty(),
            "{table} is half written: {} rows",
            damaged.len()
        );
    }
    let indexes = db
        .query(
            "SELECT c.oid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             JOIN pg_am a ON a.oid = c.relam JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE a.amname = 'btree' AND n.nspname = 'public'",
            &[],
        )
        .await
        .unwrap();
    for i in indexes {
        let index: String = i.get(0);
        db.query(&format!("SELECT bt_index_check('{index}', true)"), &[])
            .await
            .unwrap_or_else(|e| panic!("index {index} is damaged: {e}"));
    }
    for (p, status, body) in &answers {
        if *status != 200 {
            continue;
        }
        let id = body["delivery_id"].as_str().expect("a delivery id");
        let proofs: i64 = db
            .query_one("SELECT count(*) FROM proofs WHERE delivery_id = $1", &[&id])
            .await
            .unwrap()
            .get(0);
        assert_eq!(proofs, 1, "{p}: acknowledged delivery {id} is kept");
    }
    let effects: i64 = db
        .query_one("SELECT count(*) FROM effects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(effects as usize, payments.len(), "one effect per payment");
}
