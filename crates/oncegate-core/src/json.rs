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

/// Integer literals of at most this many digits are exact doubles whose shortest round-trip
/// form is the literal itself, so their JCS form needs no float conversion.
const EXACT_INTEGER_DIGITS: usize = 15;

/// ECMAScript's `Number.prototype.toString` switches to exponent notation above 10^21.
const ES_PLAIN_MAX_EXPONENT: i128 = 21;

impl Number {
    /// The literal as the document wrote it (validated, never empty).
    pub fn literal(&self) -> &str {
        &self.literal
    }

    /// The nearest double. Always finite: the reader and the constructors refuse literals that
    /// overflow, and a literal that underflows gives zero.
    pub fn to_f64(&self) -> f64 {
        match self.literal.parse::<f64>() {
            Ok(value) => value,
            // Every RFC 8259 number is also valid input for Rust's float parser.
            Err(_) => unreachable!("validated JSON number {:?} did not parse", self.literal),
        }
    }

    /// A number from its literal, if `literal` follows the RFC 8259 grammar exactly (no
    /// surrounding whitespace) and its value is finite as a double.
    pub fn from_literal(literal: &str) -> Option<Number> {
        match scan_number(literal.as_bytes(), 0) {
            Ok(end) if end == literal.len() => {
                if overflows(literal) {
                    None
                } else {
                    Some(Number {
                        literal: literal.to_owned(),
                    })
                }
            }
            _ => None,
        }
    }

    /// The number whose literal is `value` in plain decimal (exact: no double in between).
    pub fn from_u64(value: u64) -> Number {
        Number {
            literal: value.to_string(),
        }
    }

    /// The number whose literal is `value` in plain decimal, with a `-` when negative (exact).
    pub fn from_i64(value: i64) -> Number {
        Number {
            literal: value.to_string(),
        }
    }

    /// A number from a double, written in its JCS form; `None` for infinities and NaN, which
    /// JSON cannot express.
    pub fn from_f64(value: f64) -> Option<Number> {
        if !value.is_finite() {
            return None;
        }
        Some(Number {
            literal: ryu_js::Buffer::new().format_finite(value).to_owned(),
        })
    }

    /// The RFC 8785 form: ECMAScript's `Number.prototype.toString` of the nearest double
    /// (so `-0` is `0`, `1e21` is `1e+21`, and precision beyond a double is lost).
    pub fn jcs(&self) -> String {
        let mut out = String::new();
        self.write_jcs(&mut out);
        out
    }

    /// Appends [`Number::jcs`] to `out`.
    pub fn write_jcs(&self, out: &mut String) {
        let literal = self.literal.as_str();
        let digits = literal.strip_prefix('-').unwrap_or(literal);
        if digits.len() <= EXACT_INTEGER_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()) {
            // Most webhook numbers are small integers: skip the float round trip.
            out.push_str(if digits == "0" { "0" } else { literal });
            return;
        }
        out.push_str(ryu_js::Buffer::new().format_finite(self.to_f64()));
    }

    /// The exact decimal value of the literal, normalized and written with the same rules as
    /// [`Number::jcs`] but without going through a double: `100`, `100.0`, `1e2` and `0.1e3`
    /// all give `100`, and `-0` gives `0`, yet `9007199254740993` stays `9007199254740993`
    /// where JCS would say `9007199254740992`. Two literals give the same key form exactly when
    /// they denote the same decimal number, so a dedup key never merges two amounts that a
    /// double would have rounded together. For a literal whose value a double holds exactly and
    /// whose digits are the shortest that round-trip, the key form equals the JCS form.
    pub fn key_form(&self) -> String {
        let mut out = String::new();
        self.write_key_form(&mut out);
        out
    }

    /// Appends [`Number::key_form`] to `out`.
    pub fn write_key_form(&self, out: &mut String) {
        let literal = self.literal.as_str();
        let (negative, unsigned) = match literal.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, literal),
        };
        let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
            Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
            None => (unsigned, None),
        };
        let (int_part, frac_part) = match mantissa.find('.') {
            Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
            None => (mantissa, ""),
        };
        if exponent.is_none()
            && frac_part.is_empty()
            && int_part.len() as i128 <= ES_PLAIN_MAX_EXPONENT
        {
            // A plain integer is already normalized (the grammar forbids leading zeros).
            out.push_str(if int_part == "0" { "0" } else { literal });
            return;
        }

        // The significant digits are those of `int_part` followed by `frac_part`, from the
        // first non-zero one to the last non-zero one; `digit(i)` reads that concatenation.
        let int_len = int_part.len();
        let total = int_len + frac_part.len();
        let digit = |i: usize| -> u8 {
            if i < int_len {
                int_part.as_bytes()[i]
            } else {
                frac_part.as_bytes()[i - int_len]
            }
        };
        let Some(first) = (0..total).find(|&i| digit(i) != b'0') else {
            out.push('0');
            return;
        };
        let last = (first..total)
            .rev()
            .find(|&i| digit(i) != b'0')
            .unwrap_or(first);
        let push_digits = |out: &mut String, from: usize, to: usize| {
            // Copies digits [from, to) of the concatenation without building it.
            if from < int_len {
                out.push_str(&int_part[from..to.min(int_len)]);
            }
            if to > int_len {
                out.push_str(&frac_part[from.max(int_len) - int_len..to - int_len]);
            }
        };
        let k = last - first + 1;
        // The value is 0.d1d2…dk × 10^n (ECMAScript's n); the literal's decimal point sits after
        // `int_len` digits, so n = exponent + int_len - first.
        let shift = int_len as i128 - first as i128;

        if negative {
            out.push('-');
        }
        let n = match exponent.map(parse_exponent) {
            None => shift,
            Some(Exponent::Small(e)) => e + shift,
            Some(Exponent::Huge {
                negative: exp_negative,
                digits,
            }) => {
                // Only a vanishingly small or (refused) infinite value gets here: its form is
                // always the exponent notation, with n - 1 computed in decimal.
                push_digits(out, first, first + 1);
                if k > 1 {
                    out.push('.');
                    push_digits(out, first + 1, last + 1);
                }
                out.push_str(if exp_negative { "e-" } else { "e+" });
                let delta = shift - 1;
                out.push_str(&add_to_decimal(
                    digits,
                    if exp_negative { -delta } else { delta },
                ));
                return;
            }
        };
        let k = k as i128;
        let (first_i, last_i) = (first as i128, last as i128);
        if k <= n && n <= ES_PLAIN_MAX_EXPONENT {
            push_digits(out, first, last + 1);
            push_zeros(out, n - k);
        } else if 0 < n && n <= ES_PLAIN_MAX_EXPONENT {
            let point = (first_i + n) as usize;
            push_digits(out, first, point);
            out.push('.');
            push_digits(out, point, (last_i + 1) as usize);
        } else if -6 < n && n <= 0 {
            out.push_str("0.");
            push_zeros(out, -n);
            push_digits(out, first, last + 1);
        } else {
            push_digits(out, first, first + 1);
            if k > 1 {
                out.push('.');
                push_digits(out, first + 1, last + 1);
            }
            let e = n - 1;
            out.push_str(if e < 0 { "e-" } else { "e+" });
            out.push_str(&e.unsigned_abs().to_string());
        }
    }
}

fn push_zeros(out: &mut String, count: i128) {
    for _ in 0..count {
        out.push('0');
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.literal)
    }
}

/// A number literal's exponent: exact when it fits comfortably in an `i128` together with any
/// shift a literal can add, else kept as its decimal digits.
enum Exponent<'a> {
    Small(i128),
    Huge { negative: bool, digits: &'a str },
}

/// Exponents of up to this many digits are parsed into an `i128` (which holds 38 digits), with
/// room to add a shift bounded by the literal's length.
const SMALL_EXPONENT_DIGITS: usize = 30;

fn parse_exponent(text: &str) -> Exponent<'_> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let digits = digits.trim_start_matches('0');
    if digits.len() <= SMALL_EXPONENT_DIGITS {
        let magnitude = digits
            .bytes()
            .fold(0i128, |acc, d| acc * 10 + i128::from(d - b'0'));
        Exponent::Small(if negative { -magnitude } else { magnitude })
    } else {
        Exponent::Huge { negative, digits }
    }
}

/// `digits + delta` in decimal, where `digits` (no leading zeros) is far larger than `|delta|`.
fn add_to_decimal(digits: &str, delta: i128) -> String {
    // Little-endian digit values, so carries and borrows run forwards.
    let mut value: Vec<i32> = digits.bytes().rev().map(|d| i32::from(d - b'0')).collect();
    let mut carry = delta; // signed: a borrow is a negative carry
    let mut i = 0;
    while carry != 0 {
        if i == value.len() {
            value.push(0);
        }
        let sum = i128::from(value[i]) + carry;
        let digit = sum.rem_euclid(10);
        value[i] = digit as i32;
        carry = (sum - digit) / 10;
        i += 1;
    }
    while value.len() > 1 && value.last() == Some(&0) {
        value.pop();
    }
    value
        .iter()
        .rev()
        .map(|&d| char::from(b'0' + d as u8))
        .collect()
}

/// Scans one RFC 8259 number starting at `start`; returns the index just past it, or the offset
/// and description of the first deviation from the grammar.
fn scan_number(bytes: &[u8], start: usize) -> Result<usize, (usize, &'static str)> {
    let mut i = start;
    if bytes.get(i) == Some(&b'-') {
        i += 1;
    }
    match bytes.get(i) {
        Some(b'0') => {
            i += 1;
            if matches!(bytes.get(i), Some(b'0'..=b'9')) {
                return Err((i - 1, "leading zeros are not allowed in a number"));
            }
        }
        Some(b'1'..=b'9') => i = skip_digits(bytes, i + 1),
        _ => return Err((i, "expected a digit at the start of a number")),
    }
    if bytes.get(i) == Some(&b'.') {
        let digits = i + 1;
        i = skip_digits(bytes, digits);
        if i == digits {
            return Err((i, "expected a digit after the decimal point"));
        }
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let digits = i;
        i = skip_digits(bytes, digits);
        if i == digits {
            return Err((i, "expected a digit in the exponent"));
        }
    }
    Ok(i)
}

fn skip_digits(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b'0'..=b'9')) {
        i += 1;
    }
    i
}

/// Whether a grammatical number literal is infinite as a double.
fn overflows(literal: &str) -> bool {
    // The value is below 10^(integer digits + exponent), and 10^308 is below f64::MAX: only a
    // literal past that bound needs the (slower) exact conversion.
    let unsigned = literal.strip_prefix('-').unwrap_or(literal);
    let int_digits = unsigned.bytes().take_while(u8::is_ascii_digit).count();
    let int_magnitude = if unsigned.starts_with('0') {
        0
    } else {
        int_digits as i64
    };
    let exponent = match unsigned.find(['e', 'E']) {
        None => 0,
        Some(at) => {
            let text = &unsigned[at + 1..];
            let (negative, digits) = match text.as_bytes().first() {
                Some(b'-') => (true, &text[1..]),
                Some(b'+') => (false, &text[1..]),
                _ => (false, text),
            };
            let magnitude = digits.bytes().fold(0i64, |acc, d| {
                acc.saturating_mul(10).saturating_add(i64::from(d - b'0'))
            });
            if negative {
                -magnitude
            } else {
                magnitude
            }
        }
    };
    if int_magnitude.saturating_add(exponent) <= 308 {
        return false;
    }
    !literal.parse::<f64>().is_ok_and(f64::is_finite)
}

/// Finds the first byte at or after `from` that cannot be copied as is into or out of a JSON
/// string: a quote, a backslash or a control character. Returns `bytes.len()` if there is none.
pub(crate) fn find_string_special(bytes: &[u8], from: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut i = from;
    // Eight bytes at a time ("SWAR"): most strings are long runs of plain text. In each test the
    // lowest flagged byte is always a true match (borrows only propagate upwards), which is the
    // only one we use.
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let quote = w ^ (ONES * u64::from(b'"'));
        let backslash = w ^ (ONES * u64::from(b'\\'));
        let hits = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (w.wrapping_sub(ONES * 0x20) & !w);
        let hits = hits & HIGHS;
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < bytes.len() && !is_string_special(bytes[i]) {
        i += 1;
    }
    i
}

fn is_string_special(byte: u8) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20
}

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

/// An array or object being read, with what it holds so far.
enum Frame {
    Array(Vec<Value>),
    Object {
        members: Vec<(String, Value)>,
        /// The name of the member whose value is being read.
        name: String,
        /// Where this object's member name offsets start in `Reader::name_offsets`.
        offsets_from: usize,
    },
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    max_depth: usize,
    /// Byte offsets of the member names of every open object, innermost last (one shared
    /// vector rather than one per object).
    name_offsets: Vec<usize>,
}

impl Reader<'_> {
    fn document(mut self) -> Result<Value, JsonError> {
        self.skip_whitespace();
        if self.pos == self.bytes.len() {
            return Err(syntax(
                self.pos,
                "expected a JSON value, found an empty body",
            ));
        }
        let value = self.value()?;
        self.skip_whitespace();
        if self.pos < self.bytes.len() {
            return Err(syntax(
                self.pos,
                format!("unexpected {} after the top-level value", self.found()),
            ));
        }
        Ok(value)
    }

    /// Reads one value, nested containers included, with an explicit stack of open containers.
    fn value(&mut self) -> Result<Value, JsonError> {
        let mut stack: Vec<Frame> = Vec::new();
        'value: loop {
            self.skip_whitespace();
            let mut value = match self.peek() {
                Some(b'[') => {
                    self.enter(stack.len())?;
                    self.skip_whitespace();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        Value::Array(Vec::new())
                    } else {
                        stack.push(Frame::Array(Vec::new()));
                        continue 'value;
                    }
                }
                Some(b'{') => {
                    self.enter(stack.len())?;
                    self.skip_whitespace();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        Value::Object(Object::new())
                    } else {
                        let offsets_from = self.name_offsets.len();
                        let name = self.member_name("a member name or '}'")?;
                        stack.push(Frame::Object {
                            members: Vec::new(),
                            name,
                            offsets_from,
                        });
                        continue 'value;
                    }
                }
                Some(b'"') => Value::String(self.string()?),
                Some(b'-' | b'0'..=b'9') => Value::Number(self.number()?),
                Some(b't') => self.literal("true", Value::Bool(true))?,
                Some(b'f') => self.literal("false", Value::Bool(false))?,
                Some(b'n') => self.literal("null", Value::Null)?,
                _ => return Err(self.expected("a value")),
            };
            // Hand the finished value to its container; a closing bracket finishes that one too.
            loop {
                match stack.last_mut() {
                    None => return Ok(value),
                    Some(Frame::Array(items)) => {
                        items.push(value);
                        self.skip_whitespace();
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                continue 'value;
                            }
                            Some(b']') => {
                                self.pos += 1;
                                let Some(Frame::Array(items)) = stack.pop() else {
                                    unreachable!()
                                };
                                value = Value::Array(items);
                            }
                            _ => return Err(self.expected("',' or ']' after an array element")),
                        }
                    }
                    Some(Frame::Object {
                        members,
                        name,
                        offsets_from,
                    }) => {
                        members.push((std::mem::take(name), value));
                        self.skip_whitespace();
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                *name = self.member_name("a member name after ','")?;
                                continue 'value;
                            }
                            Some(b'}') => {
                                self.pos += 1;
                                let offsets_from = *offsets_from;
                                let Some(Frame::Object { members, .. }) = stack.pop() else {
                                    unreachable!()
                                };
                                if let Some(second) = first_duplicate(&members) {
                                    return Err(JsonError {
                                        kind: JsonErrorKind::DuplicateKey(
                                            members[second].0.clone(),
                                        ),
                                        offset: self.name_offsets[offsets_from + second],
                                    });
                                }
                                self.name_offsets.truncate(offsets_from);
                                value = Value::Object(Object { members });
                            }
                            _ => return Err(self.expected("',' or '}' after an object member")),
                        }
                    }
                }
            }
        }
    }

    /// Steps into an array or object at `self.pos`, `open` containers deep.
    fn enter(&mut self, open: usize) -> Result<(), JsonError> {
        if open >= self.max_depth {
            return Err(JsonError {
                kind: JsonErrorKind::TooDeep {
                    limit: self.max_depth,
                },
                offset: self.pos,
            });
        }
        self.pos += 1;
        Ok(())
    }

    /// Reads a member name and the ':' after it, recording the name's offset.
    fn member_name(&mut self, expectation: &str) -> Result<String, JsonError> {
        self.skip_whitespace();
        if self.peek() != Some(b'"') {
            return Err(self.expected(expectation));
        }
        self.name_offsets.push(self.pos);
        let name = self.string()?;
        self.skip_whitespace();
        if self.peek() != Some(b':') {
            return Err(self.expected("':' after a member name"));
        }
        self.pos += 1;
        Ok(name)
    }

    /// Reads a string whose opening quote is at `self.pos`.
    fn string(&mut self) -> Result<String, JsonError> {
        let start = self.pos + 1;
        let end = find_string_special(self.bytes, start);
        if self.bytes.get(end) == Some(&b'"') {
            // No escapes: one copy, the common case.
            self.pos = end + 1;
            return Ok(self.text[start..end].to_owned());
        }
        let mut out = String::with_capacity(end - start + 16);
        out.push_str(&self.text[start..end]);
        let mut i = end;
        loop {
            match self.bytes.get(i) {
                None => return Err(syntax(i, "unexpected end of the body inside a string")),
                Some(b'"') => {
                    self.pos = i + 1;
                    return Ok(out);
                }
                Some(b'\\') => i = self.escape(i, &mut out)?,
                Some(&control) => {
                    return Err(syntax(
                        i,
                        format!("control character U+{control:04X} must be escaped in a string"),
                    ))
                }
            }
            let next = find_string_special(self.bytes, i);
            out.push_str(&self.text[i..next]);
            i = next;
        }
    }

    /// Decodes the escape whose backslash is at `at` into `out`; returns the index after it.
    fn escape(&self, at: usize, out: &mut String) -> Result<usize, JsonError> {
        let decoded = match self.bytes.get(at + 1) {
            None => {
                return Err(syntax(
                    at + 1,
                    "unexpected end of the body inside an escape sequence",
                ))
            }
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let unit = self.hex4(at + 2)?;
                let (ch, len) = match unit {
                    0xD800..=0xDBFF => {
                        // A high surrogate counts only as the first half of an escaped pair.
                        let low = if self.bytes.get(at + 6..at + 8) == Some(b"\\u") {
                            Some(self.hex4(at + 8)?)
                        } else {
                            None
                        };
                        match low {
                            Some(low @ 0xDC00..=0xDFFF) => {
                                let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                                (char::from_u32(code), 12)
                            }
                            _ => (None, 6),
                        }
                    }
                    _ => (char::from_u32(unit), 6),
                };
                let Some(ch) = ch else {
                    return Err(JsonError {
                        kind: JsonErrorKind::LoneSurrogate,
                        offset: at,
                    });
                };
                out.push(ch);
                return Ok(at + len);
            }
            Some(_) => {
                let ch = self.text[at + 1..].chars().next().unwrap_or_default();
                return Err(syntax(
                    at,
                    format!(
                        "invalid escape sequence '\\{}' in a string",
                        ch.escape_debug()
                    ),
                ));
            }
        };
        out.push(decoded);
        Ok(at + 2)
    }

    /// Reads the four hex digits of a `\u` escape starting at `at`.
    fn hex4(&self, at: usize) -> Result<u32, JsonError> {
        let mut unit = 0;
        for i in at..at + 4 {
            let digit = match self.bytes.get(i) {
                Some(&b) => char::from(b).to_digit(16),
                None => return Err(syntax(i, "unexpected end of the body inside a \\u escape")),
            };
            let Some(digit) = digit else {
                return Err(syntax(i, "expected four hex digits after \\u"));
            };
            unit = unit * 16 + digit;
        }
        Ok(unit)
    }

    fn number(&mut self) -> Result<Number, JsonError> {
        let start = self.pos;
        let end = scan_number(self.bytes, start).map_err(|(offset, what)| syntax(offset, what))?;
        let literal = &self.text[start..end];
        if overflows(literal) {
            return Err(JsonError {
                kind: JsonErrorKind::NumberOverflow,
                offset: start,
            });
        }
        self.pos = end;
        Ok(Number {
            literal: literal.to_owned(),
        })
    }

    fn literal(&mut self, word: &str, value: Value) -> Result<Value, JsonError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(syntax(
                self.pos,
                format!("invalid literal, expected `{word}`"),
            ))
        }
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// An error saying what was expected at `self.pos` and what is there instead.
    fn expected(&self, what: &str) -> JsonError {
        syntax(self.pos, format!("expected {what}, found {}", self.found()))
    }

    /// Describes what is at `self.pos`, for messages.
    fn found(&self) -> String {
        match self.text[self.pos..].chars().next() {
            None => "the end of the body".to_owned(),
            Some(c) if c.is_control() || c.is_whitespace() => {
                format!("character U+{:04X}", u32::from(c))
            }
            Some(c) => format!("'{c}'"),
        }
    }
}

/// The index of the first member whose name repeats an earlier one, if any.
fn first_duplicate(members: &[(String, Value)]) -> Option<usize> {
    // Pairwise comparison is cheapest for the small objects webhooks are made of; large ones are
    // sorted instead, so a hostile object of many members costs n log n, not n².
    const PAIRWISE_MAX: usize = 16;
    if members.len() <= PAIRWISE_MAX {
        return (1..members.len())
            .find(|&j| members[..j].iter().any(|(name, _)| *name == members[j].0));
    }
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_unstable_by(|&a, &b| members[a].0.cmp(&members[b].0).then(a.cmp(&b)));
    // Within a run of equal names sorted by position, the second is that name's second
    // occurrence; the earliest such across runs is the one a reader meets first.
    order
        .windows(2)
        .filter(|pair| members[pair[0]].0 == members[pair[1]].0)
        .map(|pair| pair[1])
        .min()
}
