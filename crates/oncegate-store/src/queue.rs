//! The ambiguity queue: quarantined collisions and deliveries to reconcile, kept visible until
//! the authority or a person says whether each is a distinct operation or a duplicate.

use std::collections::BTreeMap;

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_core::matrix::{Difference, Flag};
use time::OffsetDateTime;

use crate::decision::{Horizon, StrategyRef};
use crate::delivery::TenantFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// Same key, different discriminants: a collision.
    Quarantine,
    /// Cannot be identified safely: verify with the authority or a person.
    Reconcile,
}

impl QueueKind {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueKind::Quarantine => "quarantine",
            QueueKind::Reconcile => "reconcile",
        }
    }

    pub fn parse(s: &str) -> Option<QueueKind> {
        [QueueKind::Quarantine, QueueKind::Reconcile]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueStatus {
    Open,
    Resolved,
}

impl QueueStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueStatus::Open => "open",
            QueueStatus::Resolved => "resolved",
        }
    }

    pub fn parse(s: &str) -> Option<QueueStatus> {
        [QueueStatus::Open, QueueStatus::Resolved]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// What the queue suggests before anyone looked, derived from the matrix row that queued it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proposal {
    /// Discriminants differ (a collision): most likely a distinct operation.
    Distinct,
    /// It would have been ignored but the strategy's breaker is open: most likely a duplicate.
    Duplicate,
    /// Nothing points either way: ask the authority, else a person.
    Verify,
}

impl Proposal {
    pub fn as_str(self) -> &'static str {
        match self {
            Proposal::Distinct => "distinct",
            Proposal::Duplicate => "duplicate",
            Proposal::Verify => "verify",
        }
    }

    pub fn parse(s: &str) -> Option<Proposal> {
        [Proposal::Distinct, Proposal::Duplicate, Proposal::Verify]
            .into_iter()
            .find(|k| k.as_str() == s)
    }

    /// The proposal for an item queued by a decision with these differences and flags.
    pub fn for_decision(differences: &[Difference], flags: &[Flag]) -> Proposal {
        if !differences.is_empty() {
            Proposal::Distinct
        } else if flags.contains(&Flag::BreakerOpen) {
            Proposal::Duplicate
        } else {
            Proposal::Verify
        }
    }
}

/// The verdict on a queue item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResolutionOutcome {
    /// A second legitimate operation: released as a new, claimable effect.
    Distinct,
    /// The same operation as the existing effect: linked to it.
    Duplicate,
}

impl ResolutionOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ResolutionOutcome::Distinct => "distinct",
            ResolutionOutcome::Duplicate => "duplicate",
        }
    }

    pub fn parse(s: &str) -> Option<ResolutionOutcome> {
        [ResolutionOutcome::Distinct, ResolutionOutcome::Duplicate]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// What a reconciler or a person decided about a queue item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub outcome: ResolutionOutcome,
    /// The provider's own reference of the operation, when the authority gave one.
    pub authoritative_ref: Option<String>,
    pub note: String,
    /// Who decided: an operator name, or `reconciler` for the authority.
    pub by: String,
    pub at: OffsetDateTime,
}

/// A resolution as recorded on its item, with the effect it produced or linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolutionRecord {
    pub resolution: Resolution,
    /// The released effect (distinct) or the existing effect it was linked to (duplicate).
    pub effect: Option<EffectId>,
}

/// One queue entry with everything a reviewer needs side by side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueItem {
    pub id: QueueItemId,
    pub kind: QueueKind,
    pub status: QueueStatus,
    pub delivery: DeliveryId,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    pub strategy: Option<StrategyRef>,
    pub key: Option<String>,
    /// The horizon of the key's type: a distinct resolution releases an effect as durable as it.
    pub horizon: Option<Horizon>,
    /// The incoming delivery's discriminants, carried to a released effect.
    pub discriminants: BTreeMap<String, String>,
    pub existing_effect: Option<EffectId>,
    pub first_delivery: Option<DeliveryId>,
    pub differences: Vec<Difference>,
    pub existing_result: Option<String>,
    pub proposed: Proposal,
    /// The decision's plain sentence.
    pub reason: String,
    pub created_at: OffsetDateTime,
    pub resolution: Option<ResolutionRecord>,
    /// The resource the delivery is about, carried to a released effect.
    pub resource: Option<String>,
    /// The type's criticality, carried to a released effect.
    pub critical: bool,
    /// How many times the reconciler asked the authority about this item.
    pub reconcile_attempts: u64,
    pub last_attempt_at: Option<OffsetDateTime>,
    /// Why the last attempt did not settle the item (no authority, an error, inconclusive).
    pub last_error: Option<String>,
    /// What the authority answered at the last attempt (JSON text, sensitive values masked).
    pub last_evidence: Option<String>,
    /// The evidence a reconciler resolution was based on (JSON text).
    pub resolution_evidence: Option<String>,
}

/// A queue listing, oldest first (the queue is worked in arrival order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFilter {
    pub tenants: TenantFilter,
    pub status: Option<QueueStatus>,
    pub kind: Option<QueueKind>,
    pub provider: Option<String>,
    pub limit: u32,
}

impl Default for QueueFilter {
    fn default() -> Self {
        QueueFilter {
            tenants: TenantFilter::All,
            status: Some(QueueStatus::Open),
            kind: None,
            provider: None,
            limit: 100,
        }
    }
}
