//! The proof's details: what identification found beyond the decision itself (the strategies
//! skipped and why, the fields used, the key's scope, notes, the rejection code, a replay's
//! original, the shadows' verdicts), typed and versioned.
//!
//! The store keeps them as JSON text it never reads; this is the one type that writes them
//! and the one that reads them back (the proof route, `oncegate explain`, the console), so a
//! field is named once. Version 1 is written today; details written before versions existed
//! (no `v`) read as version 0, including their old spelling `skipped_strategies`.

use serde::{Deserialize, Serialize};

/// The version [`Details::to_json`] writes.
pub const DETAILS_VERSION: u32 = 1;

/// A proof's details.
///
/// ```
/// use oncegate::details::{Details, Skipped};
///
/// let details = Details {
///     skipped: vec![Skipped { name: "provider-id".into(), version: 1, why: "no event id".into() }],
///     rejection: None,
///     ..Details::default()
/// };
/// let text = details.to_json();
/// assert!(text.starts_with(r#"{"v":1,"#));
/// assert_eq!(Details::parse(&text), details);
///
/// // Details written before versions existed still read.
/// let old = Details::parse(r#"{"skipped_strategies":[{"name":"id","version":2,"why":"absent"}]}"#);
/// assert_eq!((old.v, old.skipped[0].version), (0, 2));
/// // And are written again at the current version.
/// assert!(old.to_json().starts_with(r#"{"v":1,"#));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Details {
    /// The version the details were written under (0: before versions existed).
    #[serde(default)]
    pub v: u32,
    /// The strategies of the hierarchy tried before the one that made the key, and why each
    /// made none.
    #[serde(default, alias = "skipped_strategies")]
    pub skipped: Vec<Skipped>,
    /// The key's scope in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// For an operation-scoped key: every type of the provider declaring the operation, which
    /// all share this key (one business effect).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_by: Vec<String>,
    /// The fields the key was made of, as shown (masked when sensitive).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<UsedField>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// What identification noted (a field normalized, a strategy's caveat).
    pub notes: Vec<String>,
    /// For rejections: the stable code (`malformed_json`, `bad_signature`, `too_large`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection: Option<String>,
    /// For a late replay: the delivery replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The type's criticality (`critical`, `reversible`).
    pub criticality: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The key's confidence.
    pub confidence: Option<String>,
    /// Every shadow strategy's verdict on this delivery (the proof shows those that differ).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<ShadowVerdict>,
}

impl Default for Details {
    fn default() -> Self {
        Details {
            v: DETAILS_VERSION,
            skipped: Vec::new(),
            scope: None,
            shared_by: Vec::new(),
            fields: Vec::new(),
            notes: Vec::new(),
            rejection: None,
            replay_of: None,
            criticality: None,
            confidence: None,
            shadow: Vec::new(),
        }
    }
}

impl Details {
    /// The details of a refusal: its stable code.
    pub fn rejected(code: &str) -> Details {
        Details {
            rejection: Some(code.to_owned()),
            ..Details::default()
        }
    }

    /// The JSON text the store keeps, at the current version.
    pub fn to_json(&self) -> String {
        if self.v == DETAILS_VERSION {
            // Every decision's details are at the current version: written as they are,
            // without a copy.
            return serde_json::to_string(self).expect("proof details serialize");
        }
        let current = Details {
            v: DETAILS_VERSION,
            ..self.clone()
        };
        serde_json::to_string(&current).expect("proof details serialize")
    }

    /// Reads stored details leniently: text that is not a details object (a store written by
    /// hand, a future version's unknown shape) reads as empty version-0 details rather than
    /// hiding the rest of the proof.
    pub fn parse(text: &str) -> Details {
        serde_json::from_str(text).unwrap_or(Details {
            v: 0,
            ..Details::default()
        })
    }
}

/// A strategy of the hierarchy that made no key (the core's one shape).
pub use oncegate_core::identity::Skipped;

/// A field a key was made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsedField {
    /// The JSON Pointer (empty: the canonical body).
    pub pointer: String,
    /// Its value as shown in proofs (a keyed hash when the field is sensitive).
    pub shown: String,
}

/// What one shadow strategy would have decided for a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShadowVerdict {
    /// `name@version`.
    pub strategy: String,
    /// Its level (`provider_id`, `business_ref`, `semantic`, `fingerprint`).
    pub level: String,
    /// Its key's confidence.
    pub confidence: Option<String>,
    /// The shadow's key, when it could make one.
    pub key: Option<String>,
    /// The action it would have taken.
    pub action: String,
    /// Why.
    pub reason: String,
    /// The first delivery of the shadow key, when the shadow matched one.
    pub reference_delivery_id: Option<String>,
}

/// The verdicts that differ from the decision taken (`actual`, an action's name).
pub fn differing(verdicts: &[ShadowVerdict], actual: &str) -> Vec<ShadowVerdict> {
    verdicts
        .iter()
        .filter(|v| v.action != actual)
        .cloned()
        .collect()
}
