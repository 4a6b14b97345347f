//! How a PostgreSQL text column holds a NUL character, which PostgreSQL's `text` cannot store.
//!
//! A delivery's data reaches text columns (its event type, its resource, a reason sentence
//! naming them) and strict JSON allows `\u0000` in any string, so a valid delivery could not be
//! recorded: the statement fails with SQLSTATE 22021 and, before this module, the provider was
//! answered 503 and retried for days. Raw bodies are already bytes (`BYTEA`) and JSON texts
//! are written escaped by `serde_json`; what remains is plain text, and no crate spells it for
//! us, so it is done here, on PostgreSQL only (SQLite's text keeps NUL as it is).
//!
//! A text that holds a NUL, or that happens to begin with the mark U+FFFF (a Unicode
//! noncharacter, never meant for interchange), is written as the mark followed by the text with
//! `\` doubled and NUL spelled `\0`. Every other text — all texts of a store written before
//! this module existed, in practice — is written unchanged, so equality in SQL still means
//! equality of the values, and reading undoes the spelling exactly.

use std::borrow::Cow;

use crate::error::StoreError;
use crate::sql::Value;

const MARK: char = '\u{FFFF}';

fn needs_spelling(s: &str) -> bool {
    s.contains('\0') || s.starts_with(MARK)
}

/// The text as PostgreSQL stores it.
pub(crate) fn encode(s: &str) -> Cow<'_, str> {
    if !needs_spelling(s) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    out.push(MARK);
    for c in s.chars() {
        match c {
            '\0' => out.push_str("\\0"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The value a stored text spells.
pub(crate) fn decode(s: String) -> Result<String, StoreError> {
    let Some(rest) = s.strip_prefix(MARK) else {
        return Ok(s);
    };
    let mut out = String::with_capacity(rest.len());
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') => out.push('\0'),
            Some('\\') => out.push('\\'),
            _ => {
                return Err(StoreError::corrupt(
                    "a stored text has an unknown escape after its NUL mark",
                ))
            }
        }
    }
    Ok(out)
}

/// The parameters with their texts as PostgreSQL stores them; borrowed (no copy) when no text
/// needs it, which is every parameter of ordinary traffic.
pub(crate) fn params<'p, 'a>(params: &'p [Value<'a>]) -> Cow<'p, [Value<'a>]> {
    let spelled = |v: &Value| matches!(v, Value::Text(Some(s)) if needs_spelling(s));
    if !params.iter().any(spelled) {
        return Cow::Borrowed(params);
    }
    Cow::Owned(
        params
            .iter()
            .map(|v| match v {
                Value::Text(Some(s)) => Value::Text(Some(Cow::Owned(encode(s).into_owned()))),
                other => other.clone(),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_round_trip_and_plain_ones_are_unchanged() {
        for s in [
            "",
            "refund.created",
            "a\0b",
            "\0",
            "back\\slash\0",
            "\u{FFFF}starts with the mark",
            "\u{FFFF}\\0 looks spelled",
            "ends with a backslash \\",
        ] {
            let stored = encode(s);
            assert!(!stored.contains('\0'), "{stored:?}");
            assert_eq!(decode(stored.into_owned()).unwrap(), s);
        }
        assert!(matches!(encode("plain \\ text"), Cow::Borrowed(_)));
        assert_eq!(encode("a\0b"), "\u{FFFF}a\\0b");
        // Two values never share a spelling.
        assert_ne!(encode("a\\0"), encode("a\0"));
        assert!(decode("\u{FFFF}bad \\x".to_owned()).is_err());
    }

    #[test]
    fn parameters_are_copied_only_when_a_text_needs_it() {
        let plain = [Value::Text(Some("x".into())), Value::Int(Some(1))];
        assert!(matches!(params(&plain), Cow::Borrowed(_)));
        let nul = [Value::Text(Some("x\0".into())), Value::Text(None)];
        let out = params(&nul);
        assert_eq!(out[0], Value::Text(Some("\u{FFFF}x\\0".into())));
        assert_eq!(out[1], Value::Text(None));
    }
}
