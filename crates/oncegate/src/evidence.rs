//! The evidence a reconciliation attempt keeps with its queue item: what was asked, what
//! came back and the verdict drawn from it. One type for the authority's answers and the
//! consumer's verification, so every attempt and every resolution reads the same way in the
//! console, `explain` and the API (stored as JSON; a field that does not apply is absent).

use serde::Serialize;

/// What one attempt asked and heard.
///
/// ```
/// use oncegate::Evidence;
///
/// let evidence = Evidence {
///     asked: Some("https://api.payflow.example/v1/payments/{resource}/refunds".into()),
///     at: Some(1_772_366_400),
///     verdict: Some("distinct".into()),
///     authoritative_ref: Some("re_3Kd8".into()),
///     ..Evidence::default()
/// };
/// assert_eq!(
///     evidence.to_json(),
///     r#"{"asked":"https://api.payflow.example/v1/payments/{resource}/refunds","at":1772366400,"verdict":"distinct","authoritative_ref":"re_3Kd8"}"#
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// The URL asked (the template, when the clear one would show a sensitive resource).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub asked: Option<String>,
    /// When, in Unix seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<i64>,
    /// The effect being verified (the consumer's verification).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    /// The operations the authority lists for the resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operations: Option<Vec<Operation>>,
    /// The local effects of the resource, as the verdict saw them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_effects: Option<Vec<LocalEffect>>,
    /// The effect whose outcome is unknown, when the item is its verification (`null` when not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verifying: Option<Option<String>>,
    /// The consumer's answer: its HTTP status and the first 2 KiB of its body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// See `status`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Why nothing was heard (unreachable, a timeout, a missing secret).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What was concluded: `distinct`, `duplicate`, `applied`, `not_applied`, `inconclusive`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// The provider's reference of the operation the verdict rests on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authoritative_ref: Option<String>,
}

/// One operation an authority lists.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Operation {
    /// The provider's reference of it.
    pub reference: String,
    /// Its discriminants, in key form (masked when sensitive).
    pub discriminants: std::collections::BTreeMap<String, String>,
}

/// One local effect of the resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalEffect {
    /// Its id.
    pub effect: String,
    /// The provider's reference it carries, if any.
    pub authoritative_ref: Option<String>,
    /// Its state.
    pub state: String,
}

impl Evidence {
    /// The JSON kept with the queue item.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("evidence serializes")
    }
}
