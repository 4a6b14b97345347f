//! The load benchmark: `oncegate serve` against a hand-made endpoint over real HTTP, on SQLite
//! and PostgreSQL, with a webhook mix: 70 % first deliveries of new captures, 25 %
//! re-encoded retries of earlier ones, 5 % collisions (the same capture key, another amount);
//! every `process` is completed on the same connection right after.
//!
//! The hand-made endpoint is what a user writes instead (`ONCEGATE_LOAD_ROLE=baseline`, this
//! same binary run as a child): axum, parse the JSON, one `INSERT … ON CONFLICT DO NOTHING
//! RETURNING` per delivery and one `UPDATE` per complete, with the same durability (SQLite WAL
//! with `synchronous=FULL`; PostgreSQL as the server is configured). It journals nothing and
//! cannot tell a collision from a retry.
//!
//! Both servers run as their own processes on 127.0.0.1, each on a fresh store, and are measured
//! A/B alternating in slices; a side's figure is the median of its slices. Printed per store:
//! decisions per second of each side, their ratio, the p50/p99 of a delivery's answer, and the
//! CPU time a decision costs each side's server and its PostgreSQL backends, on SQLite the
//! bytes it writes to disk, and how often per decision the server's threads went to sleep with
//! nothing to run or were preempted (`cpu`): on a virtual machine each sleep and wake-up costs
//! the kernel several microseconds.
//! Then the scale mode: the p99 of new decisions with 10k and with 1M stored effects (seeded
//! with bulk SQL, two deliveries each over 30 days: `load/seed.rs`), `oncegate serve`'s RSS
//! before and after, and how long the console's pages and the report take to answer.
//!
//! Run: `cargo bench -p oncegate-cli --bench load` (PostgreSQL at 127.0.0.1:5432 or
//! `ONCEGATE_TEST_PG`). `ONCEGATE_LOAD_SECS` is the seconds of each slice (5), `ONCEGATE_LOAD_ROUNDS`
//! the slices per side (3), `ONCEGATE_LOAD_CONNECTIONS` the connections (32),
//! `ONCEGATE_LOAD_BACKENDS` `sqlite`, `postgres` or both, `ONCEGATE_LOAD_WORKERS` the threads
//! of `oncegate serve` (`--workers`; unset, one per core), `ONCEGATE_LOAD_INSTANCES` how many
//! `oncegate serve` processes share the PostgreSQL database (1; the connections are dealt out
//! among them in turn, each gathers its own batches, and their CPU is summed: what a database
//! carrying several instances costs; SQLite stays one process), `ONCEGATE_LOAD_SCALE` the largest
//! seeded count (1000000; 0 skips the scale mode), `ONCEGATE_LOAD_ROUNDS=0` runs the scale mode
//! alone. `ONCEGATE_LOAD_PERF=<dir>` records each side's server and PostgreSQL backends with
//! `perf` in a slice of its own after the timed ones, and prints the backends' CPU per decision
//! by phase of a statement's life and the server's by part (`load/phases.rs`).
//! Where the server collects statement statistics (`pg_stat_statements`, which
//! `scripts/with-test-pg` preloads), it also prints each side's top statements by time per
//! decision (`load/statements.rs`).

#[path = "load/cpu.rs"]
mod cpu;
#[path = "load/phases.rs"]
mod phases;
#[path = "load/seed.rs"]
mod seed;
#[path = "load/statements.rs"]
mod statements;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "load-bench-ingest-token";
/// Reads `/metrics` (the store's batch sizes).
const OPERATOR_TOKEN: &str = "load-bench-operator-token";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn wanted(backend: &str) -> bool {
    std::env::var("ONCEGATE_LOAD_BACKENDS")
        .map(|list| list.split(',').any(|b| b.trim() == backend))
        .unwrap_or(true)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    if std::env::var("ONCEGATE_LOAD_ROLE").as_deref() == Ok("baseline") {
        let store = std::env::var("ONCEGATE_LOAD_STORE").expect("ONCEGATE_LOAD_STORE");
        let listen = std::env::var("ONCEGATE_LOAD_LISTEN").expect("ONCEGATE_LOAD_LISTEN");
        rt.block_on(baseline::serve(&store, &listen));
        return;
    }
    rt.block_on(bench());
}

// ---------------------------------------------------------------------------------------------
// The mix

/// A capture as the provider sends it; `variant` re-encodes it (another `sent_at`, `attempt`
/// and member order: the same event, other bytes).
fn capture(n: u64, amount: u64, variant: u64) -> String {
    let sent = format!(
        "2026-03-05T16:{:02}:{:02}Z",
        variant % 60,
        (variant * 7) % 60
    );
    if variant.is_multiple_of(2) {
        format!(
            r#"{{"type":"payment.captured","sent_at":"{sent}","attempt":{a},"data":{{"payment_id":"pay_{n}","capture_id":"cap_{n}","amount":{amount},"currency":"EUR","captured_at":"2026-03-05T16:00:00Z"}}}}"#,
            a = variant + 1
        )
    } else {
        format!(
            r#"{{"data":{{"currency":"EUR","amount":{amount},"capture_id":"cap_{n}","payment_id":"pay_{n}","captured_at":"2026-03-05T16:00:00Z"}},"attempt":{a},"type":"payment.captured","sent_at":"{sent}"}}"#,
            a = variant + 1
        )
    }
}

/// What one slice measured.
#[derive(Default)]
struct Tally {
    /// Decisions per second.
    decisions: u64,
    /// Decisions in all.
    total: u64,
    latencies_us: Vec<u64>,
    unexpected: u64,
    /// The first unexpected answers, for the report.
    samples: Vec<String>,
}

/// Splitmix64: a deterministic mix without a dependency.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Drives `bases` (one server's instances) from `connections` connections for `secs`, the
/// connections dealt out among the instances in turn: the mix (or only new captures when
/// `only_new`), each `process` completed right after on the same connection. Captures are
/// numbered from `from` on, so the slices never reuse one.
async fn drive(bases: &[String], connections: u64, secs: f64, from: u64, only_new: bool) -> Tally {
    let counter = Arc::new(AtomicU64::new(from));
    let sent: Arc<Mutex<Vec<u64>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let base = bases[c as usize % bases.len()].clone();
        let (counter, sent) = (counter.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            // One client with one connection: a process and its complete share it.
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .expect("a client");
            let mut rng = from ^ (c + 1).wrapping_mul(0x5851_F42D_4C95_7F2D);
            let mut tally = Tally::default();
            while Instant::now() < deadline {
                let roll = next(&mut rng) % 100;
                let earlier = {
                    let sent = sent.lock().expect("sent");
                    (!sent.is_empty()).then(|| sent[(next(&mut rng) % sent.len() as u64) as usize])
                };
                let (body, expect) = match (only_new, roll, earlier) {
                    (false, 70..=94, Some(n)) => {
                        (capture(n, 1500, next(&mut rng) % 50 + 1), "ignore")
                    }
                    (false, 95.., Some(n)) => (capture(n, 2500, 0), "quarantine"),
                    _ => {
                        let n = counter.fetch_add(1, Ordering::Relaxed);
                        (capture(n, 1500, 0), "process")
                    }
                };
                let t = Instant::now();
                let answer = client
                    .post(format!("{base}/v1/deliveries/acme/payflow/live"))
                    .bearer_auth(TOKEN)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                let Ok(answer) = answer else {
                    tally.unexpected += 1;
                    continue;
                };
                let doc: serde_json::Value = answer.json().await.unwrap_or_default();
                tally.latencies_us.push(t.elapsed().as_micros() as u64);
                tally.decisions += 1;
                let action = doc["action"].as_str().unwrap_or("");
                // The hand-made endpoint cannot tell a collision from a retry.
                if action != expect
                    && !(expect == "quarantine"
                        && action == "ignore"
                        && doc["handmade"].as_bool() == Some(true))
                {
                    tally.unexpected += 1;
                    if tally.samples.len() < 2 {
                        tally.samples.push(format!("expected {expect}, got {doc}"));
                    }
                }
                if action == "process" {
                    let effect = doc["effect"]["id"].as_str().unwrap_or("").to_owned();
                    let token = doc["reservation"]["token"].clone();
                    let done = client
                        .post(format!("{base}/v1/effects/{effect}/complete"))
                        .bearer_auth(TOKEN)
                        .json(&serde_json::json!({"token": token, "result": {"ok": true}}))
                        .send()
                        .await;
                    if !done.is_ok_and(|r| r.status().is_success()) {
                        tally.unexpected += 1;
                    }
                    if expect == "process" {
                        if let Some(n) = body_number(&body) {
                            let mut sent = sent.lock().expect("sent");
                            if sent.len() < 100_000 {
                                sent.push(n);
                            }
                        }
                    }
                }
            }
            tally
        }));
    }
    let mut all = Tally::default();
    for t in tasks {
        let t = t.await.expect("a connection");
        all.decisions += t.decisions;
        all.unexpected += t.unexpected;
        all.latencies_us.extend(t.latencies_us);
        if all.samples.len() < 3 {
            all.samples.extend(t.samples);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.total = all.decisions;
    all.decisions = (all.decisions as f64 / elapsed) as u64;
    all
}

fn body_number(body: &str) -> Option<u64> {
    let at = body.find("\"pay_")? + 5;
    body[at..].split('"').next()?.parse().ok()
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------------
// The servers

/// One side's server: its processes (several instances of `oncegate serve` on one database,
/// or one) and their base URLs, in the same order.
struct Server {
    children: Vec<Child>,
    bases: Vec<String>,
}

impl Server {
    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn ready(base: &str) {
    let client = reqwest::Client::new();
    for _ in 0..600 {
        if client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server at {base} did not come up");
}

/// The example contract, with a collision breaker that the mix's 5 % of collisions does not
/// open (at the example's 0.5 % it opens within a second, and every later retry is then sent to
/// reconciliation, as it should be in production).
fn contract() -> std::path::PathBuf {
    let text = include_str!("../../../examples/oncegate.toml")
        .replace("breaker_threshold = 0.005", "breaker_threshold = 0.5");
    let path = contract_path();
    std::fs::write(&path, text).expect("write the bench contract");
    path
}

/// `oncegate serve --workers`, from `ONCEGATE_LOAD_WORKERS` (unset: serve's default, a thread
/// per core).
fn workers() -> Option<u16> {
    std::env::var("ONCEGATE_LOAD_WORKERS").ok().map(|v| {
        v.parse()
            .expect("ONCEGATE_LOAD_WORKERS is a number of threads")
    })
}

/// How many `oncegate serve` processes share a PostgreSQL database, from
/// `ONCEGATE_LOAD_INSTANCES` (1).
fn instances() -> usize {
    std::env::var("ONCEGATE_LOAD_INSTANCES")
        .ok()
        .map_or(1, |v| {
            v.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .expect("ONCEGATE_LOAD_INSTANCES is a number of processes, at least 1")
        })
}

/// Where this run's contract is written (removed at the end of the run).
fn contract_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("oncegate-load-{}.toml", std::process::id()))
}

/// `instances` processes of `oncegate serve` on `store`, started one after the other (the first
/// creates the schema).
async fn oncegate(store: &str, instances: usize) -> Server {
    let mut server = Server {
        children: Vec::new(),
        bases: Vec::new(),
    };
    for _ in 0..instances {
        let (child, base) = oncegate_instance(store).await;
        server.children.push(child);
        server.bases.push(base);
    }
    server
}

async fn oncegate_instance(store: &str) -> (Child, String) {
    let port = oncegate::store::testing::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .arg("serve")
        .arg("--contract")
        .arg(contract())
        .arg("--no-purge")
        .args(["--store", store, "--listen", &format!("127.0.0.1:{port}")])
        .args(workers().map(|n| format!("--workers={n}")))
        .env_remove("ONCEGATE_WORKERS")
        .env(
            "ONCEGATE_TOKENS",
            format!("ingest:*:{TOKEN};operator:*:{OPERATOR_TOKEN}"),
        )
        .env("ONCEGATE_KEY_SALT", "load-bench-salt-load-bench-salt")
        .env("PAYFLOW_SIGNING_SECRET", "load-bench-secret")
        .env("ONCEGATE_LOG", "off")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("oncegate serve starts");
    let base = format!("http://127.0.0.1:{port}");
    ready(&base).await;
    (child, base)
}

async fn handmade(store: &str) -> Server {
    let port = oncegate::store::testing::free_port();
    let child = Command::new(std::env::current_exe().expect("this binary"))
        .env("ONCEGATE_LOAD_ROLE", "baseline")
        .env("ONCEGATE_LOAD_STORE", store)
        .env("ONCEGATE_LOAD_LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .spawn()
        .expect("the hand-made endpoint starts");
    let base = format!("http://127.0.0.1:{port}");
    ready(&base).await;
    Server {
        children: vec![child],
        bases: vec![base],
    }
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|k| k.parse::<f64>().ok())
            })
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// A fresh PostgreSQL database named after `tag` (dropped first if a run left it), and its URL.
async fn pg_database(admin: &tokio_postgres::Client, base: &str, tag: &str) -> String {
    let name = format!("oncegate_load_{tag}_{}", std::process::id());
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("CREATE DATABASE");
    format!("{base}/{name}")
}

// ---------------------------------------------------------------------------------------------
// The run

async fn bench() {
    let secs = env_u64("ONCEGATE_LOAD_SECS", 5) as f64;
    let rounds = env_u64("ONCEGATE_LOAD_ROUNDS", 3);
    let connections = env_u64("ONCEGATE_LOAD_CONNECTIONS", 32).max(1);
    let scale = env_u64("ONCEGATE_LOAD_SCALE", 1_000_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let admin_url = std::env::var("ONCEGATE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let pg_base = admin_url
        .rsplit_once('/')
        .map(|(b, _)| b.to_owned())
        .unwrap_or(admin_url.clone());
    let admin = match tokio_postgres::connect(&admin_url, tokio_postgres::NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(connection);
            Some(client)
        }
        Err(e) => {
            eprintln!("PostgreSQL is not reachable at {admin_url} ({e}); skipping it");
            None
        }
    };
    if rounds > 0 {
        println!(
            "load: {connections} connections over HTTP, {rounds} alternating slices of {secs} s per side; \
             mix 70 % new captures, 25 % re-encoded retries, 5 % collisions; each process completed{}",
            match workers() {
                Some(n) => format!("; oncegate serve --workers {n}"),
                None => String::new(),
            } + &match instances() {
                1 => String::new(),
                n => format!("; {n} instances of oncegate serve on PostgreSQL's database"),
            }
        );
        println!(
            "{:<9} {:>14} {:>9} {:>9} {:>14} {:>9} {:>9} {:>7}",
            "store", "oncegate /s", "p50 ms", "p99 ms", "hand-made /s", "p50 ms", "p99 ms", "ratio"
        );
    }
    let mut stores: Vec<(&str, String, String)> = Vec::new();
    // No slices: the scale mode alone.
    if rounds > 0 && wanted("sqlite") {
        stores.push((
            "sqlite",
            format!("sqlite://{}", dir.path().join("oncegate.db").display()),
            format!("sqlite://{}", dir.path().join("handmade.db").display()),
        ));
    }
    if let (true, Some(admin)) = (rounds > 0 && wanted("postgres"), &admin) {
        stores.push((
            "postgres",
            pg_database(admin, &pg_base, "ours").await,
            pg_database(admin, &pg_base, "handmade").await,
        ));
    }
    for (backend, ours_url, theirs_url) in &stores {
        // Several instances share a PostgreSQL database; an SQLite file stays one process's.
        let ours = oncegate(
            ours_url,
            if *backend == "postgres" {
                instances()
            } else {
                1
            },
        )
        .await;
        let theirs = handmade(theirs_url).await;
        // Warm-up, untimed.
        drive(&ours.bases, connections, 1.0, 0, false).await;
        drive(&theirs.bases, connections, 1.0, 0, false).await;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let (mut la, mut lb) = (Vec::new(), Vec::new());
        let mut unexpected = 0;
        let mut samples = Vec::new();
        let pg = admin.as_ref().filter(|_| *backend == "postgres");
        let ours_meter = cpu::Meter::new(ours.pids(), pg.map(|a| (a, ours_url.as_str())));
        let theirs_meter = cpu::Meter::new(theirs.pids(), pg.map(|a| (a, theirs_url.as_str())));
        let (mut ours_cpu, mut theirs_cpu) = (cpu::Used::default(), cpu::Used::default());
        let mut batches = BatchSizes::default();
        // Each side's statements from here on (`pg_stat_statements`, where the server has it).
        let databases = [ours_url.as_str(), theirs_url.as_str()]
            .map(|u| u.rsplit('/').next().unwrap_or_default().to_owned());
        let counted = match pg {
            Some(admin) if statements::available(admin).await => {
                let mut reset = true;
                for database in &databases {
                    reset &= statements::reset(admin, database).await;
                }
                reset.then_some(admin)
            }
            _ => None,
        };
        let (mut ours_total, mut theirs_total) = (0, 0);
        for round in 1..=rounds {
            let from = round * 100_000_000;
            let before = ours_meter.read().await;
            let sizes_before = BatchSizes::scrape(&ours.bases).await;
            let t = drive(&ours.bases, connections, secs, from, false).await;
            ours_cpu.add(&before, &ours_meter.read().await, t.total);
            batches.add(&sizes_before, &BatchSizes::scrape(&ours.bases).await);
            unexpected += t.unexpected;
            samples.extend(t.samples);
            a.push(t.decisions as f64);
            ours_total += t.total;
            la.extend(t.latencies_us);
            let before = theirs_meter.read().await;
            let t = drive(&theirs.bases, connections, secs, from, false).await;
            theirs_cpu.add(&before, &theirs_meter.read().await, t.total);
            b.push(t.decisions as f64);
            theirs_total += t.total;
            lb.extend(t.latencies_us);
        }
        let mut statement_lines = None;
        if let Some(admin) = counted {
            statement_lines = Some((
                statements::line(admin, &databases[0], ours_total, 5).await,
                statements::line(admin, &databases[1], theirs_total, 5).await,
            ));
        }
        // `ONCEGATE_LOAD_PERF`: one more slice per side, outside the figures above (recording
        // costs the recorded processes CPU of its own), with the server and its backends
        // recorded by perf; the shares of their samples then divide the CPU per decision of the
        // timed slices.
        let mut profiled = None;
        if let Some(dir) = std::env::var_os("ONCEGATE_LOAD_PERF").filter(|_| pg.is_some()) {
            let from = (rounds + 1) * 100_000_000;
            let dir = std::path::PathBuf::from(dir);
            let mut sides = Vec::new();
            for (name, server, meter) in [
                ("oncegate", &ours, &ours_meter),
                ("hand-made", &theirs, &theirs_meter),
            ] {
                let backends = meter.read().await.backends();
                let recording = phases::Recording::start(&dir, name, &backends);
                let serving =
                    phases::Recording::start(&dir, &format!("{name}-server"), &server.pids());
                drive(&server.bases, connections, secs, from, false).await;
                let phases = recording.and_then(phases::Recording::phases);
                sides.push((phases, serving.and_then(phases::Recording::parts)));
            }
            profiled = Some(sides);
        }
        la.sort_unstable();
        lb.sort_unstable();
        let (ra, rb) = (median(a), median(b));
        println!(
            "{backend:<9} {ra:>14.0} {:>9.2} {:>9.2} {rb:>14.0} {:>9.2} {:>9.2} {:>6.2}x",
            percentile(&la, 0.5),
            percentile(&la, 0.99),
            percentile(&lb, 0.5),
            percentile(&lb, 0.99),
            ra / rb
        );
        let ((os, op), (ts, tp)) = (ours_cpu.per_decision(), theirs_cpu.per_decision());
        if *backend == "postgres" {
            println!(
                "  CPU per decision: oncegate serve {os:.0} µs + PostgreSQL {op:.0} µs; \
                 hand-made {ts:.0} µs + PostgreSQL {tp:.0} µs ({:.2}x in all)",
                (os + op) / (ts + tp).max(1.0)
            );
            if let Some([(Some(o), os_parts), (Some(t), ts_parts)]) = profiled.as_deref() {
                println!(
                    "  PostgreSQL's CPU per decision by phase (perf, a slice of its own), µs: oncegate {}; hand-made {}",
                    o.line(op),
                    t.line(tp)
                );
                println!(
                    "  executing the statements alone (executor start-up, run, end): oncegate {:.0} µs; \
                     hand-made {:.0} µs, of its {tp:.0} µs in all",
                    o.executor(op),
                    t.executor(tp)
                );
                if let (Some(o), Some(t)) = (os_parts, ts_parts) {
                    println!(
                        "  the server's CPU per decision by part, µs: oncegate serve {}; hand-made {}",
                        o.line(os),
                        t.line(ts)
                    );
                }
            }
            if let Some((Some(o), Some(t))) = &statement_lines {
                println!(
                    "  PostgreSQL's statement time per decision, its top statements (pg_stat_statements, wall time): oncegate {o}; hand-made {t}"
                );
            }
        } else {
            println!(
                "  CPU per decision, the store's work included: oncegate serve {os:.0} µs; \
                 hand-made {ts:.0} µs ({:.2}x)",
                os / ts.max(1.0)
            );
            println!(
                "  written to disk per decision: oncegate serve {:.1} KiB; hand-made {:.1} KiB",
                ours_cpu.written_kib(),
                theirs_cpu.written_kib()
            );
        }
        let ((ov, oi), (tv, ti)) = (ours_cpu.switches(), theirs_cpu.switches());
        println!(
            "  the server's threads per decision: slept {ov:.2}, preempted {oi:.2} (oncegate serve); \
             slept {tv:.2}, preempted {ti:.2} (hand-made)"
        );
        println!("  {}", batches.line());
        if unexpected > 0 {
            println!("  ({unexpected} oncegate answers were not the expected action or failed)");
            for s in samples.iter().take(3) {
                println!("  {s}");
            }
        }
    }
    drop(stores);
    if scale > 0 {
        scale_mode(
            connections,
            secs,
            scale,
            dir.path(),
            admin.as_ref(),
            &pg_base,
        )
        .await;
    }
    // The contract file and the databases of this run go with it (the servers using them are
    // stopped by now).
    let _ = std::fs::remove_file(contract_path());
    if let Some(admin) = &admin {
        let tags = ["ours", "handmade", "scale10000"].map(str::to_owned);
        for tag in tags.into_iter().chain([format!("scale{scale}")]) {
            let name = format!("oncegate_load_{tag}_{}", std::process::id());
            let _ = admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
        }
    }
}

/// The store's group commits during the timed slices, from `oncegate_store_batch_calls` (a
/// histogram: cumulative counts per `le`, then `_count` and `_sum`) and
/// `oncegate_store_round_trips_total`.
#[derive(Debug, Default, Clone)]
struct BatchSizes {
    /// (`le`, batches at or under it), cumulative, in the order served.
    buckets: Vec<(String, f64)>,
    batches: f64,
    calls: f64,
    round_trips: f64,
}

impl BatchSizes {
    /// The instances' batches, summed.
    async fn scrape(bases: &[String]) -> BatchSizes {
        let mut all = BatchSizes::default();
        for base in bases {
            all.count(&BatchSizes::scrape_one(base).await, 1.0);
        }
        all
    }

    async fn scrape_one(base: &str) -> BatchSizes {
        let text = match reqwest::Client::new()
            .get(format!("{base}/metrics"))
            .bearer_auth(OPERATOR_TOKEN)
            .send()
            .await
        {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let mut seen = BatchSizes::default();
        for line in text.lines() {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value: f64 = value.parse().unwrap_or(0.0);
            if let Some(le) = name
                .strip_prefix("oncegate_store_batch_calls_bucket{le=\"")
                .and_then(|r| r.strip_suffix("\"}"))
            {
                seen.buckets.push((le.to_owned(), value));
            } else if name == "oncegate_store_batch_calls_count" {
                seen.batches = value;
            } else if name == "oncegate_store_batch_calls_sum" {
                seen.calls = value;
            } else if name == "oncegate_store_round_trips_total" {
                seen.round_trips = value;
            }
        }
        seen
    }

    /// Adds what happened between two scrapes.
    fn add(&mut self, before: &BatchSizes, after: &BatchSizes) {
        self.count(after, 1.0);
        self.count(before, -1.0);
    }

    /// Adds `sign` times what `other` counted.
    fn count(&mut self, other: &BatchSizes, sign: f64) {
        if self.buckets.is_empty() {
            self.buckets = other
                .buckets
                .iter()
                .map(|(le, _)| (le.clone(), 0.0))
                .collect();
        }
        for ((_, total), (_, n)) in self.buckets.iter_mut().zip(&other.buckets) {
            *total += sign * n;
        }
        self.batches += sign * other.batches;
        self.calls += sign * other.calls;
        self.round_trips += sign * other.round_trips;
    }

    /// `group commits: N, M calls each on average[, R round trips each]; share of batches by
    /// calls: ≤1 x %, …` (round trips where the store has a server).
    fn line(&self) -> String {
        if self.batches <= 0.0 {
            return "group commits: none reported".to_owned();
        }
        let mut previous = 0.0;
        let mut shares = Vec::new();
        let mut bound = "1".to_owned();
        for (le, cumulative) in &self.buckets {
            let share = 100.0 * (cumulative - previous) / self.batches;
            previous = *cumulative;
            let label = if le == "+Inf" {
                format!(">{bound}")
            } else {
                let le = le.parse::<f64>().map_or(le.clone(), |b| format!("{b:.0}"));
                let label = format!("≤{le}");
                bound = le.clone();
                label
            };
            shares.push(format!("{label} {share:.0} %"));
        }
        let trips = if self.round_trips > 0.0 {
            format!(", {:.2} round trips each", self.round_trips / self.batches)
        } else {
            String::new()
        };
        format!(
            "group commits: {:.0}, {:.1} calls each on average{trips}; batches by calls: {}",
            self.batches,
            self.calls / self.batches,
            shares.join(", ")
        )
    }
}

/// The p99 of new decisions with 10k and with `scale` stored effects (and twice as many
/// deliveries), `serve`'s RSS, and how long the console's pages and the report take to answer.
async fn scale_mode(
    connections: u64,
    secs: f64,
    scale: u64,
    dir: &std::path::Path,
    admin: Option<&tokio_postgres::Client>,
    pg_base: &str,
) {
    println!("\nscale: p99 of new decisions ({connections} connections, {secs} s, 100 % new captures), oncegate serve's RSS, and the median of 5 answers of each read ({} days of deliveries, 2 per effect)", seed::DAYS);
    println!(
        "{:<9} {:>12} {:>9} {:>9} {:>12} {:>12}   reads (ms)",
        "store", "effects", "p50 ms", "p99 ms", "RSS before", "RSS after"
    );
    for backend in ["sqlite", "postgres"] {
        if !wanted(backend) || (backend == "postgres" && admin.is_none()) {
            continue;
        }
        for count in [10_000u64, scale] {
            let url = match backend {
                "sqlite" => format!(
                    "sqlite://{}",
                    dir.join(format!("scale-{count}.db")).display()
                ),
                _ => pg_database(admin.expect("admin"), pg_base, &format!("scale{count}")).await,
            };
            // The schema first (the service creates it), then the rows, then the service again.
            drop(oncegate(&url, 1).await);
            let seeding = Instant::now();
            seed::history(&url, count).await;
            let seeded = seeding.elapsed();
            // The report's minute totals of the history counted once, as an operator does after
            // an upgrade (`oncegate rollup`): the service then counts only the new minutes.
            let counting = Instant::now();
            let counted = Command::new(env!("CARGO_BIN_EXE_oncegate"))
                .args(["rollup", "--store", &url])
                .output()
                .expect("run oncegate rollup");
            assert!(
                counted.status.success(),
                "oncegate rollup: {}",
                String::from_utf8_lossy(&counted.stderr)
            );
            let totals = counting.elapsed();
            let server = oncegate(&url, 1).await;
            let pid = server.pids()[0];
            drive(&server.bases, connections, 1.0, 0, true).await;
            let before = rss_mib(pid);
            let mut t = drive(&server.bases, connections, secs, 900_000_000, true).await;
            let after = rss_mib(pid);
            t.latencies_us.sort_unstable();
            let reads = reads(&server.bases[0]).await;
            println!(
                "{backend:<9} {count:>12} {:>9.2} {:>9.2} {before:>9.1} MiB {after:>8.1} MiB   {reads}  (seeded in {:.0} s, report totals counted in {:.0} s)",
                percentile(&t.latencies_us, 0.5),
                percentile(&t.latencies_us, 0.99),
                seeded.as_secs_f64(),
                totals.as_secs_f64()
            );
        }
    }
}

/// The median time of 5 answers of each page an operator reads first: the console's deliveries,
/// queue and report pages (signed in as the console's users are) and the report's API.
async fn reads(base: &str) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client");
    let signed = client
        .post(format!("{base}/console/signin"))
        .form(&[("token", OPERATOR_TOKEN)])
        .send()
        .await
        .expect("sign in to the console");
    let cookie = signed
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok()?.split(';').next().map(str::to_owned))
        .collect::<Vec<_>>()
        .join("; ");
    assert!(
        !cookie.is_empty(),
        "the console answered its sign-in with a session"
    );
    let since = (time::OffsetDateTime::now_utc() - time::Duration::days(1))
        .format(&time::format_description::well_known::Rfc3339)
        .expect("a date");
    let pages = [
        ("deliveries", "/console/deliveries".to_owned()),
        ("queue", "/console/queue".to_owned()),
        ("report (24 hours)", "/console/report".to_owned()),
        (
            "decisions chart (24 hourly reports)",
            "/console/decisions".to_owned(),
        ),
        ("api report 1 day", format!("/v1/report?since={since}")),
        ("report (all)", "/console/report?range=all".to_owned()),
    ];
    let mut out = Vec::new();
    let mut failed = None;
    for (name, path) in pages {
        let mut times = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            let answer = client
                .get(format!("{base}{path}"))
                .header(reqwest::header::COOKIE, &cookie)
                .bearer_auth(OPERATOR_TOKEN)
                .send()
                .await
                .expect("a read");
            let status = answer.status();
            let _ = answer.bytes().await;
            if !status.is_success() {
                failed = Some(format!(
                    "{name} answered {} after {:.0}",
                    status.as_u16(),
                    start.elapsed().as_secs_f64() * 1000.0
                ));
                break;
            }
            times.push(start.elapsed().as_micros() as u64);
        }
        if let Some(failed) = failed.take() {
            out.push(failed);
            continue;
        }
        times.sort_unstable();
        out.push(format!("{name} {:.0}", times[2] as f64 / 1000.0));
    }
    out.join(", ")
}

// ---------------------------------------------------------------------------------------------
// The hand-made endpoint

mod baseline {
    use std::sync::{Arc, Mutex};

    use axum::extract::{Path, State};
    use axum::routing::post;
    use axum::{Json, Router};
    use serde_json::{json, Value};

    /// Where the hand-made endpoint keeps its one table.
    #[derive(Clone)]
    enum Db {
        Sqlite(Arc<Mutex<rusqlite::Connection>>),
        Postgres(deadpool_postgres::Pool),
    }

    const TABLE: &str =
        "CREATE TABLE IF NOT EXISTS captures (k TEXT PRIMARY KEY, token BIGINT NOT NULL, state TEXT NOT NULL, result TEXT)";

    pub async fn serve(store: &str, listen: &str) {
        let db = match store.strip_prefix("sqlite://") {
            Some(path) => {
                let conn = rusqlite::Connection::open(path).expect("open");
                let _: String = conn
                    .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
                    .expect("WAL");
                conn.execute_batch(&format!("PRAGMA synchronous = FULL; {TABLE};"))
                    .expect("the table");
                Db::Sqlite(Arc::new(Mutex::new(conn)))
            }
            None => {
                let config: tokio_postgres::Config = store.parse().expect("a PostgreSQL URL");
                let manager = deadpool_postgres::Manager::from_config(
                    config,
                    tokio_postgres::NoTls,
                    deadpool_postgres::ManagerConfig {
                        recycling_method: deadpool_postgres::RecyclingMethod::Fast,
                    },
                );
                let pool = deadpool_postgres::Pool::builder(manager)
                    .max_size(16)
                    .build()
                    .expect("a pool");
                pool.get()
                    .await
                    .expect("a connection")
                    .batch_execute(TABLE)
                    .await
                    .expect("the table");
                Db::Postgres(pool)
            }
        };
        let app = Router::new()
            .route("/healthz", axum::routing::get(|| async { "ok" }))
            .route("/v1/deliveries/{tenant}/{provider}/{env}", post(deliver))
            .route("/v1/effects/{key}/complete", post(complete))
            .with_state(db);
        let listener = tokio::net::TcpListener::bind(listen).await.expect("bind");
        axum::serve(listener, app).await.expect("serve");
    }

    async fn deliver(
        State(db): State<Db>,
        Path((tenant, provider, env)): Path<(String, String, String)>,
        body: axum::body::Bytes,
    ) -> Json<Value> {
        let doc: Value = serde_json::from_slice(&body).unwrap_or_default();
        let key = format!(
            "{tenant}/{provider}/{env}/{}/{}",
            doc["data"]["payment_id"].as_str().unwrap_or(""),
            doc["data"]["capture_id"].as_str().unwrap_or("")
        );
        let sql = "INSERT INTO captures (k, token, state) VALUES ($1, 1, 'reserved') ON CONFLICT (k) DO NOTHING RETURNING token";
        let won = match db {
            Db::Sqlite(conn) => {
                let key = key.clone();
                tokio::task::spawn_blocking(move || {
                    let conn = conn.lock().expect("the connection");
                    let mut stmt = conn
                        .prepare_cached(&sql.replace('$', "?"))
                        .expect("prepare");
                    let mut rows = stmt.query([&key]).expect("insert");
                    rows.next().expect("a row").is_some()
                })
                .await
                .expect("the insert")
            }
            Db::Postgres(pool) => {
                let client = pool.get().await.expect("a connection");
                let stmt = client.prepare_cached(sql).await.expect("prepare");
                client
                    .query_opt(&stmt, &[&key])
                    .await
                    .expect("insert")
                    .is_some()
            }
        };
        Json(if won {
            json!({"action": "process", "handmade": true, "effect": {"id": key.replace('/', "~")}, "reservation": {"token": 1}})
        } else {
            json!({"action": "ignore", "handmade": true})
        })
    }

    async fn complete(
        State(db): State<Db>,
        Path(key): Path<String>,
        Json(body): Json<Value>,
    ) -> Json<Value> {
        let key = key.replace('~', "/");
        let token = body["token"].as_i64().unwrap_or(0);
        let result = body["result"].to_string();
        let sql = "UPDATE captures SET state = 'completed', result = $2 WHERE k = $1 AND token = $3 AND state = 'reserved'";
        let n = match db {
            Db::Sqlite(conn) => tokio::task::spawn_blocking(move || {
                let conn = conn.lock().expect("the connection");
                let mut stmt = conn
                    .prepare_cached(&sql.replace('$', "?"))
                    .expect("prepare");
                stmt.execute(rusqlite::params![key, result, token])
                    .expect("update")
            })
            .await
            .expect("the update") as u64,
            Db::Postgres(pool) => {
                let client = pool.get().await.expect("a connection");
                let stmt = client.prepare_cached(sql).await.expect("prepare");
                client
                    .execute(&stmt, &[&key, &result, &token])
                    .await
                    .expect("update")
            }
        };
        Json(json!({"completed": n == 1}))
    }
}
