//! Fuzzes RFC 8785 canonicalization: for every body the reader accepts, the canonical form is
//! read back to itself (`canon(parse(canon(x))) == canon(x)`), and another spelling of the same
//! value (members shuffled, whitespace added, characters escaped, numbers re-spelled) has the
//! same canonical form and the same key form.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oncegate_core::canon::{to_jcs, to_key_form};
use oncegate_core::json::{parse, Limits, Value};

fuzz_target!(|body: &[u8]| {
    let Ok(value) = parse(body, &Limits::default()) else {
        return;
    };
    let jcs = to_jcs(&value);
    let key = to_key_form(&value);
    // The canonical forms may be longer than the body (`1e-7` is `1e-7`, but `1E400` never
    // reads): no size limit applies to the second reading, only the depth, which is the same.
    let unbounded = Limits {
        max_bytes: usize::MAX,
        ..Limits::default()
    };

    let again = parse(jcs.as_bytes(), &unbounded)
        .unwrap_or_else(|e| panic!("the canonical form {jcs:?} does not read: {e}"));
    assert_eq!(to_jcs(&again), jcs, "JCS is not a fixed point");

    let again = parse(key.as_bytes(), &unbounded)
        .unwrap_or_else(|e| panic!("the key form {key:?} does not read: {e}"));
    assert_eq!(
        to_key_form(&again),
        key,
        "the key form is not a fixed point"
    );

    // Another spelling of the same value, its choices drawn from the body itself so a crash
    // reproduces from the one input.
    let mut respelled = String::new();
    Spelling::new(body).value(&value, &mut respelled);
    let other = parse(respelled.as_bytes(), &unbounded)
        .unwrap_or_else(|e| panic!("the respelling {respelled:?} does not read: {e}"));
    assert_eq!(
        to_jcs(&other),
        jcs,
        "two spellings, two JCS forms: {respelled:?}"
    );
    assert_eq!(
        to_key_form(&other),
        key,
        "two spellings, two key forms: {respelled:?}"
    );
});

/// Writes a value as valid JSON with arbitrary but meaning-preserving choices.
struct Spelling {
    state: u64,
}

impl Spelling {
    fn new(seed: &[u8]) -> Spelling {
        // FNV-1a of the body: deterministic, and different for every mutation.
        let state = seed.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        Spelling { state }
    }

    /// SplitMix64.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }

    fn space(&mut self, out: &mut String) {
        while self.one_in(3) {
            out.push([' ', '\t', '\n', '\r'][(self.next() % 4) as usize]);
        }
    }

    fn value(&mut self, value: &Value, out: &mut String) {
        self.space(out);
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => self.number(n.literal(), out),
            Value::String(s) => self.string(s, out),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.value(item, out);
                }
                self.space(out);
                out.push(']');
            }
            Value::Object(object) => {
                let mut members: Vec<(&str, &Value)> = object.iter().collect();
                // Fisher-Yates.
                for i in (1..members.len()).rev() {
                    let j = (self.next() % (i as u64 + 1)) as usize;
                    members.swap(i, j);
                }
                out.push('{');
                for (i, (name, member)) in members.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.space(out);
                    self.string(name, out);
                    self.space(out);
                    out.push(':');
                    self.value(member, out);
                }
                self.space(out);
                out.push('}');
            }
        }
        self.space(out);
    }

    fn string(&mut self, text: &str, out: &mut String) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '/' if self.one_in(2) => out.push_str("\\/"),
                '\u{8}' if self.one_in(2) => out.push_str("\\b"),
                '\u{c}' if self.one_in(2) => out.push_str("\\f"),
                '\n' if self.one_in(2) => out.push_str("\\n"),
                '\r' if self.one_in(2) => out.push_str("\\r"),
                '\t' if self.one_in(2) => out.push_str("\\t"),
                c if (c as u32) < 0x20 || self.one_in(4) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        if self.one_in(2) {
                            out.push_str(&format!("\\u{unit:04x}"));
                        } else {
                            out.push_str(&format!("\\u{unit:04X}"));
                        }
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }

    /// The same decimal value, spelled another way: an exponent added or moved, trailing zeros
    /// in the fraction, an upper-case `E`, an explicit `+`.
    fn number(&mut self, literal: &str, out: &mut String) {
        let (sign, unsigned) = match literal.strip_prefix('-') {
            Some(rest) => ("-", rest),
            None => ("", literal),
        };
        let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
            Some(at) => (&unsigned[..at], &unsigned[at + 1..]),
            None => (unsigned, "0"),
        };
        let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let mut exponent: i128 = match exponent.trim_start_matches('+').parse() {
            Ok(e) => e,
            // An exponent beyond i128: keep the literal as it is.
            Err(_) => {
                out.push_str(literal);
                return;
            }
        };
        // Move the decimal point: with all the digits after it, `0.<digits>e<n>`, or keep it.
        let mut int_part = int_part.to_owned();
        let mut frac_part = frac_part.to_owned();
        if self.one_in(2) {
            if let Some(moved) = exponent.checked_add(int_part.len() as i128) {
                exponent = moved;
                frac_part = format!("{int_part}{frac_part}");
                int_part = "0".to_owned();
            }
        }
        for _ in 0..self.next() % 3 {
            frac_part.push('0');
        }
        out.push_str(sign);
        out.push_str(&int_part);
        if !frac_part.is_empty() {
            out.push('.');
            out.push_str(&frac_part);
        }
        if exponent != 0 || self.one_in(2) {
            out.push(if self.one_in(2) { 'e' } else { 'E' });
            if exponent >= 0 && self.one_in(2) {
                out.push('+');
            }
            out.push_str(&exponent.to_string());
        }
    }
}
