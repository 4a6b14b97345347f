//! Reservations+decisions per second on each backend at 1 and 32 concurrent callers, against a
//! bare baseline measured in the same run: the same single-row `INSERT … ON CONFLICT DO NOTHING
//! RETURNING` through the same driver with the same durability.
//!
//! One "ours" operation is a whole `Store::decide` on a new key: read the transport and key
//! state, run the real decision matrix, reserve (effect + unique index entry + link) and write
//! the proof, durably. Deliveries are journaled beforehand, `AHEAD` at a time, outside the timing.
//!
//! Fairness: both sides of a cell use the same driver, the same durability (SQLite: WAL and
//! `synchronous=FULL`; PostgreSQL: the server's settings, one database) and the same number
//! of callers; both are warmed up first, then measured in alternating slices so a drift of the
//! machine weighs on both alike. The ratio is ours over the baseline.
//!
//! Run: `cargo bench -p oncegate-store --bench reserve` (PostgreSQL at 127.0.0.1:5432, or
//! `ONCEGATE_TEST_PG`; `ONCEGATE_BENCH_SECS` sets the seconds per side and cell, 3 by default;
//! `ONCEGATE_BENCH_BACKENDS=sqlite` or `=postgres` measures one backend only).

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

/// Each side of a cell is measured in this many alternating slices.
const ROUNDS: usize = 3;

/// Seconds each side runs, untimed, before a cell is measured.
const WARM_UP: f64 = 0.5;

/// Whether `backend` is measured: `ONCEGATE_BENCH_BACKENDS` (`sqlite`, `postgres`, or both,
/// comma-separated) narrows the run; both by default.
fn wanted(backend: &str) -> bool {
    std::env::var("ONCEGATE_BENCH_BACKENDS")
        .map(|list| list.split(',').any(|b| b.trim() == backend))
        .unwrap_or(true)
}

fn seconds() -> f64 {
    std::env::var("ONCEGATE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0)
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

/// The clock's time, as a deployment's decisions have: a row written more than two minutes
/// after its time is a late write, which the report's triggers count (schema v11), and a
/// fixed time made every row of the bench one (a store's late writes are rare).
fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
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
            scope: Default::default(),
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

/// Runs `op(i)` from `callers` tasks for `secs` (or until `limit` operations) and returns how
/// many ran and the seconds they took.
async fn drive<F, Fut>(callers: usize, secs: f64, limit: usize, op: F) -> (usize, f64)
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
    (total, start.elapsed().as_secs_f64())
}

/// Journals `count` deliveries (keys from `from`) outside any timing and returns their ids.
async fn journal(store: Arc<Store>, from: usize, count: usize) -> Arc<Vec<DeliveryId>> {
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
}

/// The most deliveries journaled ahead of their decisions. The PostgreSQL store keeps the
/// scopes of the last 4,096 deliveries it journaled, so that their decisions, which usually
/// follow at once, join its batches; a delivery journaled longer ago (a backlog) is decided in
/// a transaction of its own, after reading its scope back. Journaling a whole slice ahead
/// measured that path for most of the 32 callers' decisions.
const AHEAD: usize = 2_048;

/// `Store::decide` on new keys (one per journaled delivery, keys from `from` on) from `callers`
/// tasks for `secs` of decisions, journaling `AHEAD` deliveries at a time outside the timing;
/// decisions per second.
async fn decide(store: Arc<Store>, callers: usize, secs: f64, from: usize) -> f64 {
    let (mut done, mut spent, mut next) = (0, 0.0, from);
    while spent < secs {
        let ids = journal(store.clone(), next, AHEAD).await;
        let store = store.clone();
        let (n, t) = drive(callers, secs - spent, AHEAD, move |i| {
            let (store, ids) = (store.clone(), ids.clone());
            async move {
                let o = store
                    .decide(request(ids[i].clone(), next + i), &matrix)
                    .await
                    .expect("decide");
                assert!(o.reservation.is_some());
            }
        })
        .await;
        done += n;
        spent += t;
        next += AHEAD;
    }
    done as f64 / spent
}

/// The bare single-row insert the store is measured against, on one backend.
trait Baseline: Send + Sync + 'static {
    /// One `INSERT … ON CONFLICT DO NOTHING RETURNING` of a new key `k`, committed.
    fn insert(&self, k: String) -> impl std::future::Future<Output = ()> + Send;
}

/// SQLite's baseline: one connection with the store's durability (WAL, `synchronous=FULL`),
/// each insert its own commit.
struct SqliteBaseline(Arc<Mutex<rusqlite::Connection>>);

impl SqliteBaseline {
    fn open(path: std::path::PathBuf) -> Self {
        let conn = rusqlite::Connection::open(path).unwrap();
        let _: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .unwrap();
        conn.execute_batch(
            "PRAGMA synchronous = FULL; CREATE TABLE keys (k TEXT PRIMARY KEY, v TEXT NOT NULL);",
        )
        .unwrap();
        SqliteBaseline(Arc::new(Mutex::new(conn)))
    }
}

impl Baseline for SqliteBaseline {
    async fn insert(&self, k: String) {
        let conn = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap();
            let mut stmt = conn
                .prepare_cached(
                    "INSERT INTO keys (k, v) VALUES (?1, ?2) ON CONFLICT DO NOTHING RETURNING k",
                )
                .unwrap();
            let k: String = stmt.query_row((k, "eff"), |r| r.get(0)).unwrap();
            assert!(!k.is_empty());
        })
        .await
        .unwrap();
    }
}

/// PostgreSQL's baseline: a pool as large as the store's, each insert its own commit.
struct PgBaseline(deadpool_postgres::Pool);

impl PgBaseline {
    async fn open(url: &str) -> Self {
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
        PgBaseline(pool)
    }
}

impl Baseline for PgBaseline {
    async fn insert(&self, k: String) {
        let client = self.0.get().await.unwrap();
        let stmt = client
            .prepare_cached(
                "INSERT INTO bench_keys (k, v) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING k",
            )
            .await
            .unwrap();
        let row = client.query_one(&stmt, &[&k, &"eff"]).await.unwrap();
        let k: String = row.get(0);
        assert!(!k.is_empty());
    }
}

/// Runs the baseline's insert from `callers` tasks for `secs`; keys from `from` on.
async fn baseline<B: Baseline>(b: &Arc<B>, callers: usize, secs: f64, from: usize) -> f64 {
    let b = b.clone();
    let (n, t) = drive(callers, secs, usize::MAX, move |i| {
        let b = b.clone();
        async move { b.insert(format!("k{}", from + i)).await }
    })
    .await;
    n as f64 / t
}

/// One cell: the store against the baseline at `callers`, both warmed up first, then measured
/// in `ROUNDS` alternating slices so a drift of the machine (a noisy disk, another process)
/// weighs on both sides alike. Keys of the cell start at `base`.
async fn cell<B: Baseline>(
    store: Arc<Store>,
    bare: Arc<B>,
    callers: usize,
    secs: f64,
    base: usize,
) -> (f64, f64) {
    decide(store.clone(), callers, WARM_UP, base).await;
    baseline(&bare, callers, WARM_UP, base).await;
    let slice = secs / ROUNDS as f64;
    let (mut ours, mut theirs) = (0.0, 0.0);
    for round in 1..=ROUNDS {
        let from = base + round * 1_000_000;
        ours += decide(store.clone(), callers, slice, from).await;
        theirs += baseline(&bare, callers, slice, from).await;
    }
    (ours / ROUNDS as f64, theirs / ROUNDS as f64)
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
            if !wanted("sqlite") {
                break;
            }
            let store = oncegate_store::open(&format!(
                "sqlite://{}",
                dir.path().join(format!("ours-{n}.db")).display()
            ))
            .await
            .unwrap();
            let bare = Arc::new(SqliteBaseline::open(
                dir.path().join(format!("baseline-{n}.db")),
            ));
            let (ours, baseline) = cell(store, bare, callers, secs, n * 10_000_000).await;
            lines.push(Line {
                backend: "sqlite",
                callers,
                ours,
                baseline,
            });
        }
        let pg = if wanted("postgres") {
            pg_database().await
        } else {
            None
        };
        if let Some((url, name, admin)) = pg {
            let store = oncegate_store::open(&url).await.unwrap();
            let bare = Arc::new(PgBaseline::open(&url).await);
            for (n, callers) in CALLERS.into_iter().enumerate() {
                let base = (n + 5) * 10_000_000;
                let (ours, baseline) = cell(store.clone(), bare.clone(), callers, secs, base).await;
                lines.push(Line {
                    backend: "postgres",
                    callers,
                    ours,
                    baseline,
                });
            }
            drop(store);
            drop(bare);
            let _ = admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
        }
        lines
    });
    println!();
    println!(
        "reservations+decisions per second ({secs} s per side and cell, in {ROUNDS} alternating slices, after {WARM_UP} s of warm-up)"
    );
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
