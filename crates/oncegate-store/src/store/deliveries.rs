//! The store's calls on deliveries: one read back with its payload, its proof, the listing,
//! the report, and retention.

use oncegate_core::ids::DeliveryId;
use time::OffsetDateTime;

use super::{Result, Store};
use crate::decision::{self, ProofRecord};
use crate::delivery::{self, DeliveryFilter, DeliveryRecord, DeliverySummary, TenantFilter};
use crate::partition::{self, Partitions};
use crate::report::{self, Report};
use crate::retention::{self, PurgeCounts, PurgePolicy};

impl Store {
    /// One journaled delivery with its payload (while the payload retention keeps it);
    /// `None` when no delivery has this id, or the proof retention purged it.
    pub async fn delivery(&self, id: &DeliveryId) -> Result<Option<DeliveryRecord>> {
        self.read(id.clone(), |tx, id| Box::pin(delivery::read(tx, id)))
            .await
    }

    /// The proof of a delivery's decision (rejections have one too); `None` while it is not
    /// decided, or once the proof retention purged it.
    pub async fn proof(&self, id: &DeliveryId) -> Result<Option<ProofRecord>> {
        self.read(id.clone(), |tx, id| Box::pin(decision::proof(tx, id)))
            .await
    }

    /// Deliveries matching the filter, newest first, without their bodies.
    pub async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<DeliverySummary>> {
        self.read(filter.clone(), |tx, filter| {
            Box::pin(delivery::list(tx, filter))
        })
        .await
    }

    /// Aggregates deliveries received at or after `since`, and what became of them.
    pub async fn report(&self, tenants: &TenantFilter, since: OffsetDateTime) -> Result<Report> {
        self.report_until(tenants, since, None).await
    }

    /// The same for the deliveries received before `until` (exclusive) too; `None`: up to now.
    /// Each bound is a range of ids on the primary key, so a short period reads only its rows.
    pub async fn report_until(
        &self,
        tenants: &TenantFilter,
        since: OffsetDateTime,
        until: Option<OffsetDateTime>,
    ) -> Result<Report> {
        let period = report::Period { since, until };
        self.read(tenants.clone(), move |tx, tenants| {
            Box::pin(report::build(tx, tenants, period))
        })
        .await
    }

    /// Counts the report's minute totals: the minutes that ended more than two minutes ago and
    /// are not counted yet (at most `max_minutes`, oldest first), and again those a late write
    /// or retention changed since. A report reads a counted minute's totals instead of its
    /// rows; the upkeep calls this in the background. Idempotent, and safe beside other
    /// instances (PostgreSQL: one counts at a time; the others answer `busy`).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use oncegate_store::testing::TestDatabase;
    ///
    /// let db = TestDatabase::sqlite();
    /// let store = oncegate_store::open(&db.url).await.unwrap();
    /// // An empty store has nothing to count.
    /// let done = store.roll_up(60).await.unwrap();
    /// assert_eq!((done.minutes, done.caught_up), (0, true));
    /// # });
    /// ```
    pub async fn roll_up(&self, max_minutes: u32) -> Result<crate::RollUp> {
        self.write(true, (), move |tx, ()| {
            Box::pin(crate::rollup::roll_up(tx, i64::from(max_minutes.max(1))))
        })
        .await
    }

    /// Applies the retention rules; with `dry_run` only counts what would go (the same work,
    /// rolled back, so its counts are exact).
    pub async fn purge(
        &self,
        policy: &PurgePolicy,
        now: OffsetDateTime,
        dry_run: bool,
    ) -> Result<PurgeCounts> {
        self.write(!dry_run, *policy, move |tx, policy| {
            Box::pin(retention::purge(tx, policy, now))
        })
        .await
    }

    /// PostgreSQL: turns the journal and the proofs into tables partitioned by day (their rows
    /// so far kept as one partition, `<table>_history`) if they are not yet, and creates the
    /// partitions of the days from today to `days_ahead` days ahead that none covers yet.
    /// Needs the privileges of the tables' owner; a SQLite store has no partitions (an error).
    pub async fn partition(&self, days_ahead: u32, now: OffsetDateTime) -> Result<Partitions> {
        self.write(true, (), move |tx, ()| {
            Box::pin(partition::partition(tx, days_ahead, now))
        })
        .await
    }

    /// Creates the missing days ahead of a partitioned store (see [`Store::partition`]); does
    /// nothing to a store that is not partitioned.
    pub async fn extend_partitions(
        &self,
        days_ahead: u32,
        now: OffsetDateTime,
    ) -> Result<Partitions> {
        self.write(true, (), move |tx, ()| {
            Box::pin(partition::extend(tx, days_ahead, now))
        })
        .await
    }
}
