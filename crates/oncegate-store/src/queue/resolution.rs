//! A verdict on a queue item (`distinct` or `duplicate`), as it is recorded on the item, and
//! how it is applied: the guarded update that lets exactly one of two concurrent verdicts win,
//! then the new released effect or the link it makes.

use oncegate_core::ids::{EffectId, QueueItemId};
use time::OffsetDateTime;

use crate::codes::{self, ms, new_id};
use crate::decision::Horizon;
use crate::effect::{self, EffectState, Keyed, LinkKind, NewEffect};
use crate::error::StoreError;
use crate::plan::Scope;
use crate::queue::{self, item_from, QueueItem, QueueStatus, QUEUE_COLS};
use crate::sql::{int, opt_text, text, Tx};

type Result<T> = std::result::Result<T, StoreError>;

/// The verdict on a queue item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResolutionOutcome {
    /// A second legitimate operation: released as a new, claimable effect.
    Distinct,
    /// The same operation as the existing effect: linked to it.
    Duplicate,
}

impl ResolutionOutcome {
    /// The word stored as the item's `resolution_outcome` and spelled by the API:
    /// `"distinct"` or `"duplicate"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResolutionOutcome::Distinct => "distinct",
            ResolutionOutcome::Duplicate => "duplicate",
        }
    }

    /// The outcome [`as_str`](Self::as_str) spells, or `None` for any other word.
    ///
    /// ```
    /// use oncegate_store::ResolutionOutcome;
    ///
    /// assert_eq!(ResolutionOutcome::parse("distinct"), Some(ResolutionOutcome::Distinct));
    /// assert_eq!(ResolutionOutcome::Duplicate.as_str(), "duplicate");
    /// assert_eq!(ResolutionOutcome::parse("same"), None);
    /// ```
    pub fn parse(s: &str) -> Option<ResolutionOutcome> {
        [ResolutionOutcome::Distinct, ResolutionOutcome::Duplicate]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// What a reconciler or a person decided about a queue item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// Whether the item is another operation or the existing one again.
    pub outcome: ResolutionOutcome,
    /// The provider's own reference of the operation, when the authority gave one.
    pub authoritative_ref: Option<String>,
    /// Why, in the decider's words (kept on the item; may be empty).
    pub note: String,
    /// Who decided: an operator name, or `reconciler` for the authority.
    pub by: String,
    /// When it was decided (the resolution's time; also the released effect's creation time).
    pub at: OffsetDateTime,
}

/// A resolution as recorded on its item, with the effect it produced or linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolutionRecord {
    /// The verdict as given.
    pub resolution: Resolution,
    /// The released effect (distinct) or the existing effect it was linked to (duplicate).
    pub effect: Option<EffectId>,
}

/// Marks an open item resolved; `Conflict` when it is not open. This guarded update comes
/// first in every resolution: of two concurrent resolutions exactly one changes the row, and
/// the other writes nothing.
/// A resolution's write on its open item, found by primary key alone (see `sql`): `$2` the
/// outcome, `$3` the authoritative reference, `$4` the note, `$5` who, `$6` when (ms), `$7` the
/// effect it names.
pub(crate) const RESOLVE: &str = "UPDATE queue_items SET status = 'resolved', resolution_outcome = $2, resolution_ref = $3, resolution_note = $4, \
     resolution_by = $5, resolved_at = $6, resolution_effect = $7 WHERE id = $1 \
     AND (CASE WHEN status = 'open' THEN TRUE ELSE FALSE END)";

pub(crate) async fn mark_resolved<T: Tx + Send>(
    tx: &mut T,
    id: &QueueItemId,
    r: &Resolution,
    effect: Option<&EffectId>,
) -> Result<()> {
    let n = tx
        .exec(
            RESOLVE,
            &[
                text(id.as_str()),
                text(r.outcome.as_str()),
                opt_text(r.authoritative_ref.as_deref()),
                text(r.note.as_str()),
                text(r.by.as_str()),
                int(ms(r.at)),
                opt_text(effect.map(EffectId::as_str)),
            ],
        )
        .await?;
    if n == 0 {
        return Err(StoreError::Conflict(format!(
            "queue item {id} is already resolved"
        )));
    }
    Ok(())
}

/// How many times a distinct verdict's effect reads its key's next number before giving up:
/// each time, a decision reserving the same key took the number first.
const MAX_SEQ_ATTEMPTS: u32 = 5;

/// Settles an open item: `distinct` releases the delivery as a new claimable effect, `duplicate`
/// links it to the existing effect; an item waiting on an unknown effect is settled with it.
pub(crate) async fn resolve<T: Tx + Send>(
    tx: &mut T,
    id: &QueueItemId,
    r: &Resolution,
) -> Result<QueueItem> {
    let sql = format!("SELECT {QUEUE_COLS} FROM queue_items q WHERE q.id = $1");
    let rows = tx.query(&sql, &[text(id.as_str())]).await?;
    let row = rows.first().ok_or_else(|| StoreError::NotFound {
        what: "queue item",
        id: id.to_string(),
    })?;
    let item = item_from(row)?;
    let scope_hash = row.opt_text(28)?;
    let (resource, critical) = (item.resource.clone(), item.critical);
    if item.status == QueueStatus::Resolved {
        return Err(StoreError::Conflict(format!(
            "queue item {id} is already resolved"
        )));
    }
    // An item waiting on an effect whose outcome is unknown is a verdict on that effect, and
    // on every other item waiting on it (see `settlement`).
    if let Some(unknown) = crate::settlement::waiting_on(tx, &item, r.at).await? {
        if let Some(settled) = crate::settlement::settle(tx, &item, &unknown, r).await? {
            return Ok(settled);
        }
    }
    let now = ms(r.at);
    let effect = match r.outcome {
        ResolutionOutcome::Distinct => Some(EffectId::from_u128(new_id(r.at))),
        ResolutionOutcome::Duplicate => item.existing_effect.clone(),
    };
    mark_resolved(tx, id, r, effect.as_ref()).await?;
    match (r.outcome, &effect) {
        (ResolutionOutcome::Distinct, Some(eid)) => {
            // Released outside the unique index: it shares its key with the effect it was
            // told apart from, and its identity is enriched by the authoritative reference.
            let scope = Scope {
                tenant: item.tenant.clone(),
                provider: item.provider.clone(),
                env: item.env.clone(),
                event_type: item.event_type.clone(),
                transport_key: None,
                transport_strength: None,
                body_sha256: String::new(),
                decided: true,
            };
            // It takes the next number of its key's scope, read here: a decision reserving
            // the key meanwhile may take that number first, and the number after it is read
            // again (the insert wrote nothing).
            let mut attempts = 0;
            loop {
                let keyed = match scope_hash.as_deref() {
                    Some(hash) => Some(Keyed {
                        hash,
                        seq: effect::next_seq(tx, hash).await?,
                        slot: None,
                    }),
                    None => None,
                };
                let (sql, params) = effect::insert(NewEffect {
                    id: eid.as_str().to_owned(),
                    scope: &scope,
                    event_type: item.event_type.as_deref(),
                    strategy: item.strategy.as_ref(),
                    key_value: item.key.as_deref(),
                    keyed,
                    durable: item.horizon == Some(Horizon::Durable),
                    state: EffectState::Released,
                    token: 0,
                    lease_until: None,
                    holder: None,
                    discriminants: codes::map_json(&item.discriminants),
                    authoritative_ref: r.authoritative_ref.as_deref(),
                    first_delivery: &item.delivery,
                    queue_item: Some(id),
                    now,
                    resource: resource.as_deref(),
                    critical,
                });
                if tx.exec(sql, &params).await? > 0 {
                    break;
                }
                attempts += 1;
                if attempts == MAX_SEQ_ATTEMPTS {
                    return Err(StoreError::Conflict(format!(
                        "queue item {id}: its key's effects kept changing while its effect was written; try again"
                    )));
                }
            }
            tx.exec_all(&[effect::link(
                eid,
                &item.delivery,
                LinkKind::ResolvedDistinct,
                now,
            )])
            .await?;
        }
        (ResolutionOutcome::Duplicate, Some(eid)) => {
            tx.exec_all(&[effect::link(
                eid,
                &item.delivery,
                LinkKind::ResolvedDuplicate,
                now,
            )])
            .await?;
        }
        // A duplicate of nothing stored (e.g. a delivery without a contract): the verdict is
        // recorded on the item and there is nothing to link.
        _ => {}
    }
    queue::item(tx, id)
        .await?
        .ok_or_else(|| StoreError::NotFound {
            what: "queue item",
            id: id.to_string(),
        })
}
