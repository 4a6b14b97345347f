//! Strategies: how one provider + event type makes its effect key, and the normalizations that
//! make two spellings of the same value agree.

use crate::json::Value;
use crate::matrix::Confidence;
use crate::pointer::Pointer;
use std::fmt;
use std::time::Duration;
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

/// Kinds of key, strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// A provider event id shown reliable by the corpus.
    ProviderId,
    /// Resource + operation + functional reference.
    BusinessRef,
    /// A combination of fields.
    Semantic,
    /// Canonical JSON hash minus declared volatile fields.
    Fingerprint,
}

impl Level {
    /// Every level, strongest first.
    pub const ALL: [Level; 4] = [
        Level::ProviderId,
        Level::BusinessRef,
        Level::Semantic,
        Level::Fingerprint,
    ];

    /// The contract's spelling (`provider_id`, `business_ref`, `semantic`, `fingerprint`),
    /// which proofs and metrics write too.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::ProviderId => "provider_id",
            Level::BusinessRef => "business_ref",
            Level::Semantic => "semantic",
            Level::Fingerprint => "fingerprint",
        }
    }

    /// The level spelled `s` exactly as [`Level::as_str`] writes it; `None` otherwise.
    pub fn parse(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// The confidence a strategy of this level has unless the contract says otherwise.
    pub fn default_confidence(self) -> Confidence {
        match self {
            Level::ProviderId | Level::BusinessRef => Confidence::Strong,
            Level::Semantic => Confidence::Medium,
            Level::Fingerprint => Confidence::Weak,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A declared rewrite of one string value so that spellings of the same thing agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Normalization {
    /// Leading and trailing whitespace removed.
    Trim,
    /// Unicode lower case.
    Lowercase,
    /// Unicode upper case.
    Uppercase,
    /// An RFC 3339 date-time rewritten in UTC (`2024-05-01T12:00:00Z`).
    Utc,
}

impl Normalization {
    /// Every normalization a contract may name.
    pub const ALL: [Normalization; 4] = [
        Normalization::Trim,
        Normalization::Lowercase,
        Normalization::Uppercase,
        Normalization::Utc,
    ];

    /// The contract's spelling: `trim`, `lowercase`, `uppercase` or `utc`.
    pub fn as_str(self) -> &'static str {
        match self {
            Normalization::Trim => "trim",
            Normalization::Lowercase => "lowercase",
            Normalization::Uppercase => "uppercase",
            Normalization::Utc => "utc",
        }
    }

    /// The normalization spelled `s` exactly as [`Normalization::as_str`] writes it; `None`
    /// otherwise.
    pub fn parse(s: &str) -> Option<Normalization> {
        Normalization::ALL.into_iter().find(|n| n.as_str() == s)
    }

    /// Applies the rewrite. Only strings are rewritten; a value of another kind, or a date that
    /// does not parse, is an error rather than a silent guess.
    ///
    /// ```
    /// use oncegate_core::json::Value;
    /// use oncegate_core::strategy::Normalization;
    ///
    /// let mut at = Value::String("2024-05-01T14:00:00+02:00".into());
    /// Normalization::Utc.apply(&mut at).unwrap();
    /// assert_eq!(at.as_str(), Some("2024-05-01T12:00:00Z"));
    ///
    /// let mut not_a_date = Value::String("yesterday".into());
    /// assert!(Normalization::Utc.apply(&mut not_a_date).unwrap_err().contains("not an RFC 3339"));
    /// assert_eq!(not_a_date.as_str(), Some("yesterday")); // left as sent
    /// ```
    pub fn apply(self, value: &mut Value) -> Result<(), String> {
        let Value::String(s) = value else {
            return Err(format!(
                "{} applies to strings, found a {}",
                self.as_str(),
                value.kind_name()
            ));
        };
        match self {
            Normalization::Trim => {
                let t = s.trim();
                if t.len() != s.len() {
                    *s = t.to_owned();
                }
            }
            Normalization::Lowercase => *s = s.to_lowercase(),
            Normalization::Uppercase => *s = s.to_uppercase(),
            Normalization::Utc => {
                let parsed = OffsetDateTime::parse(s, &Rfc3339)
                    .map_err(|e| format!("{s:?} is not an RFC 3339 date-time ({e})"))?;
                // An instant near the end of year 9999 with a negative offset is past it in
                // UTC: `to_offset` would panic there.
                *s = parsed
                    .checked_to_offset(UtcOffset::UTC)
                    .ok_or_else(|| format!("{s:?} cannot be written in UTC (past year 9999)"))?
                    .format(&Rfc3339)
                    .map_err(|e| format!("{s:?} cannot be written in UTC ({e})"))?;
            }
        }
        Ok(())
    }
}

/// What the key's scope groups by, besides tenant, provider and environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeKind {
    /// The event type (default): two types never share a key.
    Type,
    /// The type's operation name: types declaring the same operation (say `payment.succeeded`
    /// and `charge.captured` both meaning "capture") share keys, so they are one effect.
    Operation,
}

impl ScopeKind {
    /// The contract's spelling of the strategy's `scope`: `type` or `operation`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Type => "type",
            ScopeKind::Operation => "operation",
        }
    }
}

/// One field a strategy reads, with its own normalizations.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Field {
    /// Where the value is in the body, read after the type's own normalizations. An absent,
    /// null or blank value skips the strategy.
    pub pointer: Pointer,
    /// The strategy's own rewrites of this field (`normalize = { "/p" = [...] }`), applied in
    /// order on a copy; one that fails skips the strategy rather than making a key from a
    /// value it could not normalize.
    pub normalize: Vec<Normalization>,
}

/// A validated strategy: one way of making an event type's effect key, one rung of its key
/// hierarchy (`[[…strategies]]`) or a shadow observed beside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Strategy {
    /// The strategy's name; part of every key it makes, with the version.
    pub name: String,
    /// The definition's version, from 1. One `name@version` has one meaning across the whole
    /// contract: changing its level, fields, confidence or scope needs a new version, so a
    /// new definition never silently reinterprets old keys (only the horizon may differ).
    pub version: u32,
    /// What kind of key it makes, which sets its default confidence.
    pub level: Level,
    /// For `fingerprint`, the parts of the document hashed (empty: the whole document).
    /// For the other levels, every field must be present, non-null and non-blank for the
    /// strategy to make the key; the key hashes their key forms in this order.
    pub fields: Vec<Field>,
    /// How much a match of its key means (default: the level's; never strong for a
    /// fingerprint).
    pub confidence: Confidence,
    /// How long the fast dedup index keeps its keys (`horizon`, default: the type's).
    pub horizon: Duration,
    /// What the key is scoped by besides tenant, provider and environment (`scope`, default
    /// `type`).
    pub scope: ScopeKind,
}

impl Strategy {
    /// `name@version`, as proofs and logs show it.
    pub fn label(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::String(v.to_owned())
    }

    #[test]
    fn normalizations_rewrite_strings_only() {
        let check = |n: Normalization, input: &str, expected: Result<&str, &str>| {
            let mut v = s(input);
            let got = n.apply(&mut v);
            match expected {
                Ok(e) => {
                    assert_eq!(got, Ok(()), "{n:?} {input:?}");
                    assert_eq!(v, s(e), "{n:?} {input:?}");
                }
                Err(part) => assert!(got.unwrap_err().contains(part), "{n:?} {input:?}"),
            }
        };
        check(Normalization::Trim, "  ref-1 \n", Ok("ref-1"));
        check(Normalization::Lowercase, "REF-É", Ok("ref-é"));
        check(Normalization::Uppercase, "eur", Ok("EUR"));
        check(
            Normalization::Utc,
            "2024-05-01T14:00:00+02:00",
            Ok("2024-05-01T12:00:00Z"),
        );
        check(
            Normalization::Utc,
            "2024-05-01T12:00:00Z",
            Ok("2024-05-01T12:00:00Z"),
        );
        check(
            Normalization::Utc,
            "2024-05-01T12:00:00.250-00:30",
            Ok("2024-05-01T12:30:00.25Z"),
        );
        check(Normalization::Utc, "yesterday", Err("not an RFC 3339"));
        // Found by fuzzing a delivery through the gate: this panicked the pipeline.
        check(
            Normalization::Utc,
            "9999-12-31T23:59:59-01:00",
            Err("cannot be written in UTC (past year 9999)"),
        );
        check(
            Normalization::Utc,
            "9999-12-31T22:59:59-01:00",
            Ok("9999-12-31T23:59:59Z"),
        );
        check(
            Normalization::Utc,
            "0000-01-01T00:00:00+01:00",
            Err("cannot be written in UTC"),
        );
        let mut n = Value::Null;
        assert!(Normalization::Trim
            .apply(&mut n)
            .unwrap_err()
            .contains("found a null"));
    }
}
