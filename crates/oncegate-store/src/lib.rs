//! Durable storage for oncegate: deliveries, effects, reservations, proofs and the ambiguity
//! queue, behind one `Store` trait with an embedded SQLite backend (the default) and a
//! PostgreSQL backend (for many stateless instances sharing one database).
//!
//! This is where the service's atomicity lives. A delivery is journaled first, in its own
//! commit; then `decide` reads what is known about its transport key and effect key, runs the
//! (pure) decision matrix on that view, and writes the decision's consequence (a reservation, a
//! link, a queue item) together with its proof as one atomic unit: the write that settles a
//! race first (the reservation's insert into the unique index, a takeover's token-guarded
//! update), the rest only if it changed a row. SQLite runs all of it in one transaction on its
//! writer thread; PostgreSQL in a batch's transaction shared with other callers, set-oriented
//! (every member's view in one statement, then every member's writes chained into one), or,
//! for a delivery journaled by another instance, in two statements without BEGIN or COMMIT. A decision that loses a race writes nothing and is read
//! and run again. A `process` answer is only given once its reservation has committed, and a
//! key has exactly one winner under any concurrency because the reservation is an atomic
//! insert into a unique index.
//!
//! Time always comes in as an argument; ids are generated here (time-ordered ULIDs).

#![warn(missing_docs)]

use std::sync::Arc;

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_core::matrix::Decision;
use time::{Duration, OffsetDateTime};

pub mod alias;
pub mod batch_sizes;
pub mod breaker;
pub mod decision;
pub mod delivery;
pub mod effect;
pub mod error;
pub mod forward;
pub mod location;
pub mod queue;
pub mod reconciliation;
pub mod report;
pub mod rescope;
pub mod retention;
pub mod shadow;

mod codes;
mod nul;
mod operations;
mod plan;
pub mod postgres;
mod schema;
mod settlement;
mod sql;
pub mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;
mod wakeup;

pub use alias::{MigrationSource, NewAlias};
pub use batch_sizes::{BatchSizes, BatchSizesSeen, BATCH_SIZE_BOUNDS};
pub use breaker::{Breaker, BreakerRecord, BreakerRule, BreakerScope, BreakerState, BreakerTally};
pub use decision::{
    DecideOutcome, DecideRequest, EffectKey, Horizon, KeyScope, PriorEffect, PriorView,
    ProofRecord, Reservation, StrategyRef,
};
pub use delivery::{
    DeliveryFilter, DeliveryRecord, DeliverySummary, NewReception, TenantFilter, TransportKey,
    TransportStrength,
};
pub use effect::{Claim, EffectLink, EffectRecord, EffectState, LinkKind};
pub use error::StoreError;
pub use forward::{
    ForwardAttempt, ForwardCounts, ForwardEnd, ForwardFilter, ForwardNext, ForwardRecord,
    ForwardStart, ForwardState, ForwardType, NewForward,
};
pub use location::StoreLocation;
pub use queue::{
    CursorError, DeliveryItems, Proposal, QueueCounts, QueueCursor, QueueFilter, QueueItem,
    QueueKind, QueuePage, QueueRef, QueueStatus, Resolution, ResolutionOutcome, ResolutionRecord,
    StatusCounts,
};
pub use reconciliation::{MissingOperation, ReconcileAttempt, ResourceScope};
pub use report::{Report, ReportCounts, ReportRow};
pub use rescope::{OperationScope, RescopeCounts};
pub use retention::{PurgeCounts, PurgePolicy};
pub use settlement::Verified;
pub use shadow::{ShadowCount, ShadowDisagreement, ShadowObservation, ShadowPrior};

/// The decision matrix as the store runs it: pure, synchronous, and possibly run more than
/// once per delivery (when a race changed the prior, the store re-reads it and asks again).
///
/// Any `Fn(&PriorView) -> Decision` closure that owns what it captures (`Clone + 'static`) is
/// one, so callers pass `&closure`. A backend may run it where the data is: SQLite takes a
/// shared handle (`share`) into its writer thread, so the view is read, decided and applied
/// in one place, inside the group commit.
pub trait Matrix: Send + Sync {
    /// The decision for one view.
    fn decide(&self, view: &PriorView) -> Decision;

    /// An owned handle on this matrix that can move to another thread.
    fn share(&self) -> SharedMatrix;
}

/// An owned, shareable matrix (what `Matrix::share` returns).
pub type SharedMatrix = Arc<dyn Matrix>;

impl<F> Matrix for F
where
    F: Fn(&PriorView) -> Decision + Clone + Send + Sync + 'static,
{
    fn decide(&self, view: &PriorView) -> Decision {
        self(view)
    }

    fn share(&self) -> SharedMatrix {
        Arc::new(self.clone())
    }
}

/// Everything the service and the tools need from durable storage. Both backends pass the
/// same conformance suite (`tests/it`).
#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// `"sqlite"` or `"postgres"`, for logs and metrics.
    fn backend(&self) -> &'static str;

    /// Readiness: the database answers and accepts a trivial query.
    async fn ping(&self) -> Result<(), StoreError>;

    /// The sizes of the group commits this store ran since it opened (calls per batch), for a
    /// backend that gathers calls into shared commits.
    fn batch_sizes(&self) -> Option<Arc<BatchSizes>> {
        None
    }

    /// How far behind its primary this store's reads are: `None` on a store that is not a
    /// replica (SQLite, a PostgreSQL primary), zero on a standby that has replayed everything
    /// it received, else the time since the last transaction it replayed committed on the
    /// primary (`pg_last_xact_replay_timestamp`).
    async fn read_lag(&self) -> Result<Option<std::time::Duration>, StoreError> {
        Ok(None)
    }

    /// Journals one reception in its own commit, before anything is decided (rejected ones
    /// too) and returns its new id.
    async fn journal(&self, reception: NewReception) -> Result<DeliveryId, StoreError>;

    /// The decision: reads the transport match and the prior effect for the key, runs `matrix`
    /// on that view, and applies its decision with the proof in one atomic write (see the
    /// crate's documentation for how each backend makes it so).
    ///
    /// * `Process` on a new key reserves it (effect + unique index entry); a lost race re-reads
    ///   the prior and runs `matrix` again, so exactly one caller ever gets `process` for a key.
    /// * `Process` on a prior failed (retryable) or unknown effect takes it over: same effect,
    ///   fencing token + 1, a new lease.
    /// * `Process` flagged `possible_duplicate` or `unkeyed` creates a new effect outside the
    ///   unique index (it may be a distinct operation); flagged `prior_purged`, the new effect
    ///   takes over the expired index slot.
    /// * `Ignore` links the delivery to the existing effect; `Quarantine` / `Reconcile` open a
    ///   queue item; `Reject` writes only the proof.
    ///
    /// A delivery is decided once: a second `decide` for it is a `Conflict`.
    async fn decide(
        &self,
        request: DecideRequest,
        matrix: &dyn Matrix,
    ) -> Result<DecideOutcome, StoreError>;

    /// `journal` then `decide`, as one call a backend may run in one commit: the reception is
    /// journaled whatever becomes of its decision (a decision that fails is undone alone, and
    /// the journal entry is kept), and `request.delivery` is replaced by the new delivery's id.
    ///
    /// `Err` means the reception was not journaled (as `journal` failing); `Ok((id, decided))`
    /// that it was, with the decision's own result, exactly as the two calls would answer.
    async fn journal_and_decide(
        &self,
        reception: NewReception,
        request: DecideRequest,
        matrix: &dyn Matrix,
    ) -> Result<(DeliveryId, Result<DecideOutcome, StoreError>), StoreError> {
        let id = self.journal(reception).await?;
        let request = DecideRequest {
            delivery: id.clone(),
            ..request
        };
        let decided = self.decide(request, matrix).await;
        Ok((id, decided))
    }

    /// Records the effect's result (a reference to the transaction, resource and rule version,
    /// as JSON text; never the payload). Refused with `StaleToken` when another holder took
    /// over, `LeaseLost` when the lease passed or an outcome is already recorded.
    async fn complete(
        &self,
        effect: &EffectId,
        token: u64,
        result: &str,
        now: OffsetDateTime,
    ) -> Result<(), StoreError>;

    /// Records a failure; a retryable one lets the next delivery of the key take over.
    async fn fail(
        &self,
        effect: &EffectId,
        token: u64,
        retryable: bool,
        error: &str,
        now: OffsetDateTime,
    ) -> Result<(), StoreError>;

    /// Extends a live reservation's lease to `now + lease` and returns the new deadline.
    async fn heartbeat(
        &self,
        effect: &EffectId,
        token: u64,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<OffsetDateTime, StoreError>;

    /// Turns every reservation whose lease passed into `unknown` (nothing is re-run) and
    /// returns those effects.
    async fn expire_leases(&self, now: OffsetDateTime) -> Result<Vec<EffectId>, StoreError>;

    /// One journaled delivery with its payload (while the payload retention keeps it);
    /// `None` when no delivery has this id, or the proof retention purged it.
    async fn delivery(&self, id: &DeliveryId) -> Result<Option<DeliveryRecord>, StoreError>;

    /// The proof of a delivery's decision (rejections have one too); `None` while it is not
    /// decided, or once the proof retention purged it.
    async fn proof(&self, id: &DeliveryId) -> Result<Option<ProofRecord>, StoreError>;

    /// The effect with every delivery linked to it.
    async fn effect(&self, id: &EffectId) -> Result<Option<EffectRecord>, StoreError>;

    /// The tenant of an effect, in one look-up (what a holder's call checks its caller
    /// against); `None` when no such effect exists.
    async fn effect_tenant(&self, id: &EffectId) -> Result<Option<String>, StoreError>;

    /// Deliveries matching the filter, newest first, without their bodies.
    async fn deliveries(&self, filter: &DeliveryFilter)
        -> Result<Vec<DeliverySummary>, StoreError>;

    /// Queue items matching the filter, oldest first.
    async fn queue_list(&self, filter: &QueueFilter) -> Result<Vec<QueueItem>, StoreError>;

    /// One page of the listing (oldest first, after `filter.after`), where the next page
    /// starts, and the counts per kind and status under the filter's tenant, provider, type and
    /// age, all read in one transaction.
    async fn queue_page(&self, filter: &QueueFilter) -> Result<QueuePage, StoreError>;

    /// One queue item, open or resolved, with its resolution and reconcile attempts; `None`
    /// when no item has this id.
    async fn queue_item(&self, id: &QueueItemId) -> Result<Option<QueueItem>, StoreError>;

    /// Settles an open queue item: `distinct` releases the delivery as a new claimable effect
    /// carrying the authoritative reference; `duplicate` links it to the existing effect.
    /// Resolving an item twice is a `Conflict`.
    ///
    /// An item waiting on an effect whose outcome is unknown settles that effect and every
    /// other item waiting on it, in the same transaction: `duplicate` completes it; `distinct`
    /// on its verify item releases that same effect once (never by the reconciler); see
    /// `settlement`.
    async fn resolve(
        &self,
        item: &QueueItemId,
        resolution: Resolution,
    ) -> Result<QueueItem, StoreError>;

    /// Hands one released effect (oldest first) to `worker` exclusively, as a reservation with
    /// a fencing token and a lease; `None` when there is no work.
    async fn claim(
        &self,
        worker: &str,
        tenants: &TenantFilter,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<Claim>, StoreError>;

    /// Aggregates deliveries received at or after `since`, and what became of them.
    async fn report(
        &self,
        tenants: &TenantFilter,
        since: OffsetDateTime,
    ) -> Result<Report, StoreError>;

    // Reconciliation (schema v2): see `reconciliation`.

    /// Every local effect of one resource, oldest first (links not included).
    async fn resource_effects(
        &self,
        scope: &ResourceScope,
    ) -> Result<Vec<EffectRecord>, StoreError>;

    /// The open items the reconciler works (`reconcile` and `quarantine`), least recently
    /// attempted first, then oldest first.
    async fn open_reconcile_items(&self, limit: u32) -> Result<Vec<QueueItem>, StoreError>;

    /// Records an attempt that left an item open (shown in the queue listing).
    async fn record_reconcile_attempt(
        &self,
        item: &QueueItemId,
        attempt: ReconcileAttempt,
    ) -> Result<QueueItem, StoreError>;

    /// `resolve`, keeping the evidence (JSON text); a `duplicate` of an effect whose outcome
    /// was unknown also settles that effect as completed.
    async fn resolve_with_evidence(
        &self,
        item: &QueueItemId,
        resolution: Resolution,
        evidence: &str,
    ) -> Result<QueueItem, StoreError>;

    /// Settles an effect whose outcome was unknown from the consumer's verification answer:
    /// completed with its result, or released under fencing + 1; every open item waiting on it
    /// is resolved `duplicate` with the evidence. `Conflict` when it is no longer unknown.
    async fn settle_unknown(
        &self,
        effect: &EffectId,
        verified: &Verified,
        resolution: Resolution,
        evidence: &str,
    ) -> Result<Vec<QueueItem>, StoreError>;

    /// The resources of one provider's type that effects or queue items were recorded for at
    /// or after `since` (what the invisible-losses sweep asks the authority about).
    async fn resources_seen(
        &self,
        provider: &str,
        event_type: &str,
        since: OffsetDateTime,
    ) -> Result<Vec<ResourceScope>, StoreError>;

    /// Replaces the authority operations found with no local effect for one resource; returns
    /// how many are missing now.
    async fn record_missing(
        &self,
        scope: &ResourceScope,
        missing: &[MissingOperation],
        now: OffsetDateTime,
    ) -> Result<u64, StoreError>;

    /// Applies the retention rules; with `dry_run` only counts what would go.
    async fn purge(
        &self,
        policy: &PurgePolicy,
        now: OffsetDateTime,
        dry_run: bool,
    ) -> Result<PurgeCounts, StoreError>;

    /// Counts key matches of a strategy (decisions whose prior was not `None`; a collision
    /// when one was quarantined) in its breaker's rolling window, in one write, and opens the
    /// breaker when the window trips `rule` at one of them; `opened_now` is true for exactly
    /// one caller.
    async fn breaker_record(
        &self,
        scope: &BreakerScope,
        tally: &BreakerTally,
        rule: &BreakerRule,
        now: OffsetDateTime,
    ) -> Result<BreakerRecord, StoreError>;

    /// The breaker of one strategy scope, with its window's counts (closed when it never opened).
    async fn breaker(
        &self,
        scope: &BreakerScope,
        rule: &BreakerRule,
        now: OffsetDateTime,
    ) -> Result<Breaker, StoreError>;

    /// Every breaker that ever opened and every scope with matches in the window.
    async fn breakers(
        &self,
        rule: &BreakerRule,
        now: OffsetDateTime,
    ) -> Result<Vec<Breaker>, StoreError>;

    /// Closes an open breaker with an operator's note and clears its window; `Conflict` when it
    /// is not open, `NotFound` when it never opened.
    async fn breaker_close(
        &self,
        scope: &BreakerScope,
        note: &str,
        by: &str,
        now: OffsetDateTime,
    ) -> Result<Breaker, StoreError>;

    /// Every effect with its first delivery's payload, oldest first: what `oncegate migrate`
    /// recomputes keys from.
    async fn migration_sources(&self) -> Result<Vec<MigrationSource>, StoreError>;

    /// Records that `alias.key` (made by another strategy version) names `alias.effect`, so a
    /// decision whose key holds nothing finds that effect. False when the key was already held.
    async fn record_alias(&self, alias: &NewAlias) -> Result<bool, StoreError>;

    /// Starts a task that notifies `wake` whenever another instance sharing the store queued an
    /// item (a hint: PostgreSQL's LISTEN/NOTIFY); `None` when the backend has no such channel.
    /// The caller aborts the task when it stops.
    fn listen_for_queued(
        &self,
        wake: Arc<tokio::sync::Notify>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let _ = wake;
        None
    }

    /// Moves the keys that operation-scoped strategies wrote under their event type (before
    /// keys were scoped by the operation) to the operation's scope, in one transaction;
    /// idempotent. See `rescope`.
    async fn rescope(&self, scopes: &[OperationScope]) -> Result<RescopeCounts, StoreError>;

    /// A shadow strategy's look-up in its own index: the prior holder of the key, or `None`
    /// when this delivery is now its first (shadows never touch effects).
    async fn shadow_observe(
        &self,
        observation: &ShadowObservation,
    ) -> Result<Option<ShadowPrior>, StoreError>;

    /// Records that a shadow would have decided otherwise (once per delivery and shadow).
    async fn shadow_disagreement(&self, d: &ShadowDisagreement) -> Result<(), StoreError>;

    /// Disagreements per tenant/provider/env/type/shadow since `since`.
    async fn shadow_counts(&self, since: OffsetDateTime) -> Result<Vec<ShadowCount>, StoreError>;

    // Gateway mode (schema v6): see `forward`.

    /// Enqueues the forward of an effect held under its token (or starts a new series when the
    /// token is newer than the row's); false when nothing changed.
    async fn forward_enqueue(&self, forward: &NewForward) -> Result<bool, StoreError>;

    /// The forward of one effect.
    async fn forward(&self, effect: &EffectId) -> Result<Option<ForwardRecord>, StoreError>;

    /// Forwards matching the filter, most recently changed first.
    async fn forwards(&self, filter: &ForwardFilter) -> Result<Vec<ForwardRecord>, StoreError>;

    /// Pending forwards due by `now` and attempts in flight past their deadline.
    async fn forwards_due(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<ForwardRecord>, StoreError>;

    /// When the next forward falls due (or the next attempt in flight reaches its deadline).
    async fn forward_next_due(&self) -> Result<Option<OffsetDateTime>, StoreError>;

    /// Starts the next attempt of a due, pending forward under `token` and extends the effect's
    /// lease to `deadline`, atomically; `None` when it is not (or no longer) this caller's.
    async fn forward_start(
        &self,
        effect: &EffectId,
        token: u64,
        now: OffsetDateTime,
        deadline: OffsetDateTime,
    ) -> Result<Option<ForwardStart>, StoreError>;

    /// Records how an attempt ended and what follows (completed, retried later, dead letter),
    /// under the token it was sent with; a stale answer changes nothing but the log.
    async fn forward_finish(
        &self,
        effect: &EffectId,
        token: u64,
        series: u64,
        attempt: u64,
        end: &ForwardEnd,
    ) -> Result<ForwardState, StoreError>;

    /// Marks an attempt in flight past its deadline as interrupted (its outcome unknown).
    async fn forward_interrupt(
        &self,
        effect: &EffectId,
        token: u64,
        now: OffsetDateTime,
    ) -> Result<bool, StoreError>;

    /// Re-sends a dead letter: the effect reserved again under the next token, a fresh series.
    async fn forward_resend(
        &self,
        effect: &EffectId,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<ForwardRecord, StoreError>;

    /// Claims the oldest released effect of a forward type and enqueues its forward.
    async fn forward_claim(
        &self,
        types: &[ForwardType],
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ForwardRecord>, StoreError>;

    /// Every forward attempt of one effect, in order.
    async fn forward_attempts(&self, effect: &EffectId) -> Result<Vec<ForwardAttempt>, StoreError>;

    /// Forwards pending, sending and dead, of the tenants the filter admits.
    async fn forward_counts(&self, tenants: &TenantFilter) -> Result<ForwardCounts, StoreError>;
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
pub async fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    open_at(&url.parse()?).await
}

/// Opens a PostgreSQL streaming standby of a store for reads only (listings, reports, proofs
/// read back): its schema is checked, never migrated (a standby replays the primary's
/// migrations), and every transaction on it is read-only, so nothing can be written through it
/// even when the string names a primary by mistake. SQLite has no replica: a `sqlite://`
/// location is refused.
pub async fn open_replica(location: &StoreLocation) -> Result<Arc<dyn Store>, StoreError> {
    match location {
        StoreLocation::Postgres(conn) => Ok(Arc::new(postgres::PgStore::open_replica(conn).await?)),
        StoreLocation::Sqlite(_) => Err(StoreError::Config(
            "a read store is a PostgreSQL streaming standby; a SQLite store has no replica"
                .to_owned(),
        )),
    }
}

/// Opens the store at a checked location (see [`open`]).
pub async fn open_at(location: &StoreLocation) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match location {
        StoreLocation::Postgres(conn) => Arc::new(postgres::PgStore::open(conn).await?),
        StoreLocation::Sqlite(path) => Arc::new(sqlite::SqliteStore::open(path).await?),
    })
}
