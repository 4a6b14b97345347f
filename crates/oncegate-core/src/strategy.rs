//! Strategies: how one provider + event type makes its effect key, and the normalizations that
//! make two spellings of the same value agree.

use crate::json::{Number, Value};
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
    /// A decimal string read as the number it spells (`"10.00"` → `10.00`), so that the key
    /// form, which writes a number by its exact decimal value, makes `"10.00"`, `"10.0"` and
    /// `10` one amount. Providers that send money as decimal strings in major units (Shopify,
    /// Mollie) or as strings of minor units (Paddle) need it wherever an amount is compared.
    /// A number is left as it is; a string that is not a plain JSON number (`"1,000"`,
    /// `"+5"`, `"€10"`) is an error, never a guess.
    Decimal,
}

impl Normalization {
    /// Every normalization a contract may name.
    pub const ALL: [Normalization; 5] = [
        Normalization::Trim,
        Normalization::Lowercase,
        Normalization::Uppercase,
        Normalization::Utc,
        Normalization::Decimal,
    ];

    /// The contract's spelling: `trim`, `lowercase`, `uppercase`, `utc` or `decimal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Normalization::Trim => "trim",
            Normalization::Lowercase => "lowercase",
            Normalization::Uppercase => "uppercase",
            Normalization::Utc => "utc",
            Normalization::Decimal => "decimal",
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
    ///
    /// // Decimal strings become numbers: "10.00" and "10.0" are one amount in a key.
    /// let (mut a, mut b) = (Value::String("10.00".into()), Value::String("10.0".into()));
    /// Normalization::Decimal.apply(&mut a).unwrap();
    /// Normalization::Decimal.apply(&mut b).unwrap();
    /// assert_eq!(oncegate_core::canon::to_key_form(&a), oncegate_core::canon::to_key_form(&b));
    /// let mut words = Value::String("ten".into());
    /// assert!(Normalization::Decimal.apply(&mut words).unwrap_err().contains("not a decimal"));
    /// ```
    pub fn apply(self, value: &mut Value) -> Result<(), String> {
        if self == Normalization::Decimal {
            return decimal(value);
        }
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
            Normalization::Decimal => unreachable!("handled above"),
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

/// The `decimal` normalization: a string spelling a plain JSON number becomes that number
/// (surrounding whitespace allowed); a number stays; anything else is an error.
fn decimal(value: &mut Value) -> Result<(), String> {
    match value {
        Value::Number(_) => Ok(()),
        Value::String(s) => match Number::from_literal(s.trim()) {
            Some(n) => {
                *value = Value::Number(n);
                Ok(())
            }
            None => Err(format!(
                "{s:?} is not a decimal number (digits, an optional sign `-`, an optional fraction)"
            )),
        },
        other => Err(format!(
            "decimal applies to strings and numbers, found a {}",
            other.kind_name()
        )),
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

/// Where a key field's value is read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// A place in the body, read after the type's own normalizations.
    Body(Pointer),
    /// A request header (`header:X-Shopify-Webhook-Id` in the contract), matched regardless of
    /// case, its value trimmed. Some providers put an event's identity only there: Shopify's
    /// webhook id is in `X-Shopify-Webhook-Id`, not in the body. The name is stored
    /// lower-case.
    Header(String),
}

impl Source {
    /// The prefix that makes a strategy field a header: `header:<name>`.
    pub const HEADER_PREFIX: &'static str = "header:";

    /// The source as the contract writes it and proofs show it: the pointer, or
    /// `header:<name>` (lower-case).
    ///
    /// ```
    /// use oncegate_core::strategy::Source;
    /// assert_eq!(Source::Header("x-shopify-webhook-id".into()).label(), "header:x-shopify-webhook-id");
    /// ```
    pub fn label(&self) -> String {
        match self {
            Source::Body(p) => p.as_str().to_owned(),
            Source::Header(name) => format!("{}{name}", Source::HEADER_PREFIX),
        }
    }

    /// The body pointer, `None` for a header.
    pub fn pointer(&self) -> Option<&Pointer> {
        match self {
            Source::Body(p) => Some(p),
            Source::Header(_) => None,
        }
    }
}

/// One field a strategy reads, with its own normalizations.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Field {
    /// Where the value is: a place in the body or a header. An absent, null or blank value
    /// skips the strategy.
    pub source: Source,
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
    /// Values of the strategy's fields that identify nothing (`placeholders`): ids a provider's
    /// test tools put in every event they send (Stripe's old test webhooks all carry
    /// `evt_00000000000000`). A field holding one counts as absent, so the hierarchy falls to
    /// the next strategy instead of merging every test event into one effect. Compared with
    /// the value as sent (after the field's normalizations).
    pub placeholders: Vec<String>,
    /// The written reason for the choice (`why`): which id is stable, what it is unique for.
    /// Shown by `oncegate check`; it does not change the key.
    pub why: String,
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
        let decimal = |input: Value| {
            let mut v = input;
            Normalization::Decimal
                .apply(&mut v)
                .map(|()| crate::canon::to_key_form(&v))
        };
        assert_eq!(decimal(s("10.00")), Ok("10".to_owned()));
        assert_eq!(decimal(s("10.0")), Ok("10".to_owned()));
        assert_eq!(decimal(s(" 65215 ")), Ok("65215".to_owned()));
        assert_eq!(decimal(s("-0.50")), Ok("-0.5".to_owned()));
        assert_eq!(
            decimal(s("820982911946154508")),
            Ok("820982911946154508".to_owned())
        );
        assert_ne!(decimal(s("10.01")), decimal(s("10.1")));
        for bad in ["1,000", "+5", "€10", "", "1.", ".5", "0x10", "NaN"] {
            assert!(
                decimal(s(bad)).unwrap_err().contains("not a decimal"),
                "{bad:?}"
            );
        }
        let number = crate::json::parse(b"1e2", &crate::json::Limits::default()).unwrap();
        assert_eq!(decimal(number), Ok("100".to_owned()));
        assert!(decimal(Value::Bool(true))
            .unwrap_err()
            .contains("found a boolean"));
        let mut n = Value::Null;
        assert!(Normalization::Trim
            .apply(&mut n)
            .unwrap_err()
            .contains("found a null"));
    }
}
