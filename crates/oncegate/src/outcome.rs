//! What a delivery comes to: run the effect now (holding its reservation), already done,
//! isolated as a collision, sent to reconciliation, or refused — each with its proof.

use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_core::matrix::{Action, Confidence, Decision, Difference, Prior};
use oncegate_store::{DecideOutcome, StrategyRef};
use time::OffsetDateTime;

use crate::details::Details;
use crate::gate::{Gate, MAX_RESULT_BYTES};
use crate::plan::Plan;
use crate::refusal::Refusal;
use crate::GateError;

/// What a delivery comes to.
#[derive(Debug)]
pub enum Outcome {
    /// Run the effect now; report its outcome through the reservation.
    Process(Held),
    /// Gateway mode: the effect must run, and its forward to the type's endpoint is durable;
    /// the forwarder holds the reservation and delivers it exactly once. The action is
    /// `process`; there is nothing for the caller to run or report.
    Forwarded(Proof),
    /// The effect already ran (or is running): do nothing, answer with its result.
    Ignore(Proof),
    /// A key match whose discriminants differ: kept in the queue for a person (or the
    /// authority) to tell a duplicate from a distinct effect.
    Quarantine(Proof),
    /// The delivery cannot be identified safely enough for its criticality: kept in the queue
    /// for the authority or a person.
    Reconcile(Proof),
    /// Refused before identification (journaled, with its proof).
    Rejected(Rejected),
}

impl Outcome {
    pub(crate) fn of(gate: &Gate, proof: Proof, o: DecideOutcome) -> Outcome {
        match (o.decision.action, o.reservation) {
            (Action::Process, Some(r)) => Outcome::Process(Held {
                gate: gate.clone(),
                effect: r.effect,
                fencing: r.fencing_token,
                lease_until: Some(r.lease_until),
                proof: Some(proof),
            }),
            (Action::Ignore, _) => Outcome::Ignore(proof),
            (Action::Quarantine, _) => Outcome::Quarantine(proof),
            // A reject never comes out of an identified decision; a process without a
            // reservation cannot either (the store guarantees it), and is read as the safe side.
            _ => Outcome::Reconcile(proof),
        }
    }

    /// The proof of the decision.
    pub fn proof(&self) -> &Proof {
        match self {
            Outcome::Process(held) => held
                .proof
                .as_ref()
                .expect("a reservation out of a decision carries its proof"),
            Outcome::Ignore(p)
            | Outcome::Forwarded(p)
            | Outcome::Quarantine(p)
            | Outcome::Reconcile(p) => p,
            Outcome::Rejected(r) => &r.proof,
        }
    }

    /// The action decided.
    pub fn action(&self) -> Action {
        self.proof().action()
    }
}

/// A refused reception: why, and its proof.
#[derive(Debug, Clone)]
pub struct Rejected {
    /// Why.
    pub refusal: Refusal,
    /// The proof of the `reject` decision.
    pub proof: Proof,
}

/// Why a delivery was decided as it was: what the decision answer says, in types.
#[derive(Debug, Clone)]
pub struct Proof {
    /// The journal entry of the reception.
    pub delivery: DeliveryId,
    /// The event type, when the provider's contract could read one.
    pub event_type: Option<String>,
    /// The matrix's decision: action, one-sentence reason, layer, flags, row.
    pub decision: Decision,
    /// The strategy that made the key, if one did.
    pub strategy: Option<StrategyRef>,
    /// The key's confidence.
    pub confidence: Option<Confidence>,
    /// The effect key.
    pub effect_key: Option<String>,
    /// The effect reserved, duplicated, or collided with.
    pub effect: Option<EffectId>,
    /// What the store held under the key.
    pub prior: Prior,
    /// For an ignore: the existing effect's result (JSON text), or its permanent error.
    pub existing_result: Option<String>,
    /// The first delivery of the existing effect, or the earlier packet of a transport match.
    pub reference_delivery: Option<DeliveryId>,
    /// The discriminants that differ from the existing effect's.
    pub differences: Vec<Difference>,
    /// The queue item of a quarantine or a reconcile.
    pub queue_item: Option<QueueItemId>,
    /// The recorded details; their `shadow` holds the shadow verdicts that differ from the
    /// decision.
    pub details: Details,
}

impl Proof {
    /// The proof of a recorded decision: the plan's strategy and confidence, and the value of
    /// its key (`effect_key`), which the decision's request took from the plan.
    pub(crate) fn decided(
        delivery: DeliveryId,
        event_type: Option<String>,
        plan: Plan,
        effect_key: Option<String>,
        differences: Vec<Difference>,
        details: Details,
        o: &DecideOutcome,
    ) -> Proof {
        Proof {
            delivery,
            event_type,
            decision: o.decision.clone(),
            strategy: plan.strategy,
            confidence: plan.confidence,
            effect_key,
            effect: o.effect.clone(),
            prior: o.prior,
            existing_result: o.existing_result.clone(),
            reference_delivery: o.reference_delivery.clone(),
            differences,
            queue_item: o.queue_item.clone(),
            details,
        }
    }

    pub(crate) fn refused(delivery: DeliveryId, details: Details, o: &DecideOutcome) -> Proof {
        Proof {
            delivery,
            event_type: None,
            decision: o.decision.clone(),
            strategy: None,
            confidence: None,
            effect_key: None,
            effect: None,
            prior: o.prior,
            existing_result: None,
            reference_delivery: None,
            differences: Vec::new(),
            queue_item: None,
            details,
        }
    }

    /// The action decided.
    pub fn action(&self) -> Action {
        self.decision.action
    }
}

/// The reservation of an effect that must run now, held by whoever runs it: report its
/// outcome with [`complete`](Held::complete) or [`fail`](Held::fail), and keep a long effect's
/// lease alive with [`heartbeat`](Held::heartbeat).
///
/// Dropping it without an outcome leaves the effect `in_progress` until its lease passes; it
/// then becomes `unknown`, and a critical one is verified before anything runs it again.
#[derive(Debug)]
pub struct Held {
    gate: Gate,
    effect: EffectId,
    fencing: u64,
    lease_until: Option<OffsetDateTime>,
    proof: Option<Proof>,
}

impl Held {
    pub(crate) fn rebuilt(gate: Gate, effect: EffectId, fencing: u64) -> Held {
        Held {
            gate,
            effect,
            fencing,
            lease_until: None,
            proof: None,
        }
    }

    /// The effect held.
    pub fn effect(&self) -> &EffectId {
        &self.effect
    }

    /// The fencing token: the store refuses an outcome under an older one.
    pub fn fencing(&self) -> u64 {
        self.fencing
    }

    /// When the lease passes, as granted or last renewed (unknown for a rebuilt reservation
    /// until its first heartbeat).
    pub fn lease_until(&self) -> Option<OffsetDateTime> {
        self.lease_until
    }

    /// The proof of the `process` decision this reservation came out of (`None` for one
    /// rebuilt from a token with [`Gate::held`]).
    pub fn proof(&self) -> Option<&Proof> {
        self.proof.as_ref()
    }

    /// The effect ran: records its result (JSON text, at most 16 KiB: references, not
    /// payloads), which every later duplicate answers with.
    pub async fn complete(self, result: &str) -> Result<(), GateError> {
        if result.len() > MAX_RESULT_BYTES {
            return Err(GateError::TooLarge {
                what: "result",
                bytes: result.len(),
                max: MAX_RESULT_BYTES,
            });
        }
        if serde_json::from_str::<serde::de::IgnoredAny>(result).is_err() {
            return Err(GateError::NotJson { what: "result" });
        }
        let gate = &self.gate;
        gate.store()
            .complete(&self.effect, self.fencing, result, gate.now())
            .await?;
        gate.metrics().effect_outcome("completed");
        tracing::info!(effect_id = %self.effect, fencing = self.fencing, "effect completed");
        Ok(())
    }

    /// The effect failed: `retryable` releases it for the provider's next retry; otherwise the
    /// failure is permanent and duplicates answer with `error`.
    pub async fn fail(self, retryable: bool, error: &str) -> Result<(), GateError> {
        if error.len() > MAX_RESULT_BYTES {
            return Err(GateError::TooLarge {
                what: "error",
                bytes: error.len(),
                max: MAX_RESULT_BYTES,
            });
        }
        let gate = &self.gate;
        gate.store()
            .fail(&self.effect, self.fencing, retryable, error, gate.now())
            .await?;
        gate.metrics().effect_outcome(if retryable {
            "failed_retryable"
        } else {
            "failed"
        });
        tracing::info!(effect_id = %self.effect, fencing = self.fencing, retryable, "effect failed");
        Ok(())
    }

    /// Extends the lease by the gate's lease time; returns when it now passes.
    pub async fn heartbeat(&mut self) -> Result<OffsetDateTime, GateError> {
        let gate = &self.gate;
        let until = gate
            .store()
            .heartbeat(&self.effect, self.fencing, gate.lease_time(), gate.now())
            .await?;
        self.lease_until = Some(until);
        Ok(until)
    }
}
