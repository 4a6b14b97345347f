//! JSON Pointers (RFC 6901): parsed once from the contract, then used to read, remove or rewrite
//! one place of a parsed body.

use crate::json::Value;
use std::fmt;

/// A parsed JSON Pointer. `""` is the whole document.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pointer {
    text: String,
    tokens: Vec<String>,
}

/// Why a string is not a JSON Pointer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    /// The text is neither empty nor starts with `/`; holds the text.
    #[error("a JSON Pointer must be empty or start with '/', got {0:?}")]
    NoLeadingSlash(String),
    #[error("{0:?} has a '~' not followed by 0 or 1 (write '~0' for '~' and '~1' for '/')")]
    /// The text has a `~` that is not part of `~0` or `~1`; holds the whole text.
    BadEscape(String),
}

impl Pointer {
    /// Parses RFC 6901 text: `""` is the whole document, otherwise each `/` starts a reference
    /// token in which `~1` stands for `/` and `~0` for `~`. Nothing is resolved yet: whether the
    /// place exists is a question for [`Pointer::get`] on a given document.
    ///
    /// ```
    /// use oncegate_core::json::{parse, Limits};
    /// use oncegate_core::pointer::{Pointer, PointerError};
    ///
    /// let body = parse(br#"{"data":{"a/b":["x","y"]}}"#, &Limits::default()).unwrap();
    /// let p = Pointer::parse("/data/a~1b/1").unwrap();
    /// assert_eq!(p.get(&body).and_then(|v| v.as_str()), Some("y"));
    /// assert!(Pointer::parse("/data/a~1b/2").unwrap().get(&body).is_none());
    /// assert!(matches!(Pointer::parse("data"), Err(PointerError::NoLeadingSlash(_))));
    /// ```
    pub fn parse(text: &str) -> Result<Pointer, PointerError> {
        if text.is_empty() {
            return Ok(Pointer {
                text: String::new(),
                tokens: Vec::new(),
            });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PointerError::NoLeadingSlash(text.to_owned()));
        };
        let mut tokens = Vec::new();
        for raw in rest.split('/') {
            let mut token = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => token.push('~'),
                        Some('1') => token.push('/'),
                        _ => return Err(PointerError::BadEscape(text.to_owned())),
                    }
                } else {
                    token.push(c);
                }
            }
            tokens.push(token);
        }
        Ok(Pointer {
            text: text.to_owned(),
            tokens,
        })
    }

    /// The pointer as written in the contract, escapes included (`""` for the whole document).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this is `""`, the whole document rather than a place inside it.
    pub fn is_root(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The value at this place, if the document has one.
    pub fn get<'v>(&self, doc: &'v Value) -> Option<&'v Value> {
        self.tokens.iter().try_fold(doc, |v, t| step(v, t))
    }

    /// The value at this place, mutably, if the document has one (used to rewrite a field in
    /// place, e.g. a date normalized to UTC).
    pub fn get_mut<'v>(&self, doc: &'v mut Value) -> Option<&'v mut Value> {
        self.tokens.iter().try_fold(doc, |v, t| step_mut(v, t))
    }

    /// What `remove` would take out of `doc`, without changing it: `Some(true)` a member of an
    /// object, `Some(false)` an element of an array (the elements after it then move down one
    /// place), `None` nothing.
    pub(crate) fn removal(&self, doc: &Value) -> Option<bool> {
        let (last, parents) = self.tokens.split_last()?;
        match parents.iter().try_fold(doc, |v, t| step(v, t))? {
            Value::Object(o) => o.get(last).map(|_| true),
            Value::Array(a) => index(last, a.len()).map(|_| false),
            _ => None,
        }
    }

    /// Whether this place is `other` or inside it (`/a/b` is inside `/a`, `/ab` is not).
    pub(crate) fn is_within(&self, other: &Pointer) -> bool {
        self.text
            .strip_prefix(other.text.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// Removes the value at this place and returns it. The root cannot be removed.
    pub fn remove(&self, doc: &mut Value) -> Option<Value> {
        let (last, parents) = self.tokens.split_last()?;
        let parent = parents.iter().try_fold(doc, |v, t| step_mut(v, t))?;
        match parent {
            Value::Object(o) => o.remove(last),
            Value::Array(a) => {
                let i = index(last, a.len())?;
                Some(a.remove(i))
            }
            _ => None,
        }
    }
}

/// An array index token: digits only, no leading zero (RFC 6901 section 4), in range.
fn index(token: &str, len: usize) -> Option<usize> {
    if token.is_empty()
        || (token.len() > 1 && token.starts_with('0'))
        || !token.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    token.parse::<usize>().ok().filter(|i| *i < len)
}

fn step<'v>(v: &'v Value, token: &str) -> Option<&'v Value> {
    match v {
        Value::Object(o) => o.get(token),
        Value::Array(a) => a.get(index(token, a.len())?),
        _ => None,
    }
}

fn step_mut<'v>(v: &'v mut Value, token: &str) -> Option<&'v mut Value> {
    match v {
        Value::Object(o) => o.get_mut(token),
        Value::Array(a) => {
            let i = index(token, a.len())?;
            a.get_mut(i)
        }
        _ => None,
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.text.is_empty() {
            f.write_str("(whole document)")
        } else {
            f.write_str(&self.text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{parse, Limits};

    fn doc() -> Value {
        parse(
            br#"{"a":{"b/c":[10,{"~x":true}]},"":1}"#,
            &Limits::default(),
        )
        .unwrap()
    }

    #[test]
    fn reads_escaped_tokens_and_indices() {
        let d = doc();
        let check = |p: &str, expected: Option<&str>| {
            let got = Pointer::parse(p).unwrap().get(&d).map(crate::canon::to_jcs);
            assert_eq!(got.as_deref(), expected, "pointer {p}");
        };
        check("/a/b~1c/0", Some("10"));
        check("/a/b~1c/1/~0x", Some("true"));
        check("/", Some("1"));
        check("/a/b~1c/01", None);
        check("/a/b~1c/2", None);
        check("/a/b~1c/-", None);
        check("/missing", None);
    }

    #[test]
    fn refuses_bad_syntax() {
        assert!(matches!(
            Pointer::parse("a/b"),
            Err(PointerError::NoLeadingSlash(_))
        ));
        assert!(matches!(
            Pointer::parse("/a~2"),
            Err(PointerError::BadEscape(_))
        ));
        assert!(matches!(
            Pointer::parse("/a~"),
            Err(PointerError::BadEscape(_))
        ));
    }

    #[test]
    fn removes_members_and_elements() {
        let mut d = doc();
        assert!(Pointer::parse("/a/b~1c/0")
            .unwrap()
            .remove(&mut d)
            .is_some());
        assert_eq!(
            crate::canon::to_jcs(&d),
            r#"{"":1,"a":{"b/c":[{"~x":true}]}}"#
        );
        assert!(Pointer::parse("").unwrap().remove(&mut d).is_none());
    }
}
