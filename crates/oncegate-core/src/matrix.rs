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
    /// Every action, in declaration order (what a metric listing each one iterates).
    pub const ALL: [Action; 5] = [
        Action::Process,
        Action::Ignore,
        Action::Quarantine,
        Action::Reconcile,
        Action::Reject,
    ];

    /// The action's stable lower-case name (`process`, `ignore`, `quarantine`, `reconcile`,
    /// `reject`), as proofs, metrics, the API and the CLI write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Process => "process",
            Action::Ignore => "ignore",
            Action::Quarantine => "quarantine",
            Action::Reconcile => "reconcile",
            Action::Reject => "reject",
        }
    }

    /// The action whose [`Action::as_str`] name is `s` exactly; `None` for anything else.
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
///
/// A strategy's confidence defaults from its level ([`crate::strategy::Level::default_confidence`])
/// and may be set in the contract, except that a fingerprint is never strong.
pub enum Confidence {
    /// The key names one operation: a match whose discriminants agree is a duplicate and is
    /// ignored. The default of `provider_id` and `business_ref` strategies.
    Strong,
    /// The key usually names one operation, but two legitimate ones can share it: a match is
    /// processed and flagged on a reversible type, reconciled on a critical one. The default of
    /// `semantic` strategies.
    Medium,
    /// Two legitimate operations can plainly share the key (byte-identical refunds): a match
    /// is treated as a medium one, never ignored. The default of `fingerprint` strategies.
    Weak,
}

impl Confidence {
    /// The contract's and the proofs' spelling: `strong`, `medium` or `weak`.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Strong => "strong",
            Confidence::Medium => "medium",
            Confidence::Weak => "weak",
        }
    }

    /// The confidence spelled `s` exactly as [`Confidence::as_str`] writes it; `None` otherwise.
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
    /// The contract's and the proofs' spelling: `reversible` or `critical`.
    pub fn as_str(self) -> &'static str {
        match self {
            Criticality::Reversible => "reversible",
            Criticality::Critical => "critical",
        }
    }

    /// The criticality spelled `s` exactly as [`Criticality::as_str`] writes it; `None`
    /// otherwise.
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
    /// The stable name proofs and metrics use: `transport` or `effect`.
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
    /// The flag's stable snake-case name (`possible_duplicate`, `breaker_open`, …), as proofs,
    /// metrics and the API write it.
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
    /// Reserved, lease still running (or released from the queue and waiting to be claimed).
    InProgress,
    /// The effect was applied and its result recorded.
    Completed,
    /// The holder of the reservation reported that the effect failed.
    Failed {
        /// Whether the holder said a new attempt may succeed. Under a strong key a retryable
        /// failure gets a new reservation (R6), a permanent one is returned as the existing
        /// result (R6b).
        retryable: bool,
    },
    /// A reservation whose lease expired with neither complete nor fail.
    Unknown,
    /// The key's record was purged past its horizon; only the proof (or nothing) remains.
    Purged,
}

impl Prior {
    /// The state in words, as decision reasons write it (`in progress`, `failed (retryable)`,
    /// `unknown outcome`…): for people, not a stable code.
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
    /// The discriminant's JSON Pointer, as the contract writes it.
    pub field: String,
    /// Its value on the stored effect; `None` when the field was absent, null or blank there.
    pub existing: Option<String>,
    /// Its value on the incoming delivery; `None` when the field is absent, null or blank.
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
    /// No earlier delivery carries the same provider delivery id in the same scope, or the
    /// delivery has none (a raw-body hash never makes a transport match).
    None,
    /// Same provider delivery id in the same scope, same raw body: a retry of the packet.
    SameIdSameBody,
    /// Same provider delivery id, different body: the provider reuses ids; not proof of anything.
    SameIdOtherBody,
}

/// What the matrix knows about the effect key of a delivery that was identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyed {
    /// The confidence of the strategy that made the key.
    pub confidence: Confidence,
    /// What the store holds for the key.
    pub prior: Prior,
    /// Discriminants that disagree with the prior effect (empty when none or no prior).
    pub differences: Vec<Difference>,
}

/// Everything the matrix needs, gathered by the caller from the contract, the identity and
/// the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Situation {
    /// Refused before identification (malformed body, bad signature, over limits): row R1,
    /// `reject`.
    Rejected(Rejection),
    /// The provider or the event type has no contract: row R2, `reconcile` (kept, never
    /// dropped).
    NoContract {
        /// The provider the delivery was posted for.
        provider: String,
        /// The event type the delivery declares.
        event_type: String,
        /// Whether the contract knows the provider, so only the type is unknown (it changes
        /// the reason's wording, not the action).
        provider_known: bool,
    },
    /// The type has a contract but none of its strategies could make a key: `reconcile` for
    /// a critical type (R2), `process` flagged `unkeyed` for a reversible one (R2b).
    NoKey {
        /// The type's criticality.
        criticality: Criticality,
        /// Why each strategy was skipped, `name@version: why`, joined by `; `, for the reason.
        missing: String,
    },
    /// The delivery has an effect key: rows R3 to R10 decide from its confidence, what the
    /// store holds for it, the discriminants and the type's criticality.
    Identified {
        /// The type's criticality.
        criticality: Criticality,
        /// Whether the type has an authority to ask; says who an R9 reconcile waits for.
        authority: bool,
        /// Whether the collision breaker of the strategy that made the key is open: what
        /// would be an `ignore` becomes `reconcile` (R10).
        breaker_open: bool,
        /// How the delivery's transport key matched an earlier delivery.
        transport: TransportMatch,
        /// The effect key's confidence, prior and discriminant differences.
        key: Keyed,
    },
}

/// The matrix's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What the caller is to do with the delivery.
    pub action: Action,
    /// For ignores: the layer at which the duplicate was recognized.
    pub layer: Option<Layer>,
    /// One plain sentence.
    pub reason: String,
    /// Marks a reviewer or a metric should see, each at most once, in the order the rows set
    /// them.
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

    /// Whether the decision carries `flag`.
    pub fn has(&self, flag: Flag) -> bool {
        self.flags.contains(&flag)
    }
}

/// Runs the matrix. The first matching row wins.
///
/// The seed's second refund: no event id, so the key is a weak fingerprint, and it matches a
/// completed refund of the same amount on the same payment. On a critical type that may be a
/// second legitimate refund, so it is reconciled, never ignored; a differing amount would be a
/// collision.
///
/// ```
/// use oncegate_core::matrix::{
///     decide, Action, Confidence, Criticality, Difference, Keyed, Prior, Situation,
///     TransportMatch,
/// };
///
/// let refund = |key: Keyed| Situation::Identified {
///     criticality: Criticality::Critical,
///     authority: true,
///     breaker_open: false,
///     transport: TransportMatch::None,
///     key,
/// };
/// let weak_match = Keyed {
///     confidence: Confidence::Weak,
///     prior: Prior::Completed,
///     differences: Vec::new(),
/// };
/// let d = decide(&refund(weak_match.clone()));
/// assert_eq!((d.action, d.rule), (Action::Reconcile, "R9"));
/// assert!(d.reason.contains("the provider's authority will be asked"));
///
/// let collision = Keyed {
///     differences: vec![Difference {
///         field: "/data/amount".into(),
///         existing: Some("1500".into()),
///         incoming: Some("2500".into()),
///     }],
///     ..weak_match
/// };
/// let d = decide(&refund(collision));
/// assert_eq!((d.action, d.rule), (Action::Quarantine, "R4"));
/// assert!(d.reason.contains("/data/amount: 1500 → 2500"));
/// ```
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
