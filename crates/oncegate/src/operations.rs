//! The operator's actions, in one place whatever medium a person acts through (the API, the
//! console, the command line): resolve a queue item found by any id the queue lists, close a
//! collision breaker, re-send a dead letter, apply the retention purge now. Each one counts its
//! metrics and writes its log line here, so an adapter only reads its request and renders the
//! answer.

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_core::matrix::Action;
use oncegate_store::{
    Breaker, BreakerScope, DeliveryItems, ForwardRecord, Partitions, PurgeCounts, QueueFilter,
    QueueItem, QueueRef, Resolution, RollUp, StoreError, TenantFilter,
};

use crate::gate::Gate;

/// How many items of one delivery a look-up by delivery id reads; a delivery has one or two in
/// practice (a lease-expiry item after an earlier resolution, say).
const MAX_DELIVERY_ITEMS: u32 = 100;

/// Why no queue item answers to an id (see [`Gate::queue_item_named`]).
#[derive(Debug, thiserror::Error)]
pub enum QueueLookupError {
    /// No queue item of a visible tenant has this id.
    #[error("no queue item {0}")]
    NoItem(QueueItemId),
    /// The delivery has several open items: settling the wrong one would decide an effect's
    /// outcome, which cannot be undone, so the caller names one.
    #[error("delivery {delivery} has {} open queue items", open.len())]
    Ambiguous {
        /// The delivery named.
        delivery: DeliveryId,
        /// Its open items, oldest first.
        open: Vec<QueueItemId>,
    },
    /// The delivery was decided without going to the queue.
    #[error("delivery {delivery} was decided `{}`; it is not in the queue", action.as_str())]
    Decided {
        /// The delivery named.
        delivery: DeliveryId,
        /// Its decision.
        action: Action,
    },
    /// The delivery was journaled but has no decision yet.
    #[error("delivery {0} has no recorded decision")]
    Undecided(DeliveryId),
    /// No delivery of a visible tenant has this id.
    #[error("no delivery {0}")]
    NoDelivery(DeliveryId),
    /// The store's own error.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a queue item was not resolved (see [`Gate::resolve_queue_item`]).
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The item is resolved already (before, or meanwhile by someone else); as it is now.
    #[error("queue item {} is already resolved", .0.id)]
    AlreadyResolved(Box<QueueItem>),
    /// The store refused the verdict: the item's effect changed meanwhile, or the verdict
    /// cannot apply to it.
    #[error("queue item {item} was not resolved: {why}")]
    Conflict {
        /// The item.
        item: QueueItemId,
        /// The store's reason.
        why: String,
    },
    /// The store's own error.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Gate {
    /// The queue item `target` names, as the queue lists it, among the tenants `tenants`
    /// allows: its queue item id (`q_…`), or a delivery id (`dlv_…`) whose one open item is
    /// meant (else its latest resolved one). A delivery with several open items, or with none, says
    /// so; an item or delivery of another tenant does not exist.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use oncegate::{Gate, QueueLookupError};
    /// use oncegate::store::{QueueRef, TenantFilter};
    ///
    /// let contract = oncegate_core::contract::parse("oncegate.toml", "").unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    /// let gate = Gate::open(contract, &url, Vec::new()).await.unwrap();
    /// let item: QueueRef = "q_01j0000000000000000000000a".parse().unwrap();
    /// let none = gate.queue_item_named(&item, &TenantFilter::All).await;
    /// assert!(matches!(none, Err(QueueLookupError::NoItem(_))));
    /// let delivery: QueueRef = "dlv_01j0000000000000000000000a".parse().unwrap();
    /// let none = gate.queue_item_named(&delivery, &TenantFilter::All).await;
    /// assert!(matches!(none, Err(QueueLookupError::NoDelivery(_))));
    /// # });
    /// ```
    pub async fn queue_item_named(
        &self,
        target: &QueueRef,
        tenants: &TenantFilter,
    ) -> Result<QueueItem, QueueLookupError> {
        let store = self.store();
        match target {
            QueueRef::Item(id) => match store.queue_item(id).await? {
                Some(item) if tenants.allows(&item.tenant) => Ok(item),
                _ => Err(QueueLookupError::NoItem(id.clone())),
            },
            QueueRef::Delivery(id) => {
                let items = store
                    .queue_list(&QueueFilter {
                        tenants: tenants.clone(),
                        status: None,
                        delivery: Some(id.clone()),
                        limit: MAX_DELIVERY_ITEMS,
                        ..QueueFilter::default()
                    })
                    .await?;
                match DeliveryItems::of(&items) {
                    DeliveryItems::Open(item) | DeliveryItems::Resolved(item) => Ok(item.clone()),
                    DeliveryItems::Ambiguous(ids) => Err(QueueLookupError::Ambiguous {
                        delivery: id.clone(),
                        open: ids,
                    }),
                    DeliveryItems::None => Err(self.not_queued(id.clone(), tenants).await?),
                }
            }
        }
    }

    /// Why a delivery with no queue item has none.
    async fn not_queued(
        &self,
        id: DeliveryId,
        tenants: &TenantFilter,
    ) -> Result<QueueLookupError, StoreError> {
        let store = self.store();
        Ok(match store.proof(&id).await? {
            Some(p) if tenants.allows(&p.tenant) => QueueLookupError::Decided {
                delivery: id,
                action: p.action,
            },
            Some(_) => QueueLookupError::NoDelivery(id),
            None => match store.delivery(&id).await? {
                Some(d) if tenants.allows(&d.tenant) => QueueLookupError::Undecided(id),
                _ => QueueLookupError::NoDelivery(id),
            },
        })
    }

    /// Settles an open queue item with a person's verdict (`distinct` releases the delivery as
    /// a new claimable effect, `duplicate` links it to the existing one; see the store's
    /// `resolve`), counts it and logs it. An item resolved already, before or meanwhile, is
    /// [`ResolveError::AlreadyResolved`].
    pub async fn resolve_queue_item(
        &self,
        item: &QueueItem,
        resolution: Resolution,
    ) -> Result<QueueItem, ResolveError> {
        if item.resolution.is_some() {
            return Err(ResolveError::AlreadyResolved(Box::new(item.clone())));
        }
        let outcome = resolution.outcome;
        let resolved = match self.store().resolve(&item.id, resolution).await {
            Ok(resolved) => resolved,
            // Resolved meanwhile (or settled with another item of the same effect).
            Err(StoreError::Conflict(why)) => {
                return Err(match self.store().queue_item(&item.id).await? {
                    Some(now) if now.resolution.is_some() => {
                        ResolveError::AlreadyResolved(Box::new(now))
                    }
                    _ => ResolveError::Conflict {
                        item: item.id.clone(),
                        why,
                    },
                })
            }
            Err(e) => return Err(e.into()),
        };
        let now = self.now();
        self.metrics().resolution(outcome.as_str());
        self.metrics().settled_by_person(&resolved, now);
        tracing::info!(
            delivery_id = %resolved.delivery,
            queue_item_id = %resolved.id,
            tenant = %resolved.tenant,
            outcome = outcome.as_str(),
            effect_id = resolved.resolution.as_ref().and_then(|r| r.effect.as_ref()).map(|e| e.to_string()).unwrap_or_default(),
            "queue item resolved"
        );
        Ok(resolved)
    }

    /// Closes an open collision breaker with an operator's note and name (the only way one
    /// closes) and clears its window. `Conflict` when it is not open, `NotFound` when it never
    /// opened.
    pub async fn close_breaker(
        &self,
        scope: &BreakerScope,
        note: &str,
        by: &str,
    ) -> Result<Breaker, StoreError> {
        let closed = self
            .store()
            .breaker_close(scope, note, by, self.now())
            .await?;
        self.metrics().breaker(scope, false);
        tracing::info!(
            provider = %scope.provider,
            env = %scope.env,
            event_type = %scope.event_type,
            strategy = %scope.strategy_label(),
            by = %by,
            note = %note,
            "collision breaker closed by an operator"
        );
        Ok(closed)
    }

    /// Re-sends a dead letter (an operator's decision, from the queue): its effect is held
    /// again under the next fencing token, for the gate's lease, and a fresh attempt series
    /// starts now. `Conflict` when the forward is not dead, `NotFound` when the effect has
    /// none.
    pub async fn resend_forward(&self, effect: &EffectId) -> Result<ForwardRecord, StoreError> {
        let f = self
            .store()
            .forward_resend(effect, self.lease_time(), self.now())
            .await?;
        self.forward_wake().notify_one();
        Ok(f)
    }

    /// Applies the contract's retention now (index entries past their horizon, payloads past
    /// `payload_retention`, proofs past `proof_retention`; durable effect identities kept),
    /// through the store's one purge path; with `dry_run` only counts what would go.
    pub async fn purge(&self, dry_run: bool) -> Result<PurgeCounts, StoreError> {
        self.store()
            .purge(&crate::purge::policy(self), self.now(), dry_run)
            .await
    }

    /// PostgreSQL: partitions the journal and the proofs by day if they are not yet (their
    /// rows so far kept as one partition), and creates the days from today to `days_ahead`
    /// ahead that no partition covers; retention then drops whole days. Needs the tables'
    /// owner. A SQLite store has no partitions: an error that says so.
    pub async fn partition(&self, days_ahead: u32) -> Result<Partitions, StoreError> {
        let made = self.store().partition(days_ahead, self.now()).await?;
        tracing::info!(
            converted = made.converted,
            created = made.created.len(),
            skipped = made.skipped.len(),
            "time partitions"
        );
        Ok(made)
    }

    /// Counts the report's minute totals until every minute that ended more than two minutes
    /// ago is counted, the stale ones again (see [`oncegate_store::Store::roll_up`]); the
    /// upkeep does this in the background, and a large store counted once up front (after an
    /// upgrade, say) lets the upkeep keep up with new minutes only. `busy` when another
    /// instance is counting, or a transaction in progress outlived the wait.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let contract = oncegate_core::contract::parse(
    ///     "oncegate.toml",
    ///     include_str!("../../../examples/oncegate.toml"),
    /// )
    /// .unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    /// let gate = oncegate::Gate::open(contract, &url, b"salt".to_vec()).await.unwrap();
    /// let counted = gate.count_report_totals().await.unwrap();
    /// assert!(counted.caught_up && !counted.busy);
    /// # });
    /// ```
    pub async fn count_report_totals(&self) -> Result<RollUp, StoreError> {
        let mut all = RollUp::default();
        // Minutes per call, sized from the call before to about `TOTALS_DELIVERIES_PER_CALL`
        // deliveries: SQLite counts in the writer's transaction, which the decisions wait for.
        let mut width: u64 = 60;
        loop {
            let done = self.store().roll_up(width as u32).await?;
            all.minutes += done.minutes;
            all.recounted += done.recounted;
            all.deliveries += done.deliveries;
            let per_minute = done.deliveries / (done.minutes + done.recounted).max(1);
            width = (TOTALS_DELIVERIES_PER_CALL / per_minute.max(1)).clamp(1, 1440);
            if done.busy || done.caught_up {
                all.busy = done.busy;
                all.caught_up = done.caught_up;
                tracing::debug!(
                    minutes = all.minutes,
                    recounted = all.recounted,
                    deliveries = all.deliveries,
                    busy = all.busy,
                    "report totals counted"
                );
                return Ok(all);
            }
        }
    }
}

/// The deliveries one call of the report's count reads at most (about 50 ms on SQLite).
const TOTALS_DELIVERIES_PER_CALL: u64 = 20_000;
