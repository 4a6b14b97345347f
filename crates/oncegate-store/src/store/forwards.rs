//! The store's calls for gateway mode's forwards: enqueue, the listings, an attempt's start,
//! end or interruption, an operator's re-send, and the claim of released work as a forward.

use oncegate_core::ids::EffectId;
use time::{Duration, OffsetDateTime};

use super::{Result, Store};
use crate::delivery::TenantFilter;
use crate::forward::{
    self, ForwardAttempt, ForwardCounts, ForwardEnd, ForwardFilter, ForwardRecord, ForwardStart,
    ForwardState, ForwardType, NewForward,
};

impl Store {
    /// Enqueues the forward of an effect held under its token (or starts a new series when the
    /// token is newer than the row's); false when nothing changed.
    pub async fn forward_enqueue(&self, new: &NewForward) -> Result<bool> {
        self.write(true, new.clone(), |tx, new| {
            Box::pin(forward::enqueue(tx, new))
        })
        .await
    }

    /// The forward of one effect.
    pub async fn forward(&self, effect: &EffectId) -> Result<Option<ForwardRecord>> {
        self.read(effect.clone(), |tx, effect| {
            Box::pin(forward::read(tx, effect))
        })
        .await
    }

    /// Forwards matching the filter, most recently changed first.
    pub async fn forwards(&self, filter: &ForwardFilter) -> Result<Vec<ForwardRecord>> {
        self.read(filter.clone(), |tx, filter| {
            Box::pin(forward::list(tx, filter))
        })
        .await
    }

    /// Pending forwards due by `now` and attempts in flight past their deadline.
    pub async fn forwards_due(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<ForwardRecord>> {
        self.read((), move |tx, ()| Box::pin(forward::due(tx, now, limit)))
            .await
    }

    /// When the next forward falls due (or the next attempt in flight reaches its deadline).
    pub async fn forward_next_due(&self) -> Result<Option<OffsetDateTime>> {
        self.read((), |tx, ()| Box::pin(forward::next_due(tx)))
            .await
    }

    /// Starts the next attempt of a due, pending forward under `token` and extends the effect's
    /// lease to `deadline`, atomically; `None` when it is not (or no longer) this caller's.
    pub async fn forward_start(
        &self,
        effect: &EffectId,
        token: u64,
        now: OffsetDateTime,
        deadline: OffsetDateTime,
    ) -> Result<Option<ForwardStart>> {
        self.write(true, effect.clone(), move |tx, effect| {
            Box::pin(forward::start(tx, effect, token, now, deadline))
        })
        .await
    }

    /// Records how an attempt ended and what follows (completed, retried later, dead letter),
    /// under the token it was sent with; a stale answer changes nothing but the log.
    pub async fn forward_finish(
        &self,
        effect: &EffectId,
        token: u64,
        series: u64,
        attempt: u64,
        end: &ForwardEnd,
    ) -> Result<ForwardState> {
        self.write(
            true,
            (effect.clone(), end.clone()),
            move |tx, (effect, end)| {
                Box::pin(forward::finish(tx, effect, token, series, attempt, end))
            },
        )
        .await
    }

    /// Marks an attempt in flight past its deadline as interrupted (its outcome unknown).
    pub async fn forward_interrupt(
        &self,
        effect: &EffectId,
        token: u64,
        now: OffsetDateTime,
    ) -> Result<bool> {
        self.write(true, effect.clone(), move |tx, effect| {
            Box::pin(forward::interrupt(tx, effect, token, now))
        })
        .await
    }

    /// Re-sends a dead letter: the effect reserved again under the next token, a fresh series.
    pub async fn forward_resend(
        &self,
        effect: &EffectId,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<ForwardRecord> {
        self.write(true, effect.clone(), move |tx, effect| {
            Box::pin(forward::resend(tx, effect, lease, now))
        })
        .await
    }

    /// Claims the oldest released effect of a forward type and enqueues its forward.
    pub async fn forward_claim(
        &self,
        types: &[ForwardType],
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ForwardRecord>> {
        self.write(true, types.to_vec(), move |tx, types| {
            Box::pin(forward::claim(tx, types, lease, now))
        })
        .await
    }

    /// Every forward attempt of one effect, in order.
    pub async fn forward_attempts(&self, effect: &EffectId) -> Result<Vec<ForwardAttempt>> {
        self.read(effect.clone(), |tx, effect| {
            Box::pin(forward::attempts(tx, effect))
        })
        .await
    }

    /// Forwards pending, sending and dead, of the tenants the filter admits.
    pub async fn forward_counts(&self, tenants: &TenantFilter) -> Result<ForwardCounts> {
        self.read(tenants.clone(), |tx, tenants| {
            Box::pin(forward::counts(tx, tenants))
        })
        .await
    }
}
