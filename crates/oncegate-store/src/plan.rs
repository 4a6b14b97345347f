//! The backend-independent half of a decision: how stored rows become the view the
//! matrix reads, and what each decision writes. The backends only run the SQL; keeping this
//! logic in one place is what makes them answer alike.

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_core::matrix::{Action, Decision, Flag, Layer, Prior, TransportMatch};

use crate::codes;
use crate::decision::{EffectKey, PriorEffect, PriorView};
use crate::delivery::TransportStrength;
use crate::effect::{EffectState, LinkKind};
use crate::error::StoreError;
use crate::queue::QueueKind;

/// How many times a decision is re-read and re-run after a race changed what it was based on.
/// Each retry follows someone else's commit, so this only runs out under a pathological storm.
pub(crate) const MAX_ATTEMPTS: usize = 16;

/// The delivery being decided, as journaled.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    pub transport_key: Option<String>,
    pub transport_strength: Option<TransportStrength>,
    pub body_sha256: String,
    pub decided: bool,
}

impl Scope {
    /// The scope hash of the request's key, with the type the request names (it may be known
    /// only after the body was read). An operation-scoped key ignores the type: every type
    /// declaring the operation must find the same effect.
    pub fn key_hash(&self, event_type: Option<&str>, key: &EffectKey) -> String {
        codes::scope_hash(
            &self.tenant,
            &self.provider,
            &self.env,
            key.scope.part(event_type).as_deref(),
            &key.strategy.name,
            key.strategy.version,
            &key.value,
        )
    }

    /// Only a provider's delivery id can say "the same packet again": a weak transport key
    /// (the body hash) would match two legitimate byte-identical operations, the very case the
    /// product exists to keep apart.
    pub fn strong_transport_key(&self) -> Option<&str> {
        match self.transport_strength {
            Some(TransportStrength::Strong) => self.transport_key.as_deref(),
            _ => None,
        }
    }
}

/// An effect row as the view reads it.
#[derive(Debug, Clone)]
pub(crate) struct EffectRow {
    pub id: String,
    pub state: String,
    pub token: i64,
    pub lease_until: Option<i64>,
    pub first_delivery: String,
    pub discriminants: String,
    pub result: Option<String>,
    pub error: Option<String>,
}

pub(crate) fn parse_effect_id(s: &str) -> Result<EffectId, StoreError> {
    s.parse()
        .map_err(|_| StoreError::corrupt(format!("stored effect id {s:?} is malformed")))
}

pub(crate) fn parse_delivery_id(s: &str) -> Result<DeliveryId, StoreError> {
    s.parse()
        .map_err(|_| StoreError::corrupt(format!("stored delivery id {s:?} is malformed")))
}

pub(crate) fn parse_queue_id(s: &str) -> Result<QueueItemId, StoreError> {
    s.parse()
        .map_err(|_| StoreError::corrupt(format!("stored queue item id {s:?} is malformed")))
}

pub(crate) fn parse_state(s: &str) -> Result<EffectState, StoreError> {
    EffectState::parse(s).ok_or_else(|| StoreError::corrupt(format!("unknown effect state {s:?}")))
}

/// A stored state as of `now`: a reservation whose lease passed reads as unknown, whether or
/// not `expire_leases` has run yet, so answers never depend on when the sweeper last ran.
pub(crate) fn effective_state(
    state: EffectState,
    lease_until: Option<i64>,
    now_ms: i64,
) -> EffectState {
    match (state, lease_until) {
        (EffectState::Reserved, Some(until)) if until <= now_ms => EffectState::Unknown,
        _ => state,
    }
}

pub(crate) fn prior_effect(
    row: EffectRow,
    indexed: bool,
    now_ms: i64,
) -> Result<PriorEffect, StoreError> {
    let state = effective_state(parse_state(&row.state)?, row.lease_until, now_ms);
    Ok(PriorEffect {
        id: parse_effect_id(&row.id)?,
        state,
        fencing_token: row.token as u64,
        first_delivery: parse_delivery_id(&row.first_delivery)?,
        discriminants: codes::parse_map(&row.discriminants)?,
        result: row.result,
        error: row.error,
        indexed,
    })
}

/// What the matrix is told about the prior effect.
pub(crate) fn prior_of(effect: Option<&PriorEffect>, index_entry_without_effect: bool) -> Prior {
    match effect {
        None if index_entry_without_effect => Prior::Purged,
        None => Prior::None,
        Some(e) if !e.indexed => Prior::Purged,
        Some(e) => match e.state {
            EffectState::Reserved | EffectState::Released => Prior::InProgress,
            EffectState::Completed => Prior::Completed,
            EffectState::Failed { retryable } => Prior::Failed { retryable },
            EffectState::Unknown => Prior::Unknown,
        },
    }
}

/// The transport match, from the earliest decided delivery with the same strong transport key
/// (one with the same body first).
pub(crate) fn transport_of(
    own: &Scope,
    earlier: Option<(String, String)>,
) -> Result<(TransportMatch, Option<DeliveryId>), StoreError> {
    match earlier {
        None => Ok((TransportMatch::None, None)),
        Some((id, hash)) => {
            let id = parse_delivery_id(&id)?;
            let m = if hash == own.body_sha256 {
                TransportMatch::SameIdSameBody
            } else {
                TransportMatch::SameIdOtherBody
            };
            Ok((m, Some(id)))
        }
    }
}

/// What a decision writes besides its proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// A new effect under the key in the unique index (or in its expired slot). Losing the
    /// atomic insert means someone else won the key: re-read and decide again.
    ReserveIndexed,
    /// The prior effect again, under the next fencing token. The conditional update fails if
    /// anyone else moved the effect first: re-read and decide again.
    Takeover {
        effect: EffectId,
        token: u64,
    },
    /// A new effect outside the unique index: it may be a distinct operation sharing the key.
    ReserveUnindexed,
    Link {
        effect: EffectId,
        kind: LinkKind,
    },
    Queue(QueueKind),
    ProofOnly,
}

pub(crate) fn plan(key: Option<&EffectKey>, view: &PriorView, decision: &Decision) -> Plan {
    match decision.action {
        Action::Process => {
            if key.is_none() {
                return Plan::ReserveUnindexed;
            }
            match (view.prior, view.effect.as_ref()) {
                (Prior::None | Prior::Purged, _) => Plan::ReserveIndexed,
                (_, Some(_)) if decision.has(Flag::PossibleDuplicate) => Plan::ReserveUnindexed,
                (Prior::Failed { retryable: true } | Prior::Unknown, Some(e)) => Plan::Takeover {
                    effect: e.id.clone(),
                    token: e.fencing_token,
                },
                // A matrix that answers `process` over a live effect without flagging a possible
                // duplicate still never gets a second holder of the same key: the new effect
                // stays outside the unique index.
                _ => Plan::ReserveUnindexed,
            }
        }
        Action::Ignore => match &view.effect {
            Some(e) => {
                let kind = if decision.layer == Some(Layer::Transport) {
                    LinkKind::Transport
                } else {
                    LinkKind::Effect
                };
                Plan::Link {
                    effect: e.id.clone(),
                    kind,
                }
            }
            None => Plan::ProofOnly,
        },
        Action::Quarantine => Plan::Queue(QueueKind::Quarantine),
        Action::Reconcile => Plan::Queue(QueueKind::Reconcile),
        Action::Reject => Plan::ProofOnly,
    }
}

/// The discriminants that disagree between the stored effect and the incoming delivery, over
/// the union of their fields (a field present on one side only is a difference too).
pub(crate) fn differences(
    existing: &std::collections::BTreeMap<String, String>,
    incoming: &std::collections::BTreeMap<String, String>,
) -> Vec<oncegate_core::matrix::Difference> {
    let fields: std::collections::BTreeSet<&String> =
        existing.keys().chain(incoming.keys()).collect();
    fields
        .into_iter()
        .filter(|f| existing.get(*f) != incoming.get(*f))
        .map(|f| oncegate_core::matrix::Difference {
            field: f.clone(),
            existing: existing.get(f).cloned(),
            incoming: incoming.get(f).cloned(),
        })
        .collect()
}

/// The delivery a decision points back to: the first delivery of the existing effect, else
/// the earlier packet with the same transport key if any.
///
/// A transport-layer ignore points at the effect's first delivery too, not at the earliest
/// journaled packet with the same delivery id: under concurrency that packet can be another
/// retry that was itself ignored, and the proof should name the delivery whose effect it is.
pub(crate) fn reference_delivery(view: &PriorView) -> Option<DeliveryId> {
    view.effect
        .as_ref()
        .map(|e| e.first_delivery.clone())
        .or_else(|| view.transport_reference.clone())
}

/// The existing effect's outcome, returned with an ignore (its result, or its permanent error).
pub(crate) fn existing_result(view: &PriorView) -> Option<String> {
    view.effect
        .as_ref()
        .and_then(|e| e.result.clone().or_else(|| e.error.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{Horizon, StrategyRef};
    use oncegate_core::matrix::Confidence;

    fn key() -> EffectKey {
        EffectKey {
            strategy: StrategyRef {
                name: "s".into(),
                version: 1,
                level: "provider_id".into(),
            },
            value: "k".into(),
            scope: Default::default(),
            confidence: Confidence::Strong,
            horizon: Horizon::Durable,
            discriminants: Default::default(),
        }
    }

    fn effect(state: EffectState, indexed: bool) -> PriorEffect {
        PriorEffect {
            id: EffectId::from_u128(7),
            state,
            fencing_token: 3,
            first_delivery: DeliveryId::from_u128(1),
            discriminants: Default::default(),
            result: Some("r".into()),
            error: None,
            indexed,
        }
    }

    fn decision(action: Action, flags: &[Flag]) -> Decision {
        Decision {
            action,
            layer: None,
            reason: String::new(),
            flags: flags.to_vec(),
            rule: "T",
        }
    }

    fn check(prior: Prior, e: Option<PriorEffect>, d: Decision, expected: Plan) {
        let view = PriorView {
            transport: TransportMatch::None,
            transport_reference: None,
            prior,
            effect: e,
            differences: vec![],
            breaker_open: false,
            next_seq: 1,
        };
        assert_eq!(plan(Some(&key()), &view, &d), expected, "{prior:?} {d:?}");
    }

    #[test]
    fn plans_follow_the_prior_and_the_flags() {
        let eid = EffectId::from_u128(7);
        check(
            Prior::None,
            None,
            decision(Action::Process, &[]),
            Plan::ReserveIndexed,
        );
        check(
            Prior::Failed { retryable: true },
            Some(effect(EffectState::Failed { retryable: true }, true)),
            decision(Action::Process, &[Flag::RetryAfterFailure]),
            Plan::Takeover {
                effect: eid.clone(),
                token: 3,
            },
        );
        check(
            Prior::Unknown,
            Some(effect(EffectState::Unknown, true)),
            decision(Action::Process, &[Flag::Takeover]),
            Plan::Takeover {
                effect: eid.clone(),
                token: 3,
            },
        );
        check(
            Prior::Completed,
            Some(effect(EffectState::Completed, true)),
            decision(Action::Process, &[Flag::PossibleDuplicate]),
            Plan::ReserveUnindexed,
        );
        check(
            Prior::Purged,
            Some(effect(EffectState::Completed, false)),
            decision(
                Action::Process,
                &[Flag::PriorPurged, Flag::PossibleDuplicate],
            ),
            Plan::ReserveIndexed,
        );
        check(
            Prior::Completed,
            Some(effect(EffectState::Completed, true)),
            decision(Action::Ignore, &[]),
            Plan::Link {
                effect: eid,
                kind: LinkKind::Effect,
            },
        );
        check(
            Prior::None,
            None,
            decision(Action::Reconcile, &[]),
            Plan::Queue(QueueKind::Reconcile),
        );
        check(
            Prior::None,
            None,
            decision(Action::Reject, &[]),
            Plan::ProofOnly,
        );
    }

    #[test]
    fn an_expired_lease_reads_as_unknown() {
        assert_eq!(
            effective_state(EffectState::Reserved, Some(10), 10),
            EffectState::Unknown
        );
        assert_eq!(
            effective_state(EffectState::Reserved, Some(11), 10),
            EffectState::Reserved
        );
        assert_eq!(
            effective_state(EffectState::Completed, Some(1), 10),
            EffectState::Completed
        );
    }
}
