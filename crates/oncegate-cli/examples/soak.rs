//! The soak: `oncegate serve` twice on one PostgreSQL database, under the webhook mix for a long
//! time (an hour by default), printing each minute what drifts when something leaks: each
//! instance's resident memory and open file descriptors, the database's connections, and the
//! minute's p99 and throughput. `scripts/soak` builds and runs it; it is not part of the tests.
//!
//! Mix (as the load bench's): 70 % first deliveries of new captures, 25 % re-encoded retries of
//! earlier ones, 5 % collisions (an earlier capture's key, another amount); every `process` is
//! completed right after, through the instance that answered.
//!
//! `ONCEGATE_SOAK_SECS` (3600), `ONCEGATE_SOAK_CONNECTIONS` (16), `ONCEGATE_TEST_PG` (the admin
//! URL, `postgres://postgres@127.0.0.1:5432/postgres` by default).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "soak-ingest-token-000";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident memory (KiB) and open descriptors of a process, from `/proc`.
fn rss_and_fds(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    (rss, fds)
}

fn capture(n: u64, amount: u64, pretty: bool) -> String {
    let body = serde_json::json!({
        "type": "payment.captured",
        "sent_at": "2026-03-02T09:14:07Z",
        "data": {
            "payment_id": format!("pay_soak_{n}"),
            "capture_id": format!("cap_soak_{n}"),
            "amount": amount,
            "currency": "EUR",
            "captured_at": "2026-03-02T10:14:05+01:00"
        }
    });
    if pretty {
        serde_json::to_string_pretty(&body).unwrap()
    } else {
        body.to_string()
    }
}

struct Instance {
    child: Child,
    base: String,
}

fn serve(binary: &str, contract: &str, store: &str) -> Instance {
    let port = oncegate::store::testing::free_port();
    let child = Command::new(binary)
        .args(["serve", "--contract", contract, "--store", store])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("ONCEGATE_KEY_SALT", "soak-salt-0123456789")
        .env("ONCEGATE_TOKENS", format!("ingest:*:{TOKEN}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("oncegate serve starts");
    Instance {
        child,
        base: format!("http://127.0.0.1:{port}"),
    }
}

#[tokio::main]
async fn main() {
    let secs = env_u64("ONCEGATE_SOAK_SECS", 3600);
    let connections = env_u64("ONCEGATE_SOAK_CONNECTIONS", 16);
    let admin = std::env::var("ONCEGATE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let binary = std::env::var("ONCEGATE_SOAK_BINARY").expect("ONCEGATE_SOAK_BINARY");
    let contract = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/oncegate.toml");

    let name = format!("oncegate_soak_{}", std::process::id());
    let (admin_client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL at ONCEGATE_TEST_PG");
    tokio::spawn(conn);
    admin_client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let store = oncegate::store::testing::with_database(&admin, &name);
    let mut instances = vec![serve(&binary, contract, &store)];
    // The first migrates the schema; the second starts on it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    instances.push(serve(&binary, contract, &store));
    let http = reqwest::Client::new();
    for i in &instances {
        let deadline = Instant::now() + Duration::from_secs(30);
        while http.get(format!("{}/readyz", i.base)).send().await.is_err() {
            assert!(Instant::now() < deadline, "an instance never became ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    let bases: Arc<Vec<String>> = Arc::new(instances.iter().map(|i| i.base.clone()).collect());
    let next = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::<u32>::new()));
    let errors = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(secs);
    for c in 0..connections {
        let (bases, next, latencies, errors) = (
            bases.clone(),
            next.clone(),
            latencies.clone(),
            errors.clone(),
        );
        let http = http.clone();
        tokio::spawn(async move {
            let mut rng = c.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            while Instant::now() < end {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let roll = rng % 100;
                let issued = next.load(Ordering::Relaxed);
                let body = if roll < 70 || issued == 0 {
                    capture(next.fetch_add(1, Ordering::Relaxed), 4990, false)
                } else if roll < 95 {
                    capture(rng % issued, 4990, true)
                } else {
                    capture(rng % issued, 5990, false)
                };
                let base = &bases[(rng % bases.len() as u64) as usize];
                let t = Instant::now();
                let answer = http
                    .post(format!("{base}/v1/deliveries/acme/payflow/live"))
                    .bearer_auth(TOKEN)
                    .body(body)
                    .send()
                    .await;
                let Ok(answer) = answer else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if answer.status() != 200 {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                let v: serde_json::Value = answer.json().await.unwrap_or_default();
                latencies
                    .lock()
                    .unwrap()
                    .push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                if v["action"] == "process" {
                    let effect = v["effect"]["id"].as_str().unwrap_or_default();
                    let token = v["reservation"]["token"].as_str().unwrap_or_default();
                    let _ = http
                        .post(format!("{base}/v1/effects/{effect}/complete"))
                        .bearer_auth(TOKEN)
                        .json(&serde_json::json!({"token": token, "result": {"ok": true}}))
                        .send()
                        .await;
                }
            }
        });
    }

    println!("minute  deliveries/s  p99_ms  errors  rss_kib(a,b)  fds(a,b)  pg_connections");
    let mut minute = 0;
    let mut tick = Instant::now();
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(60).min(end - Instant::now())).await;
        minute += 1;
        let elapsed = tick.elapsed().as_secs_f64();
        tick = Instant::now();
        let mut l = std::mem::take(&mut *latencies.lock().unwrap());
        l.sort_unstable();
        let p99 = l
            .get(l.len().saturating_sub(1) * 99 / 100)
            .copied()
            .unwrap_or(0);
        let [(ra, fa), (rb, fb)] = [
            rss_and_fds(instances[0].child.id()),
            rss_and_fds(instances[1].child.id()),
        ];
        let pg: i64 = admin_client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                &[&name],
            )
            .await
            .map(|r| r.get(0))
            .unwrap_or(-1);
        println!(
            "{minute:>6}  {:>12.0}  {:>6.1}  {:>6}  {ra:>6},{rb:<6}  {fa:>4},{fb:<4}  {pg:>14}",
            l.len() as f64 / elapsed,
            p99 as f64 / 1000.0,
            errors.swap(0, Ordering::Relaxed),
        );
    }
    for mut i in instances {
        let _ = i.child.kill();
        let _ = i.child.wait();
    }
    let _ = admin_client
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await;
}
