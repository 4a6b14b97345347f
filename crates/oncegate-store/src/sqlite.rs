//! The embedded SQLite backend: one file, zero set-up, WAL, `synchronous=FULL`.
//!
//! All writes go through one dedicated writer thread that owns the only writing connection and
//! receives work on a channel. It takes every request waiting in the channel (waiting briefly
//! for the callers of its last batch to come back, see `writer_loop`), runs each in its own
//! SAVEPOINT inside one transaction, commits once, and only then answers every caller.
//!
//! Why batch: with `synchronous=FULL` every commit costs an fsync, which dominates the cost of
//! a reservation. SQLite allows one writer at a time anyway, so N concurrent callers committing
//! one by one pay N fsyncs in a row; a group commit pays one for all of them and still answers
//! each caller only after its own writes are durable. The SAVEPOINT per item keeps items
//! independent: one that fails (a stale token, a constraint) is rolled back alone and the
//! others commit.
//!
//! Reads use a small pool of separate connections (WAL lets them run beside the writer). A
//! decision is not a read followed by a write: the caller's matrix is shared into the writer
//! thread, which reads the view, runs the matrix and applies the decision in the item's
//! SAVEPOINT, so a decision costs one hop to the writer and one read of the view.

use std::borrow::Cow;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::Instant;

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ErrorCode, ToSql};
use time::{Duration, OffsetDateTime};
use tokio::sync::oneshot;

use crate::breaker::{self, Breaker, BreakerRecord, BreakerRule, BreakerScope};
use crate::codes::{ms, new_id};
use crate::decision::{DecideOutcome, DecideRequest, ProofRecord};
use crate::delivery::{
    DeliveryFilter, DeliveryRecord, DeliverySummary, NewReception, TenantFilter,
};
use crate::effect::{Claim, EffectRecord};
use crate::error::StoreError;
use crate::queue::{QueueFilter, QueueItem, QueuePage, Resolution};
use crate::reconciliation::{self, MissingOperation, ReconcileAttempt, ResourceScope};
use crate::report::Report;
use crate::retention::{PurgeCounts, PurgePolicy};
use crate::schema;
use crate::sql::{Cell, Dialect, Row, Statement, Tx, Value};
use crate::{Matrix, Store};

type Result<T> = std::result::Result<T, StoreError>;

/// The most requests one group commit takes; beyond it the next batch starts, so one huge
/// burst cannot hold every caller behind a single long transaction.
const MAX_BATCH: usize = 512;

/// The longest the writer waits for the callers of its last batch to come back before it
/// starts the next one (see `writer_loop`); well under the cost of the commit it saves.
const GATHER: std::time::Duration = std::time::Duration::from_micros(500);

/// Reads running at once, each on its own connection kept open for reuse. Opening a SQLite
/// connection costs far more than a read, so concurrent readers wait for a connection rather
/// than open (and later drop) new ones.
const READERS: usize = 4;

/// Prepared statements kept per connection. The store uses a few dozen distinct statements;
/// rusqlite's default of 16 would re-prepare some of them on every decision.
const STATEMENT_CACHE: usize = 256;

/// How long a connection waits for a lock held by another process (a CLI purge, say) before
/// the store reports itself unavailable.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The SQLite store. Dropping it stops the writer after the work already queued.
pub struct SqliteStore {
    writer: Option<mpsc::Sender<Box<dyn WriteJob>>>,
    thread: Option<JoinHandle<()>>,
    readers: Arc<Readers>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies the embedded migrations.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let writer_path = path.clone();
        let conn = tokio::task::spawn_blocking(move || open_writer(&writer_path))
            .await
            .map_err(|_| StoreError::unavailable_plain("the SQLite open task stopped"))??;
        let (tx, rx) = mpsc::channel::<Box<dyn WriteJob>>();
        let thread = std::thread::Builder::new()
            .name("oncegate-sqlite-writer".to_owned())
            .spawn(move || writer_loop(conn, rx))
            .map_err(|e| StoreError::unavailable("the SQLite writer thread could not start", e))?;
        Ok(SqliteStore {
            writer: Some(tx),
            thread: Some(thread),
            readers: Arc::new(Readers {
                path,
                permits: Arc::new(tokio::sync::Semaphore::new(READERS)),
                idle: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Runs `work` in the writer's next batch and answers once that batch committed. With
    /// `keep` false the work is rolled back even when it succeeds (a dry run).
    async fn write<T, F>(&self, keep: bool, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteTx<'_>) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(Pending {
            work: Some(work),
            keep,
            result: None,
            reply,
        });
        let sender = self.writer.as_ref().ok_or_else(stopped)?;
        sender.send(job).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Runs `work` on a reader connection, in one read transaction, off the async threads.
    async fn read<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteTx<'_>) -> Result<T> + Send + 'static,
    {
        let readers = self.readers.clone();
        let permit = readers
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::unavailable_plain("the SQLite readers are closed"))?;
        tokio::task::spawn_blocking(move || {
            let result = readers.with(work);
            drop(permit);
            result
        })
        .await
        .map_err(|_| StoreError::unavailable_plain("a SQLite read task stopped"))?
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Closing the channel lets the writer finish what is queued and close its connection;
        // joining makes "dropped" mean "closed", so the file can be reopened at once.
        drop(self.writer.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn stopped() -> StoreError {
    StoreError::unavailable_plain("the SQLite writer stopped")
}

/// Maps a SQLite error to what the caller can act on, with a short cause of our own words.
pub(crate) fn sqlite_err(e: rusqlite::Error) -> StoreError {
    let cause = match &e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            ErrorCode::CannotOpen => "the database file cannot be opened",
            ErrorCode::DiskFull => "the disk is full",
            ErrorCode::ReadOnly => "the database is read-only",
            ErrorCode::PermissionDenied => "permission to the database file was denied",
            ErrorCode::SystemIoFailure => "an I/O error occurred on the database file",
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                "the database is locked by another process"
            }
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                return StoreError::Corrupt(
                    "the database file is corrupt or is not an oncegate database".to_owned(),
                )
            }
            ErrorCode::ConstraintViolation => {
                return StoreError::Conflict("a uniqueness rule refused the write".to_owned())
            }
            _ => "the database refused the operation",
        },
        rusqlite::Error::FromSqlConversionFailure(..) | rusqlite::Error::InvalidColumnType(..) => {
            return StoreError::Corrupt("a stored value has an unexpected type".to_owned())
        }
        _ => "the database refused the operation",
    };
    StoreError::unavailable(cause, e)
}

fn open_writer(path: &Path) -> Result<Connection> {
    let mut conn = Connection::open(path).map_err(sqlite_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sqlite_err)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(sqlite_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::unavailable_plain(format!(
            "the database could not switch to WAL (it is in {mode} mode)"
        )));
    }
    // FULL: a commit is on disk before it returns, so an acknowledged reservation survives a
    // power loss. NORMAL would be faster in WAL mode and could lose the last commits.
    conn.execute_batch("PRAGMA synchronous = FULL")
        .map_err(sqlite_err)?;
    migrate(&mut conn)?;
    Ok(conn)
}

fn open_reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path).map_err(sqlite_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sqlite_err)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sqlite_err)?;
    tx.execute_batch(schema::VERSION_TABLE)
        .map_err(sqlite_err)?;
    let current: i64 = tx
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_version",
            [],
            |r| r.get(0),
        )
        .map_err(sqlite_err)?;
    if current > schema::known_version() {
        return Err(StoreError::SchemaTooNew {
            found: current,
            known: schema::known_version(),
        });
    }
    for (version, sql) in schema::sqlite() {
        if version > current {
            tx.execute_batch(&sql).map_err(sqlite_err)?;
            tx.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?1, ?2)",
                (version, ms(OffsetDateTime::now_utc())),
            )
            .map_err(sqlite_err)?;
        }
    }
    tx.commit().map_err(sqlite_err)
}

// ---------------------------------------------------------------------------------------------
// The executor the shared operations run on

/// A SQLite connection inside a transaction the store opened.
pub(crate) struct SqliteTx<'a> {
    conn: &'a mut Connection,
}

impl ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Value::Text(Some(s)) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Value::Int(Some(v)) => ToSqlOutput::Owned(rusqlite::types::Value::Integer(*v)),
            Value::Bool(b) => ToSqlOutput::Owned(rusqlite::types::Value::Integer(i64::from(*b))),
            Value::Bytes(Some(b)) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
            Value::Text(None) | Value::Int(None) | Value::Bytes(None) => {
                ToSqlOutput::Owned(rusqlite::types::Value::Null)
            }
        })
    }
}

/// The shared statements use PostgreSQL's `$1`; SQLite's numbered form is `?1`.
fn placeholders(sql: &str) -> Cow<'_, str> {
    if sql.contains('$') {
        Cow::Owned(sql.replace('$', "?"))
    } else {
        Cow::Borrowed(sql)
    }
}

impl SqliteTx<'_> {
    fn exec_now(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        let mut stmt = self
            .conn
            .prepare_cached(&placeholders(sql))
            .map_err(sqlite_err)?;
        let n = stmt
            .execute(rusqlite::params_from_iter(params.iter()))
            .map_err(sqlite_err)?;
        Ok(n as u64)
    }

    fn query_now(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let mut stmt = self
            .conn
            .prepare_cached(&placeholders(sql))
            .map_err(sqlite_err)?;
        let columns = stmt.column_count();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params.iter()))
            .map_err(sqlite_err)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(sqlite_err)? {
            let mut cells = Vec::with_capacity(columns);
            for i in 0..columns {
                cells.push(match row.get_ref(i).map_err(sqlite_err)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(v) => Cell::Int(v),
                    ValueRef::Real(v) => Cell::Int(v as i64),
                    ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Cell::Bytes(b.to_vec()),
                });
            }
            out.push(Row(cells));
        }
        Ok(out)
    }
}

impl Tx for SqliteTx<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn exec(&mut self, sql: &str, params: &[Value]) -> impl Future<Output = Result<u64>> + Send {
        std::future::ready(self.exec_now(sql, params))
    }

    fn query(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> impl Future<Output = Result<Vec<Row>>> + Send {
        std::future::ready(self.query_now(sql, params))
    }

    fn exec_all(
        &mut self,
        statements: &[Statement],
    ) -> impl Future<Output = Result<Vec<u64>>> + Send {
        std::future::ready(
            statements
                .iter()
                .map(|(sql, params)| self.exec_now(sql, params))
                .collect(),
        )
    }
}

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Runs a shared operation on SQLite. Its statements complete synchronously, so the future is
/// ready on its first poll; one that is not would be a bug, reported rather than spun on.
fn now_or_never<T>(fut: impl Future<Output = Result<T>>) -> Result<T> {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(StoreError::Corrupt(
            "a SQLite operation waited, which it never should".to_owned(),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Readers

struct Readers {
    path: PathBuf,
    permits: Arc<tokio::sync::Semaphore>,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    fn with<T>(&self, work: impl FnOnce(&mut SqliteTx<'_>) -> Result<T>) -> Result<T> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut conn = match idle {
            Some(c) => c,
            None => open_reader(&self.path)?,
        };
        // One read transaction so a multi-statement read sees one snapshot.
        conn.execute_batch("BEGIN").map_err(sqlite_err)?;
        let result = work(&mut SqliteTx { conn: &mut conn });
        let end = conn.execute_batch("COMMIT");
        if end.is_ok() {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.push(conn);
        }
        result
    }
}

// ---------------------------------------------------------------------------------------------
// The writer

/// One request to the writer, type-erased so different operations share the channel.
trait WriteJob: Send {
    /// Runs inside the batch transaction; returns whether its writes are to be kept.
    fn run(&mut self, conn: &mut Connection) -> bool;
    /// Answers the caller once the batch's fate is known (`Some(cause)` if it did not commit).
    fn answer(self: Box<Self>, failure: Option<&str>);
}

struct Pending<T, F> {
    work: Option<F>,
    keep: bool,
    result: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> WriteJob for Pending<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut SqliteTx<'_>) -> Result<T> + Send + 'static,
{
    fn run(&mut self, conn: &mut Connection) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        // A panicking item must not take the writer (and every other caller) down with it.
        let result = catch_unwind(AssertUnwindSafe(|| work(&mut SqliteTx { conn })))
            .unwrap_or_else(|_| {
                Err(StoreError::Corrupt(
                    "a write failed unexpectedly and was rolled back".to_owned(),
                ))
            });
        let keep = self.keep && result.is_ok();
        self.result = Some(result);
        keep
    }

    fn answer(self: Box<Self>, failure: Option<&str>) {
        let this = *self;
        let answer = match (this.result, failure) {
            // An item that failed on its own keeps its own error, whatever became of the batch.
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(v)), None) => Ok(v),
            (_, Some(cause)) => Err(StoreError::unavailable_plain(cause)),
            (None, None) => Err(StoreError::unavailable_plain("the write was not run")),
        };
        let _ = this.reply.send(answer);
    }
}

fn writer_loop(mut conn: Connection, jobs: mpsc::Receiver<Box<dyn WriteJob>>) {
    // The callers answered by the last commit usually come straight back with their next
    // request, but one at a time: starting the next batch with only the first of them would
    // pay a whole commit (an fsync) for a handful of items while the rest queue behind it.
    // So the writer gathers until as many requests as the last batch held are in, or for at
    // most `GATHER`. A lone caller (a batch of one) never waits.
    let mut expected = 1;
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        let deadline = Instant::now() + GATHER;
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(mpsc::TryRecvError::Disconnected) => break,
                Err(mpsc::TryRecvError::Empty) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if batch.len() >= expected || left.is_zero() {
                        break;
                    }
                    match jobs.recv_timeout(left) {
                        Ok(job) => batch.push(job),
                        Err(_) => break,
                    }
                }
            }
        }
        expected = batch.len();
        run_batch(&mut conn, batch);
    }
}

fn short_cause(e: rusqlite::Error) -> String {
    match sqlite_err(e) {
        StoreError::Unavailable { cause, .. } => cause,
        other => other.to_string(),
    }
}

fn run_batch(conn: &mut Connection, mut batch: Vec<Box<dyn WriteJob>>) {
    let mut failure: Option<String> = conn.execute_batch("BEGIN IMMEDIATE").err().map(short_cause);
    if failure.is_none() {
        for job in batch.iter_mut() {
            // Some errors (a full disk, an I/O error) make SQLite roll the whole transaction
            // back; running further items would then commit them one by one, outside the
            // batch's all-or-nothing answer, so the batch stops there.
            if conn.is_autocommit() {
                failure = Some("the transaction was aborted by the database".to_owned());
                break;
            }
            if let Err(e) = conn.execute_batch("SAVEPOINT item") {
                failure = Some(short_cause(e));
                break;
            }
            let keep = job.run(conn);
            let end = if keep {
                conn.execute_batch("RELEASE item")
            } else {
                conn.execute_batch("ROLLBACK TO item; RELEASE item")
            };
            if let Err(e) = end {
                failure = Some(short_cause(e));
                break;
            }
        }
    }
    if failure.is_none() {
        failure = conn.execute_batch("COMMIT").err().map(short_cause);
    }
    if failure.is_some() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    for job in batch {
        job.answer(failure.as_deref());
    }
}

// ---------------------------------------------------------------------------------------------
// The store

#[async_trait::async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> Result<()> {
        // Through the writer: ready means able to write, not only to read.
        self.write(true, |tx| tx.query_now("SELECT 1", &[]).map(|_| ()))
            .await
    }

    async fn journal(&self, reception: NewReception) -> Result<DeliveryId> {
        let id = DeliveryId::from_u128(new_id(reception.received_at));
        let answer = id.clone();
        self.write(true, move |tx| {
            now_or_never(crate::delivery::journal(tx, &id, &reception))
        })
        .await?;
        Ok(answer)
    }

    async fn decide(&self, request: DecideRequest, matrix: &dyn Matrix) -> Result<DecideOutcome> {
        // One hop: the writer reads the view, runs the matrix and applies its decision inside
        // the batch, so nothing can change the view in between (it holds the write lock).
        let matrix = matrix.share();
        self.write(true, move |tx| {
            now_or_never(crate::decision::decide(tx, &request, None, |view| {
                matrix.decide(view)
            }))
        })
        .await
    }

    async fn complete(
        &self,
        effect: &EffectId,
        token: u64,
        result: &str,
        now: OffsetDateTime,
    ) -> Result<()> {
        let (effect, result) = (effect.clone(), result.to_owned());
        self.write(true, move |tx| {
            now_or_never(crate::effect::complete(tx, &effect, token, &result, now))
        })
        .await
    }

    async fn fail(
        &self,
        effect: &EffectId,
        token: u64,
        retryable: bool,
        error: &str,
        now: OffsetDateTime,
    ) -> Result<()> {
        let (effect, error) = (effect.clone(), error.to_owned());
        self.write(true, move |tx| {
            now_or_never(crate::effect::fail(
                tx, &effect, token, retryable, &error, now,
            ))
        })
        .await
    }

    async fn heartbeat(
        &self,
        effect: &EffectId,
        token: u64,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<OffsetDateTime> {
        let effect = effect.clone();
        self.write(true, move |tx| {
            now_or_never(crate::effect::heartbeat(tx, &effect, token, lease, now))
        })
        .await
    }

    async fn expire_leases(&self, now: OffsetDateTime) -> Result<Vec<EffectId>> {
        self.write(true, move |tx| {
            now_or_never(reconciliation::expire_leases(tx, now))
        })
        .await
    }

    async fn delivery(&self, id: &DeliveryId) -> Result<Option<DeliveryRecord>> {
        let id = id.clone();
        self.read(move |tx| now_or_never(crate::delivery::read(tx, &id)))
            .await
    }

    async fn proof(&self, id: &DeliveryId) -> Result<Option<ProofRecord>> {
        let id = id.clone();
        self.read(move |tx| now_or_never(crate::decision::proof(tx, &id)))
            .await
    }

    async fn effect(&self, id: &EffectId) -> Result<Option<EffectRecord>> {
        let id = id.clone();
        self.read(move |tx| now_or_never(crate::effect::read(tx, &id)))
            .await
    }

    async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<DeliverySummary>> {
        let filter = filter.clone();
        self.read(move |tx| now_or_never(crate::delivery::list(tx, &filter)))
            .await
    }

    async fn queue_list(&self, filter: &QueueFilter) -> Result<Vec<QueueItem>> {
        let filter = filter.clone();
        self.read(move |tx| now_or_never(crate::queue::list(tx, &filter)))
            .await
    }

    async fn queue_page(&self, filter: &QueueFilter) -> Result<QueuePage> {
        let filter = filter.clone();
        self.read(move |tx| now_or_never(crate::queue::page(tx, &filter)))
            .await
    }

    async fn queue_item(&self, id: &QueueItemId) -> Result<Option<QueueItem>> {
        let id = id.clone();
        self.read(move |tx| now_or_never(crate::queue::item(tx, &id)))
            .await
    }

    async fn resolve(&self, item: &QueueItemId, resolution: Resolution) -> Result<QueueItem> {
        let item = item.clone();
        self.write(true, move |tx| {
            now_or_never(crate::queue::resolution::resolve(tx, &item, &resolution))
        })
        .await
    }

    async fn claim(
        &self,
        worker: &str,
        tenants: &TenantFilter,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<Claim>> {
        let (worker, tenants) = (worker.to_owned(), tenants.clone());
        self.write(true, move |tx| {
            now_or_never(crate::effect::claim(tx, &worker, &tenants, lease, now))
        })
        .await
    }

    async fn report(&self, tenants: &TenantFilter, since: OffsetDateTime) -> Result<Report> {
        let tenants = tenants.clone();
        self.read(move |tx| now_or_never(crate::report::build(tx, &tenants, since)))
            .await
    }

    async fn resource_effects(&self, scope: &ResourceScope) -> Result<Vec<EffectRecord>> {
        let scope = scope.clone();
        self.read(move |tx| now_or_never(reconciliation::resource_effects(tx, &scope)))
            .await
    }

    async fn open_reconcile_items(&self, limit: u32) -> Result<Vec<QueueItem>> {
        self.read(move |tx| now_or_never(reconciliation::open_reconcile_items(tx, limit)))
            .await
    }

    async fn record_reconcile_attempt(
        &self,
        item: &QueueItemId,
        attempt: ReconcileAttempt,
    ) -> Result<QueueItem> {
        let item = item.clone();
        self.write(true, move |tx| {
            now_or_never(reconciliation::record_attempt(tx, &item, &attempt))
        })
        .await
    }

    async fn resolve_with_evidence(
        &self,
        item: &QueueItemId,
        resolution: Resolution,
        evidence: &str,
    ) -> Result<QueueItem> {
        let (item, evidence) = (item.clone(), evidence.to_owned());
        self.write(true, move |tx| {
            now_or_never(reconciliation::resolve_with_evidence(
                tx,
                &item,
                &resolution,
                &evidence,
            ))
        })
        .await
    }

    async fn resources_seen(
        &self,
        provider: &str,
        event_type: &str,
        since: OffsetDateTime,
    ) -> Result<Vec<ResourceScope>> {
        let (provider, event_type) = (provider.to_owned(), event_type.to_owned());
        self.read(move |tx| {
            now_or_never(reconciliation::resources_seen(
                tx,
                &provider,
                &event_type,
                since,
            ))
        })
        .await
    }

    async fn record_missing(
        &self,
        scope: &ResourceScope,
        missing: &[MissingOperation],
        now: OffsetDateTime,
    ) -> Result<u64> {
        let (scope, missing) = (scope.clone(), missing.to_vec());
        self.write(true, move |tx| {
            now_or_never(reconciliation::record_missing(tx, &scope, &missing, now))
        })
        .await
    }

    async fn purge(
        &self,
        policy: &PurgePolicy,
        now: OffsetDateTime,
        dry_run: bool,
    ) -> Result<PurgeCounts> {
        let policy = *policy;
        self.write(!dry_run, move |tx| {
            now_or_never(crate::retention::purge(tx, &policy, now))
        })
        .await
    }

    async fn breaker_record(
        &self,
        scope: &BreakerScope,
        collision: bool,
        rule: &BreakerRule,
        now: OffsetDateTime,
    ) -> Result<BreakerRecord> {
        let (scope, rule) = (scope.clone(), *rule);
        self.write(true, move |tx| {
            now_or_never(breaker::record(tx, &scope, collision, &rule, now))
        })
        .await
    }

    async fn breaker(
        &self,
        scope: &BreakerScope,
        rule: &BreakerRule,
        now: OffsetDateTime,
    ) -> Result<Breaker> {
        let (scope, rule) = (scope.clone(), *rule);
        self.read(move |tx| now_or_never(breaker::read(tx, &scope, &rule, now)))
            .await
    }

    async fn breakers(&self, rule: &BreakerRule, now: OffsetDateTime) -> Result<Vec<Breaker>> {
        let rule = *rule;
        self.read(move |tx| now_or_never(breaker::list(tx, &rule, now)))
            .await
    }

    async fn breaker_close(
        &self,
        scope: &BreakerScope,
        note: &str,
        by: &str,
        now: OffsetDateTime,
    ) -> Result<Breaker> {
        let (scope, note, by) = (scope.clone(), note.to_owned(), by.to_owned());
        self.write(true, move |tx| {
            now_or_never(breaker::close(tx, &scope, &note, &by, now))
        })
        .await
    }

    async fn migration_sources(&self) -> Result<Vec<crate::alias::MigrationSource>> {
        self.read(move |tx| now_or_never(crate::alias::migration_sources(tx)))
            .await
    }

    async fn record_alias(&self, alias: &crate::alias::NewAlias) -> Result<bool> {
        let alias = alias.clone();
        self.write(true, move |tx| {
            now_or_never(crate::alias::record_alias(tx, &alias))
        })
        .await
    }

    async fn settle_unknown(
        &self,
        effect: &EffectId,
        verified: &crate::settlement::Verified,
        resolution: Resolution,
        evidence: &str,
    ) -> Result<Vec<QueueItem>> {
        let (effect, verified, evidence) = (effect.clone(), verified.clone(), evidence.to_owned());
        self.write(true, move |tx| {
            now_or_never(crate::settlement::settle_verified(
                tx,
                &effect,
                &verified,
                &resolution,
                &evidence,
            ))
        })
        .await
    }

    async fn rescope(
        &self,
        scopes: &[crate::rescope::OperationScope],
    ) -> Result<crate::rescope::RescopeCounts> {
        let scopes = scopes.to_vec();
        self.write(true, move |tx| {
            now_or_never(crate::rescope::rescope(tx, &scopes))
        })
        .await
    }

    async fn shadow_observe(
        &self,
        observation: &crate::shadow::ShadowObservation,
    ) -> Result<Option<crate::shadow::ShadowPrior>> {
        let o = observation.clone();
        self.write(true, move |tx| now_or_never(crate::shadow::observe(tx, &o)))
            .await
    }

    async fn shadow_disagreement(&self, d: &crate::shadow::ShadowDisagreement) -> Result<()> {
        let d = d.clone();
        self.write(true, move |tx| {
            now_or_never(crate::shadow::record_disagreement(tx, &d))
        })
        .await
    }

    async fn shadow_counts(
        &self,
        since: OffsetDateTime,
    ) -> Result<Vec<crate::shadow::ShadowCount>> {
        self.read(move |tx| now_or_never(crate::shadow::counts(tx, since)))
            .await
    }
}
