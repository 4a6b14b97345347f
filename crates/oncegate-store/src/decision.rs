//! One decision: what the service asks (`DecideRequest`), what the store shows the decision
//! matrix (`PriorView`), what it answers (`DecideOutcome`) and what it keeps forever after
//! (`ProofRecord`); and the decision itself, written once for both backends: the view is read
//! (`view`), the matrix asked, its consequence and proof written (`writes`), and all of it read
//! and asked again when a concurrent decision changed the ground in between.

use std::collections::BTreeMap;

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_core::matrix::{
    Action, Confidence, Decision, Difference, Flag, Layer, Prior, TransportMatch,
};
use time::{Duration, OffsetDateTime};

use crate::codes::{self, from_ms};
use crate::delivery::NewReception;
use crate::effect::EffectState;
use crate::error::StoreError;
use crate::plan::{self, Scope, MAX_ATTEMPTS};
use crate::sql::{text, Row, Tx};

pub(crate) mod view;
pub(crate) mod writes;

type Result<T> = std::result::Result<T, StoreError>;

/// The strategy that made a key: identity is a contract, and a new version never
/// reinterprets the keys of an old one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StrategyRef {
    /// The strategy's name, as the contract spells it.
    pub name: String,
    /// The strategy's version, part of every key's scope: a new version starts with fresh keys.
    pub version: u32,
    /// `provider_id`, `business_ref`, `semantic` or `fingerprint`.
    pub level: String,
}

/// How long the fast index keeps a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Horizon {
    /// Financial types: the effect identity is kept forever, like a ledger.
    Durable,
    /// The provider's retry window plus a margin.
    For(Duration),
}

/// What a key is scoped by besides tenant, provider, environment and strategy name+version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum KeyScope {
    /// The delivery's event type (the default): two types never share a key.
    #[default]
    EventType,
    /// A declared operation (the strategy's `scope = "operation"`): every type that declares
    /// it shares the key, so one business effect seen through two event types is reserved once.
    Operation(String),
}

impl KeyScope {
    /// The scope of a key the core's identity made: its declared operation when the strategy
    /// is operation-scoped, else the event type.
    pub fn of(key: &oncegate_core::identity::EffectKey) -> KeyScope {
        key.operation
            .clone()
            .map_or(KeyScope::EventType, KeyScope::Operation)
    }

    /// The scope a type's strategy gives its keys (for a key read back from a proof).
    pub fn of_strategy(
        t: &oncegate_core::contract::EventType,
        s: &oncegate_core::strategy::Strategy,
    ) -> KeyScope {
        match s.scope {
            oncegate_core::strategy::ScopeKind::Type => KeyScope::EventType,
            oncegate_core::strategy::ScopeKind::Operation => {
                KeyScope::Operation(t.operation.clone())
            }
        }
    }

    /// The scope part the store's index hashes: the event type, or `operation:<name>`. A
    /// type-scoped key hashes exactly as it always did, so existing rows keep their meaning.
    ///
    /// ```
    /// use oncegate_store::KeyScope;
    /// assert_eq!(KeyScope::EventType.part(Some("refund.created")).as_deref(), Some("refund.created"));
    /// let shared = KeyScope::Operation("capture".into());
    /// assert_eq!(shared.part(Some("charge.captured")), shared.part(Some("payment.succeeded")));
    /// ```
    pub fn part(&self, event_type: Option<&str>) -> Option<String> {
        match self {
            KeyScope::EventType => event_type.map(str::to_owned),
            KeyScope::Operation(op) => Some(format!("operation:{op}")),
        }
    }
}

/// The effect key of a delivery, as the core's identity computed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectKey {
    /// The strategy that made the key.
    pub strategy: StrategyRef,
    /// The key as the core made it (sensitive parts already keyed-hashed). The store scopes it
    /// further by tenant, provider, env, `scope` (the event type, or the declared operation)
    /// and strategy name+version, so the same value under two scopes never matches.
    pub value: String,
    /// The event type, or the operation several types share.
    pub scope: KeyScope,
    /// How far a match of this key can be trusted to name the same operation.
    pub confidence: Confidence,
    /// How long the fast index keeps the key (the index entry's expiry; the proof outlives it).
    pub horizon: Horizon,
    /// The type's discriminants for this delivery: field → canonical (masked) value. Stored
    /// with a new effect so later matches can be compared against it.
    pub discriminants: BTreeMap<String, String>,
}

/// Everything the store needs to decide one journaled delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecideRequest {
    /// The journaled delivery to decide (the id `journal` returned).
    pub delivery: DeliveryId,
    /// The event type once the body was read; recorded on the delivery when it was not known
    /// at journal time.
    pub event_type: Option<String>,
    /// `None` when the delivery was rejected, has no contract, or no strategy made a key.
    pub key: Option<EffectKey>,
    /// How long a `process` reservation lasts before it is presumed lost.
    pub lease: Duration,
    /// Opaque JSON text kept in the proof (skipped strategies, fields used…).
    pub details_json: String,
    /// The decision's time: the lease runs from it, the index horizon is measured from it, and new
    /// ids carry it.
    pub now: OffsetDateTime,
    /// The resource the delivery is about (the type's `resource` field), kept on the effect
    /// so the reconciler can list every local effect of one resource.
    pub resource: Option<String>,
    /// The type's criticality: an expired reservation of a critical effect is verified before
    /// any retry; a reversible one is released for takeover.
    pub critical: bool,
}

/// The effect that already holds a delivery's key, as the matrix sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorEffect {
    /// The effect's id.
    pub id: EffectId,
    /// As stored, except that a reservation whose lease passed reads as `Unknown`.
    pub state: EffectState,
    /// Its fencing token as read; a takeover succeeds only if no one moved it since.
    pub fencing_token: u64,
    /// The delivery that created the effect: the `reference_delivery` of an ignore.
    pub first_delivery: DeliveryId,
    /// The discriminants recorded when the effect was reserved: field → canonical (masked) value.
    pub discriminants: BTreeMap<String, String>,
    /// The result reference recorded by `complete`.
    pub result: Option<String>,
    /// The error recorded by `fail`.
    pub error: Option<String>,
    /// False when the fast index entry expired (past the horizon) and only the record was
    /// found: the prior then reads as `Purged`.
    pub indexed: bool,
}

/// What the store knows about a delivery's transport key and effect key, read in one statement
/// by the decision and handed to the (pure) decision matrix.
///
/// The mapping to `Prior`: an unexpired index entry gives its effect's state (`Reserved` →
/// `InProgress`, an expired lease → `Unknown`, `Released` → `InProgress`); an index entry
/// whose effect is gone, or an effect with this key whose index entry expired, gives
/// `Purged` (the horizon passed but a record remains); nothing at all gives `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorView {
    /// Whether an earlier delivery carries the same provider delivery id, and with which body.
    pub transport: TransportMatch,
    /// The earlier delivery with the same transport key (one with the same body when there is one).
    pub transport_reference: Option<DeliveryId>,
    /// The prior record for the effect key as the matrix reads it (`None` when there is no key).
    pub prior: Prior,
    /// The effect that holds the key, when one was found (through the index, the effect table or
    /// an alias).
    pub effect: Option<PriorEffect>,
    /// The discriminants that disagree between `effect` and the request's key, computed by the
    /// store over the union of both fields (empty without a prior effect). The matrix's
    /// `Keyed::differences` should be exactly this list, so the proof and the queue item
    /// record what the matrix saw.
    pub differences: Vec<Difference>,
    /// Whether the collision breaker of the key's strategy (its provider, environment, event
    /// type, name and version) is open, read in the same snapshot as the rest: its ignores are
    /// then reconciled instead. False without a key.
    pub breaker_open: bool,
    /// The number a new effect of the key takes in its scope: one past the latest effect's
    /// (`effect::Keyed::seq`), 1 for a key without one.
    pub(crate) next_seq: i64,
}

/// The reservation a `process` answer hands to the caller: run the effect, then `complete`
/// or `fail` it with this token before `lease_until`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The effect reserved (or taken over) for the caller.
    pub effect: EffectId,
    /// The token to present with `complete`, `fail` and `heartbeat`: 1 for a new effect, the prior
    /// token + 1 for a takeover.
    pub fencing_token: u64,
    /// When the lease ends: the decision's `now` plus the request's `lease`. Past it, the
    /// reservation is presumed lost and the effect's outcome becomes unknown.
    pub lease_until: OffsetDateTime,
}

/// The answer of one decision; everything in it is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecideOutcome {
    /// What the matrix decided, as it was applied (after any re-read that a lost race caused).
    pub decision: Decision,
    /// The prior record for the key the decision was made on.
    pub prior: Prior,
    /// The transport match the decision was made on.
    pub transport: TransportMatch,
    /// The effect the decision concerns: the one reserved or taken over (`Process`), the one
    /// duplicated (`Ignore`), or the existing one the delivery collides with or must be
    /// reconciled against (`Quarantine`, `Reconcile`). Only the first two link the delivery.
    pub effect: Option<EffectId>,
    /// Present exactly when the action is `Process`.
    pub reservation: Option<Reservation>,
    /// The first delivery of the existing effect, or the earlier packet for a transport match.
    pub reference_delivery: Option<DeliveryId>,
    /// For `Ignore`: the existing effect's result (or its permanent error).
    pub existing_result: Option<String>,
    /// For `Quarantine` and `Reconcile`.
    pub queue_item: Option<QueueItemId>,
}

/// Why a delivery was processed, ignored, isolated or sent to reconciliation — kept without
/// the payload until the proof retention passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofRecord {
    /// The delivery this proof explains.
    pub delivery: DeliveryId,
    /// The delivery's tenant.
    pub tenant: String,
    /// The delivery's provider.
    pub provider: String,
    /// The delivery's environment (`live`, `test`…).
    pub env: String,
    /// The delivery's event type, `None` when it was never known (a rejection).
    pub event_type: Option<String>,
    /// The decision's time: the request's `now`.
    pub decided_at: OffsetDateTime,
    /// The strategy that made the key; `None` when none did (a rejection, no contract, an unkeyed
    /// delivery).
    pub strategy: Option<StrategyRef>,
    /// The effect key's value as the core made it (sensitive parts keyed-hashed), when one was
    /// made.
    pub key: Option<String>,
    /// The confidence of that key, when one was made.
    pub confidence: Option<Confidence>,
    /// The prior record for the key the matrix saw.
    pub prior: Prior,
    /// The transport match the matrix saw.
    pub transport: TransportMatch,
    /// What the delivery was told to do.
    pub action: Action,
    /// For an ignore: whether it was recognized as the same packet or as the same effect.
    pub layer: Option<Layer>,
    /// The decision's reason, one plain sentence.
    pub reason: String,
    /// The marks the matrix set (`possible_duplicate`, `takeover`, `breaker_open`…), in order.
    pub flags: Vec<Flag>,
    /// The matrix row that decided (`R1`…).
    pub rule: String,
    /// The version of the decision matrix that decided (the core's `MATRIX_VERSION`), so a proof
    /// can be read against the rules of its time.
    pub matrix_version: u32,
    /// The first delivery of the existing effect, or the earlier packet for a transport match.
    pub reference_delivery: Option<DeliveryId>,
    /// The effect the decision concerns (as [`DecideOutcome::effect`]).
    pub effect: Option<EffectId>,
    /// The queue item opened for a quarantine or a reconcile.
    pub queue_item: Option<QueueItemId>,
    /// The discriminants that disagreed with the existing effect (empty when none did).
    pub differences: Vec<Difference>,
    /// The request's `details_json`, kept as given (skipped strategies, fields used…).
    pub details_json: String,
}

/// The delivery's event type: the request's once the body was read, else the journal's.
pub(crate) fn event_type_of<'a>(scope: &'a Scope, req: &'a DecideRequest) -> Option<&'a str> {
    req.event_type.as_deref().or(scope.event_type.as_deref())
}

pub(crate) fn already_decided(id: &DeliveryId) -> StoreError {
    StoreError::Conflict(format!("delivery {id} was already decided"))
}

/// The scope of a delivery as `journal` wrote it (not decided yet), so a backend that keeps it
/// can spare `decide` reading it back.
pub(crate) fn journaled_scope(r: &NewReception) -> Scope {
    Scope {
        tenant: r.tenant.clone(),
        provider: r.provider.clone(),
        env: r.env.clone(),
        event_type: r.event_type.clone(),
        transport_key: r.transport_key.as_ref().map(|k| k.value.clone()),
        transport_strength: r.transport_key.as_ref().map(|k| k.strength),
        body_sha256: r.body_sha256.clone(),
        decided: false,
    }
}

/// Reads the view, asks `choose` for a decision on it and applies it. When applying loses a
/// race (the key was reserved, or the effect moved, since the view was read), the view is read
/// again and `choose` asked again, so the answer is always based on what was true when it
/// committed.
///
/// `journal` is the delivery's journal entry when it is written with the proof, in one row
/// (its scope is then the entry's); otherwise the delivery is read. Either way a delivery is
/// decided once: its row refuses a second proof (`schema::DECIDED_ONCE`), and with it
/// everything that decision would have written.
pub(crate) async fn decide<T, F>(
    tx: &mut T,
    req: &DecideRequest,
    journal: Option<&NewReception>,
    mut choose: F,
) -> Result<DecideOutcome>
where
    T: Tx + Send,
    F: FnMut(&PriorView) -> Decision + Send,
{
    let scope = match journal {
        Some(reception) => journaled_scope(reception),
        None => view::scope(tx, &req.delivery).await?,
    };
    if scope.decided {
        return Err(already_decided(&req.delivery));
    }
    let hash = view::key_hash(&scope, req);
    let hash = hash.as_deref();
    for _ in 0..MAX_ATTEMPTS {
        let view = view::load(tx, &scope, req, hash).await?;
        let decision = choose(&view);
        if let Some(outcome) =
            writes::apply(tx, &scope, req, hash, &view, decision, journal).await?
        {
            return Ok(outcome);
        }
    }
    Err(StoreError::Conflict(format!(
        "the key of delivery {} kept changing while it was decided; try again",
        req.delivery
    )))
}

const PROOF_COLS: &str = "p.delivery_id, p.tenant, p.provider, p.env, p.event_type, p.decided_at, p.strategy_name, \
     p.strategy_version, p.strategy_level, p.key_value, p.confidence, p.prior, p.transport, p.action, p.layer, p.reason, \
     p.flags, p.rule, p.matrix_version, p.reference_delivery, p.effect_id, p.queue_item_id, p.differences, p.details";

/// The strategy of a row whose columns `at`, `at + 1` and `at + 2` hold its name, version and
/// level (absent when the row has no key).
pub(crate) fn strategy_from(row: &Row, at: usize) -> Result<Option<StrategyRef>> {
    Ok(
        match (
            row.opt_text(at)?,
            row.opt_int(at + 1)?,
            row.opt_text(at + 2)?,
        ) {
            (Some(name), Some(version), Some(level)) => Some(StrategyRef {
                name,
                version: u32::try_from(version)
                    .map_err(|_| StoreError::corrupt("a strategy version is out of range"))?,
                level,
            }),
            _ => None,
        },
    )
}

fn proof_from(row: &Row) -> Result<ProofRecord> {
    let action = row.text(13)?;
    Ok(ProofRecord {
        delivery: plan::parse_delivery_id(&row.text(0)?)?,
        tenant: row.text(1)?,
        provider: row.text(2)?,
        env: row.text(3)?,
        event_type: row.opt_text(4)?,
        decided_at: from_ms(row.int(5)?)?,
        strategy: strategy_from(row, 6)?,
        key: row.opt_text(9)?,
        confidence: row
            .opt_text(10)?
            .map(|c| {
                Confidence::parse(&c)
                    .ok_or_else(|| StoreError::corrupt(format!("unknown confidence {c:?}")))
            })
            .transpose()?,
        prior: codes::parse_prior(&row.text(11)?)?,
        transport: codes::parse_transport(&row.text(12)?)?,
        action: Action::parse(&action)
            .ok_or_else(|| StoreError::corrupt(format!("unknown action {action:?}")))?,
        layer: row
            .opt_text(14)?
            .map(|l| codes::parse_layer(&l))
            .transpose()?,
        reason: row.text(15)?,
        flags: codes::parse_flags(&row.text(16)?)?,
        rule: row.text(17)?,
        matrix_version: u32::try_from(row.int(18)?)
            .map_err(|_| StoreError::corrupt("a matrix version is out of range"))?,
        reference_delivery: row
            .opt_text(19)?
            .map(|d| plan::parse_delivery_id(&d))
            .transpose()?,
        effect: row
            .opt_text(20)?
            .map(|e| plan::parse_effect_id(&e))
            .transpose()?,
        queue_item: row
            .opt_text(21)?
            .map(|q| plan::parse_queue_id(&q))
            .transpose()?,
        differences: codes::parse_differences(&row.text(22)?)?,
        details_json: row.text(23)?,
    })
}

pub(crate) async fn proof<T: Tx + Send>(
    tx: &mut T,
    id: &DeliveryId,
) -> Result<Option<ProofRecord>> {
    let sql = format!("SELECT {PROOF_COLS} FROM proofs p WHERE p.delivery_id = $1");
    let rows = tx.query(&sql, &[text(id.as_str())]).await?;
    rows.first().map(proof_from).transpose()
}
