//! Late replay: an operator asks for a delivery to be run again, possibly long after its key
//! left the fast index. The same strategy version the proof names is re-run over the stored
//! payload; when the recomputed key is the proof's and the proof's effect is completed, the
//! replay is ignored with that effect's result ("found through the proof"). Anything less
//! certain — the payload or the strategy version gone, a key that no longer matches, an effect
//! without an outcome — sends the replay to `reconcile`, where a person approves it.
//!
//! A replay is journaled as a new reception with its own proof (whose details name the
//! original delivery), so the report counts it and still has no unexplained gap. It is
//! journaled without a transport key: it is not a provider's packet, and must never make a
//! later provider retry look like the same packet again.
//!
//! Used by `POST /v1/deliveries/{id}/replay` and by `oncegate replay`, so both decide alike.

use oncegate_core::contract::{Contract, EventType};
use oncegate_core::identity::{self, Origin};
use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_core::json::{self, Limits};
use oncegate_core::matrix::{Action, Criticality, Decision, Flag, Layer};
use oncegate_store::{
    BreakerRule, BreakerScope, DecideRequest, EffectKey, EffectState, Horizon, KeyScope,
    NewReception, PriorView, ProofRecord, Store, StoreError,
};
use time::OffsetDateTime;

use crate::gate::to_time;

/// What a replay decided, as recorded in its own proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// The delivery that was replayed.
    pub original: DeliveryId,
    /// The new reception the replay was journaled as.
    pub delivery: DeliveryId,
    /// `ignore` (found through the proof) or `reconcile` (approval needed).
    pub action: Action,
    /// The decision's one-sentence reason.
    pub reason: String,
    /// The matrix row.
    pub rule: &'static str,
    /// The effect found through the proof (ignore), or the one to reconcile against.
    pub effect: Option<EffectId>,
    /// The effect's result, for an ignore.
    pub result: Option<String>,
    /// The queue item of a reconcile.
    pub queue_item: Option<QueueItemId>,
}

/// Why a replay cannot be trusted to be ignored, in one fragment of a sentence.
enum Doubt {
    PayloadPurged,
    NoProofKey,
    StrategyGone(String),
    NoKeyNow(String),
    KeyChanged,
    NoEffect,
    NotCompleted(&'static str),
    BreakerOpen(String),
}

impl Doubt {
    fn sentence(&self) -> String {
        let why = match self {
            Doubt::PayloadPurged => {
                "its payload was purged, so its key cannot be recomputed".to_owned()
            }
            Doubt::NoProofKey => {
                "its proof records no effect key to find the business result by".to_owned()
            }
            Doubt::StrategyGone(s) => format!("strategy {s} is no longer in the contract"),
            Doubt::NoKeyNow(why) => {
                format!("the proof's strategy makes no key from the stored payload ({why})")
            }
            Doubt::KeyChanged => "the recomputed key differs from the one in its proof".to_owned(),
            Doubt::NoEffect => "its proof names no effect (or the effect was purged)".to_owned(),
            Doubt::NotCompleted(state) => {
                format!("the effect found through its proof is {state}, not completed")
            }
            Doubt::BreakerOpen(s) => format!("the collision breaker of strategy {s} is open"),
        };
        format!("Kept for reconciliation: a late replay whose business result cannot be confirmed, because {why}; approve it in the queue.")
    }
}

/// The effect a proof stands for: the one its queue item's resolution produced or linked, else
/// the one it names.
async fn proof_effect(store: &Store, proof: &ProofRecord) -> Result<Option<EffectId>, StoreError> {
    if let Some(item) = &proof.queue_item {
        if let Some(q) = store.queue_item(item).await? {
            if let Some(effect) = q.resolution.and_then(|r| r.effect) {
                return Ok(Some(effect));
            }
        }
    }
    Ok(proof.effect.clone())
}

/// The type's definition reduced to the one strategy version the proof names, so identity
/// runs exactly that version (never a newer one that would reinterpret the key).
fn only_version(t: &EventType, name: &str, version: u32) -> Option<EventType> {
    let mut t = t.clone();
    t.strategies
        .retain(|s| s.name == name && s.version == version);
    (!t.strategies.is_empty()).then_some(t)
}

/// Replays `original` at `now`. `NotFound` when the delivery (or its proof) no longer exists:
/// past the proof retention there is nothing left to replay; a provider's new delivery of the
/// same event is then decided as usual (its prior reads as purged).
pub async fn replay(
    store: &Store,
    contract: &Contract,
    salt: &[u8],
    original: &DeliveryId,
    now: OffsetDateTime,
) -> Result<ReplayOutcome, StoreError> {
    let not_found = || StoreError::NotFound {
        what: "delivery",
        id: original.to_string(),
    };
    let d = store.delivery(original).await?.ok_or_else(not_found)?;
    let proof = store.proof(original).await?.ok_or_else(not_found)?;
    let event_type = d.event_type.clone().or_else(|| proof.event_type.clone());
    let type_def = event_type
        .as_deref()
        .and_then(|t| contract.provider(&d.provider)?.types.get(t));
    let target = proof_effect(store, &proof).await?;
    let effect = match &target {
        Some(id) => store.effect(id).await?,
        None => None,
    };

    // The key the replay is decided under: the proof's, with the discriminants recomputed
    // from the payload when it is still there (else the effect's own).
    let mut doubt = None;
    let mut key = match (&proof.strategy, &proof.key, proof.confidence) {
        (Some(strategy), Some(value), Some(confidence)) => Some(EffectKey {
            strategy: strategy.clone(),
            value: value.clone(),
            // The proof's strategy as the contract defines it; a strategy the contract no
            // longer has was necessarily type-scoped or is unreachable by any new key anyway.
            scope: type_def
                .and_then(|t| {
                    t.strategies
                        .iter()
                        .find(|s| s.name == strategy.name && s.version == strategy.version)
                        .map(|s| KeyScope::of_strategy(t, s))
                })
                .unwrap_or_default(),
            confidence,
            horizon: match type_def {
                Some(t) if t.durable => Horizon::Durable,
                Some(t) => Horizon::For(to_time(t.horizon)),
                None => Horizon::Durable,
            },
            discriminants: effect
                .as_ref()
                .map(|e| e.discriminants.clone())
                .unwrap_or_default(),
        }),
        _ => None,
    };
    let mut notes = Vec::new();
    let mut resource = None;
    match (&mut key, &d.payload) {
        (None, _) => doubt = Some(Doubt::NoProofKey),
        (Some(_), None) => doubt = Some(Doubt::PayloadPurged),
        (Some(k), Some(payload)) => {
            let limits = Limits {
                max_bytes: contract.settings.max_body_bytes,
                max_depth: contract.settings.max_depth,
            };
            let label = format!("{}@{}", k.strategy.name, k.strategy.version);
            match (
                type_def.and_then(|t| only_version(t, &k.strategy.name, k.strategy.version)),
                json::parse(payload, &limits),
            ) {
                (None, _) => doubt = Some(Doubt::StrategyGone(label)),
                (Some(_), Err(e)) => doubt = Some(Doubt::NoKeyNow(e.to_string())),
                (Some(t), Ok(doc)) => {
                    let origin = Origin {
                        tenant: &d.tenant,
                        provider: &d.provider,
                        env: &d.env,
                    };
                    // The headers journaled with it (the contract's key headers are kept).
                    let headers: Vec<(String, String)> = serde_json::from_str::<
                        std::collections::BTreeMap<String, String>,
                    >(&d.headers_json)
                    .map(|h| h.into_iter().collect())
                    .unwrap_or_default();
                    let id = identity::identify(&t, origin, &doc, &headers, salt);
                    notes.extend(id.notes.clone());
                    resource = id.resource.clone();
                    match &id.effect {
                        None => {
                            let why = id
                                .skipped
                                .iter()
                                .map(|s| s.why.clone())
                                .collect::<Vec<_>>()
                                .join("; ");
                            doubt = Some(Doubt::NoKeyNow(why));
                        }
                        Some(made) if made.key != k.value => doubt = Some(Doubt::KeyChanged),
                        Some(_) => {
                            k.discriminants = id
                                .discriminants
                                .iter()
                                .filter_map(|(f, v)| v.clone().map(|v| (f.clone(), v)))
                                .collect();
                        }
                    }
                }
            }
        }
    }
    if doubt.is_none() {
        doubt = match &effect {
            None => Some(Doubt::NoEffect),
            Some(e) if e.state == EffectState::Completed => None,
            Some(e) => Some(Doubt::NotCompleted(e.state.as_str())),
        };
    }
    // An open breaker distrusts every ignore of its strategy, a replay's too. Its state does
    // not depend on the window, so the default rule reads it.
    if let (None, Some(k), Some(t)) = (&doubt, &key, &event_type) {
        let scope = BreakerScope {
            provider: d.provider.clone(),
            env: d.env.clone(),
            event_type: t.clone(),
            strategy: k.strategy.name.clone(),
            version: k.strategy.version,
        };
        let rule = BreakerRule::new(
            contract.settings.breaker_threshold,
            contract.settings.breaker_min_sample,
        );
        if store.breaker(&scope, &rule, now).await?.is_open() {
            doubt = Some(Doubt::BreakerOpen(scope.strategy_label()));
        }
    }
    let flags = match &doubt {
        Some(Doubt::BreakerOpen(_)) => vec![Flag::BreakerOpen],
        _ => Vec::new(),
    };

    let reception = NewReception {
        tenant: d.tenant.clone(),
        provider: d.provider.clone(),
        env: d.env.clone(),
        event_type: event_type.clone(),
        received_at: now,
        size: d.size,
        body_sha256: d.body_sha256.clone(),
        headers_json: d.headers_json.clone(),
        payload: d.payload.clone(),
        transport_key: None,
        correlation_id: d.correlation_id.clone(),
    };
    let delivery = store.journal(reception).await?;
    let details = crate::details::Details {
        replay_of: Some(original.to_string()),
        notes,
        criticality: type_def.map(|t| t.criticality.as_str().to_owned()),
        confidence: proof.confidence.map(|c| c.as_str().to_owned()),
        ..crate::details::Details::default()
    };
    let request = DecideRequest {
        delivery: delivery.clone(),
        event_type,
        key,
        // A replay never reserves anything; the lease is only the request's required field.
        lease: time::Duration::seconds(1),
        details_json: details.to_json(),
        now,
        resource,
        critical: type_def.is_none_or(|t| t.criticality == Criticality::Critical),
    };
    // The store may run the matrix on another thread (SQLite's writer), so it owns what it
    // reads: the doubt's sentence and the ignore reason are made here.
    let doubt = doubt.as_ref().map(Doubt::sentence);
    let ignored = format!(
        "Ignored: a late replay of {original} re-ran strategy version {} and found the completed effect through the proof, even past the index horizon.",
        proof
            .strategy
            .as_ref()
            .map(|s| format!("{}@{}", s.name, s.version))
            .unwrap_or_default()
    );
    let reconcile = move |reason: String| Decision {
        action: Action::Reconcile,
        layer: None,
        reason,
        flags: flags.clone(),
        rule: "RP2",
    };
    let matrix = move |view: &PriorView| match &doubt {
        Some(d) => reconcile(d.clone()),
        None => {
            let same = view.effect.as_ref().map(|e| &e.id) == target.as_ref();
            if same && view.differences.is_empty() {
                Decision {
                    action: Action::Ignore,
                    layer: Some(Layer::Effect),
                    reason: ignored.clone(),
                    flags: Vec::new(),
                    rule: "RP1",
                }
            } else {
                reconcile(
                    "Kept for reconciliation: a late replay whose key now leads to another effect than the one in its proof; approve it in the queue.".to_owned(),
                )
            }
        }
    };
    let outcome = store.decide(request, &matrix).await?;
    Ok(ReplayOutcome {
        original: original.clone(),
        delivery,
        action: outcome.decision.action,
        reason: outcome.decision.reason.clone(),
        rule: outcome.decision.rule,
        effect: outcome.effect.clone(),
        result: outcome.existing_result.clone(),
        queue_item: outcome.queue_item.clone(),
    })
}
