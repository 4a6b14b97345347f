//! How a resolution settles an effect whose outcome is unknown, and with it every queue item
//! waiting on that effect.
//!
//! When a critical reservation's lease expires, its effect becomes `unknown` and a "verify
//! before retry" item opens under the delivery that was processed; a retry of the same
//! operation arriving meanwhile opens its own `reconcile` item against the same effect. All of
//! them ask one question: did the effect happen? So the first verdict answers it for all:
//!
//! * `duplicate` on any of them: the effect happened. It is settled `completed` (its result
//!   names who verified it and the item), and every other item waiting on it is resolved
//!   `duplicate`, linked to it, with the same `by` and a note naming the item it was settled
//!   with. Nothing runs again.
//! * `distinct` on the verify item (the one under the effect's own first delivery): the effect
//!   did not happen. The same effect is released under its next fencing token, so exactly one
//!   worker claims and runs it once; the other waiting items are resolved `duplicate` of it
//!   (they are retries of that one operation). Only a person may say so: the reconciler never
//!   releases an effect whose outcome is unknown, and the store refuses it if asked.
//! * `distinct` on a retry's item: that delivery is another operation. It is released as its
//!   own effect as any `distinct` is; the unknown effect and its verify item are untouched.
//!
//! Items "waiting on" the effect are the open `reconcile` items pointing at it with no
//! differing discriminant; a quarantined collision with the same effect is another question
//! (is it a distinct operation?) and stays open. Everything happens in the caller's one
//! transaction, on both backends.

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use time::OffsetDateTime;

use crate::codes::ms;
use crate::effect::link;
use crate::effect::LinkKind;
use crate::error::StoreError;
use crate::plan;
use crate::queue::resolution::{mark_resolved, RESOLVE};
use crate::queue::{self, QueueItem, QueueKind, Resolution, ResolutionOutcome};
use crate::sql::{int, opt_text, text, Tx};

type Result<T> = std::result::Result<T, StoreError>;

/// Who the reconciler says it is in a resolution's `by`.
const RECONCILER: &str = "reconciler";

/// An effect whose outcome is unknown, as a resolution needs it.
pub(crate) struct UnknownEffect {
    id: EffectId,
    first_delivery: DeliveryId,
}

/// The outcome is unknown: the sweep said so, or the lease passed and the sweep has not run.
const UNKNOWN: &str = "(state = 'unknown' OR (state = 'reserved' AND lease_until <= $2))";

/// The unknown effect `item` waits on, if it waits on one.
pub(crate) async fn waiting_on<T: Tx + Send>(
    tx: &mut T,
    item: &QueueItem,
    now: OffsetDateTime,
) -> Result<Option<UnknownEffect>> {
    let Some(effect) = &item.existing_effect else {
        return Ok(None);
    };
    if item.kind != QueueKind::Reconcile || !item.differences.is_empty() {
        return Ok(None);
    }
    let rows = tx
        .query(
            &format!("SELECT first_delivery FROM effects WHERE id = $1 AND {UNKNOWN}"),
            &[text(effect.as_str()), int(ms(now))],
        )
        .await?;
    rows.first()
        .map(|r| {
            Ok(UnknownEffect {
                id: effect.clone(),
                first_delivery: plan::parse_delivery_id(&r.text(0)?)?,
            })
        })
        .transpose()
}

/// Settles `item` and the effect it waits on; `None` when the verdict is a retry's `distinct`,
/// which the ordinary resolution handles (a new effect, the unknown one untouched).
pub(crate) async fn settle<T: Tx + Send>(
    tx: &mut T,
    item: &QueueItem,
    effect: &UnknownEffect,
    r: &Resolution,
) -> Result<Option<QueueItem>> {
    let verify_item = item.delivery == effect.first_delivery;
    match r.outcome {
        ResolutionOutcome::Distinct if !verify_item => return Ok(None),
        ResolutionOutcome::Distinct => {
            if r.by == RECONCILER {
                return Err(StoreError::Conflict(format!(
                    "effect {} has an unknown outcome: the reconciler never releases it, a person resolves queue item {}",
                    effect.id, item.id
                )));
            }
            mark_resolved(tx, &item.id, r, Some(&effect.id)).await?;
            // The same effect under its next token: a late holder's `complete` is stale, and
            // one claim runs it once. Its queue item says who released it and why.
            release_unknown(
                tx,
                &effect.id,
                Some(&item.id),
                r.authoritative_ref.as_deref(),
                r.at,
            )
            .await?;
            tx.exec_all(&[link(
                &effect.id,
                &item.delivery,
                LinkKind::ResolvedDistinct,
                ms(r.at),
            )])
            .await?;
        }
        ResolutionOutcome::Duplicate => {
            mark_resolved(tx, &item.id, r, Some(&effect.id)).await?;
            let result = verified_result(r, &item.id);
            complete_unknown(
                tx,
                &effect.id,
                &result,
                r.authoritative_ref.as_deref(),
                r.at,
            )
            .await?;
            tx.exec_all(&[link(
                &effect.id,
                &item.delivery,
                LinkKind::ResolvedDuplicate,
                ms(r.at),
            )])
            .await?;
        }
    }
    settle_others(tx, item, effect, r).await?;
    queue::item(tx, &item.id)
        .await?
        .ok_or_else(|| StoreError::NotFound {
            what: "queue item",
            id: item.id.to_string(),
        })
        .map(Some)
}

/// The result an effect is completed with when a verdict, not its holder, says it happened:
/// who verified it, on what reference, through which queue item. One shape whoever verified it
/// (a person, the reconciler against an authority).
///
/// ```text
/// {"verified_by":"sam@support","authoritative_ref":"re_1Fa2","queue_item":"q_…"}
/// ```
pub(crate) fn verified_result(resolution: &Resolution, item: &QueueItemId) -> String {
    serde_json::json!({
        "verified_by": resolution.by,
        "authoritative_ref": resolution.authoritative_ref,
        "queue_item": item.as_str(),
    })
    .to_string()
}

fn moved(effect: &EffectId) -> StoreError {
    StoreError::Conflict(format!(
        "effect {effect} is no longer of unknown outcome (it changed while it was being settled); list the queue again"
    ))
}

/// The unknown effect happened: settled `completed` with `result`.
async fn complete_unknown<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    result: &str,
    reference: Option<&str>,
    at: OffsetDateTime,
) -> Result<()> {
    let n = tx
        .exec(
            &format!(
                "UPDATE effects SET state = 'completed', result = $3, holder = NULL, \
                 authoritative_ref = COALESCE(authoritative_ref, $4), updated_at = $2 WHERE id = $1 AND {UNKNOWN}"
            ),
            &[text(effect.as_str()), int(ms(at)), text(result), opt_text(reference)],
        )
        .await?;
    if n == 0 {
        return Err(moved(effect));
    }
    Ok(())
}

/// The unknown effect did not happen: the same effect under its next fencing token, so a late
/// holder's `complete` is stale and one claim runs it once.
async fn release_unknown<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    queue_item: Option<&QueueItemId>,
    reference: Option<&str>,
    at: OffsetDateTime,
) -> Result<()> {
    let n = tx
        .exec(
            &format!(
                "UPDATE effects SET state = 'released', fencing_token = fencing_token + 1, lease_until = NULL, \
                 holder = NULL, queue_item_id = COALESCE($3, queue_item_id), \
                 authoritative_ref = COALESCE(authoritative_ref, $4), updated_at = $2 WHERE id = $1 AND {UNKNOWN}"
            ),
            &[
                text(effect.as_str()),
                int(ms(at)),
                opt_text(queue_item.map(QueueItemId::as_str)),
                opt_text(reference),
            ],
        )
        .await?;
    if n == 0 {
        return Err(moved(effect));
    }
    Ok(())
}

/// Resolves every other item waiting on the effect as a duplicate of it, settled with `first`.
async fn settle_others<T: Tx + Send>(
    tx: &mut T,
    first: &QueueItem,
    effect: &UnknownEffect,
    r: &Resolution,
) -> Result<()> {
    let note = format!(
        "settled with queue item {} (resolved {}){}",
        first.id,
        r.outcome.as_str(),
        if r.note.is_empty() {
            String::new()
        } else {
            format!(": {}", r.note)
        }
    );
    resolve_waiting(tx, &effect.id, Some(&first.id), &note, r).await?;
    Ok(())
}

/// Resolves every open item waiting on `effect` (but `except`) as a duplicate of it, linked,
/// with `note`; returns the ids it resolved.
async fn resolve_waiting<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    except: Option<&QueueItemId>,
    note: &str,
    r: &Resolution,
) -> Result<Vec<QueueItemId>> {
    let rows = tx
        .query(
            "SELECT q.id, q.delivery_id FROM queue_items q WHERE q.existing_effect = $1 AND q.status = 'open' \
             AND q.kind = 'reconcile' AND q.differences = '[]' AND q.id <> $2 ORDER BY q.created_at, q.id",
            &[
                text(effect.as_str()),
                text(except.map_or("", QueueItemId::as_str)),
            ],
        )
        .await?;
    let mut resolved = Vec::with_capacity(rows.len());
    for row in rows {
        let id = row.text(0)?;
        let delivery = plan::parse_delivery_id(&row.text(1)?)?;
        // Guarded like every resolution: an item someone resolved meanwhile keeps its own
        // verdict, and this one goes on with the others.
        let n = tx
            .exec(
                RESOLVE,
                &[
                    text(id.as_str()),
                    text(ResolutionOutcome::Duplicate.as_str()),
                    opt_text(r.authoritative_ref.as_deref()),
                    text(note),
                    text(r.by.as_str()),
                    int(ms(r.at)),
                    text(effect.as_str()),
                ],
            )
            .await?;
        if n == 1 {
            tx.exec_all(&[link(
                effect,
                &delivery,
                LinkKind::ResolvedDuplicate,
                ms(r.at),
            )])
            .await?;
            resolved.push(
                id.parse()
                    .map_err(|_| StoreError::corrupt("a stored queue item id is malformed"))?,
            );
        }
    }
    Ok(resolved)
}

/// What the consumer's verification API answered about an effect whose outcome was unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// The effect ran; its result (JSON text) is recorded as the effect's result.
    #[allow(missing_docs)] // the variant's doc says what `result` holds
    Applied { result: String },
    /// The effect did not run: it is released as claimable work under the next fencing token,
    /// so the holder whose lease expired stays refused.
    NotApplied,
}

/// Settles an unknown effect from the consumer's own answer, in one transaction: completed with
/// the consumer's result, or released once under its next fencing token; every item waiting
/// on it is resolved `duplicate` of it, with `evidence`. Unlike a person's verdict, it needs no
/// item to start from: the consumer answered about the effect itself. `Conflict` when its
/// outcome is no longer unknown.
pub(crate) async fn settle_verified<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    verified: &Verified,
    r: &Resolution,
    evidence: &str,
) -> Result<Vec<QueueItem>> {
    match verified {
        Verified::Applied { result } => complete_unknown(tx, effect, result, None, r.at).await?,
        Verified::NotApplied => release_unknown(tx, effect, None, None, r.at).await?,
    }
    let duplicate = Resolution {
        outcome: ResolutionOutcome::Duplicate,
        ..r.clone()
    };
    let ids = resolve_waiting(tx, effect, None, &r.note, &duplicate).await?;
    let mut items = Vec::with_capacity(ids.len());
    for id in &ids {
        tx.exec(
            "UPDATE queue_items SET resolution_evidence = $2 WHERE id = $1",
            &[text(id.as_str()), text(evidence)],
        )
        .await?;
        if let Some(item) = queue::item(tx, id).await? {
            items.push(item);
        }
    }
    Ok(items)
}
