//! The store's calls on the ambiguity queue and its reconciliation: listings, one item,
//! resolutions (an operator's or the reconciler's, with its evidence), the settling of an
//! unknown outcome, and the invisible-losses sweep.

use oncegate_core::ids::{EffectId, QueueItemId};
use time::OffsetDateTime;

use super::{Result, Store};
use crate::effect::EffectRecord;
use crate::queue::{self, QueueFilter, QueueItem, QueuePage, Resolution};
use crate::reconciliation::{self, MissingOperation, ReconcileAttempt, ResourceScope};
use crate::settlement::{self, Verified};

impl Store {
    /// Queue items matching the filter, oldest first.
    pub async fn queue_list(&self, filter: &QueueFilter) -> Result<Vec<QueueItem>> {
        self.read(filter.clone(), |tx, filter| {
            Box::pin(queue::list(tx, filter))
        })
        .await
    }

    /// One page of the listing (oldest first, after `filter.after`), where the next page
    /// starts, and the counts per kind and status under the filter's tenant, provider, type and
    /// age, all read in one transaction.
    pub async fn queue_page(&self, filter: &QueueFilter) -> Result<QueuePage> {
        self.read(filter.clone(), |tx, filter| {
            Box::pin(queue::page(tx, filter))
        })
        .await
    }

    /// One queue item, open or resolved, with its resolution and reconcile attempts; `None`
    /// when no item has this id.
    pub async fn queue_item(&self, id: &QueueItemId) -> Result<Option<QueueItem>> {
        self.read(id.clone(), |tx, id| Box::pin(queue::item(tx, id)))
            .await
    }

    /// Settles an open queue item: `distinct` releases the delivery as a new claimable effect
    /// carrying the authoritative reference; `duplicate` links it to the existing effect.
    /// Resolving an item twice is a `Conflict`.
    ///
    /// An item waiting on an effect whose outcome is unknown settles that effect and every
    /// other item waiting on it, in the same transaction: `duplicate` completes it; `distinct`
    /// on its verify item releases that same effect once (never by the reconciler); see
    /// `settlement`.
    pub async fn resolve(&self, item: &QueueItemId, resolution: Resolution) -> Result<QueueItem> {
        self.write(
            true,
            (item.clone(), resolution),
            |tx, (item, resolution)| Box::pin(queue::resolution::resolve(tx, item, resolution)),
        )
        .await
    }

    /// Every local effect of one resource, oldest first (links not included).
    pub async fn resource_effects(&self, scope: &ResourceScope) -> Result<Vec<EffectRecord>> {
        self.read(scope.clone(), |tx, scope| {
            Box::pin(reconciliation::resource_effects(tx, scope))
        })
        .await
    }

    /// The open items the reconciler works (`reconcile` and `quarantine`), least recently
    /// attempted first, then oldest first; with `attempted_by`, only those never attempted or
    /// last attempted at or before it (read from the index, so a worker whose shortest
    /// backoff has not passed for the items it just attempted does not read them again).
    pub async fn open_reconcile_items(
        &self,
        limit: u32,
        attempted_by: Option<OffsetDateTime>,
    ) -> Result<Vec<QueueItem>> {
        self.read((), move |tx, ()| {
            Box::pin(reconciliation::open_reconcile_items(
                tx,
                limit,
                attempted_by,
            ))
        })
        .await
    }

    /// Records the attempts that left items open (each shown in the queue listing with its
    /// item), in one write: for each, whether it was recorded, `false` for an item resolved
    /// meanwhile, which takes no more attempts. The reconciler records a pass's attempts
    /// together, so a pass over many items costs one commit, not one each.
    pub async fn record_reconcile_attempts(
        &self,
        attempts: &[(QueueItemId, ReconcileAttempt)],
    ) -> Result<Vec<bool>> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        self.write(true, attempts.to_vec(), |tx, attempts| {
            Box::pin(reconciliation::record_attempts(tx, attempts))
        })
        .await
    }

    /// `resolve`, keeping the evidence (JSON text); a `duplicate` of an effect whose outcome
    /// was unknown also settles that effect as completed.
    pub async fn resolve_with_evidence(
        &self,
        item: &QueueItemId,
        resolution: Resolution,
        evidence: &str,
    ) -> Result<QueueItem> {
        self.write(
            true,
            (item.clone(), resolution, evidence.to_owned()),
            |tx, (item, resolution, evidence)| {
                Box::pin(reconciliation::resolve_with_evidence(
                    tx, item, resolution, evidence,
                ))
            },
        )
        .await
    }

    /// Settles an effect whose outcome was unknown from the consumer's verification answer:
    /// completed with its result, or released under fencing + 1; every open item waiting on it
    /// is resolved `duplicate` with the evidence. `Conflict` when it is no longer unknown.
    pub async fn settle_unknown(
        &self,
        effect: &EffectId,
        verified: &Verified,
        resolution: Resolution,
        evidence: &str,
    ) -> Result<Vec<QueueItem>> {
        self.write(
            true,
            (
                effect.clone(),
                verified.clone(),
                resolution,
                evidence.to_owned(),
            ),
            |tx, (effect, verified, resolution, evidence)| {
                Box::pin(settlement::settle_verified(
                    tx, effect, verified, resolution, evidence,
                ))
            },
        )
        .await
    }

    /// The resources of one provider's type that effects or queue items were recorded for at
    /// or after `since` (what the invisible-losses sweep asks the authority about).
    pub async fn resources_seen(
        &self,
        provider: &str,
        event_type: &str,
        since: OffsetDateTime,
    ) -> Result<Vec<ResourceScope>> {
        self.read(
            (provider.to_owned(), event_type.to_owned()),
            move |tx, (provider, event_type)| {
                Box::pin(reconciliation::resources_seen(
                    tx, provider, event_type, since,
                ))
            },
        )
        .await
    }

    /// Replaces the authority operations found with no local effect for one resource; returns
    /// how many are missing now.
    pub async fn record_missing(
        &self,
        scope: &ResourceScope,
        missing: &[MissingOperation],
        now: OffsetDateTime,
    ) -> Result<u64> {
        self.write(
            true,
            (scope.clone(), missing.to_vec()),
            move |tx, (scope, missing)| {
                Box::pin(reconciliation::record_missing(tx, scope, missing, now))
            },
        )
        .await
    }
}
