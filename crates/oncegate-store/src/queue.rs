//! The ambiguity queue: quarantined collisions and deliveries to reconcile, kept visible until
//! the authority or a person says whether each is a distinct operation or a duplicate.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use oncegate_core::ids::{DeliveryId, EffectId, IdError, QueueItemId};
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

/// A queue listing, oldest first (the queue is worked in arrival order), one page at a time.
///
/// Every field narrows; `None` means "any". Pages are keyed on `(created_at, id)`, so an item
/// inserted while someone pages through never shifts the items after the cursor: it is
/// created now, so it sorts after everything already listed and shows on a later page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFilter {
    pub tenants: TenantFilter,
    pub status: Option<QueueStatus>,
    pub kind: Option<QueueKind>,
    pub provider: Option<String>,
    pub limit: u32,
    /// The delivery's event type.
    pub event_type: Option<String>,
    /// Only the items of this delivery (what a resolution by delivery id chooses among).
    pub delivery: Option<DeliveryId>,
    /// Queued strictly before this instant (`older_than`).
    pub created_before: Option<OffsetDateTime>,
    /// Queued at or after this instant (`newer_than`).
    pub created_since: Option<OffsetDateTime>,
    /// Only the items after this one in the listing's order (the previous page's `next`).
    pub after: Option<QueueCursor>,
    /// Only the items before this one in the listing's order (the next page's `previous`):
    /// the last `limit` of them, still listed oldest first.
    pub before: Option<QueueCursor>,
}

impl Default for QueueFilter {
    fn default() -> Self {
        QueueFilter {
            tenants: TenantFilter::All,
            status: Some(QueueStatus::Open),
            kind: None,
            provider: None,
            limit: 100,
            event_type: None,
            delivery: None,
            created_before: None,
            created_since: None,
            after: None,
            before: None,
        }
    }
}

/// A position in the queue's listing order: an item's `(created_at, id)`, where a page ends
/// (`next`, passed back as `after`) or begins (`previous`, passed back as `before`). Its text
/// form is opaque to callers (they only hand it back), and parsing refuses anything not made
/// here.
///
/// ```
/// use oncegate_store::queue::QueueCursor;
/// use oncegate_core::ids::QueueItemId;
/// use time::OffsetDateTime;
///
/// let cursor = QueueCursor {
///     created_at: OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(),
///     id: QueueItemId::from_u128(42),
/// };
/// let text = cursor.to_string();
/// assert_eq!(text.parse::<QueueCursor>().unwrap(), cursor);
/// assert!("q_not-a-cursor".parse::<QueueCursor>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueCursor {
    pub created_at: OffsetDateTime,
    pub id: QueueItemId,
}

impl QueueCursor {
    /// The position of `item`: as `after`, the items following it; as `before`, the items
    /// preceding it.
    pub fn after(item: &QueueItem) -> QueueCursor {
        QueueCursor {
            created_at: item.created_at,
            id: item.id.clone(),
        }
    }
}

/// Why a cursor text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a queue cursor this service issued (pass the `next` of a listing unchanged)")]
pub struct CursorError(pub String);

impl fmt::Display for QueueCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hex of "<milliseconds>:<item id>": URL-safe as it stands, and no caller is tempted
        // to build one by hand from a timestamp.
        let ms = (self.created_at.unix_timestamp_nanos() / 1_000_000) as i64;
        f.write_str(&hex::encode(format!("{ms}:{}", self.id)))
    }
}

impl FromStr for QueueCursor {
    type Err = CursorError;

    fn from_str(s: &str) -> Result<Self, CursorError> {
        let refused = || CursorError(s.to_owned());
        let bytes = hex::decode(s).map_err(|_| refused())?;
        let text = String::from_utf8(bytes).map_err(|_| refused())?;
        let (ms, id) = text.split_once(':').ok_or_else(refused)?;
        let ms: i64 = ms.parse().map_err(|_| refused())?;
        let created_at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
            .map_err(|_| refused())?;
        Ok(QueueCursor {
            created_at,
            id: id.parse().map_err(|_| refused())?,
        })
    }
}

/// Open and resolved items of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCounts {
    pub open: u64,
    pub resolved: u64,
}

/// How many items each kind holds in each status, under a listing's tenant, provider, type
/// and age filters (its kind, status and cursor do not narrow them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    pub quarantine: StatusCounts,
    pub reconcile: StatusCounts,
}

impl QueueCounts {
    /// The counts of one kind, to fill in.
    pub fn of(&mut self, kind: QueueKind) -> &mut StatusCounts {
        match kind {
            QueueKind::Quarantine => &mut self.quarantine,
            QueueKind::Reconcile => &mut self.reconcile,
        }
    }
}

/// One page of a listing, read in one transaction with its counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePage {
    pub items: Vec<QueueItem>,
    /// Where the next page starts (pass as `after`); `None` on the last page.
    pub next: Option<QueueCursor>,
    /// Where the previous page ends (pass as `before`); `None` on the first page.
    pub previous: Option<QueueCursor>,
    pub counts: QueueCounts,
}

/// What a resolution names: an item by its own id (`q_…`), or a delivery (`dlv_…`) whose
/// open item is meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueRef {
    Item(QueueItemId),
    Delivery(DeliveryId),
}

impl FromStr for QueueRef {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, IdError> {
        if s.starts_with(QueueItemId::PREFIX) {
            s.parse().map(QueueRef::Item)
        } else {
            s.parse().map(QueueRef::Delivery)
        }
    }
}

/// Which of a delivery's items a resolution by delivery id settles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryItems<'a> {
    /// The delivery has no queue item at all.
    None,
    /// Exactly one open item: the one meant.
    Open(&'a QueueItem),
    /// Items, all resolved (the latest one): resolving again is a conflict.
    Resolved(&'a QueueItem),
    /// Several open items: the caller must name one by its queue item id, because a wrong
    /// pick would settle an effect's outcome, which cannot be undone.
    Ambiguous(Vec<QueueItemId>),
}

impl<'a> DeliveryItems<'a> {
    /// Sorts out the items of one delivery (as `QueueFilter::delivery` lists them).
    ///
    /// ```
    /// use oncegate_store::queue::DeliveryItems;
    /// assert_eq!(DeliveryItems::of(&[]), DeliveryItems::None);
    /// ```
    pub fn of(items: &'a [QueueItem]) -> DeliveryItems<'a> {
        let open: Vec<&QueueItem> = items
            .iter()
            .filter(|i| i.status == QueueStatus::Open)
            .collect();
        match open.as_slice() {
            [one] => DeliveryItems::Open(one),
            [] => match items.iter().max_by_key(|i| (i.created_at, i.id.clone())) {
                Some(latest) => DeliveryItems::Resolved(latest),
                None => DeliveryItems::None,
            },
            many => DeliveryItems::Ambiguous(many.iter().map(|i| i.id.clone()).collect()),
        }
    }
}
