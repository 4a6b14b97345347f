//! In-process throughput of the gate: one operation is `Gate::deliver` of a new refund (journal,
//! identification, breaker, the store's decision, durably) followed by `Held::complete`, on
//! SQLite (WAL, `synchronous=FULL`) and PostgreSQL, with 1 and 32 concurrent callers.
//!
//! The peer figure beside it: AWS Powertools' idempotency utility on Redis, measured
//! in process on this machine kind at about 1,900 decisions/s on one thread, and not durable
//! (Redis acknowledges before anything reaches a disk). The goal is ≥ 10× that, durably.
//!
//! Run: `cargo bench -p oncegate --bench deliver` (PostgreSQL at 127.0.0.1:5432, or
//! `ONCEGATE_TEST_PG`; `ONCEGATE_BENCH_BACKENDS=sqlite` or `=postgres` measures one backend;
//! `ONCEGATE_BENCH_WORKERS` sets the runtime's threads, 2 by default).
//! Criterion prints each cell's throughput (`thrpt`, deliveries completed per second).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use oncegate::{Gate, GateConfig, Outcome, Reception};
use oncegate_store::testing::TestDatabase;

/// Powertools Idempotency on Redis, in process, one thread (see the file's documentation).
const PEER_PER_SECOND: f64 = 1_900.0;

const CALLERS: [usize; 2] = [1, 32];

/// The runtime's threads: `ONCEGATE_BENCH_WORKERS`, else 2.
fn workers() -> usize {
    std::env::var("ONCEGATE_BENCH_WORKERS").map_or(2, |v| {
        v.parse()
            .expect("ONCEGATE_BENCH_WORKERS is a number of threads")
    })
}

fn wanted(backend: &str) -> bool {
    std::env::var("ONCEGATE_BENCH_BACKENDS")
        .map(|list| list.split(',').any(|b| b.trim() == backend))
        .unwrap_or(true)
}

fn refund(n: u64) -> Reception {
    let body = format!(
        r#"{{"type":"refund.created","sent_at":"2026-03-05T16:02:11Z","attempt":1,"data":{{"payment_id":"pay_{}","request_ref":"rr-{n}","amount":1500,"currency":"EUR"}}}}"#,
        n % 97
    );
    Reception::new("acme", "payflow", "live", body.into_bytes())
}

/// One delivery decided `process` and completed.
async fn once(gate: &Gate, n: u64) {
    match gate
        .deliver(refund(n))
        .await
        .expect("a delivery is decided")
    {
        Outcome::Process(held) => held
            .complete(r#"{"refund":"ok"}"#)
            .await
            .expect("the effect completes"),
        other => panic!("a new refund must run, not {:?}", other.action()),
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers())
        .enable_all()
        .build()
        .unwrap();
    let contract = Arc::new(
        oncegate_core::contract::parse(
            "examples/oncegate.toml",
            include_str!("../../../examples/oncegate.toml"),
        )
        .unwrap(),
    );
    let mut group = c.benchmark_group("deliver+complete");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    let mut rates = Vec::new();
    for backend in ["sqlite", "postgres"] {
        if !wanted(backend) {
            continue;
        }
        let db = rt.block_on(async {
            match backend {
                "sqlite" => TestDatabase::sqlite(),
                _ => TestDatabase::postgres("oncegate_bench_gate").await,
            }
        });
        let store = rt.block_on(oncegate_store::open(&db.url)).unwrap();
        let gate = Gate::new(GateConfig::new(contract.clone(), store, b"bench".to_vec()));
        let next = Arc::new(AtomicU64::new(0));
        for callers in CALLERS {
            let samples = Arc::new(std::sync::Mutex::new(Vec::<f64>::new()));
            group.bench_function(format!("{backend}/{callers}"), |b| {
                b.iter_custom(|iters| {
                    let gate = gate.clone();
                    let next = next.clone();
                    let elapsed = rt.block_on(async move {
                        let started = Instant::now();
                        let tasks: Vec<_> = (0..callers as u64)
                            .map(|caller| {
                                let gate = gate.clone();
                                let next = next.clone();
                                // Each caller takes its share of the iterations.
                                let share = iters / callers as u64
                                    + u64::from(caller < iters % callers as u64);
                                tokio::spawn(async move {
                                    for _ in 0..share {
                                        once(&gate, next.fetch_add(1, Ordering::Relaxed)).await;
                                    }
                                })
                            })
                            .collect();
                        for t in tasks {
                            t.await.unwrap();
                        }
                        started.elapsed()
                    });
                    let rate = iters as f64 / elapsed.as_secs_f64();
                    samples.lock().unwrap().push(rate);
                    elapsed
                });
            });
            // The median of the samples' rates (the warm-up's included, which only lowers it).
            let mut s = samples.lock().unwrap().clone();
            s.sort_by(f64::total_cmp);
            rates.push((backend, callers, s.get(s.len() / 2).copied().unwrap_or(0.0)));
        }
        rt.block_on(db.cleanup());
    }
    group.finish();
    println!("\nin-process deliver+complete per second, beside Powertools Idempotency on Redis (≈{PEER_PER_SECOND} /s, one thread, not durable):");
    for (backend, callers, rate) in rates {
        println!(
            "  {backend:<9} {callers:>2} callers  {rate:>9.0} /s  {:>5.1}× the peer",
            rate / PEER_PER_SECOND
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
