//! The store's calls on effects beyond the decision: a holder's failure and heartbeat, an
//! effect read back, and claims of released work.

use std::collections::BTreeMap;

use oncegate_core::ids::EffectId;
use time::{Duration, OffsetDateTime};

use super::{Result, Store};
use crate::delivery::TenantFilter;
use crate::effect::{self, Claim, EffectRecord, EffectState};

impl Store {
    /// Records a failure; a retryable one lets the next delivery of the key take over.
    pub async fn fail(
        &self,
        effect: &EffectId,
        token: u64,
        retryable: bool,
        error: &str,
        now: OffsetDateTime,
    ) -> Result<()> {
        self.write(
            true,
            (effect.clone(), error.to_owned()),
            move |tx, (effect, error)| {
                Box::pin(effect::fail(tx, effect, token, retryable, error, now))
            },
        )
        .await
    }

    /// Extends a live reservation's lease to `now + lease` and returns the new deadline.
    pub async fn heartbeat(
        &self,
        effect: &EffectId,
        token: u64,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<OffsetDateTime> {
        self.write(true, effect.clone(), move |tx, effect| {
            Box::pin(effect::heartbeat(tx, effect, token, lease, now))
        })
        .await
    }

    /// The effect with every delivery linked to it.
    pub async fn effect(&self, id: &EffectId) -> Result<Option<EffectRecord>> {
        self.read(id.clone(), |tx, id| Box::pin(effect::read(tx, id)))
            .await
    }

    /// The states of several effects as of `now`, by id, in one read: a reservation whose
    /// lease passed reads as unknown, as every decision reads it; an id with no effect is
    /// absent. The reconciler reads its pass's effects with it.
    pub async fn effect_states(
        &self,
        ids: &[EffectId],
        now: OffsetDateTime,
    ) -> Result<BTreeMap<EffectId, EffectState>> {
        if ids.is_empty() {
            return Ok(BTreeMap::new());
        }
        let now_ms = crate::codes::ms(now);
        self.read(ids.to_vec(), move |tx, ids| {
            Box::pin(effect::states(tx, ids, now_ms))
        })
        .await
    }

    /// The tenant of an effect, in one look-up (what a holder's call checks its caller
    /// against); `None` when no such effect exists.
    pub async fn effect_tenant(&self, id: &EffectId) -> Result<Option<String>> {
        self.read(id.clone(), |tx, id| Box::pin(effect::tenant(tx, id)))
            .await
    }

    /// Hands one released effect (oldest first) to `worker` exclusively, as a reservation with
    /// a fencing token and a lease; `None` when there is no work.
    pub async fn claim(
        &self,
        worker: &str,
        tenants: &TenantFilter,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<Claim>> {
        self.write(
            true,
            (worker.to_owned(), tenants.clone()),
            move |tx, (worker, tenants)| Box::pin(effect::claim(tx, worker, tenants, lease, now)),
        )
        .await
    }
}
