//! A delivery's way through the gate: `deliver` and `refuse` run the pipeline as a task of
//! its own, stage by stage (refuse, parse and identify in `pipeline`; then decide: journal,
//! shadows, the store's decision; then answer: count, log, settle, proof), a refusal recorded
//! by `reject`; a decision the store could not record waits in the backlog until it is back.
//! Also the reservation a transport rebuilds (`held`), the late replay and the breakers' rule.

use std::sync::Arc;
use std::time::Instant;

use oncegate_core::ids::{DeliveryId, EffectId};
use oncegate_core::matrix::{self, Difference, Rejection, Situation};
use oncegate_store::{DecideOutcome, DecideRequest, PriorView};
use time::OffsetDateTime;

use crate::backlog::Undecided;
use crate::details::Details;
use crate::error::GateError;
use crate::gate::Gate;
use crate::metrics::DecisionLabels;
use crate::outcome::{Held, Outcome, Proof, Rejected};
use crate::pipeline::{self, label_or, Identified};
use crate::plan;
use crate::reception::Reception;
use crate::refusal::Refusal;
use crate::{breaker, finish, shadow};

impl Gate {
    /// Journals and decides one delivery whose sender was authenticated (or needs none): a
    /// body that could not be kept, an environment the contract does not declare or a body
    /// that is not acceptable JSON is refused ([`Outcome::Rejected`]); everything else is
    /// identified with the contract and decided in the store.
    ///
    /// The pipeline runs in the caller's task, to its end: a caller that gives up (a client
    /// that hangs up, a request timeout) hands the rest to a task of its own, so a decision is
    /// never cut between its journal entry and its proof (see `finish`).
    ///
    /// A store error is returned after the reception was journaled when it could be: a
    /// decision the store could not record while it was unavailable is remembered, and its
    /// proof is written once the store is back (by the next decision or the upkeep).
    pub async fn deliver(&self, reception: Reception) -> Result<Outcome, GateError> {
        let gate = self.clone();
        match finish::to_the_end(async move { gate.pipeline(reception).await }).await {
            Ok(result) => result,
            Err(finish::Panicked) => {
                tracing::error!("the delivery pipeline panicked");
                Err(GateError::Panicked)
            }
        }
    }

    /// Journals a reception refused by its transport (its sender could not be authenticated)
    /// and records its `reject` decision.
    pub async fn refuse(
        &self,
        reception: Reception,
        refusal: Refusal,
    ) -> Result<Outcome, GateError> {
        let gate = self.clone();
        let task = async move {
            let started = Instant::now();
            let received_at = reception.received_at.unwrap_or_else(|| gate.now());
            gate.reject(&reception, received_at, started, refusal).await
        };
        match finish::to_the_end(task).await {
            Ok(result) => result,
            Err(finish::Panicked) => {
                tracing::error!("the refusal pipeline panicked");
                Err(GateError::Panicked)
            }
        }
    }

    /// The collision breakers' rule: the contract's threshold and minimum sample over the
    /// gate's window.
    pub fn breaker_rule(&self) -> oncegate_store::BreakerRule {
        breaker::rule(self)
    }

    /// Replays a journaled delivery late, on purpose (an operator's decision): its proof's
    /// strategy version over its stored payload finds the effect it already had (`ignore`), or
    /// it is kept for reconciliation. Journaled as a new reception naming the original; see
    /// [`crate::replay`].
    pub async fn replay(
        &self,
        original: &DeliveryId,
    ) -> Result<crate::replay::ReplayOutcome, GateError> {
        Ok(crate::replay::replay(
            self.store().as_ref(),
            self.contract(),
            self.salt(),
            original,
            self.now(),
        )
        .await?)
    }

    /// The reservation of `effect` under `fencing`, as a transport rebuilds it from the token
    /// it handed out: its outcome is reported through it.
    pub fn held(&self, effect: EffectId, fencing: u64) -> Held {
        Held::rebuilt(self.clone(), effect, fencing)
    }

    /// A delivery's pipeline, stage by stage: refuse, parse, identify (`pipeline`, pure), then
    /// decide (journal, shadows, the store's decision) and answer (count, log, settle, proof).
    async fn pipeline(&self, r: Reception) -> Result<Outcome, GateError> {
        let started = Instant::now();
        let received_at = r.received_at.unwrap_or_else(|| self.now());
        let contract = self.contract().clone();
        if let Some(refusal) = pipeline::refusal(&r, &contract, &self.limits()) {
            return self.reject(&r, received_at, started, refusal).await;
        }
        let doc = match pipeline::parse(&r, &self.limits()) {
            Ok(doc) => doc,
            Err(refusal) => return self.reject(&r, received_at, started, refusal).await,
        };
        let (mut identified, entry) =
            pipeline::identify(&contract, &r, &doc, self.salt(), received_at);
        let decided = self
            .decide(&r, &doc, &mut identified, entry, received_at)
            .await?;
        self.answer(&r, identified, decided, received_at, started)
            .await
    }

    /// Stage 4, decide: journals the reception, runs the type's shadow strategies (when it has
    /// any, before the decision, so their verdicts are part of the proof) and records the
    /// store's decision.
    async fn decide(
        &self,
        r: &Reception,
        doc: &oncegate_core::json::Value,
        identified: &mut Identified<'_>,
        entry: oncegate_store::NewReception,
        received_at: OffsetDateTime,
    ) -> Result<Decided, GateError> {
        // The request owns the plan's key, resource and details: they move into it, and the
        // proof keeps the key's value (`Decided::effect_key`).
        let plan = &mut identified.plan;
        let key = plan.key.take();
        let effect_key = key.as_ref().map(|k| k.value.clone());
        let resource = plan.resource.take();
        let critical = plan.critical;
        let mut details = std::mem::take(&mut plan.details);
        let event_type = &identified.event_type;
        // The outcome does not repeat the differences the matrix saw, so the closure keeps the
        // last view's list (the store may run it more than once; the last run is the one
        // applied). The store may run the closure on another thread (SQLite's writer), so it
        // owns its state.
        let seen: Arc<std::sync::Mutex<Vec<Difference>>> = Arc::default();
        let shape = identified.plan.shape.clone();
        let matrix = {
            let seen = seen.clone();
            move |view: &PriorView| {
                *seen.lock().expect("differences lock") = view.differences.clone();
                shape.decide(view)
            }
        };
        let request = |delivery: DeliveryId, details: &Details| DecideRequest {
            delivery,
            event_type: event_type.clone(),
            key,
            lease: self.lease_time(),
            details_json: details.to_json(),
            now: received_at,
            resource,
            critical,
        };
        let shadowed = match (identified.type_def, event_type) {
            (Some(t), Some(et)) if !t.shadow.is_empty() => Some((t, et)),
            _ => None,
        };
        let (delivery, shadows, decided) = match shadowed {
            Some((t, et)) => {
                let delivery = self.store().journal(entry).await?;
                // Shadow strategies see the delivery before the decision so their verdicts are
                // part of the proof; they never change it.
                let shadows = shadow::verdicts(self, t, r, doc, et, &delivery, received_at).await;
                details.shadow = shadows.clone();
                let decided = self
                    .store()
                    .decide(request(delivery.clone(), &details), &matrix)
                    .await;
                (delivery, shadows, decided)
            }
            None => {
                // No shadow needs the delivery's id first: journal and decide in one call,
                // which a store may run in one commit (the entry is kept whatever the decision).
                let pending = request(DeliveryId::from_u128(0), &details);
                let (delivery, decided) = self
                    .store()
                    .journal_and_decide(entry, pending, &matrix)
                    .await?;
                (delivery, Vec::new(), decided)
            }
        };
        let outcome = match decided {
            Ok(o) => o,
            Err(e) => return Err(self.undecided(delivery, event_type.clone(), e.into())),
        };
        let differences = std::mem::take(&mut *seen.lock().expect("differences lock"));
        Ok(Decided {
            delivery,
            outcome,
            details,
            shadows,
            differences,
            effect_key,
        })
    }

    /// Stage 5, answer: what follows a recorded decision (the reconciler woken, the breaker
    /// counted, metrics and the log line, missed decisions settled, shadow disagreements
    /// recorded, gateway mode's forward enqueued) and the outcome with its proof.
    async fn answer(
        &self,
        r: &Reception,
        identified: Identified<'_>,
        decided: Decided,
        received_at: OffsetDateTime,
        started: Instant,
    ) -> Result<Outcome, GateError> {
        let Decided {
            delivery,
            outcome,
            mut details,
            shadows,
            differences,
            effect_key,
        } = decided;
        if outcome.queue_item.is_some() {
            // Committed: the reconciler can attempt it now rather than at its next poll.
            self.wake().notify_one();
        }
        if breaker::counts(&outcome) {
            if let Some(scope) = identified.breaker(r) {
                breaker::count(self, &scope, &outcome).await;
            }
        }
        self.metrics().decision(
            &identified.labels(r, &outcome),
            &outcome.decision,
            started.elapsed(),
        );
        identified.log(r, &delivery, &outcome);
        // A decision recorded means the store is back: settle what it missed meanwhile.
        let waiting = self.settle_undecided().await;
        if waiting > 0 {
            tracing::debug!(waiting, "missed decisions still wait for the store");
        }
        details.shadow = match &identified.event_type {
            Some(et) if !shadows.is_empty() => {
                shadow::settle(
                    self,
                    r.origin(),
                    et,
                    &delivery,
                    outcome.decision.action,
                    &shadows,
                    received_at,
                )
                .await
            }
            _ => Vec::new(),
        };
        let forward = identified.forward(r, &delivery, &outcome, received_at);
        let proof = Proof::decided(
            delivery,
            identified.event_type,
            identified.plan,
            effect_key,
            differences,
            details,
            &outcome,
        );
        if let Some(forward) = forward {
            // Not enqueued (the store went away): the reservation's lease runs out and the
            // unknown-outcome path takes it (verify, or release for the forwarder to claim).
            self.enqueue_forward(forward).await?;
            return Ok(Outcome::Forwarded(proof));
        }
        Ok(Outcome::of(self, proof, outcome))
    }

    /// Journals a refused reception, records its `reject` decision and returns it.
    async fn reject(
        &self,
        r: &Reception,
        received_at: OffsetDateTime,
        started: Instant,
        refusal: Refusal,
    ) -> Result<Outcome, GateError> {
        let code = refusal.kind.code();
        self.metrics().rejected(code);
        let provider = self.contract().provider(&r.provider);
        let entry = plan::journal_entry(r, received_at, None, None, provider);
        let rejection = Rejection {
            code: code.to_owned(),
            message: refusal.fragment.clone(),
        };
        let decision = matrix::decide(&Situation::Rejected(rejection));
        let details = Details::rejected(code);
        let request = DecideRequest {
            // Replaced by the journaled delivery's id.
            delivery: DeliveryId::from_u128(0),
            event_type: None,
            key: None,
            lease: self.lease_time(),
            details_json: details.to_json(),
            now: received_at,
            resource: None,
            critical: true,
        };
        let recorded = decision.clone();
        let matrix = move |_: &PriorView| recorded.clone();
        let (delivery, decided) = self
            .store()
            .journal_and_decide(entry, request, &matrix)
            .await?;
        let outcome: DecideOutcome = match decided {
            Ok(o) => o,
            Err(e) => return Err(self.undecided(delivery, None, e.into())),
        };
        self.metrics().decision(
            &DecisionLabels {
                provider: label_or(provider.is_some(), &r.provider, "(unknown)"),
                env: &r.env,
                event_type: "(rejected)",
                strategy: None,
                level: "",
                action: decision.action.as_str(),
                confidence: None,
            },
            &decision,
            started.elapsed(),
        );
        tracing::info!(
            delivery_id = %delivery,
            tenant = %r.tenant,
            provider = %r.provider,
            env = %r.env,
            action = "reject",
            code,
            size = r.body.size(),
            correlation_id = r.correlation_id.as_deref().unwrap_or(""),
            "reception refused"
        );
        let proof = Proof::refused(delivery, details, &outcome);
        Ok(Outcome::Rejected(Rejected { refusal, proof }))
    }

    /// A journaled reception whose decision could not be recorded: remembered when the store
    /// is unavailable, so its proof is written once the store is back.
    fn undecided(
        &self,
        delivery: DeliveryId,
        event_type: Option<String>,
        e: GateError,
    ) -> GateError {
        if e.is_unavailable() {
            tracing::warn!(delivery_id = %delivery, "journaled but not decided: the store went away");
            self.backlog().remember(Undecided {
                delivery,
                event_type,
            });
        }
        e
    }

    /// Records the decisions the store missed while it was down, as rejections. Returns how
    /// many are still waiting.
    pub(crate) async fn settle_undecided(&self) -> usize {
        self.backlog()
            .settle(
                self.store().as_ref(),
                self.metrics(),
                self.now(),
                self.lease_time(),
            )
            .await
    }
}

/// What the decide stage recorded, for the answer stage.
struct Decided {
    delivery: DeliveryId,
    outcome: DecideOutcome,
    details: Details,
    shadows: Vec<crate::details::ShadowVerdict>,
    differences: Vec<Difference>,
    /// The value of the key the request took from the plan, for the proof.
    effect_key: Option<String>,
}
