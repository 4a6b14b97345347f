//! The canonical form of a JSON value: RFC 8785 (JCS), and the key form that dedup keys hash.
//!
//! Both forms sort object members by the UTF-16 code units of their names, write no whitespace
//! and escape strings the JCS way. They differ only in numbers: JCS writes the nearest double as
//! ECMAScript would ([`Number::jcs`]), which is what interoperates with other JCS producers;
//! the key form writes the literal's exact decimal value ([`Number::key_form`]), so that two
//! amounts a double cannot tell apart never share a key.
//!
//! Writing is recursive; the depth of a parsed value is bounded by the reader's limit.

use std::cmp::Ordering;

use crate::json::{find_string_special, Number, Value};

/// Appends the RFC 8785 canonical form of `value` to `out`.
pub fn write_jcs(value: &Value, out: &mut String) {
    Writer {
        numbers: NumberForm::Jcs,
        members: Vec::new(),
    }
    .value(value, out);
}

/// The RFC 8785 canonical form of `value`: members sorted by the UTF-16 code units of their
/// names, no whitespace, numbers as ECMAScript writes the nearest double.
///
/// ```
/// use oncegate_core::canon::to_jcs;
/// use oncegate_core::json::{parse, Limits};
///
/// let body = parse(br#"{ "b": 1.50, "a": [true, null], "c": 1e21 }"#, &Limits::default()).unwrap();
/// assert_eq!(to_jcs(&body), r#"{"a":[true,null],"b":1.5,"c":1e+21}"#);
/// ```
pub fn to_jcs(value: &Value) -> String {
    let mut out = String::new();
    write_jcs(value, &mut out);
    out
}

/// Appends the key form of `value` to `out`: JCS, except that numbers keep their exact decimal
/// value ([`Number::key_form`]).
pub fn write_key_form(value: &Value, out: &mut String) {
    Writer {
        numbers: NumberForm::Key,
        members: Vec::new(),
    }
    .value(value, out);
}

/// The key form of `value`: what dedup keys hash.
///
/// Two spellings of one decimal agree; two amounts a double would round together do not.
///
/// ```
/// use oncegate_core::canon::{to_jcs, to_key_form};
/// use oncegate_core::json::{parse, Limits};
///
/// let read = |text: &str| parse(text.as_bytes(), &Limits::default()).unwrap();
/// assert_eq!(to_key_form(&read(r#"{"amount":100.0}"#)), to_key_form(&read(r#"{"amount":1e2}"#)));
///
/// let (a, b) = (read("9007199254740993"), read("9007199254740992"));
/// assert_eq!(to_jcs(&a), to_jcs(&b)); // one double
/// assert_ne!(to_key_form(&a), to_key_form(&b)); // two amounts
/// assert_eq!(to_key_form(&a), "9007199254740993");
/// ```
pub fn to_key_form(value: &Value) -> String {
    let mut out = String::new();
    write_key_form(value, &mut out);
    out
}

#[derive(Clone, Copy)]
enum NumberForm {
    Jcs,
    Key,
}

struct Writer<'v> {
    numbers: NumberForm,
    /// The members of every object being written, innermost last: one buffer for the whole
    /// value instead of one sorted copy per object.
    members: Vec<(&'v str, &'v Value)>,
}

impl<'v> Writer<'v> {
    fn value(&mut self, value: &'v Value, out: &mut String) {
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(true) => out.push_str("true"),
            Value::Bool(false) => out.push_str("false"),
            Value::Number(number) => self.number(number, out),
            Value::String(text) => write_string(text, out),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.value(item, out);
                }
                out.push(']');
            }
            Value::Object(object) => {
                let from = self.members.len();
                self.members.extend(object.iter());
                self.members[from..].sort_unstable_by(|a, b| cmp_utf16(a.0, b.0));
                let to = self.members.len();
                out.push('{');
                for i in from..to {
                    // Nested objects push above `to` and truncate back before returning.
                    let (name, member) = self.members[i];
                    if i > from {
                        out.push(',');
                    }
                    write_string(name, out);
                    out.push(':');
                    self.value(member, out);
                }
                out.push('}');
                self.members.truncate(from);
            }
        }
    }

    fn number(&self, number: &Number, out: &mut String) {
        match self.numbers {
            NumberForm::Jcs => number.write_jcs(out),
            NumberForm::Key => number.write_key_form(out),
        }
    }
}

/// Compares two strings by their UTF-16 code units, as RFC 8785 section 3.2.3 requires.
///
/// UTF-8 byte order is code point order, and UTF-16 order agrees with it except between a
/// character above U+FFFF (a surrogate pair, D800–DBFF first) and one in U+E000–U+FFFF: those are
/// the only characters whose UTF-8 lead bytes are F0–F4 and EE–EF respectively. So the bytes are
/// compared, and only that one case at the first difference is turned around.
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let Some(at) = a.iter().zip(b).position(|(x, y)| x != y) else {
        return a.len().cmp(&b.len());
    };
    // Both strings are identical before `at`, so either both bytes are lead bytes of characters
    // starting at `at`, or both are continuation bytes (0x80–0xBF) of same-length characters.
    let (x, y) = (a[at], b[at]);
    let supplementary = |byte: u8| byte >= 0xF0;
    let upper_bmp = |byte: u8| byte == 0xEE || byte == 0xEF;
    if supplementary(x) && upper_bmp(y) {
        Ordering::Less
    } else if upper_bmp(x) && supplementary(y) {
        Ordering::Greater
    } else {
        x.cmp(&y)
    }
}

/// Writes `text` as a JSON string the RFC 8785 way: `"` and `\` escaped, control characters as
/// their short escapes or `\u00xx` (lowercase hex), everything else (`/` included) as is.
pub(crate) fn write_string(text: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push('"');
    let mut start = 0;
    loop {
        let at = find_string_special(bytes, start);
        out.push_str(&text[start..at]);
        let Some(&byte) = bytes.get(at) else { break };
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0C => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            _ => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xF)]));
            }
        }
        start = at + 1;
    }
    out.push('"');
}
