//! The ambiguity queue: quarantined collisions and deliveries to reconcile, kept visible until
//! the authority or a person says whether each is a distinct operation or a duplicate (see
//! `resolution`). Here: the items, their listing (a keyset cursor, counts per kind and status)
//! and how a delivery id names its one open item.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use oncegate_core::ids::{DeliveryId, EffectId, IdError, QueueItemId};
use oncegate_core::matrix::{Difference, Flag};
use time::{Duration, OffsetDateTime};

use crate::codes::{self, from_ms, ms};
use crate::decision::{strategy_from, Horizon, StrategyRef};
use crate::delivery::TenantFilter;
use crate::error::StoreError;
use crate::plan;
use crate::sql::{int, text, Query, Row, Tx};

pub(crate) mod resolution;

pub use resolution::{Resolution, ResolutionOutcome, ResolutionRecord};

type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Why a delivery was queued: the action of the matrix row that sent it to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// Same key, different discriminants: a collision.
    Quarantine,
    /// Cannot be identified safely: verify with the authority or a person.
    Reconcile,
}

impl QueueKind {
    /// The word stored in the item's `kind` column: `"quarantine"` or `"reconcile"`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueKind::Quarantine => "quarantine",
            QueueKind::Reconcile => "reconcile",
        }
    }

    /// The kind [`as_str`](Self::as_str) spells, or `None` for any other word.
    ///
    /// ```
    /// use oncegate_store::QueueKind;
    ///
    /// for k in [QueueKind::Quarantine, QueueKind::Reconcile] {
    ///     assert_eq!(QueueKind::parse(k.as_str()), Some(k));
    /// }
    /// assert_eq!(QueueKind::parse("collision"), None);
    /// ```
    pub fn parse(s: &str) -> Option<QueueKind> {
        [QueueKind::Quarantine, QueueKind::Reconcile]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// Whether a queue item still waits for a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueStatus {
    /// Waiting for the reconciler or a person; the delivery's effect is not applied meanwhile.
    Open,
    /// Settled by a resolution (recorded on the item); resolving it again is a `Conflict`.
    Resolved,
}

impl QueueStatus {
    /// The word stored in the item's `status` column: `"open"` or `"resolved"`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueStatus::Open => "open",
            QueueStatus::Resolved => "resolved",
        }
    }

    /// The status [`as_str`](Self::as_str) spells, or `None` for any other word.
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
    /// The word stored in the item's `proposed` column: `"distinct"`, `"duplicate"` or `"verify"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Proposal::Distinct => "distinct",
            Proposal::Duplicate => "duplicate",
            Proposal::Verify => "verify",
        }
    }

    /// The proposal [`as_str`](Self::as_str) spells, or `None` for any other word.
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

/// One queue entry with everything a reviewer needs side by side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueItem {
    /// The item's id (`q_…`), time-ordered by creation.
    pub id: QueueItemId,
    /// Whether it was quarantined as a collision or sent to reconciliation.
    pub kind: QueueKind,
    /// Open until a resolution settles it.
    pub status: QueueStatus,
    /// The queued delivery.
    pub delivery: DeliveryId,
    /// The delivery's tenant.
    pub tenant: String,
    /// The delivery's provider.
    pub provider: String,
    /// The delivery's environment (`live`, `test`…).
    pub env: String,
    /// The delivery's event type, when it was known.
    pub event_type: Option<String>,
    /// The strategy that made the delivery's key; `None` when no key was made (no contract,
    /// required fields absent).
    pub strategy: Option<StrategyRef>,
    /// The delivery's effect key value, when one was made.
    pub key: Option<String>,
    /// The horizon of the key's type: a distinct resolution releases an effect as durable as it.
    pub horizon: Option<Horizon>,
    /// The incoming delivery's discriminants, carried to a released effect.
    pub discriminants: BTreeMap<String, String>,
    /// The effect that already held the key when the item was queued (the one a collision differs
    /// from, or a `duplicate` verdict links to).
    pub existing_effect: Option<EffectId>,
    /// That effect's first delivery: what a reviewer compares the queued delivery with.
    pub first_delivery: Option<DeliveryId>,
    /// The discriminants that disagreed with the existing effect (a collision's evidence).
    pub differences: Vec<Difference>,
    /// The existing effect's result (or its recorded error) when the item was queued.
    pub existing_result: Option<String>,
    /// What the queue suggests, from the matrix row that queued the item.
    pub proposed: Proposal,
    /// The decision's plain sentence.
    pub reason: String,
    /// When the item was queued; the listing's order.
    pub created_at: OffsetDateTime,
    /// The verdict, once the item is resolved.
    pub resolution: Option<ResolutionRecord>,
    /// The resource the delivery is about, carried to a released effect.
    pub resource: Option<String>,
    /// The type's criticality, carried to a released effect.
    pub critical: bool,
    /// How many times the reconciler asked the authority about this item.
    pub reconcile_attempts: u64,
    /// When the reconciler last asked the authority about this item.
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
    /// The tenants the caller may see; applied in the query itself.
    pub tenants: TenantFilter,
    /// Only items in this status; `Some(Open)` by default (the work to do).
    pub status: Option<QueueStatus>,
    /// Only items of this kind.
    pub kind: Option<QueueKind>,
    /// Only items of deliveries from this provider.
    pub provider: Option<String>,
    /// The most items on one page (100 by default).
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
    /// When the item was queued (kept to the millisecond in the text form).
    pub created_at: OffsetDateTime,
    /// The item's id: orders items queued in the same millisecond.
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
    /// Items still waiting for a verdict.
    pub open: u64,
    /// Items settled by a resolution.
    pub resolved: u64,
}

/// How many items each kind holds in each status, under a listing's tenant, provider, type
/// and age filters (its kind, status and cursor do not narrow them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Collisions: same key, differing discriminants.
    pub quarantine: StatusCounts,
    /// Deliveries that could not be identified safely.
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
    /// The page's items, oldest first (at most the filter's `limit`).
    pub items: Vec<QueueItem>,
    /// Where the next page starts (pass as `after`); `None` on the last page.
    pub next: Option<QueueCursor>,
    /// Where the previous page ends (pass as `before`); `None` on the first page.
    pub previous: Option<QueueCursor>,
    /// Items per kind and status under the filter's tenant, provider, type and age.
    pub counts: QueueCounts,
}

/// What a resolution names: an item by its own id (`q_…`), or a delivery (`dlv_…`) whose
/// open item is meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueRef {
    /// A queue item named by its own id (`q_…`).
    Item(QueueItemId),
    /// A delivery (`dlv_…`) whose one open item is meant (see [`DeliveryItems`]).
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

pub(crate) const QUEUE_COLS: &str = "q.id, q.kind, q.status, q.delivery_id, q.tenant, q.provider, q.env, q.event_type, \
     q.strategy_name, q.strategy_version, q.strategy_level, q.key_value, q.durable, q.horizon_ms, q.discriminants, \
     q.existing_effect, q.first_delivery, q.differences, q.existing_result, q.proposed, q.reason, q.created_at, \
     q.resolution_outcome, q.resolution_ref, q.resolution_note, q.resolution_by, q.resolved_at, q.resolution_effect, q.scope_hash, \
     q.resource, q.attempts, q.last_attempt_at, q.last_error, q.last_evidence, q.resolution_evidence, q.critical";

/// A queue item from a row of `QUEUE_COLS`.
pub(crate) fn item_from(row: &Row) -> Result<QueueItem> {
    let kind = row.text(1)?;
    let status = row.text(2)?;
    let proposed = row.text(19)?;
    let horizon = match (row.boolean(12)?, row.opt_int(13)?) {
        (true, _) => Some(Horizon::Durable),
        (false, Some(h)) => Some(Horizon::For(Duration::milliseconds(h))),
        (false, None) => None,
    };
    let resolution = match (row.opt_text(22)?, row.opt_int(26)?) {
        (Some(outcome), Some(at)) => Some(ResolutionRecord {
            resolution: Resolution {
                outcome: ResolutionOutcome::parse(&outcome).ok_or_else(|| {
                    StoreError::corrupt(format!("unknown resolution {outcome:?}"))
                })?,
                authoritative_ref: row.opt_text(23)?,
                note: row.opt_text(24)?.unwrap_or_default(),
                by: row.opt_text(25)?.unwrap_or_default(),
                at: from_ms(at)?,
            },
            effect: row
                .opt_text(27)?
                .map(|e| plan::parse_effect_id(&e))
                .transpose()?,
        }),
        _ => None,
    };
    Ok(QueueItem {
        id: plan::parse_queue_id(&row.text(0)?)?,
        kind: QueueKind::parse(&kind)
            .ok_or_else(|| StoreError::corrupt(format!("unknown queue kind {kind:?}")))?,
        status: QueueStatus::parse(&status)
            .ok_or_else(|| StoreError::corrupt(format!("unknown queue status {status:?}")))?,
        delivery: plan::parse_delivery_id(&row.text(3)?)?,
        tenant: row.text(4)?,
        provider: row.text(5)?,
        env: row.text(6)?,
        event_type: row.opt_text(7)?,
        strategy: strategy_from(row, 8)?,
        key: row.opt_text(11)?,
        horizon,
        discriminants: codes::parse_map(&row.text(14)?)?,
        existing_effect: row
            .opt_text(15)?
            .map(|e| plan::parse_effect_id(&e))
            .transpose()?,
        first_delivery: row
            .opt_text(16)?
            .map(|d| plan::parse_delivery_id(&d))
            .transpose()?,
        differences: codes::parse_differences(&row.text(17)?)?,
        existing_result: row.opt_text(18)?,
        proposed: Proposal::parse(&proposed)
            .ok_or_else(|| StoreError::corrupt(format!("unknown proposal {proposed:?}")))?,
        reason: row.text(20)?,
        created_at: from_ms(row.int(21)?)?,
        resolution,
        resource: row.opt_text(29)?,
        reconcile_attempts: row.int(30)?.max(0) as u64,
        last_attempt_at: row.opt_int(31)?.map(from_ms).transpose()?,
        last_error: row.opt_text(32)?,
        last_evidence: row.opt_text(33)?,
        resolution_evidence: row.opt_text(34)?,
        critical: row.boolean(35)?,
    })
}

pub(crate) async fn item<T: Tx + Send>(tx: &mut T, id: &QueueItemId) -> Result<Option<QueueItem>> {
    let sql = format!("SELECT {QUEUE_COLS} FROM queue_items q WHERE q.id = $1");
    let rows = tx.query(&sql, &[text(id.as_str())]).await?;
    rows.first().map(item_from).transpose()
}

/// The filters a listing and its counts share: tenant, provider, type, delivery and age.
fn scope<'a>(q: &mut Query<'a>, f: &'a QueueFilter) {
    q.tenants("q.tenant", &f.tenants);
    q.eq_if("q.provider", f.provider.as_deref());
    q.eq_if("q.event_type", f.event_type.as_deref());
    q.eq_if("q.delivery_id", f.delivery.as_ref().map(DeliveryId::as_str));
    if let Some(before) = f.created_before {
        let p = q.bind(int(ms(before)));
        q.push(&format!(" AND q.created_at < {p}"));
    }
    if let Some(since) = f.created_since {
        let p = q.bind(int(ms(since)));
        q.push(&format!(" AND q.created_at >= {p}"));
    }
}

/// Items matching the filter, oldest first.
pub(crate) async fn list<T: Tx + Send>(tx: &mut T, f: &QueueFilter) -> Result<Vec<QueueItem>> {
    let mut q = Query::new(&format!(
        "SELECT {QUEUE_COLS} FROM queue_items q WHERE 1 = 1"
    ));
    scope(&mut q, f);
    q.eq_if("q.status", f.status.map(QueueStatus::as_str));
    q.eq_if("q.kind", f.kind.map(QueueKind::as_str));
    if let Some(after) = &f.after {
        // Keyset paging on the listing's own order: rows inserted meanwhile are created
        // later, so they sort after the cursor and never shift a page already handed out.
        let c = q.bind(int(ms(after.created_at)));
        let i = q.bind(text(after.id.as_str()));
        // The `>=` bound alone is what an index on `created_at` can seek to; the rest drops
        // the items of the cursor's own instant up to and including its id.
        q.push(&format!(
            " AND q.created_at >= {c} AND (q.created_at > {c} OR q.id > {i})"
        ));
    }
    if let Some(before) = &f.before {
        let c = q.bind(int(ms(before.created_at)));
        let i = q.bind(text(before.id.as_str()));
        q.push(&format!(
            " AND q.created_at <= {c} AND (q.created_at < {c} OR q.id < {i})"
        ));
    }
    // Paging backwards reads the items nearest the cursor first, then lists them oldest first.
    let backwards = f.before.is_some() && f.after.is_none();
    let order = if backwards {
        "q.created_at DESC, q.id DESC"
    } else {
        "q.created_at, q.id"
    };
    let p = q.bind(int(i64::from(f.limit)));
    q.push(&format!(" ORDER BY {order} LIMIT {p}"));
    let rows = tx.query(&q.sql, &q.params).await?;
    let mut items = rows.iter().map(item_from).collect::<Result<Vec<_>>>()?;
    if backwards {
        items.reverse();
    }
    Ok(items)
}

/// Whether the listing holds any item after `after` (or before `before`).
async fn has<T: Tx + Send>(
    tx: &mut T,
    f: &QueueFilter,
    after: Option<QueueCursor>,
    before: Option<QueueCursor>,
) -> Result<bool> {
    let probe = QueueFilter {
        after,
        before,
        limit: 1,
        ..f.clone()
    };
    Ok(!list(tx, &probe).await?.is_empty())
}

/// Items per kind and status under the filter's tenant, provider, type, delivery and age.
pub(crate) async fn counts<T: Tx + Send>(tx: &mut T, f: &QueueFilter) -> Result<QueueCounts> {
    let mut q = Query::new("SELECT q.kind, q.status, COUNT(*) FROM queue_items q WHERE 1 = 1");
    scope(&mut q, f);
    q.push(" GROUP BY q.kind, q.status");
    let mut counts = QueueCounts::default();
    for row in tx.query(&q.sql, &q.params).await? {
        let (kind, status) = (row.text(0)?, row.text(1)?);
        let kind = QueueKind::parse(&kind)
            .ok_or_else(|| StoreError::corrupt(format!("unknown queue kind {kind:?}")))?;
        let n = row.int(2)?.max(0) as u64;
        let slot = counts.of(kind);
        match QueueStatus::parse(&status) {
            Some(QueueStatus::Open) => slot.open = n,
            Some(QueueStatus::Resolved) => slot.resolved = n,
            None => {
                return Err(StoreError::corrupt(format!(
                    "unknown queue status {status:?}"
                )))
            }
        }
    }
    Ok(counts)
}

/// One page and the counts, in the caller's (one) transaction. One row more than the page
/// is read to know whether another page follows in the reading direction; the other side is
/// probed for one item when a cursor was given.
pub(crate) async fn page<T: Tx + Send>(tx: &mut T, f: &QueueFilter) -> Result<QueuePage> {
    let mut probe = f.clone();
    probe.limit = f.limit.saturating_add(1);
    let mut items = list(tx, &probe).await?;
    let more = items.len() > f.limit as usize;
    let backwards = f.before.is_some() && f.after.is_none();
    let (next, previous) = if backwards {
        if more {
            items.remove(0);
        }
        let previous = if more {
            items.first().map(QueueCursor::after)
        } else {
            None
        };
        let next = match items.last() {
            Some(last) => has(tx, f, Some(QueueCursor::after(last)), None)
                .await?
                .then(|| QueueCursor::after(last)),
            None => None,
        };
        (next, previous)
    } else {
        items.truncate(f.limit as usize);
        let next = if more {
            items.last().map(QueueCursor::after)
        } else {
            None
        };
        let previous = match (&f.after, items.first()) {
            (Some(_), Some(first)) => has(tx, f, None, Some(QueueCursor::after(first)))
                .await?
                .then(|| QueueCursor::after(first)),
            _ => None,
        };
        (next, previous)
    };
    let counts = counts(tx, f).await?;
    Ok(QueuePage {
        items,
        next,
        previous,
        counts,
    })
}
