//! What a decision writes: its consequence (a reservation, a takeover, a link, a queue item)
//! and its proof, handed to the executor as one conditional unit (`Tx::write_decision`): the
//! write that settles a race first, the rest kept only if it changed a row.

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_core::matrix::{Action, Decision, MATRIX_VERSION};

use crate::codes::{self, duration_ms, from_ms, ms, new_id};
use crate::decision::{
    already_decided, event_type_of, DecideOutcome, DecideRequest, Horizon, PriorView, Reservation,
};
use crate::delivery::NewReception;
use crate::effect::{self, EffectState, Keyed, LinkKind, NewEffect};
use crate::error::StoreError;
use crate::plan::{self, Plan, Scope};
use crate::queue::Proposal;
use crate::sql::{int, opt_int, opt_text, text, Statement, Tx, Value};

use std::borrow::Cow;

type Result<T> = std::result::Result<T, StoreError>;

fn horizon_parts(h: Option<Horizon>) -> (bool, Option<i64>) {
    match h {
        None => (false, None),
        Some(Horizon::Durable) => (true, None),
        Some(Horizon::For(d)) => (false, Some(duration_ms(d))),
    }
}

/// Applies a decision; `None` when its conditional write found the ground moved (nothing of
/// this attempt was written: everything else is kept only if that write changed a row).
#[allow(clippy::too_many_arguments)]
pub(super) async fn apply<T: Tx + Send>(
    tx: &mut T,
    scope: &Scope,
    req: &DecideRequest,
    hash: Option<&str>,
    view: &PriorView,
    decision: Decision,
    journal: Option<&NewReception>,
) -> Result<Option<DecideOutcome>> {
    let Prepared {
        head,
        mut writes,
        proof,
        outcome,
        ..
    } = prepare(scope, req, hash, view, decision, journal)?;
    writes.extend(proof);
    let applied = match tx.write_decision(head.as_ref(), &writes).await {
        Ok(applied) => applied,
        // The proof's rule (`schema::DECIDED_ONCE`): another transaction decided this
        // delivery concurrently. Nothing of this attempt was kept.
        Err(e) => return Err(refused(&req.delivery, e)),
    };
    Ok(applied.then_some(outcome))
}

/// A decision's proof written into its delivery's journal entry: `proof` holds the values of
/// `schema::PROOF_COLUMNS`. No `ON CONFLICT`, no condition on the row: an entry already
/// decided has its `decided_at` emptied here, which `schema::DECIDED_ONCE` refuses, undoing
/// every write of this decision (they are sent together with the commit).
pub(crate) fn proof_update<'a>(
    delivery: &'a DeliveryId,
    event_type: Option<&'a str>,
    proof: Vec<Value<'a>>,
) -> Statement<'a> {
    let mut params = Vec::with_capacity(2 + proof.len());
    params.push(text(delivery.as_str()));
    params.push(opt_text(event_type));
    params.extend(proof);
    (
        "UPDATE deliveries SET event_type = COALESCE($2, event_type), \
         decided_at = CASE WHEN decided_at IS NULL THEN CAST($3 AS BIGINT) END, strategy_name = $4, \
         strategy_version = $5, strategy_level = $6, key_value = $7, confidence = $8, prior = $9, transport = $10, \
         action = $11, layer = $12, reason = $13, flags = $14, rule = $15, matrix_version = $16, \
         reference_delivery = $17, effect_id = $18, queue_item_id = $19, differences = $20, details = $21, \
         link_kind = $22 WHERE id = $1",
        params,
    )
}

/// The values of `schema::PROOF_COLUMNS` of a delivery not decided: a journal entry written
/// without its proof, with the statement that writes one with it.
pub(crate) fn no_proof() -> Vec<Value<'static>> {
    crate::schema::PROOF_COLUMNS
        .iter()
        .map(|(_, kind)| match *kind {
            "BIGINT" => Value::Int(None),
            _ => Value::Text(None),
        })
        .collect()
}

/// The error of a decision of `delivery` whose writes were refused: a conflict is the proof's
/// rule, so another transaction decided this delivery first.
pub(crate) fn refused(delivery: &DeliveryId, e: StoreError) -> StoreError {
    match e {
        StoreError::Conflict(_) => already_decided(delivery),
        e => e,
    }
}

/// A decision's writes, ready to run (`Tx::write_decision`), and its answer once they did.
/// Their texts are borrowed from the request, its scope and its view, which outlive them.
pub(crate) struct Prepared<'a> {
    /// The conditional write that settles a race, if the plan has one.
    pub head: Option<Statement<'a>>,
    /// Everything else but the proof, kept only if the head changed a row.
    pub writes: Vec<Statement<'a>>,
    /// The proof, kept only if the head changed a row: the delivery's journal entry with it
    /// (`delivery::decided_statement`), or its update of the entry (`proof_update`). Always
    /// there from `prepare`; a backend takes it to write it where it belongs.
    pub proof: Option<Statement<'a>>,
    /// What the head locks: the key's scope hash for a new effect (its number in the scope is
    /// unique), the effect's id for a takeover.
    lock: Option<Cow<'a, str>>,
    /// What the decision answers once its writes committed.
    pub outcome: DecideOutcome,
}

impl Prepared<'_> {
    /// What the head locks (the key's place in its scope, or the effect taken over), so a
    /// backend writing several decisions in one transaction can take their locks in one order.
    pub fn lock_key(&self) -> Option<&str> {
        self.lock.as_deref()
    }
}

/// What a decision writes and answers, without running it. `hash`: the key's scope hash
/// (`view::key_hash`), made once per decision. `journal`: the delivery's journal entry, when
/// it is written with the proof (not yet in the store).
pub(crate) fn prepare<'a>(
    scope: &'a Scope,
    req: &'a DecideRequest,
    hash: Option<&'a str>,
    view: &'a PriorView,
    decision: Decision,
    journal: Option<&'a NewReception>,
) -> Result<Prepared<'a>> {
    let now = ms(req.now);
    let event_type: Option<&'a str> = event_type_of(scope, req);
    let key = req.key.as_ref();
    let durable = matches!(key.map(|k| k.horizon), Some(Horizon::Durable));
    let lease_until = now.saturating_add(duration_ms(req.lease));
    let discriminants = codes::map_json(&key.map(|k| k.discriminants.clone()).unwrap_or_default());
    let existing = view.effect.as_ref().map(|e| e.id.clone());

    let mut effect = None;
    let mut reservation = None;
    let mut queue_item = None;
    // How the delivery is linked to its effect, if it is: written in the proof's own row (the
    // effect's record reads its deliveries from the proofs and from `links`, which keeps the
    // links made after a decision: resolutions, claims).
    let mut link: Option<LinkKind> = None;
    // The one conditional write that settles a race, if the plan has one, and everything
    // after it, kept only if it changed a row: all sent at once where the backend can (one
    // statement and one round trip on PostgreSQL).
    let mut head: Option<Statement> = None;
    let mut writes: Vec<Statement> = Vec::new();
    // A new effect reserved for this delivery with fencing token 1, holding the key's slot
    // (`slot` given) or beside it (a possible duplicate), or without a key. A keyed one takes
    // the number after the latest effect of its key the view saw: its insert is the head, and
    // writes nothing if another effect took that number since.
    let mut lock = None;
    let reserve_new =
        |head: &mut Option<Statement<'a>>, id: &EffectId, slot: Option<Option<i64>>| {
            *head = Some(effect::insert(NewEffect {
                id: id.as_str().to_owned(),
                scope,
                event_type,
                strategy: key.map(|k| &k.strategy),
                key_value: key.map(|k| k.value.as_str()),
                keyed: hash.map(|hash| Keyed {
                    hash,
                    seq: view.next_seq,
                    slot,
                }),
                durable,
                state: EffectState::Reserved,
                token: 1,
                lease_until: Some(lease_until),
                holder: None,
                discriminants: discriminants.clone(),
                authoritative_ref: None,
                first_delivery: &req.delivery,
                queue_item: None,
                now,
                resource: req.resource.as_deref(),
                critical: req.critical,
            }));
            Ok::<_, StoreError>(Reservation {
                effect: id.clone(),
                fencing_token: 1,
                lease_until: from_ms(lease_until)?,
            })
        };
    match plan::plan(key, view, &decision) {
        Plan::ReserveIndexed => {
            let id = EffectId::from_u128(new_id(req.now));
            let expires = match key.map(|k| k.horizon) {
                Some(Horizon::For(d)) => Some(now.saturating_add(duration_ms(d))),
                _ => None,
            };
            // The atomic reservation: the effect takes the key's next number in its scope,
            // which only one effect can have, and holds the key's slot until `expires`.
            reservation = Some(reserve_new(&mut head, &id, Some(expires))?);
            lock = hash.map(Cow::Borrowed);
            link = Some(LinkKind::Reserved);
            effect = Some(id);
        }
        Plan::Takeover { effect: id, token } => {
            // Only the holder of the token that was read may move the effect on; anyone who
            // moved it first (another takeover, a late complete) makes this change no row.
            lock = Some(Cow::Owned(id.as_str().to_owned()));
            head = Some((
                "UPDATE effects SET state = 'reserved', fencing_token = fencing_token + 1, lease_until = $3, \
                 holder = NULL, error = NULL, updated_at = $4 \
                 WHERE id = $1 AND fencing_token = $2 \
                 AND (state IN ('failed_retryable', 'unknown') OR (state = 'reserved' AND lease_until <= $4))",
                vec![text(id.as_str().to_owned()), int(token as i64), int(lease_until), int(now)],
            ));
            link = Some(LinkKind::Reserved);
            reservation = Some(Reservation {
                effect: id.clone(),
                fencing_token: token + 1,
                lease_until: from_ms(lease_until)?,
            });
            effect = Some(id);
        }
        Plan::ReserveUnindexed => {
            let id = EffectId::from_u128(new_id(req.now));
            reservation = Some(reserve_new(&mut head, &id, None)?);
            lock = hash.map(Cow::Borrowed);
            link = Some(LinkKind::Reserved);
            effect = Some(id);
        }
        Plan::Link { effect: id, kind } => {
            link = Some(kind);
            effect = Some(id);
        }
        Plan::Queue(kind) => {
            let id = QueueItemId::from_u128(new_id(req.now));
            let (q_durable, horizon_ms) = horizon_parts(key.map(|k| k.horizon));
            let strategy = key.map(|k| &k.strategy);
            let proposed = Proposal::for_decision(&view.differences, &decision.flags);
            writes.push((
                "INSERT INTO queue_items (id, kind, status, delivery_id, tenant, provider, env, event_type, strategy_name, \
                 strategy_version, strategy_level, key_value, scope_hash, durable, horizon_ms, discriminants, existing_effect, \
                 first_delivery, differences, existing_result, proposed, reason, created_at, resource, critical) \
                 VALUES ($1, $2, 'open', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)",
                vec![
                    text(id.as_str().to_owned()),
                    text(kind.as_str()),
                    text(req.delivery.as_str()),
                    text(scope.tenant.as_str()),
                    text(scope.provider.as_str()),
                    text(scope.env.as_str()),
                    opt_text(event_type),
                    opt_text(strategy.map(|s| s.name.as_str())),
                    opt_int(strategy.map(|s| i64::from(s.version))),
                    opt_text(strategy.map(|s| s.level.as_str())),
                    opt_text(key.map(|k| k.value.as_str())),
                    opt_text(hash),
                    Value::Bool(q_durable),
                    opt_int(horizon_ms),
                    text(discriminants.clone()),
                    opt_text(view.effect.as_ref().map(|e| e.id.as_str())),
                    opt_text(view.effect.as_ref().map(|e| e.first_delivery.as_str())),
                    text(codes::differences_json(&view.differences)),
                    opt_text(plan::existing_result(view)),
                    text(proposed.as_str()),
                    text(decision.reason.clone()),
                    int(now),
                    opt_text(req.resource.as_deref()),
                    Value::Bool(req.critical),
                ],
            ));
            queue_item = Some(id);
            effect = existing.clone();
        }
        Plan::ProofOnly => {
            if decision.action != Action::Reject {
                effect = existing.clone();
            }
        }
    }

    let reference = plan::reference_delivery(view);
    let strategy = key.map(|k| &k.strategy);
    let proof = vec![
        int(now),
        opt_text(strategy.map(|s| s.name.as_str())),
        opt_int(strategy.map(|s| i64::from(s.version))),
        opt_text(strategy.map(|s| s.level.as_str())),
        opt_text(key.map(|k| k.value.as_str())),
        opt_text(key.map(|k| k.confidence.as_str())),
        text(codes::prior_code(view.prior)),
        text(codes::transport_code(view.transport)),
        text(decision.action.as_str()),
        opt_text(decision.layer.map(|l| l.as_str())),
        text(decision.reason.clone()),
        text(codes::flags_json(&decision.flags)),
        text(decision.rule),
        int(i64::from(MATRIX_VERSION)),
        opt_text(reference.as_ref().map(|d| d.as_str().to_owned())),
        opt_text(effect.as_ref().map(|e| e.as_str().to_owned())),
        opt_text(queue_item.as_ref().map(|q| q.as_str().to_owned())),
        text(codes::differences_json(&view.differences)),
        text(req.details_json.as_str()),
        opt_text(link.map(LinkKind::as_str)),
    ];
    // The proof is the delivery's own row (schema v14): written with its journal entry when
    // the entry is still to be written, or into it. The decision's event type is the row's.
    let proof = match journal {
        Some(reception) => {
            crate::delivery::decided_statement(&req.delivery, reception, event_type, proof)
        }
        None => proof_update(&req.delivery, event_type, proof),
    };
    let existing_result = if decision.action == Action::Ignore {
        plan::existing_result(view)
    } else {
        None
    };
    Ok(Prepared {
        head,
        writes,
        proof: Some(proof),
        lock,
        outcome: DecideOutcome {
            prior: view.prior,
            transport: view.transport,
            effect,
            reservation,
            reference_delivery: reference,
            existing_result,
            queue_item,
            decision,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The column names a statement writes, in order: an insert's list, or an update's `SET`.
    fn written(sql: &str) -> Vec<String> {
        if let Some(rest) = sql.strip_prefix("INSERT INTO deliveries (") {
            let list = rest.split_once(')').expect("a column list").0;
            list.split(',').map(|c| c.trim().to_owned()).collect()
        } else {
            let set = sql
                .strip_prefix("UPDATE deliveries SET ")
                .and_then(|s| s.rsplit_once(" WHERE "))
                .expect("an update")
                .0;
            set.split(", ")
                .filter_map(|a| a.split_once(" = ").map(|(c, _)| c.trim().to_owned()))
                .collect()
        }
    }

    /// Both ways a proof is written name `schema::PROOF_COLUMNS` in its order, the order its
    /// values are bound in, and an empty proof has a value of each column's kind.
    #[test]
    fn the_proof_statements_write_the_proof_columns_in_order() {
        let names: Vec<String> = crate::schema::PROOF_COLUMNS
            .iter()
            .map(|(n, _)| (*n).to_owned())
            .collect();
        let id = DeliveryId::from_u128(1);
        let (update, params) = proof_update(&id, None, no_proof());
        assert_eq!(written(update)[1..], names[..], "{update}");
        assert_eq!(params.len(), 2 + names.len());
        let reception = NewReception {
            tenant: "acme".into(),
            provider: "payflow".into(),
            env: "live".into(),
            event_type: None,
            received_at: time::OffsetDateTime::UNIX_EPOCH,
            size: 1,
            body_sha256: "h".into(),
            headers_json: "{}".into(),
            payload: None,
            transport_key: None,
            correlation_id: None,
        };
        let (insert, params) =
            crate::delivery::decided_statement(&id, &reception, None, no_proof());
        let columns = written(insert);
        let first = crate::delivery::FIRST_PROOF_PLACEHOLDER - 1;
        assert_eq!(columns[first..], names[..], "{insert}");
        // The entry's own columns are the journal's, in its order: its values are bound so.
        let (journal, _) = crate::delivery::journal_statement(&id, &reception);
        assert_eq!(columns[..first], written(journal)[..], "{insert}");
        assert_eq!(params.len(), columns.len());
        for ((name, kind), value) in crate::schema::PROOF_COLUMNS.iter().zip(no_proof()) {
            let int = matches!(value, Value::Int(None));
            assert_eq!(int, *kind == "BIGINT", "{name}");
        }
    }
}
