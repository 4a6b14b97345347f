//! A strict JSON reader for webhook bodies: I-JSON (RFC 7493) rules, byte offsets in every error.
//!
//! The reader is hand-written because no available crate does all of what a dedup key needs at
//! once: refuse duplicate member names (serde_json keeps the last one silently), refuse lone
//! UTF-16 surrogates in `\u` escapes, keep every number as the literal the sender wrote, and
//! report the byte offset of each problem. It walks the bytes with an explicit stack instead of
//! recursion, so a hostile body cannot overflow the thread's stack whatever its nesting; the
//! depth limit then bounds every `Value` it returns, which keeps the recursive code downstream
//! (canonicalization, `Drop`) safe as long as the limit stays modest (the default is 128).
//!
//! What is refused, and why it is never guessed:
//! - a body over [`Limits::max_bytes`] (checked before anything else), an empty body, a leading
//!   byte order mark, bytes after the top-level value, anything outside the RFC 8259 grammar
//!   (whitespace is only space, tab, line feed and carriage return);
//! - a body that is not UTF-8, at the first bad byte (the whole body is checked at once, so this
//!   wins over grammar errors further on); unescaped control characters in strings;
//! - a `\u` escape of a lone surrogate: a high one not followed by a `\u` escape of a low one, or
//!   a low one on its own;
//! - a number whose value is infinite as a double (`1e400`). A number that underflows (`1e-400`)
//!   is accepted: its literal is kept exactly, and only its double view becomes zero;
//! - nesting deeper than [`Limits::max_depth`];
//! - a member name that appears twice in one object (compared after unescaping, code point by
//!   code point), reported when the object closes, at the second occurrence. RFC 8259 leaves
//!   this to the implementation; I-JSON (RFC 7493 section 2.3) forbids it, and a dedup key must
//!   not depend on which of two values a consumer would pick.
//!
//! The `i_` ("implementation defined") files of JSONTestSuite therefore come out as follows:
//! huge positive exponents and over-long literals that overflow a double are `NumberOverflow`,
//! huge negative exponents are accepted (underflow), big integers that a double can approximate
//! are accepted with their literal kept; invalid UTF-8 (overlong forms, encoded surrogates,
//! Latin-1, truncated sequences) and UTF-16 text, with or without a byte order mark, are
//! `InvalidUtf8`; a UTF-8 byte order mark is a `Syntax` error; lone surrogate escapes are
//! `LoneSurrogate`; 500 nested arrays are `TooDeep` with the default limit of 128.

use std::fmt;

/// Limits applied while reading a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of arrays and objects accepted (the top-level value is depth 1).
    pub max_depth: usize,
    /// Largest body accepted, in bytes.
    pub max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 128,
            max_bytes: 1024 * 1024,
        }
    }
}

/// A parsed JSON value. Objects keep their members in document order; duplicate names are
/// refused by the reader, so a name appears at most once.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `null`. The key hierarchy treats a field holding `null` like an absent one: it
    /// identifies nothing, so a strategy needing it is skipped.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, kept as the literal the sender wrote (see [`Number`]).
    Number(Number),
    /// A string, unescaped; always valid UTF-8 with no lone surrogate.
    String(String),
    /// An array, elements in document order (order is meaning unless a contract declares the
    /// array unordered).
    Array(Vec<Value>),
    /// An object, members in document order, names unique.
    Object(Object),
}

/// An object's members in document order, names unique.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Object {
    members: Vec<(String, Value)>,
}

impl Object {
    /// An object with no members.
    pub fn new() -> Self {
        Object::default()
    }
    /// The value of the member called `name` (compared exactly, after unescaping), if present.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.members.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
    /// The value of the member called `name`, mutably, if present.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.members
            .iter_mut()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }
    /// Removes a member, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        let at = self.members.iter().position(|(k, _)| k == name)?;
        Some(self.members.remove(at).1)
    }
    /// Adds a member; returns `Err` with the value back if the name is already present.
    pub fn insert_new(&mut self, name: String, value: Value) -> Result<(), Value> {
        if self.get(&name).is_some() {
            return Err(value);
        }
        self.members.push((name, value));
        Ok(())
    }
    /// The members as `(name, value)` pairs in document order (not sorted: the canonical form
    /// sorts them when it writes).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.members.iter().map(|(k, v)| (k.as_str(), v))
    }
    /// The members in document order, values mutable (names stay fixed, so they stay unique).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut Value)> {
        self.members.iter_mut().map(|(k, v)| (k.as_str(), v))
    }
    /// How many members the object has.
    pub fn len(&self) -> usize {
        self.members.len()
    }
    /// Whether the object has no members (`{}`).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// A JSON number kept as the literal text the document used (already validated against the
/// RFC 8259 grammar), so that no precision is lost before we decide how to use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Number {
    literal: String,
}

/// What went wrong while reading a body, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at byte {offset}")]
pub struct JsonError {
    /// Which rule the body broke.
    pub kind: JsonErrorKind,
    /// Byte offset in the body where the problem was found.
    pub offset: usize,
}

/// The reasons a body is refused. Each `Display` is a plain sentence fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonErrorKind {
    /// The body is longer than [`Limits::max_bytes`]; the offset is the limit.
    TooLarge {
        /// The limit in force, [`Limits::max_bytes`].
        limit: usize,
        /// The body's length, in bytes.
        size: usize,
    },
    /// Arrays and objects nest deeper than [`Limits::max_depth`]; the offset is the opening
    /// bracket that goes one level too deep.
    TooDeep {
        /// The limit in force, [`Limits::max_depth`].
        limit: usize,
    },
    /// A member name appears twice in one object; the offset is its second occurrence. Holds
    /// the name, unescaped.
    DuplicateKey(String),
    /// The body is not UTF-8; the offset is the first byte of the bad sequence.
    InvalidUtf8,
    /// A `\u` escape encodes half of a surrogate pair; the offset is its backslash.
    LoneSurrogate,
    /// A number's value is infinite as a double; the offset is the number's first byte.
    NumberOverflow,
    /// Anything else outside the RFC 8259 grammar, described in a sentence fragment.
    Syntax(String),
}

impl fmt::Display for JsonErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonErrorKind::TooLarge { limit, size } => {
                write!(f, "body of {size} bytes is over the limit of {limit} bytes")
            }
            JsonErrorKind::TooDeep { limit } => write!(f, "nesting deeper than {limit} levels"),
            JsonErrorKind::DuplicateKey(k) => write!(f, "duplicate object key {k:?}"),
            JsonErrorKind::InvalidUtf8 => write!(f, "invalid UTF-8"),
            JsonErrorKind::LoneSurrogate => write!(f, "lone UTF-16 surrogate in a string"),
            JsonErrorKind::NumberOverflow => {
                write!(f, "number too large for a double (would be infinite)")
            }
            JsonErrorKind::Syntax(what) => write!(f, "{what}"),
        }
    }
}

impl Value {
    /// The JSON name of this value's type, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }
    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
    /// The boolean, if this is `true` or `false`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
    /// The number, if this is one (its literal untouched).
    pub fn as_number(&self) -> Option<&Number> {
        match self {
            Value::Number(n) => Some(n),
            _ => None,
        }
    }
    /// The string's unescaped text, if this is a string. A number is not a string: `"12"` and
    /// `12` are different values.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&Vec<Value>> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }
    /// The elements, mutably, if this is an array (used to sort an array declared unordered).
    pub fn as_array_mut(&mut self) -> Option<&mut Vec<Value>> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }
    /// The members, if this is an object.
    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(object) => Some(object),
            _ => None,
        }
    }
    /// The members, mutably, if this is an object.
    pub fn as_object_mut(&mut self) -> Option<&mut Object> {
        match self {
            Value::Object(object) => Some(object),
            _ => None,
        }
    }
}

mod number;
mod reader;

pub(crate) use reader::find_string_special;
use reader::Reader;

/// Reads `body` strictly (see the module documentation for every rule): the whole body must be
/// one JSON value within `limits`, or the error names the rule broken and the byte offset.
///
/// ```
/// use oncegate_core::json::{parse, JsonErrorKind, Limits};
///
/// let body = parse(br#"{"amount": 1.50, "currency": "EUR"}"#, &Limits::default()).unwrap();
/// let amount = body.as_object().and_then(|o| o.get("amount")).and_then(|v| v.as_number());
/// assert_eq!(amount.map(|n| n.literal()), Some("1.50"));
///
/// // A second "amount" is refused at its own offset, never resolved by picking one.
/// let err = parse(br#"{"amount":1,"amount":2}"#, &Limits::default()).unwrap_err();
/// assert_eq!(err.kind, JsonErrorKind::DuplicateKey("amount".into()));
/// assert_eq!(err.offset, 12);
/// ```
pub fn parse(body: &[u8], limits: &Limits) -> Result<Value, JsonError> {
    if body.len() > limits.max_bytes {
        return Err(JsonError {
            kind: JsonErrorKind::TooLarge {
                limit: limits.max_bytes,
                size: body.len(),
            },
            offset: limits.max_bytes,
        });
    }
    if body.starts_with(b"\xEF\xBB\xBF") {
        return Err(syntax(0, "byte order mark is not allowed"));
    }
    // Checking the whole body once lets the reader slice strings out of a `&str` afterwards.
    let text = std::str::from_utf8(body).map_err(|e| JsonError {
        kind: JsonErrorKind::InvalidUtf8,
        offset: e.valid_up_to(),
    })?;
    Reader {
        text,
        bytes: body,
        pos: 0,
        max_depth: limits.max_depth,
        name_offsets: Vec::new(),
    }
    .document()
}

fn syntax(offset: usize, what: impl Into<String>) -> JsonError {
    JsonError {
        kind: JsonErrorKind::Syntax(what.into()),
        offset,
    }
}
