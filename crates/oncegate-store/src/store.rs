//! The store: one type for either backend. Each call is written once, in the module named for
//! what it reads or writes (`deliveries`, `effects`, `queue`, `breakers`, `keys`, `forwards`),
//! as its operation run in a transaction of either backend (`AnyTx`); the calls where the
//! backends truly differ (the journal, the decision and the complete: SQLite's writer thread
//! against PostgreSQL's batches) are here, each one `match` over the backend.
//!
//! A call's work is its arguments, owned (SQLite moves them to its reader or writer thread),
//! and a function of them that PostgreSQL may run more than once (a transaction that lost a
//! serialization race starts again), so the function borrows them (`Work`). Boxed, as sqlx's
//! `Connection::transaction` takes its callback: a generic async closure held across an
//! `await` cannot yet be shown `Send` by the compiler.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use oncegate_core::ids::{DeliveryId, EffectId};
use time::OffsetDateTime;

use crate::decision::{DecideOutcome, DecideRequest};
use crate::delivery::NewReception;
use crate::error::StoreError;
use crate::location::StoreLocation;
use crate::postgres::PgStore;
use crate::sqlite::SqliteStore;
use crate::Matrix;

mod archives;
mod breakers;
mod deliveries;
mod effects;
mod forwards;
mod keys;
mod queue;
mod tx;

pub(crate) use tx::AnyTx;

/// A call's work on its arguments inside a transaction (see the module's documentation).
pub(crate) type Work<A, T> =
    Box<dyn for<'t> Fn(&'t mut AnyTx<'_>, &'t A) -> BoxFuture<'t, Result<T>> + Send + Sync>;

type Result<T> = std::result::Result<T, StoreError>;

/// Everything the service and the tools need from durable storage, on an embedded SQLite
/// file or a shared PostgreSQL database ([`open`]). Both backends pass the same conformance
/// suite (`tests/it`).
pub struct Store {
    backend: Backend,
}

// One per opened store, behind an `Arc`: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// Opens the store a store string names and applies the embedded migrations: `postgres://…`,
/// `postgresql://…` or a libpq `key=value` string for PostgreSQL; `sqlite://path` or
/// `sqlite:path` for SQLite (the file is created when missing). Anything else, a bare file
/// name included, is a `Config` error listing the accepted forms ([`StoreLocation`]).
///
/// ```
/// use oncegate_store::testing::TestDatabase;
/// use oncegate_store::{NewReception, StoreError};
/// use time::OffsetDateTime;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), StoreError> {
/// let db = TestDatabase::sqlite();
/// let store = oncegate_store::open(&db.url).await?;
/// assert_eq!(store.backend(), "sqlite");
///
/// // A reception is journaled before anything is decided, and reads back as it was given.
/// let id = store
///     .journal(NewReception {
///         tenant: "acme".into(),
///         provider: "pay".into(),
///         env: "live".into(),
///         event_type: Some("refund.created".into()),
///         received_at: OffsetDateTime::from_unix_timestamp(1_772_366_400).unwrap(),
///         size: 2,
///         body_sha256: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a".into(),
///         headers_json: "{}".into(),
///         payload: Some(b"{}".to_vec()),
///         transport_key: None,
///         correlation_id: None,
///     })
///     .await?;
/// let journaled = store.delivery(&id).await?.expect("the journaled delivery");
/// assert_eq!(journaled.payload.as_deref(), Some(&b"{}"[..]));
/// assert!(store.proof(&id).await?.is_none(), "not decided yet");
///
/// assert!(matches!(oncegate_store::open("sqlite://").await, Err(StoreError::Config(_))));
/// assert!(matches!(oncegate_store::open("oncegate.db").await, Err(StoreError::Config(_))));
/// # Ok(())
/// # }
/// ```
pub async fn open(url: &str) -> Result<Arc<Store>> {
    open_at(&url.parse()?).await
}

/// Opens a PostgreSQL streaming standby of a store for reads only (listings, reports, proofs
/// read back): its schema is checked, never migrated (a standby replays the primary's
/// migrations), and every transaction on it is read-only, so nothing can be written through it
/// even when the string names a primary by mistake. SQLite has no replica: a `sqlite://`
/// location is refused.
pub async fn open_replica(location: &StoreLocation) -> Result<Arc<Store>> {
    match location {
        StoreLocation::Postgres(conn) => Ok(Arc::new(Store {
            backend: Backend::Postgres(PgStore::open_replica(conn).await?),
        })),
        StoreLocation::Sqlite(_) => Err(StoreError::Config(
            "a read store is a PostgreSQL streaming standby; a SQLite store has no replica"
                .to_owned(),
        )),
    }
}

/// Opens the store at a checked location (see [`open`]).
pub async fn open_at(location: &StoreLocation) -> Result<Arc<Store>> {
    let backend = match location {
        StoreLocation::Postgres(conn) => Backend::Postgres(PgStore::open(conn).await?),
        StoreLocation::Sqlite(path) => Backend::Sqlite(SqliteStore::open(path).await?),
    };
    Ok(Arc::new(Store { backend }))
}

impl Store {
    /// Runs `work` on `args` in a read transaction: on one of SQLite's reader connections,
    /// or in a PostgreSQL transaction of its own, run again when it loses a serialization race.
    async fn read<A, T>(
        &self,
        args: A,
        work: impl for<'t> Fn(&'t mut AnyTx<'_>, &'t A) -> BoxFuture<'t, Result<T>>
            + Send
            + Sync
            + 'static,
    ) -> Result<T>
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
    {
        self.run(None, args, Box::new(work)).await
    }

    /// Runs `work` on `args` in a write transaction and answers once it committed: in
    /// SQLite's next batch, or in a PostgreSQL transaction of its own, run again when it loses
    /// a serialization race. With `keep` false the work is rolled back even when it succeeds
    /// (a dry run).
    async fn write<A, T>(
        &self,
        keep: bool,
        args: A,
        work: impl for<'t> Fn(&'t mut AnyTx<'_>, &'t A) -> BoxFuture<'t, Result<T>>
            + Send
            + Sync
            + 'static,
    ) -> Result<T>
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
    {
        self.run(Some(keep), args, Box::new(work)).await
    }

    /// `read` (`write` is `None`) or `write` (whether to keep the writes).
    async fn run<A, T>(&self, write: Option<bool>, args: A, work: Work<A, T>) -> Result<T>
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
    {
        match (&self.backend, write) {
            (Backend::Sqlite(store), None) => store.read_any(args, work).await,
            (Backend::Sqlite(store), Some(keep)) => store.write_any(keep, args, work).await,
            (Backend::Postgres(store), write) => {
                store.transaction(write.unwrap_or(true), args, work).await
            }
        }
    }

    /// `"sqlite"` or `"postgres"`, for logs and metrics.
    pub fn backend(&self) -> &'static str {
        match &self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Readiness: the database answers and accepts a trivial query.
    pub async fn ping(&self) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(store) => store.ping().await,
            Backend::Postgres(store) => store.ping().await,
        }
    }

    /// The sizes of the group commits this store ran since it opened (calls per batch).
    pub fn batch_sizes(&self) -> Arc<crate::BatchSizes> {
        match &self.backend {
            Backend::Sqlite(store) => store.batch_sizes(),
            Backend::Postgres(store) => store.batch_sizes(),
        }
    }

    /// How far behind its primary this store's reads are: `None` on a store that is not a
    /// replica (SQLite, a PostgreSQL primary), zero on a standby that has replayed everything
    /// it received, else the time since the last transaction it replayed committed on the
    /// primary (`pg_last_xact_replay_timestamp`).
    pub async fn read_lag(&self) -> Result<Option<std::time::Duration>> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(store) => store.read_lag().await,
        }
    }

    /// Journals one reception in its own commit, before anything is decided (rejected ones
    /// too) and returns its new id.
    pub async fn journal(&self, reception: NewReception) -> Result<DeliveryId> {
        match &self.backend {
            Backend::Sqlite(store) => store.journal(reception).await,
            Backend::Postgres(store) => store.journal(reception).await,
        }
    }

    /// The decision: reads the transport match and the prior effect for the key, runs `matrix`
    /// on that view, and applies its decision with the proof in one atomic write (see the
    /// crate's documentation for how each backend makes it so).
    ///
    /// * `Process` on a new key reserves it (the effect, numbered next among its key's effects:
    ///   the number is unique with the key); a lost race re-reads the prior and runs `matrix`
    ///   again, so exactly one caller ever gets `process` for a key.
    /// * `Process` on a prior failed (retryable) or unknown effect takes it over: same effect,
    ///   fencing token + 1, a new lease.
    /// * `Process` flagged `possible_duplicate` or `unkeyed` creates a new effect outside the
    ///   key's slot (it may be a distinct operation); flagged `prior_purged`, the new effect
    ///   holds the key's slot after the expired one.
    /// * `Ignore` links the delivery to the existing effect; `Quarantine` / `Reconcile` open a
    ///   queue item; `Reject` writes only the proof.
    ///
    /// A delivery is decided once: a second `decide` for it is a `Conflict`.
    pub async fn decide(
        &self,
        request: DecideRequest,
        matrix: &dyn Matrix,
    ) -> Result<DecideOutcome> {
        match &self.backend {
            Backend::Sqlite(store) => store.decide(request, matrix).await,
            Backend::Postgres(store) => store.decide(request, matrix).await,
        }
    }

    /// `journal` then `decide`, as one call each backend runs in one commit: the reception is
    /// journaled whatever becomes of its decision (a decision that fails is undone alone, and
    /// the journal entry is kept), and `request.delivery` is replaced by the new delivery's id.
    ///
    /// `Err` means the reception was not journaled (as `journal` failing); `Ok((id, decided))`
    /// that it was, with the decision's own result, exactly as the two calls would answer.
    pub async fn journal_and_decide(
        &self,
        reception: NewReception,
        request: DecideRequest,
        matrix: &dyn Matrix,
    ) -> Result<(DeliveryId, Result<DecideOutcome>)> {
        match &self.backend {
            Backend::Sqlite(store) => store.journal_and_decide(reception, request, matrix).await,
            Backend::Postgres(store) => store.journal_and_decide(reception, request, matrix).await,
        }
    }

    /// Records the effect's result (a reference to the transaction, resource and rule version,
    /// as JSON text; never the payload). Refused with `StaleToken` when another holder took
    /// over, `LeaseLost` when the lease passed or an outcome is already recorded.
    pub async fn complete(
        &self,
        effect: &EffectId,
        token: u64,
        result: &str,
        now: OffsetDateTime,
    ) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(store) => store.complete(effect, token, result, now).await,
            Backend::Postgres(store) => store.complete(effect, token, result, now).await,
        }
    }

    /// Turns every reservation whose lease passed into `unknown` (nothing is re-run) and
    /// returns those effects.
    pub async fn expire_leases(&self, now: OffsetDateTime) -> Result<Vec<EffectId>> {
        match &self.backend {
            Backend::Sqlite(store) => store.expire_leases(now).await,
            Backend::Postgres(store) => store.expire_leases(now).await,
        }
    }

    /// Starts a task that notifies `wake` whenever another instance sharing the store queued an
    /// item (a hint: PostgreSQL's LISTEN/NOTIFY); `None` when the backend has no such channel.
    /// The caller aborts the task when it stops.
    pub fn listen_for_queued(
        &self,
        wake: Arc<tokio::sync::Notify>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(store) => Some(store.listen_for_queued(wake)),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Nothing stands between a call of the store and its operation but Rust a reader can
    /// follow: the crate's sources define no macro (the calls were once written by one).
    #[test]
    fn no_macro_writes_the_store_calls() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![src];
        let mut found = Vec::new();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read the sources") {
                let path = entry.expect("a source entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).expect("read a source file");
                    if text.contains(concat!("macro", "_rules!")) {
                        found.push(path.display().to_string());
                    }
                }
            }
        }
        assert!(found.is_empty(), "macros defined in the store: {found:?}");
    }
}
