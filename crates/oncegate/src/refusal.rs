//! Why a reception is refused before it is identified: its body could not be kept, its sender
//! could not be authenticated, its environment is not declared, or it is not acceptable JSON.
//! A refusal is journaled and proved like any decision (a `reject`), so nothing refused is
//! lost from the report.

/// The kinds of refusal, each with its stable code (the proof's `rejection`, the API's error
/// code, the `oncegate_rejected_total{reason}` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalKind {
    /// The body was still arriving at its deadline.
    BodyTimeout,
    /// The body could not be read to its end.
    IncompleteBody,
    /// The body is over the contract's limit (or its JSON is).
    TooLarge,
    /// No credential, or one that is not valid.
    Unauthorized,
    /// The provider's signature does not verify.
    BadSignature,
    /// A valid credential whose role may not post deliveries.
    Forbidden,
    /// The environment is not one the contract declares.
    UnknownEnvironment,
    /// The body is not acceptable JSON (strict I-JSON rules).
    MalformedJson,
}

impl RefusalKind {
    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            RefusalKind::BodyTimeout => "body_timeout",
            RefusalKind::IncompleteBody => "incomplete_body",
            RefusalKind::TooLarge => "too_large",
            RefusalKind::Unauthorized => "unauthorized",
            RefusalKind::BadSignature => "bad_signature",
            RefusalKind::Forbidden => "forbidden",
            RefusalKind::UnknownEnvironment => "unknown_environment",
            RefusalKind::MalformedJson => "malformed_json",
        }
    }
}

/// A refusal: its kind and a sentence fragment saying what is wrong, naming headers or
/// limits, never a secret or a MAC.
///
/// ```
/// use oncegate::{Refusal, RefusalKind};
///
/// let r = Refusal::new(RefusalKind::BadSignature, "bad signature: no v1 candidate");
/// assert_eq!(r.kind.code(), "bad_signature");
/// assert_eq!(r.sentence("dlv_1"), "Bad signature: no v1 candidate (journaled as dlv_1).");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Its kind (and stable code).
    pub kind: RefusalKind,
    /// Lowercase, no final period (the matrix writes "Rejected: {fragment}.").
    pub fragment: String,
}

impl Refusal {
    /// A refusal of `kind` for the reason `fragment`.
    pub fn new(kind: RefusalKind, fragment: impl Into<String>) -> Refusal {
        Refusal {
            kind,
            fragment: fragment.into(),
        }
    }

    /// The answer's sentence, naming the journal entry.
    pub fn sentence(&self, delivery: &str) -> String {
        let mut chars = self.fragment.chars();
        let capitalized: String = match chars.next() {
            Some(c) => c.to_uppercase().chain(chars).collect(),
            None => String::new(),
        };
        format!("{capitalized} (journaled as {delivery}).")
    }
}
