//! A number as the document spelled it: its exact decimal value, its key form and its
//! RFC 8785 (ECMAScript) spelling, without ever going through a double where precision matters.

use std::fmt;

use super::Number;

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
pub(super) fn scan_number(bytes: &[u8], start: usize) -> Result<usize, (usize, &'static str)> {
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
pub(super) fn overflows(literal: &str) -> bool {
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
