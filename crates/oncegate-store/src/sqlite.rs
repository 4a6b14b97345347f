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

use std::borrow::{Borrow, Cow};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::Instant;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ErrorCode, ToSql};
use time::{Duration, OffsetDateTime};
use tokio::sync::oneshot;

use crate::codes::{ms, new_id};
use crate::decision::{DecideOutcome, DecideRequest};
use crate::delivery::NewReception;
use crate::error::StoreError;
use crate::queue::Resolution;
use crate::reconciliation::ReconcileAttempt;
use crate::schema;
use crate::sql::{Cell, Dialect, Row, Statement, Tx, Value};
use crate::Matrix;

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

/// A `Store` call's argument on its way to the reader or writer threads, which can hold no
/// borrow of the caller's: owned for the trip, then lent back to the operation in the form the
/// call took it (a reference as a reference, a value as a value, an owned value by reference).
trait Carry {
    type Owned: Send + 'static;
    type Lent<'a>;
    fn own(self) -> Self::Owned;
    fn lend(owned: &Self::Owned) -> Self::Lent<'_>;
}

impl<T> Carry for &T
where
    T: ToOwned + ?Sized + 'static,
    T::Owned: Send,
{
    type Owned = T::Owned;
    type Lent<'a> = &'a T;

    fn own(self) -> T::Owned {
        self.to_owned()
    }

    fn lend(owned: &T::Owned) -> &T {
        owned.borrow()
    }
}

/// Small values the operations take by value.
macro_rules! carried_as_copies {
    ($($t:ty),*) => {$(
        impl Carry for $t {
            type Owned = $t;
            type Lent<'a> = $t;

            fn own(self) -> $t {
                self
            }

            fn lend(owned: &$t) -> $t {
                *owned
            }
        }
    )*};
}

carried_as_copies!(bool, u32, u64, Duration, OffsetDateTime);

/// Values a call takes by value and its operation by reference.
macro_rules! carried_as_references {
    ($($t:ty),*) => {$(
        impl Carry for $t {
            type Owned = $t;
            type Lent<'a> = &'a $t;

            fn own(self) -> $t {
                self
            }

            fn lend(owned: &$t) -> &$t {
                owned
            }
        }
    )*};
}

carried_as_references!(Resolution, ReconcileAttempt);

/// Runs one operation of `store_impl!`'s list: its arguments carried (`Carry`) to a reader, or
/// to the writer's next batch.
macro_rules! run {
    ($store:expr, read, $keep:expr, [$($arg:ident: $ty:ty),*], $op:path, [$($call:expr),*]) => {{
        $(let $arg = <$ty as Carry>::own($arg);)*
        $store
            .read(move |tx| {
                $(#[allow(unused_variables)] let $arg = <$ty as Carry>::lend(&$arg);)*
                now_or_never($op(tx, $($call),*))
            })
            .await
    }};
    ($store:expr, write, $keep:expr, [$($arg:ident: $ty:ty),*], $op:path, [$($call:expr),*]) => {{
        let keep = $keep;
        $(let $arg = <$ty as Carry>::own($arg);)*
        $store
            .write(keep, move |tx| {
                $(#[allow(unused_variables)] let $arg = <$ty as Carry>::lend(&$arg);)*
                now_or_never($op(tx, $($call),*))
            })
            .await
    }};
}

crate::operations::store_impl!(SqliteStore, run, {
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

    async fn expire_leases(&self, now: OffsetDateTime) -> Result<Vec<EffectId>> {
        self.write(true, move |tx| {
            now_or_never(crate::reconciliation::expire_leases(tx, now))
        })
        .await
    }
});
