//! Reservations+decisions per second on each backend at 1 and 32 concurrent callers, against a
//! bare baseline measured in the same run: the same single-row `INSERT … ON CONFLICT DO NOTHING
//! RETURNING` through the same driver with the same durability.
//!
//! One "ours" operation is a whole `Store::decide` on a new key: read the transport and key
//! state, run the real decision matrix, reserve (effect + unique index entry + link) and write
//! the proof, durably. Deliveries are journaled beforehand, outside the timing.
//!
//! Run: `cargo bench -p oncegate-store --bench reserve` (PostgreSQL at 127.0.0.1:5432, or
//! `ONCEGATE_TEST_PG`; `ONCEGATE_BENCH_SECS` sets the seconds per cell, 2 by default).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant};

use oncegate_core::ids::DeliveryId;
use oncegate_core::matrix::{self, Confidence, Criticality, Keyed, Situation};
use oncegate_store::{
    DecideRequest, EffectKey, Horizon, NewReception, PriorView, Store, StrategyRef,
};
use time::{Duration, OffsetDateTime};

const CALLERS: [usize; 2] = [1, 32];

fn seconds() -> f64 {
    std::env::var("ONCEGATE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0)
}

fn matrix(view: &PriorView) -> oncegate_core::matrix::Decision {
    matrix::decide(&Situation::Identified {
        criticality: Criticality::Critical,
        authority: false,
        breaker_open: false,
        transport: view.transport,
        key: Keyed {
            confidence: Confidence::Strong,
            prior: view.prior,
            differences: view.differences.clone(),
        },
    })
}

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

fn reception(i: usize) -> NewReception {
    NewReception {
        tenant: "acme".into(),
        provider: "stripe".into(),
        env: "live".into(),
        event_type: Some("refund.created".into()),
        received_at: now(),
        size: 64,
        body_sha256: format!("{i:064x}"),
        headers_json: "{}".into(),
        payload: Some(vec![b'x'; 64]),
        transport_key: Some(oncegate_store::TransportKey {
            value: format!("evt_{i}"),
            strength: oncegate_store::TransportStrength::Strong,
        }),
        correlation_id: None,
    }
}

fn request(delivery: DeliveryId, i: usize) -> DecideRequest {
    DecideRequest {
        delivery,
        event_type: Some("refund.created".into()),
        key: Some(EffectKey {
            strategy: StrategyRef {
                name: "refund_ref".into(),
                version: 1,
                level: "business_ref".into(),
            },
            value: format!("re_{i}"),
            confidence: Confidence::Strong,
            horizon: Horizon::For(Duration::days(3)),
            discriminants: [("amount".to_owned(), "1000".to_owned())]
                .into_iter()
                .collect(),
        }),
        lease: Duration::seconds(30),
        details_json: "{}".into(),
        now: now(),
        resource: Some(format!("pay_{i}")),
        critical: true,
    }
}

/// Runs `op(i)` from `callers` tasks for `secs` (or until `limit` operations) and returns
/// operations per second.
async fn drive<F, Fut>(callers: usize, secs: f64, limit: usize, op: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + StdDuration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (op, next) = (op.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0usize;
            while Instant::now() < deadline {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= limit {
                    break;
                }
                op(i).await;
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("a bench task");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// Measures `Store::decide` on new keys: calibrates briefly, journals enough deliveries for
/// the timed run, then times the decisions alone.
async fn ours(store: Arc<dyn Store>, callers: usize, secs: f64, offset: usize) -> f64 {
    let journal = |store: Arc<dyn Store>, from: usize, count: usize| async move {
        let ids = Arc::new(Mutex::new(vec![None; count]));
        let slots = ids.clone();
        drive(32, 3600.0, count, move |i| {
            let (store, slots) = (store.clone(), slots.clone());
            async move {
                let id = store.journal(reception(from + i)).await.expect("journal");
                slots.lock().unwrap()[i] = Some(id);
            }
        })
        .await;
        let ids: Vec<DeliveryId> = ids
            .lock()
            .unwrap()
            .iter()
            .map(|d| d.clone().expect("journaled"))
            .collect();
        Arc::new(ids)
    };
    let decide = |store: Arc<dyn Store>, from: usize, ids: Arc<Vec<DeliveryId>>, secs: f64| {
        let limit = ids.len();
        drive(callers, secs, limit, move |i| {
            let (store, ids) = (store.clone(), ids.clone());
            async move {
                let o = store
                    .decide(request(ids[i].clone(), from + i), &matrix)
                    .await
                    .expect("decide");
                assert!(o.reservation.is_some());
            }
        })
    };
    // Calibration: a short run says how many deliveries the timed run needs.
    let probe = journal(store.clone(), offset, 200 * callers.max(4)).await;
    let rate = decide(store.clone(), offset, probe, 0.3).await;
    let needed = ((rate * secs * 1.5) as usize).max(100);
    let ids = journal(store.clone(), offset + 1_000_000, needed).await;
    decide(store, offset + 1_000_000, ids, secs).await
}

async fn sqlite_baseline(path: std::path::PathBuf, callers: usize, secs: f64) -> f64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    let _: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch(
        "PRAGMA synchronous = FULL; CREATE TABLE keys (k TEXT PRIMARY KEY, v TEXT NOT NULL);",
    )
    .unwrap();
    let conn = Arc::new(Mutex::new(conn));
    drive(callers, secs, usize::MAX, move |i| {
        let conn = conn.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let conn = conn.lock().unwrap();
                let mut stmt = conn
                    .prepare_cached("INSERT INTO keys (k, v) VALUES (?1, ?2) ON CONFLICT DO NOTHING RETURNING k")
                    .unwrap();
                let k: String = stmt.query_row((format!("k{i}"), "eff"), |r| r.get(0)).unwrap();
                assert!(!k.is_empty());
            })
            .await
            .unwrap();
        }
    })
    .await
}

async fn pg_baseline(url: &str, callers: usize, secs: f64) -> f64 {
    let config: tokio_postgres::Config = url.parse().unwrap();
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
        .unwrap();
    pool.get()
        .await
        .unwrap()
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS bench_keys (k TEXT PRIMARY KEY, v TEXT NOT NULL)",
        )
        .await
        .unwrap();
    drive(callers, secs, usize::MAX, move |i| {
        let pool = pool.clone();
        async move {
            let client = pool.get().await.unwrap();
            let stmt = client
                .prepare_cached("INSERT INTO bench_keys (k, v) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING k")
                .await
                .unwrap();
            let row = client.query_one(&stmt, &[&format!("k{i}-{}", callers), &"eff"]).await.unwrap();
            let k: String = row.get(0);
            assert!(!k.is_empty());
        }
    })
    .await
}

struct Line {
    backend: &'static str,
    callers: usize,
    ours: f64,
    baseline: f64,
}

async fn pg_database() -> Option<(String, String, tokio_postgres::Client)> {
    let admin = std::env::var("ONCEGATE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let (client, connection) = match tokio_postgres::connect(&admin, tokio_postgres::NoTls).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("PostgreSQL is not reachable at {admin} ({e}); skipping its rows");
            return None;
        }
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let name = format!(
        "oncegate_bench_{}",
        ulid::Ulid::new().to_string().to_lowercase()
    );
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let base = admin
        .rsplit_once('/')
        .map(|(b, _)| b.to_owned())
        .unwrap_or(admin.clone());
    Some((format!("{base}/{name}"), name, client))
}

fn main() {
    let secs = seconds();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let lines = rt.block_on(async {
        let mut lines = Vec::new();
        let dir = tempfile::tempdir().unwrap();
        for (n, callers) in CALLERS.into_iter().enumerate() {
            let store =
                oncegate_store::open(dir.path().join(format!("ours-{n}.db")).to_str().unwrap())
                    .await
                    .unwrap();
            let ours = ours(store, callers, secs, n * 10_000_000).await;
            let baseline =
                sqlite_baseline(dir.path().join(format!("baseline-{n}.db")), callers, secs).await;
            lines.push(Line {
                backend: "sqlite",
                callers,
                ours,
                baseline,
            });
        }
        if let Some((url, name, admin)) = pg_database().await {
            let store = oncegate_store::open(&url).await.unwrap();
            for (n, callers) in CALLERS.into_iter().enumerate() {
                let ours = ours(store.clone(), callers, secs, (n + 5) * 10_000_000).await;
                let baseline = pg_baseline(&url, callers, secs).await;
                lines.push(Line {
                    backend: "postgres",
                    callers,
                    ours,
                    baseline,
                });
            }
            drop(store);
            let _ = admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
        }
        lines
    });
    println!();
    println!("reservations+decisions per second ({secs} s per cell)");
    println!(
        "{:<10} {:>7} {:>14} {:>16} {:>8}",
        "backend", "callers", "ours decide/s", "baseline insert/s", "ratio"
    );
    for l in lines {
        println!(
            "{:<10} {:>7} {:>14.0} {:>16.0} {:>7.2}x",
            l.backend,
            l.callers,
            l.ours,
            l.baseline,
            l.ours / l.baseline
        );
    }
}
