//! The decision matrix: what to do with one delivery, as a pure function of its identity and
//! of what the store already knows about its key. The first matching row wins; every answer
//! carries the row that produced it and one plain sentence a support engineer can read out.
//!
//! Time never proves identity here: a key match within some window is not a duplicate unless
//! the key's strength and the discriminants say so.

use std::fmt;

/// Bumped whenever a row changes meaning; stored in every proof.
pub const MATRIX_VERSION: u32 = 1;

/// What oncegate tells the caller to do with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Run the effect: the caller holds the reservation and must complete or fail it.
    Process,
    /// Do nothing: the effect is already applied or under way; linked to the first delivery.
    Ignore,
    /// Same key, different essentials: kept aside and counted as a collision.
    Quarantine,
    /// Cannot be identified safely: kept, verified against the source or a person first.
    Reconcile,
    /// Refused before identification (malformed, bad signature, over limits); still journaled.
    Reject,
}

impl Action {
    pub const ALL: [Action; 5] = [
        Action::Process,
        Action::Ignore,
        Action::Quarantine,
        Action::Reconcile,
        Action::Reject,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Process => "process",
            Action::Ignore => "ignore",
            Action::Quarantine => "quarantine",
            Action::Reconcile => "reconcile",
            Action::Reject => "reject",
        }
    }

    pub fn parse(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much a key can be trusted to mean "the same operation".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Confidence {
    Strong,
    Medium,
    Weak,
}

impl Confidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Strong => "strong",
            Confidence::Medium => "medium",
            Confidence::Weak => "weak",
        }
    }

    pub fn parse(s: &str) -> Option<Confidence> {
        [Confidence::Strong, Confidence::Medium, Confidence::Weak]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

/// What a duplicate or a loss costs for an event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Criticality {
    /// A duplicate is a nuisance (a notification).
    Reversible,
    /// A duplicate or a loss is serious (capture, refund, ledger write, stock, revocation).
    Critical,
}

impl Criticality {
    pub fn as_str(self) -> &'static str {
        match self {
            Criticality::Reversible => "reversible",
            Criticality::Critical => "critical",
        }
    }

    pub fn parse(s: &str) -> Option<Criticality> {
        [Criticality::Reversible, Criticality::Critical]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

/// The layer at which a duplicate was recognized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The same packet delivered again (provider retry, same delivery id).
    Transport,
    /// A different packet asking for an effect that already exists.
    Effect,
}

impl Layer {
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Transport => "transport",
            Layer::Effect => "effect",
        }
    }
}

/// Marks on a decision that a reviewer or a metric should see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flag {
    /// Processed although a medium/weak key matched: may be corrected later.
    PossibleDuplicate,
    /// The strategy's collision breaker turned an `ignore` into `reconcile`.
    BreakerOpen,
    /// A reservation whose lease expired with no outcome was taken over.
    Takeover,
    /// A retry after a retryable failure: a new reservation with a higher fencing token.
    RetryAfterFailure,
    /// The provider's delivery id was seen before with a different body.
    TransportIdReused,
    /// No strategy applied on a reversible type: processed under the delivery's own identity.
    Unkeyed,
    /// The earlier record for this key was purged past its horizon.
    PriorPurged,
}

impl Flag {
    pub fn as_str(self) -> &'static str {
        match self {
            Flag::PossibleDuplicate => "possible_duplicate",
            Flag::BreakerOpen => "breaker_open",
            Flag::Takeover => "takeover",
            Flag::RetryAfterFailure => "retry_after_failure",
            Flag::TransportIdReused => "transport_id_reused",
            Flag::Unkeyed => "unkeyed",
            Flag::PriorPurged => "prior_purged",
        }
    }
}

/// What the store holds for the effect key, summarized for the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prior {
    /// No effect has this key (or the index entry expired and no durable identity remains).
    None,
    /// Reserved, lease still running.
    InProgress,
    Completed,
    Failed {
        retryable: bool,
    },
    /// A reservation whose lease expired with neither complete nor fail.
    Unknown,
    /// The key's record was purged past its horizon; only the proof (or nothing) remains.
    Purged,
}

impl Prior {
    pub fn as_str(self) -> &'static str {
        match self {
            Prior::None => "none",
            Prior::InProgress => "in progress",
            Prior::Completed => "completed",
            Prior::Failed { retryable: true } => "failed (retryable)",
            Prior::Failed { retryable: false } => "failed (permanent)",
            Prior::Unknown => "unknown outcome",
            Prior::Purged => "purged",
        }
    }
}

/// One discriminant that disagrees between the stored effect and the incoming delivery.
/// Values are canonical forms, already masked when the field is sensitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub field: String,
    pub existing: Option<String>,
    pub incoming: Option<String>,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".to_owned());
        write!(
            f,
            "{}: {} → {}",
            self.field,
            show(&self.existing),
            show(&self.incoming)
        )
    }
}

/// Why a delivery was refused before identification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// A stable short code (`malformed_json`, `bad_signature`, `too_large`, …).
    pub code: String,
    /// The plain sentence naming what is wrong.
    pub message: String,
}

/// How the transport layer matched, if at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportMatch {
    None,
    /// Same provider delivery id in the same scope, same raw body: a retry of the packet.
    SameIdSameBody,
    /// Same provider delivery id, different body: the provider reuses ids; not proof of anything.
    SameIdOtherBody,
}

/// What the matrix knows about the effect key of a delivery that was identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyed {
    pub confidence: Confidence,
    pub prior: Prior,
    /// Discriminants that disagree with the prior effect (empty when none or no prior).
    pub differences: Vec<Difference>,
}

/// Everything the matrix needs, gathered by the caller from the contract, the identity and
/// the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Situation {
    Rejected(Rejection),
    /// The provider or the event type has no contract.
    NoContract {
        provider: String,
        event_type: String,
        provider_known: bool,
    },
    /// The type has a contract but none of its strategies could make a key.
    NoKey {
        criticality: Criticality,
        missing: String,
    },
    Identified {
        criticality: Criticality,
        authority: bool,
        breaker_open: bool,
        transport: TransportMatch,
        key: Keyed,
    },
}

/// The matrix's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    /// For ignores: the layer at which the duplicate was recognized.
    pub layer: Option<Layer>,
    /// One plain sentence.
    pub reason: String,
    pub flags: Vec<Flag>,
    /// The row of the matrix that decided (`R1`…), for proofs and tests.
    pub rule: &'static str,
}

impl Decision {
    fn new(action: Action, rule: &'static str, reason: String) -> Self {
        Decision {
            action,
            layer: None,
            reason,
            flags: Vec::new(),
            rule,
        }
    }

    fn at(mut self, layer: Layer) -> Self {
        self.layer = Some(layer);
        self
    }

    fn flag(mut self, flag: Flag) -> Self {
        if !self.flags.contains(&flag) {
            self.flags.push(flag);
        }
        self
    }

    pub fn has(&self, flag: Flag) -> bool {
        self.flags.contains(&flag)
    }
}

/// Runs the matrix. The first matching row wins.
pub fn decide(situation: &Situation) -> Decision {
    match situation {
        // R1: refused before identification, still journaled by the caller.
        Situation::Rejected(r) => Decision::new(Action::Reject, "R1", format!("Rejected: {}.", r.message)),
        // R2: nothing says what this delivery's identity is, so it is kept, never dropped.
        Situation::NoContract { provider, event_type, provider_known } => {
            let what = if *provider_known {
                format!("event type {event_type:?} of provider {provider:?} has no contract")
            } else {
                format!("provider {provider:?} has no contract")
            };
            Decision::new(Action::Reconcile, "R2", format!("Kept for reconciliation: {what}, so its identity cannot be decided."))
        }
        Situation::NoKey { criticality: Criticality::Critical, missing } => Decision::new(
            Action::Reconcile,
            "R2",
            format!("Kept for reconciliation: no strategy could make a key ({missing}) and the type is critical."),
        ),
        Situation::NoKey { criticality: Criticality::Reversible, missing } => Decision::new(
            Action::Process,
            "R2b",
            format!("Processed under the delivery's own identity: no strategy could make a key ({missing}) and the type is reversible."),
        )
        .flag(Flag::Unkeyed),
        Situation::Identified { criticality, authority, breaker_open, transport, key } => {
            identified(*criticality, *authority, *breaker_open, *transport, key)
        }
    }
}

fn identified(
    criticality: Criticality,
    authority: bool,
    breaker_open: bool,
    transport: TransportMatch,
    key: &Keyed,
) -> Decision {
    let critical = criticality == Criticality::Critical;
    let strong = key.confidence == Confidence::Strong;
    let reused = transport == TransportMatch::SameIdOtherBody;
    let mark = |d: Decision| {
        if reused {
            d.flag(Flag::TransportIdReused)
        } else {
            d
        }
    };
    // What an ignore becomes when the strategy's breaker is open.
    let ignore_or_breaker = |d: Decision| {
        if breaker_open {
            Decision::new(
                Action::Reconcile,
                "R10",
                format!(
                    "Sent to reconciliation instead of ignored because the strategy's collision breaker is open (otherwise: {}).",
                    d.reason.trim_end_matches('.')
                ),
            )
            .flag(Flag::BreakerOpen)
        } else {
            d
        }
    };

    // R5 (transport layer): the very same packet again (same provider delivery id, same body)
    // while its effect is done or under way. A retry after a failure falls through to R6.
    if transport == TransportMatch::SameIdSameBody
        && key.differences.is_empty()
        && matches!(key.prior, Prior::Completed | Prior::InProgress)
    {
        return ignore_or_breaker(
            Decision::new(
                Action::Ignore,
                "R5",
                "Ignored: the same delivery id and body were already received (a provider retry)."
                    .to_owned(),
            )
            .at(Layer::Transport),
        );
    }

    match key.prior {
        // R3: first time this effect is seen.
        Prior::None => mark(Decision::new(Action::Process, "R3", "Processed: no effect exists yet for this key.".to_owned())),
        _ if !key.differences.is_empty() => {
            // R4: same key, different essentials: a collision, never an ignore.
            let list: Vec<String> = key.differences.iter().map(ToString::to_string).collect();
            mark(Decision::new(
                Action::Quarantine,
                "R4",
                format!("Quarantined: the key matches an existing effect but discriminants differ ({}).", list.join("; ")),
            ))
        }
        Prior::Unknown => {
            // R7: the earlier attempt's outcome is unknown; never re-run a critical effect blind.
            if critical {
                mark(Decision::new(
                    Action::Reconcile,
                    "R7",
                    "Kept for reconciliation: an earlier attempt's lease expired with no outcome; the critical effect must be verified before any retry.".to_owned(),
                ))
            } else {
                mark(Decision::new(
                    Action::Process,
                    "R7",
                    "Processed as a takeover: an earlier attempt's lease expired with no outcome and the type is reversible.".to_owned(),
                ))
                .flag(Flag::Takeover)
            }
        }
        Prior::Purged => {
            if critical {
                mark(Decision::new(
                    Action::Reconcile,
                    "R7b",
                    "Kept for reconciliation: the key's earlier record was purged, so a repeat cannot be told from a new operation.".to_owned(),
                ))
                .flag(Flag::PriorPurged)
            } else {
                mark(Decision::new(Action::Process, "R7b", "Processed: the key's earlier record was purged and the type is reversible.".to_owned()))
                    .flag(Flag::PriorPurged)
                    .flag(Flag::PossibleDuplicate)
            }
        }
        _ if strong => match key.prior {
            // R5: a strong key, the effect is done or under way.
            Prior::Completed | Prior::InProgress => ignore_or_breaker(mark(
                Decision::new(
                    Action::Ignore,
                    "R5",
                    format!("Ignored: a strong key matches an effect that is {}, and its discriminants agree.", key.prior.as_str()),
                )
                .at(Layer::Effect),
            )),
            // R6: a retryable failure may be retried under a new reservation.
            Prior::Failed { retryable: true } => mark(Decision::new(
                Action::Process,
                "R6",
                "Processed again: the effect failed with a retryable error; a new reservation supersedes the old one.".to_owned(),
            ))
            .flag(Flag::RetryAfterFailure),
            Prior::Failed { retryable: false } => ignore_or_breaker(mark(
                Decision::new(
                    Action::Ignore,
                    "R6b",
                    "Ignored: the effect already failed permanently; the existing failure is returned.".to_owned(),
                )
                .at(Layer::Effect),
            )),
            Prior::None | Prior::Unknown | Prior::Purged => unreachable!("handled above"),
        },
        // R8: a medium or weak key matched on a reversible type: a duplicate is a nuisance.
        _ if !critical => mark(Decision::new(
            Action::Process,
            "R8",
            format!(
                "Processed but flagged: a {} key matches an effect that is {}, and the type is reversible.",
                key.confidence.as_str(),
                key.prior.as_str()
            ),
        ))
        .flag(Flag::PossibleDuplicate),
        // R9: a medium or weak key matched on a critical type: it may be a second legitimate
        // operation (the seed's second refund), so ask the source instead of guessing.
        _ => {
            let who = if authority { "the provider's authority will be asked" } else { "a person must decide (no authority is configured)" };
            mark(Decision::new(
                Action::Reconcile,
                "R9",
                format!(
                    "Kept for reconciliation: a {} key matches an effect that is {} on a critical type; it may be a second legitimate operation, so {who}.",
                    key.confidence.as_str(),
                    key.prior.as_str()
                ),
            ))
        }
    }
}
