//! The pure stages of a delivery's pipeline, before and after the store: refuse what cannot be
//! kept, parse the body strictly, identify it with the contract, and, once decided, the
//! labels and the log line of its answer. `Gate::pipeline` runs them in that order around the
//! store's decision; each takes what it needs, not the gate.

use oncegate_core::contract::{Contract, EventType, Provider};
use oncegate_core::ids::DeliveryId;
use oncegate_core::json::{self, JsonErrorKind, Limits};
use oncegate_core::matrix::Confidence;
use oncegate_store::{BreakerScope, DecideOutcome, NewForward, NewReception};
use time::OffsetDateTime;

use crate::breaker;
use crate::metrics::DecisionLabels;
use crate::plan::{self, Plan};
use crate::reception::{Cut, Reception};
use crate::refusal::{Refusal, RefusalKind};

/// Stage 1, refuse: a body that could not be kept whole, or an environment the contract does
/// not declare. `None` when the reception may go on.
pub(crate) fn refusal(r: &Reception, contract: &Contract, limits: &Limits) -> Option<Refusal> {
    // A body cut at its deadline is refused like one cut by its sender (journaled with the
    // size and hash of what arrived), under its own code.
    match r.body.cut_by() {
        Some(Cut::Late(sentence)) => {
            return Some(Refusal::new(RefusalKind::BodyTimeout, sentence.clone()));
        }
        Some(Cut::Broken) => {
            return Some(Refusal::new(
                RefusalKind::IncompleteBody,
                "the body could not be read to its end",
            ));
        }
        Some(Cut::OverLimit) => {
            let f = format!(
                "the body of {} bytes is over the limit of {} bytes",
                r.body.size(),
                limits.max_bytes
            );
            return Some(Refusal::new(RefusalKind::TooLarge, f));
        }
        None => {}
    }
    let environments = &contract.environments;
    if !environments.is_empty() && !environments.iter().any(|e| e == &r.env) {
        let f = format!(
            "environment {:?} is not one the contract declares ({})",
            r.env,
            environments.join(", ")
        );
        return Some(Refusal::new(RefusalKind::UnknownEnvironment, f));
    }
    None
}

/// Stage 2, parse: the body as strict JSON, or the refusal that says why it is not.
pub(crate) fn parse(r: &Reception, limits: &Limits) -> Result<json::Value, Refusal> {
    json::parse(r.body.bytes(), limits).map_err(|e| match e.kind {
        JsonErrorKind::TooLarge { .. } => Refusal::new(RefusalKind::TooLarge, format!("the {e}")),
        _ => Refusal::new(
            RefusalKind::MalformedJson,
            format!("the body is not acceptable JSON: {e}"),
        ),
    })
}

/// What identification made of one delivery: its provider and type in the contract, its
/// plan (key, strategy, the matrix's question, the proof's details); the collision breaker
/// its strategy counts on is named only for a decision that counts (`breaker`).
pub(crate) struct Identified<'c> {
    /// The provider's section of the contract, when it has one.
    pub provider: Option<&'c Provider>,
    /// The event type read from the body or headers, when the provider says where.
    pub event_type: Option<String>,
    /// The type's definition, when the contract has it.
    pub type_def: Option<&'c EventType>,
    /// The key, strategy and question for the matrix.
    pub plan: Plan,
}

/// Stage 3, identify: pure, from the contract alone. Also returns the reception's journal
/// entry, which owns the body (handed to the store, never copied).
pub(crate) fn identify<'c>(
    contract: &'c Contract,
    r: &Reception,
    doc: &json::Value,
    salt: &[u8],
    received_at: OffsetDateTime,
) -> (Identified<'c>, NewReception) {
    let provider = contract.provider(&r.provider);
    let (event_type, event_type_note) = match provider {
        None => (None, None),
        Some(p) => match oncegate_core::identity::event_type_of(p, &r.headers, doc) {
            Ok(t) => (Some(t), None),
            Err(why) => (None, Some(why)),
        },
    };
    let type_def = match (provider, &event_type) {
        (Some(p), Some(t)) => p.types.get(t),
        _ => None,
    };
    let transport = plan::transport_key(r, provider);
    let plan = match type_def {
        Some(t) => Plan::identified(provider, t, r, doc, salt),
        None => Plan::no_contract(
            &r.provider,
            provider.is_some(),
            event_type.as_deref(),
            event_type_note,
        ),
    };
    let entry = plan::journal_entry(
        r,
        received_at,
        event_type.clone(),
        Some(transport),
        provider,
    );
    let identified = Identified {
        provider,
        event_type,
        type_def,
        plan,
    };
    (identified, entry)
}

impl Identified<'_> {
    /// The collision breaker the delivery's strategy counts on, when it has a strategy and a
    /// type; named on demand, since only a key match counts (`breaker::count`).
    pub(crate) fn breaker(&self, r: &Reception) -> Option<BreakerScope> {
        match (&self.plan.strategy, &self.event_type) {
            (Some(s), Some(t)) => Some(breaker::scope(&r.provider, &r.env, t, s)),
            _ => None,
        }
    }

    /// Stage 5, answer: the metric labels of the decision.
    pub(crate) fn labels<'a>(
        &'a self,
        r: &'a Reception,
        outcome: &DecideOutcome,
    ) -> DecisionLabels<'a> {
        let strategy = self.plan.strategy.as_ref();
        DecisionLabels {
            provider: label_or(self.provider.is_some(), &r.provider, "(unknown)"),
            env: &r.env,
            event_type: match (self.type_def, &self.event_type) {
                (Some(_), Some(t)) => t,
                _ => "(no contract)",
            },
            strategy: strategy.map(|s| (s.name.as_str(), s.version)),
            level: strategy.map_or("", |s| s.level.as_str()),
            action: outcome.decision.action.as_str(),
            confidence: self.plan.confidence.map(Confidence::as_str),
        }
    }

    /// Stage 5, answer: the decision's log line.
    pub(crate) fn log(&self, r: &Reception, delivery: &DeliveryId, outcome: &DecideOutcome) {
        let strategy = self.plan.strategy.as_ref();
        tracing::info!(
            delivery_id = %delivery,
            tenant = %r.tenant,
            provider = %r.provider,
            env = %r.env,
            event_type = self.event_type.as_deref().unwrap_or(""),
            strategy = strategy.map(|s| s.name.as_str()).unwrap_or(""),
            strategy_version = strategy.map(|s| s.version).unwrap_or(0),
            level = strategy.map(|s| s.level.as_str()).unwrap_or(""),
            action = outcome.decision.action.as_str(),
            rule = outcome.decision.rule,
            effect_id = outcome.effect.as_ref().map(|e| e.to_string()).unwrap_or_default(),
            reference_delivery_id = outcome.reference_delivery.as_ref().map(|d| d.to_string()).unwrap_or_default(),
            correlation_id = r.correlation_id.as_deref().unwrap_or(""),
            "decision"
        );
    }

    /// Stage 5, answer: in gateway mode, the forward a `process` of a forward type makes
    /// durable before anyone hears it (the forwarder holds the effect from there on).
    pub(crate) fn forward(
        &self,
        r: &Reception,
        delivery: &DeliveryId,
        outcome: &DecideOutcome,
        received_at: OffsetDateTime,
    ) -> Option<NewForward> {
        self.type_def.and_then(|t| t.forward.as_ref())?;
        let reservation = outcome.reservation.as_ref()?;
        if outcome.decision.action != oncegate_core::matrix::Action::Process {
            return None;
        }
        Some(NewForward {
            effect: reservation.effect.clone(),
            fencing_token: reservation.fencing_token,
            delivery: delivery.clone(),
            tenant: r.tenant.clone(),
            provider: r.provider.clone(),
            env: r.env.clone(),
            event_type: self.event_type.clone(),
            due_at: received_at,
        })
    }
}

/// The label of a value the contract knows, or the word that says it does not.
pub(crate) fn label_or<'a>(known: bool, value: &'a str, unknown: &'static str) -> &'a str {
    if known {
        value
    } else {
        unknown
    }
}
