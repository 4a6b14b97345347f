//! What the gate's store holds, read through the gate: the journal and its listing, effects,
//! the queue, the report, the breakers, gateway mode's forwards, and the store's health. The
//! listings of deliveries and of the queue, and the report, are read from the gate's read
//! store when it has one (a streaming standby, `GateConfig::read_store`); every other read is
//! the store's, so a caller that acts on what it read (a holder's effect, a queue item being
//! resolved) never reads it stale. An
//! adapter (the HTTP routes, the console, the command line) lists and shows through these and
//! never holds the store itself; every listing takes the reader's tenants where records carry
//! one.

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_store::{
    Breaker, BreakerRule, DeliveryFilter, DeliveryRecord, DeliverySummary, EffectRecord,
    ForwardAttempt, ForwardCounts, ForwardFilter, ForwardRecord, ProofRecord, QueueFilter,
    QueueItem, QueuePage, Report, StoreError, TenantFilter,
};
use time::OffsetDateTime;

use crate::gate::Gate;

impl Gate {
    /// The store's backend: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        self.store().backend()
    }

    /// Whether the store answers (a round trip, on PostgreSQL a committed transaction).
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.store().ping().await
    }

    /// One journaled delivery (with its body while retention keeps it); `None` when no
    /// delivery has this id.
    pub async fn delivery(&self, id: &DeliveryId) -> Result<Option<DeliveryRecord>, StoreError> {
        self.store().delivery(id).await
    }

    /// The recorded decision of one delivery; `None` when it has none (yet).
    pub async fn decision(&self, id: &DeliveryId) -> Result<Option<ProofRecord>, StoreError> {
        self.store().proof(id).await
    }

    /// Deliveries matching the filter, newest first, without their bodies.
    pub async fn deliveries(
        &self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<DeliverySummary>, StoreError> {
        self.reader().deliveries(filter).await
    }

    /// One effect with its links; `None` when no effect has this id.
    pub async fn effect(&self, id: &EffectId) -> Result<Option<EffectRecord>, StoreError> {
        self.store().effect(id).await
    }

    /// The tenant of an effect, in one look-up; `None` when no such effect exists.
    pub async fn effect_tenant(&self, id: &EffectId) -> Result<Option<String>, StoreError> {
        self.store().effect_tenant(id).await
    }

    /// Queue items matching the filter, oldest first.
    pub async fn queue_list(&self, filter: &QueueFilter) -> Result<Vec<QueueItem>, StoreError> {
        self.reader().queue_list(filter).await
    }

    /// One page of the queue, where the next one starts and the counts per kind and status.
    pub async fn queue_page(&self, filter: &QueueFilter) -> Result<QueuePage, StoreError> {
        self.reader().queue_page(filter).await
    }

    /// One queue item, open or resolved; `None` when no item has this id.
    pub async fn queue_item(&self, id: &QueueItemId) -> Result<Option<QueueItem>, StoreError> {
        self.store().queue_item(id).await
    }

    /// The report of the deliveries of `tenants` received at or after `since`.
    pub async fn report(
        &self,
        tenants: &TenantFilter,
        since: OffsetDateTime,
    ) -> Result<Report, StoreError> {
        self.reader().report(tenants, since).await
    }

    /// The report of the deliveries of `tenants` received at or after `since` and before
    /// `until`: a bounded period reads only its own rows.
    pub async fn report_until(
        &self,
        tenants: &TenantFilter,
        since: OffsetDateTime,
        until: OffsetDateTime,
    ) -> Result<Report, StoreError> {
        self.reader()
            .report_until(tenants, since, Some(until))
            .await
    }

    /// Every breaker that ever opened and every scope with matches in `rule`'s window, now.
    pub async fn breakers(&self, rule: &BreakerRule) -> Result<Vec<Breaker>, StoreError> {
        self.store().breakers(rule, self.now()).await
    }

    /// Gateway mode's forwards matching the filter.
    pub async fn forwards(&self, filter: &ForwardFilter) -> Result<Vec<ForwardRecord>, StoreError> {
        self.store().forwards(filter).await
    }

    /// The forward of one effect; `None` when it has none.
    pub async fn forward(&self, effect: &EffectId) -> Result<Option<ForwardRecord>, StoreError> {
        self.store().forward(effect).await
    }

    /// Every attempt of one effect's forward, in order.
    pub async fn forward_attempts(
        &self,
        effect: &EffectId,
    ) -> Result<Vec<ForwardAttempt>, StoreError> {
        self.store().forward_attempts(effect).await
    }

    /// The forwards of `tenants` counted by state (the dead letters among them).
    pub async fn forward_counts(
        &self,
        tenants: &TenantFilter,
    ) -> Result<ForwardCounts, StoreError> {
        self.store().forward_counts(tenants).await
    }

    /// The Prometheus text exposition, the shared gauges read from the store first (a store
    /// that does not answer sets `oncegate_store_up` to 0).
    pub async fn scrape_metrics(&self) -> String {
        self.metrics()
            .refresh(self.store().as_ref(), self.now())
            .await;
        self.metrics().encode()
    }
}
