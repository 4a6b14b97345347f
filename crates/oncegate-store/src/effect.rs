//! Effects: the business transitions that must happen once. Deliveries are observations
//! linked to them; the effect is what gets reserved, executed, completed and claimed.

use std::collections::BTreeMap;

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use time::OffsetDateTime;

use crate::decision::StrategyRef;

/// Where an effect stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EffectState {
    /// A holder has it under a lease and a fencing token.
    Reserved,
    Completed,
    Failed {
        retryable: bool,
    },
    /// A reservation's lease passed with neither complete nor fail: nothing is re-run blindly.
    Unknown,
    /// Released by the queue as a distinct operation: waiting for a worker to `claim` it.
    Released,
}

impl EffectState {
    pub fn as_str(self) -> &'static str {
        match self {
            EffectState::Reserved => "reserved",
            EffectState::Completed => "completed",
            EffectState::Failed { retryable: true } => "failed_retryable",
            EffectState::Failed { retryable: false } => "failed",
            EffectState::Unknown => "unknown",
            EffectState::Released => "released",
        }
    }

    pub fn parse(s: &str) -> Option<EffectState> {
        [
            EffectState::Reserved,
            EffectState::Completed,
            EffectState::Failed { retryable: true },
            EffectState::Failed { retryable: false },
            EffectState::Unknown,
            EffectState::Released,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}

/// How a delivery came to be attached to an effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// The delivery created (or took over) the effect's reservation.
    Reserved,
    /// Ignored as the same packet again.
    Transport,
    /// Ignored as another packet for the same effect.
    Effect,
    /// A human or the authority said it is a duplicate of this effect.
    ResolvedDuplicate,
    /// A human or the authority said it is a distinct operation: released as this new effect.
    ResolvedDistinct,
    /// A claim of the released effect by a worker.
    Claimed,
}

impl LinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Reserved => "reserved",
            LinkKind::Transport => "transport",
            LinkKind::Effect => "effect",
            LinkKind::ResolvedDuplicate => "resolved_duplicate",
            LinkKind::ResolvedDistinct => "resolved_distinct",
            LinkKind::Claimed => "claimed",
        }
    }

    pub fn parse(s: &str) -> Option<LinkKind> {
        [
            LinkKind::Reserved,
            LinkKind::Transport,
            LinkKind::Effect,
            LinkKind::ResolvedDuplicate,
            LinkKind::ResolvedDistinct,
            LinkKind::Claimed,
        ]
        .into_iter()
        .find(|l| l.as_str() == s)
    }
}

/// One delivery attached to an effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectLink {
    pub delivery: DeliveryId,
    pub kind: LinkKind,
    pub at: OffsetDateTime,
}

/// An effect read back, with every delivery linked to it (oldest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectRecord {
    pub id: EffectId,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    pub strategy: Option<StrategyRef>,
    pub key: Option<String>,
    /// Durable effects keep their identity forever; purge never removes them.
    pub durable: bool,
    /// As stored (`expire_leases` or an access turns an expired reservation into `Unknown`).
    pub state: EffectState,
    pub fencing_token: u64,
    pub lease_until: Option<OffsetDateTime>,
    /// Who holds or last held the reservation: a worker name for claims.
    pub holder: Option<String>,
    pub discriminants: BTreeMap<String, String>,
    /// A reference to the transaction, resource and rule version (JSON text), not the payload.
    pub result: Option<String>,
    pub error: Option<String>,
    /// Set when the queue released the effect on the authority's (or a person's) word.
    pub authoritative_ref: Option<String>,
    pub first_delivery: DeliveryId,
    pub queue_item: Option<QueueItemId>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub deliveries: Vec<EffectLink>,
    /// The resource the effect is about, when its type declares one (reconciliation lists the
    /// local effects of one resource).
    pub resource: Option<String>,
    /// Critical effects are verified before any retry when their lease expires; reversible
    /// ones are released for takeover.
    pub critical: bool,
}

/// Released work handed to one worker exclusively; `complete` / `fail` / `heartbeat` it with
/// the token like any reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub effect: EffectId,
    pub fencing_token: u64,
    pub lease_until: OffsetDateTime,
    pub delivery: DeliveryId,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    pub key: Option<String>,
    pub authoritative_ref: Option<String>,
    pub queue_item: Option<QueueItemId>,
}
