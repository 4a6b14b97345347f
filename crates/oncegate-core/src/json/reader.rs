//! The strict reader: one pass over the bytes with an explicit stack (no recursion, so depth
//! is a limit, never a crash), names checked for duplicates, strings sliced out of the text.

use super::number::{overflows, scan_number};
use super::*;

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

pub(super) struct Reader<'a> {
    pub(super) text: &'a str,
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
    pub(super) max_depth: usize,
    /// Byte offsets of the member names of every open object, innermost last (one shared
    /// vector rather than one per object).
    pub(super) name_offsets: Vec<usize>,
}

impl Reader<'_> {
    pub(super) fn document(mut self) -> Result<Value, JsonError> {
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
