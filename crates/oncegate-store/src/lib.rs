//! Durable storage for oncegate: deliveries, effects, reservations, proofs and the ambiguity
//! queue, behind one `Store` type over an embedded SQLite backend (the default) or a
//! PostgreSQL backend (for many stateless instances sharing one database).
//!
//! This is where the service's atomicity lives. A delivery is journaled first, in its own
//! commit; then `decide` reads what is known about its transport key and effect key, runs the
//! (pure) decision matrix on that view, and writes the decision's consequence (a reservation, a
//! link, a queue item) together with its proof as one atomic unit: the write that settles a
//! race first (the reservation's insert of its effect, numbered next among its key's effects
//! under a unique index, a takeover's token-guarded update), the rest only if it changed a row.
//! SQLite runs all of it in one transaction on its writer thread; PostgreSQL in a batch's
//! transaction shared with other callers, set-oriented
//! (every member's view in one statement, then every member's writes chained into one), or,
//! for a delivery journaled by another instance, in two statements without BEGIN or COMMIT. A
//! decision that loses a race writes nothing and is read and run again. A `process` answer is
//! only given once its reservation has committed, and a key has exactly one winner under any
//! concurrency because the reservation is an atomic insert into a unique index.
//!
//! Time always comes in as an argument; ids are generated here (time-ordered ULIDs).

#![warn(missing_docs)]

use std::sync::Arc;

use oncegate_core::matrix::Decision;

pub mod alias;
pub mod archive;
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
pub mod partition;
mod plan;
pub mod postgres;
mod rollup;
mod schema;
mod settlement;
mod sql;
pub mod sqlite;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod wakeup;

pub use alias::{MigrationSource, NewAlias};
pub use archive::{ArchiveError, ArchiveManifest, ArchiveVerified};
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
pub use partition::Partitions;
pub use queue::{
    CursorError, DeliveryItems, Proposal, QueueCounts, QueueCursor, QueueFilter, QueueItem,
    QueueKind, QueuePage, QueueRef, QueueStatus, Resolution, ResolutionOutcome, ResolutionRecord,
    StatusCounts,
};
pub use reconciliation::{MissingOperation, ReconcileAttempt, ResourceScope};
pub use report::{Report, ReportCounts, ReportRow};
pub use rescope::{OperationScope, RescopeCounts};
pub use retention::{PurgeCounts, PurgePolicy};
pub use rollup::RollUp;
pub use settlement::Verified;
pub use shadow::{ShadowCount, ShadowDisagreement, ShadowObservation, ShadowPrior};
pub use store::{open, open_at, open_replica, Store};

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
