//! The embedded SQLite backend: one file, zero set-up, WAL, `synchronous=FULL`.
//!
//! All writes go through one dedicated writer thread that owns the only writing connection and
//! receives work on a channel. It takes every request waiting in the channel (waiting briefly
//! for the callers of its last batch to come back, see `writer`), runs each in its own
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
//!
//! `executor` runs the shared operations on a connection; `writer` is the writer thread and its
//! batches; here are the store, its readers, and the calls where SQLite differs from PostgreSQL.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use oncegate_core::ids::{DeliveryId, EffectId};
use rusqlite::{Connection, ErrorCode};
use time::OffsetDateTime;
use tokio::sync::oneshot;

use crate::codes::{ms, new_id};
use crate::decision::{DecideOutcome, DecideRequest};
use crate::delivery::NewReception;
use crate::error::StoreError;
use crate::schema;
use crate::store::{AnyTx, Work};
use crate::Matrix;

mod checkpoint;
mod executor;
mod writer;

use executor::now_or_never;
pub(crate) use executor::SqliteTx;
use writer::{writer_loop, Pending, WriteJob};

type Result<T> = std::result::Result<T, StoreError>;

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
    /// The writer's batches, by their number of calls.
    batch_sizes: Arc<crate::BatchSizes>,
    /// Dropped after the writer stopped (fields drop after `drop`): a last checkpoint.
    _checkpointer: checkpoint::Checkpointer,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies the embedded migrations.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let writer_path = path.clone();
        let mut conn = tokio::task::spawn_blocking(move || open_writer(&writer_path))
            .await
            .map_err(|_| StoreError::unavailable_plain("the SQLite open task stopped"))??;
        let checkpointer = checkpoint::Checkpointer::start(&path)?;
        checkpointer.watch(&mut conn)?;
        let (tx, rx) = mpsc::channel::<Box<dyn WriteJob>>();
        let batch_sizes = Arc::new(crate::BatchSizes::default());
        let sizes = batch_sizes.clone();
        let thread = std::thread::Builder::new()
            .name("oncegate-sqlite-writer".to_owned())
            .spawn(move || writer_loop(conn, rx, &sizes))
            .map_err(|e| StoreError::unavailable("the SQLite writer thread could not start", e))?;
        Ok(SqliteStore {
            writer: Some(tx),
            thread: Some(thread),
            batch_sizes,
            _checkpointer: checkpointer,
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

    /// Runs one of the store's calls written once (`store`) on a reader.
    pub(crate) async fn read_any<A, T>(&self, args: A, work: Work<A, T>) -> Result<T>
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
    {
        self.read(move |tx| now_or_never(work(&mut AnyTx::Sqlite(tx.reborrow()), &args)))
            .await
    }

    /// Runs one of the store's calls written once (`store`) in the writer's next batch.
    pub(crate) async fn write_any<A, T>(&self, keep: bool, args: A, work: Work<A, T>) -> Result<T>
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
    {
        self.write(keep, move |tx| {
            now_or_never(work(&mut AnyTx::Sqlite(tx.reborrow()), &args))
        })
        .await
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

/// Settings every connection gets: the lock wait, the statement cache, and a query plan that
/// never depends on the values bound.
///
/// The plan stability guarantee (QPSG) matters for speed: without it SQLite marks a statement
/// whose plan could depend on a bound value (an equality on a column outside the index it uses,
/// say `fencing_token = $2`) to be prepared again when that value changes, and the statement
/// cache clears the bindings of every statement it hands back, so such a statement was parsed
/// and planned afresh on every use (measured: 30 % of a decision's instructions).
fn configure(conn: &Connection) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sqlite_err)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map_err(sqlite_err)?;
    Ok(())
}

fn open_writer(path: &Path) -> Result<Connection> {
    let mut conn = Connection::open(path).map_err(sqlite_err)?;
    configure(&conn)?;
    // Pages the purge frees are given back to the file system by the purge itself
    // (`PRAGMA incremental_vacuum`, `retention`), so the file shrinks with the retention
    // instead of keeping its largest size. The mode only takes on a database without tables
    // yet; a store created before keeps its freed pages for reuse (docs/operations.md says how
    // to convert one).
    conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")
        .map_err(sqlite_err)?;
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
    // The WAL is copied back by `checkpoint`'s thread, and by the writer past 1,000 pages
    // (`Checkpointer::watch`). The file is cut back to 64 MiB when it restarts.
    conn.execute_batch("PRAGMA journal_size_limit = 67108864")
        .map_err(sqlite_err)?;
    migrate(&mut conn)?;
    Ok(conn)
}

fn open_reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path).map_err(sqlite_err)?;
    configure(&conn)?;
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

/// Runs a transaction-control statement (`BEGIN`, `SAVEPOINT item`, `COMMIT`…) through the
/// statement cache: `execute_batch` would parse it again on every call, several times per item.
pub(crate) fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
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
        control(&conn, "BEGIN").map_err(sqlite_err)?;
        let result = work(&mut SqliteTx { conn: &mut conn });
        let end = control(&conn, "COMMIT");
        if end.is_ok() {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.push(conn);
        }
        result
    }
}

// ---------------------------------------------------------------------------------------------
// The calls where the backends differ (see `store`)

impl SqliteStore {
    pub(crate) fn batch_sizes(&self) -> Arc<crate::BatchSizes> {
        self.batch_sizes.clone()
    }

    pub(crate) async fn ping(&self) -> Result<()> {
        // Through the writer: ready means able to write, not only to read.
        self.write(true, |tx| tx.query_now("SELECT 1", &[]).map(|_| ()))
            .await
    }

    pub(crate) async fn journal(&self, reception: NewReception) -> Result<DeliveryId> {
        let id = DeliveryId::from_u128(new_id(reception.received_at));
        let answer = id.clone();
        self.write(true, move |tx| {
            now_or_never(crate::delivery::journal(tx, &id, &reception))
        })
        .await?;
        Ok(answer)
    }

    pub(crate) async fn decide(
        &self,
        request: DecideRequest,
        matrix: &dyn Matrix,
    ) -> Result<DecideOutcome> {
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

    pub(crate) async fn journal_and_decide(
        &self,
        reception: NewReception,
        request: DecideRequest,
        matrix: &dyn Matrix,
    ) -> Result<(DeliveryId, Result<DecideOutcome>)> {
        // One hop and one item of the writer's batch: the decision, its journal entry and proof
        // one row, in a SAVEPOINT of its own; when it fails, it is undone alone and the entry
        // is written without it, so the entry is kept either way.
        let id = DeliveryId::from_u128(new_id(reception.received_at));
        let request = DecideRequest {
            delivery: id.clone(),
            ..request
        };
        let matrix = matrix.share();
        self.write(true, move |tx| {
            control(tx.conn, "SAVEPOINT decision").map_err(sqlite_err)?;
            let decided = now_or_never(crate::decision::decide(
                tx,
                &request,
                Some(&reception),
                |view| matrix.decide(view),
            ));
            if decided.is_err() {
                control(tx.conn, "ROLLBACK TO decision").map_err(sqlite_err)?;
                now_or_never(crate::delivery::journal(tx, &id, &reception))?;
            }
            control(tx.conn, "RELEASE decision").map_err(sqlite_err)?;
            Ok((id, decided))
        })
        .await
    }

    pub(crate) async fn complete(
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

    pub(crate) async fn expire_leases(&self, now: OffsetDateTime) -> Result<Vec<EffectId>> {
        self.write(true, move |tx| {
            now_or_never(crate::reconciliation::expire_leases(tx, now))
        })
        .await
    }
}
