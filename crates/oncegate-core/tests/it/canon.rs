//! The canonical forms: RFC 8785's own examples, ES6 number rows, key form rows, and properties
//! (insensitive to whitespace, member order and number spelling; idempotent; never merging).

use std::cmp::Ordering;

use oncegate_core::canon::{cmp_utf16, to_jcs, to_key_form};
use oncegate_core::json::{parse, JsonErrorKind, Limits, Number, Value};
use proptest::prelude::*;

fn read(input: &str) -> Value {
    parse(input.as_bytes(), &Limits::default()).unwrap_or_else(|e| panic!("{input:?}: {e}"))
}

/// The JCS form of `input` is `expected`.
fn check(input: &str, expected: &str) {
    assert_eq!(to_jcs(&read(input)), expected, "JCS of {input:?}");
}

/// The key form of `input` is `expected`.
fn check_key(input: &str, expected: &str) {
    assert_eq!(to_key_form(&read(input)), expected, "key form of {input:?}");
}

#[test]
fn rfc8785_section_3_2_2_example() {
    check(
        r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#,
        r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#,
    );
}

#[test]
fn rfc8785_section_3_2_3_sorting_example() {
    check(
        r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#,
        concat!(
            r#"{"\r":"Carriage Return","1":"One","#,
            "\"\u{80}\":\"Control\",",
            r#""ö":"Latin Small Letter O With Diaeresis","€":"Euro Sign","😀":"Emoji: Grinning Face","#,
            "\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        ),
    );
}

#[test]
fn jcs_rows() {
    let rows = [
        // Structure and whitespace.
        ("  [ 1 , { } , [ ] , \"\" ]\r\n", r#"[1,{},[],""]"#),
        (
            r#"{"b":1,"a":{"d":[3,2,1],"c":null}}"#,
            r#"{"a":{"c":null,"d":[3,2,1]},"b":1}"#,
        ),
        // Shorter names sort before longer ones that extend them.
        (r#"{"ab":1,"a":2,"":3}"#, r#"{"":3,"a":2,"ab":1}"#),
        // UTF-16 order, not UTF-8 order: U+10000 (D800 DC00) sorts before U+E000 and U+FFFF.
        (
            "{\"\u{ffff}\":1,\"\u{10000}\":2,\"\u{e000}\":3,\"\u{d7ff}\":4}",
            "{\"\u{d7ff}\":4,\"\u{10000}\":2,\"\u{e000}\":3,\"\u{ffff}\":1}",
        ),
        // Escapes: short forms, lowercase \u00xx, '/' and non-ASCII written as is.
        (
            r#""\b\f\n\r\t\u0000\u001F\u007f\/\u00e9\u2028""#,
            "\"\\b\\f\\n\\r\\t\\u0000\\u001f\u{7f}/é\u{2028}\"",
        ),
        (r#""\"\\""#, r#""\"\\""#),
        // Numbers go through the nearest double.
        (
            "[1.0, -0, -0.0, 1e2, 1E+2, 0.1e3, 100e0]",
            "[1,0,0,100,100,100,100]",
        ),
        (
            "[9007199254740993, 1e21, 1e-7, 123e-10000000]",
            "[9007199254740992,1e+21,1e-7,0]",
        ),
        ("[0.1000000000000000055511151231257827]", "[0.1]"),
    ];
    for (input, expected) in rows {
        check(input, expected);
    }
}

#[test]
fn key_form_rows() {
    let rows = [
        ("100", "100"),
        ("100.0", "100"),
        ("1e2", "100"),
        ("1E+2", "100"),
        ("100e0", "100"),
        ("0.1e3", "100"),
        ("10000e-2", "100"),
        ("-0", "0"),
        ("-0.000e-5", "0"),
        ("0e99999999999999999999999999999999999999999999", "0"),
        ("0", "0"),
        ("1.5", "1.5"),
        ("1.50", "1.5"),
        ("-12.34e1", "-123.4"),
        ("1e21", "1e+21"),
        ("1e20", "100000000000000000000"),
        ("123456789012345678901", "123456789012345678901"),
        ("1234567890123456789012", "1.234567890123456789012e+21"),
        ("1e-6", "0.000001"),
        ("1e-7", "1e-7"),
        ("12e-8", "1.2e-7"),
        ("0.0000012345", "0.0000012345"),
        ("4.50", "4.5"),
        ("2e-3", "0.002"),
        ("1E30", "1e+30"),
        // Digits a double cannot hold are kept.
        ("9007199254740993", "9007199254740993"),
        ("9007199254740992", "9007199254740992"),
        ("333333333.33333329", "333333333.33333329"),
        (
            "0.1000000000000000055511151231257827",
            "0.1000000000000000055511151231257827",
        ),
        ("1e-400", "1e-400"),
        ("123e-10000000", "1.23e-9999998"),
        // Exponents too long for any machine integer are adjusted in decimal.
        (
            "1e-1000000000000000000000000000000000000000",
            "1e-1000000000000000000000000000000000000000",
        ),
        (
            "12e-1000000000000000000000000000000000000000",
            "1.2e-999999999999999999999999999999999999999",
        ),
        (
            "0.012e-1000000000000000000000000000000000000000",
            "1.2e-1000000000000000000000000000000000000002",
        ),
    ];
    for (input, expected) in rows {
        check_key(input, expected);
        let number = Number::from_literal(input).unwrap();
        assert_eq!(number.key_form(), expected, "{input}");
        // The key form is a literal of the same value.
        let again = Number::from_literal(expected).unwrap();
        assert_eq!(again.key_form(), expected, "{expected}");
        assert_eq!(again.to_f64(), number.to_f64(), "{input}");
    }
    assert_ne!(
        Number::from_literal("9007199254740993").unwrap().key_form(),
        Number::from_literal("9007199254740992").unwrap().key_form()
    );
    assert_eq!(
        Number::from_literal("9007199254740993").unwrap().jcs(),
        Number::from_literal("9007199254740992").unwrap().jcs()
    );
    check_key(r#"{"b":[1.0,"x"],"a":2E0}"#, r#"{"a":2,"b":[1,"x"]}"#);
    let refused = parse(b"1e400", &Limits::default()).unwrap_err();
    assert_eq!(refused.kind, JsonErrorKind::NumberOverflow);
}

/// RFC 8785 Appendix B: IEEE 754 bit patterns and their ES6 text.
const APPENDIX_B: &[(u64, &str)] = &[
    (0x0000000000000000, "0"),
    (0x8000000000000000, "0"),
    (0x0000000000000001, "5e-324"),
    (0x8000000000000001, "-5e-324"),
    (0x7fefffffffffffff, "1.7976931348623157e+308"),
    (0xffefffffffffffff, "-1.7976931348623157e+308"),
    (0x4340000000000000, "9007199254740992"),
    (0xc340000000000000, "-9007199254740992"),
    (0x4430000000000000, "295147905179352830000"),
    (0x44b52d02c7e14af5, "9.999999999999997e+22"),
    (0x44b52d02c7e14af6, "1e+23"),
    (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
    (0x444b1ae4d6e2ef4e, "999999999999999700000"),
    (0x444b1ae4d6e2ef4f, "999999999999999900000"),
    (0x444b1ae4d6e2ef50, "1e+21"),
    (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
    (0x3eb0c6f7a0b5ed8d, "0.000001"),
    (0x41b3de4355555553, "333333333.3333332"),
    (0x41b3de4355555554, "333333333.33333325"),
    (0x41b3de4355555555, "333333333.3333333"),
    (0x41b3de4355555556, "333333333.3333334"),
    (0x41b3de4355555557, "333333333.33333343"),
    (0xbecbf647612f3696, "-0.0000033333333333333333"),
    (0x43143ff3c1cb0959, "1424953923781206.2"),
];

#[test]
fn rfc8785_appendix_b_numbers() {
    for &(bits, expected) in APPENDIX_B {
        let double = f64::from_bits(bits);
        // Written with Rust's exponent notation, so the JCS form has to be computed.
        let number = Number::from_literal(&format!("{double:e}")).unwrap();
        assert_eq!(number.jcs(), expected, "{bits:#018x}");
        assert_eq!(
            Number::from_f64(double).unwrap().literal(),
            expected,
            "{bits:#018x}"
        );
        // ES6 text is already normalized, so its key form is itself.
        let written = Number::from_literal(expected).unwrap();
        assert_eq!(written.key_form(), expected, "{bits:#018x}");
        assert_eq!(written.to_f64(), double, "{bits:#018x}");
    }
}

#[test]
fn integer_fast_path_agrees_with_the_float_path() {
    for literal in [
        "0",
        "-0",
        "7",
        "-7",
        "999999999999999",
        "-999999999999999",
        "100000000000000",
        "123456789012345",
    ] {
        let number = Number::from_literal(literal).unwrap();
        let via_float = Number::from_f64(number.to_f64()).unwrap();
        assert_eq!(number.jcs(), via_float.literal(), "{literal}");
    }
}

#[test]
fn utf16_order_examples() {
    assert_eq!(cmp_utf16("\u{10000}", "\u{e000}"), Ordering::Less);
    assert_eq!(cmp_utf16("\u{ffff}", "\u{1f600}"), Ordering::Greater);
    assert_eq!(cmp_utf16("a\u{10ffff}", "a\u{fffd}"), Ordering::Less);
    assert_eq!(cmp_utf16("\u{d7ff}", "\u{10000}"), Ordering::Less);
    assert_eq!(cmp_utf16("é", "e"), Ordering::Greater);
    assert_eq!(cmp_utf16("ab", "abc"), Ordering::Less);
    assert_eq!(cmp_utf16("abc", "abc"), Ordering::Equal);
}

// --- Properties -------------------------------------------------------------------------------

/// A decimal number as sign, significant digits and exponent: `digits × 10^exp`. Normalized:
/// no leading or trailing zeros in `digits`, and zero is `(false, "0", 0)`.
#[derive(Debug, Clone, PartialEq)]
struct Decimal {
    negative: bool,
    digits: String,
    exp: i64,
}

impl Decimal {
    fn new(negative: bool, digits: &str, exp: i64) -> Decimal {
        let trimmed = digits.trim_start_matches('0');
        let significant = trimmed.trim_end_matches('0');
        if significant.is_empty() {
            return Decimal {
                negative: false,
                digits: "0".into(),
                exp: 0,
            };
        }
        let exp = exp + (trimmed.len() - significant.len()) as i64;
        Decimal {
            negative,
            digits: significant.into(),
            exp,
        }
    }
}

/// A JSON document in the abstract: rendered many ways, it must always canonicalize the same.
#[derive(Debug, Clone)]
enum Model {
    Null,
    Bool(bool),
    Number(Decimal),
    String(String),
    Array(Vec<Model>),
    Object(Vec<(String, Model)>),
}

fn decimal() -> impl Strategy<Value = Decimal> {
    prop_oneof![
        1 => Just(Decimal::new(false, "0", 0)),
        // Up to 20 digits times 10^-400..10^260: within a double's range, underflow included.
        9 => (any::<bool>(), "[1-9][0-9]{0,19}", -400i64..=260).prop_map(|(n, d, e)| Decimal::new(n, &d, e)),
    ]
}

fn text() -> impl Strategy<Value = String> {
    // Characters that exercise escaping and the UTF-8/UTF-16 sort difference, and any others.
    let tricky = prop::sample::select(vec![
        'a',
        'b',
        '"',
        '\\',
        '/',
        '\n',
        '\u{1}',
        '\u{1f}',
        '\u{7f}',
        'é',
        '\u{2028}',
        '\u{e000}',
        '\u{ffff}',
        '\u{10000}',
        '😀',
        '\u{10ffff}',
    ]);
    prop_oneof![
        3 => prop::collection::vec(tricky, 0..5).prop_map(String::from_iter),
        1 => any::<String>(),
    ]
}

fn model() -> impl Strategy<Value = Model> {
    let leaf = prop_oneof![
        Just(Model::Null),
        any::<bool>().prop_map(Model::Bool),
        decimal().prop_map(Model::Number),
        text().prop_map(Model::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Model::Array),
            // A map keeps names unique.
            prop::collection::btree_map(text(), inner, 0..6)
                .prop_map(|m| Model::Object(m.into_iter().collect())),
        ]
    })
}

/// A small deterministic source of rendering choices (the seed comes from proptest).
struct Choices(u64);

impl Choices {
    fn below(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn render(model: &Model, choices: &mut Choices) -> String {
    let mut out = String::new();
    render_into(model, choices, &mut out);
    out
}

fn whitespace(choices: &mut Choices, out: &mut String) {
    for _ in 0..choices.below(3) {
        out.push([' ', '\t', '\n', '\r'][choices.below(4) as usize]);
    }
}

fn render_into(model: &Model, choices: &mut Choices, out: &mut String) {
    whitespace(choices, out);
    match model {
        Model::Null => out.push_str("null"),
        Model::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Model::Number(d) => out.push_str(&spell(d, choices)),
        Model::String(s) => render_string(s, choices, out),
        Model::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render_into(item, choices, out);
            }
            whitespace(choices, out);
            out.push(']');
        }
        Model::Object(members) => {
            // A random member order (Fisher-Yates).
            let mut order: Vec<usize> = (0..members.len()).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, choices.below(i as u64 + 1) as usize);
            }
            out.push('{');
            for (i, &at) in order.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                whitespace(choices, out);
                render_string(&members[at].0, choices, out);
                whitespace(choices, out);
                out.push(':');
                render_into(&members[at].1, choices, out);
            }
            whitespace(choices, out);
            out.push('}');
        }
    }
    whitespace(choices, out);
}

/// Writes a string with a random mix of literal characters and escapes.
fn render_string(text: &str, choices: &mut Choices, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        let must_escape = c == '"' || c == '\\' || c < ' ';
        if !must_escape && choices.below(3) > 0 {
            out.push(c);
            continue;
        }
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '/' => Some("\\/"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            _ => None,
        };
        match short {
            Some(escape) if choices.below(2) == 0 => out.push_str(escape),
            _ => {
                let upper = choices.below(2) == 0;
                for unit in c.encode_utf16(&mut [0; 2]) {
                    let hex = format!("\\u{unit:04x}");
                    out.push_str(&if upper {
                        hex.to_uppercase().replace("\\U", "\\u")
                    } else {
                        hex
                    });
                }
            }
        }
    }
    out.push('"');
}

fn push_exponent(exp: i64, choices: &mut Choices, out: &mut String) {
    out.push(if choices.below(2) == 0 { 'e' } else { 'E' });
    if exp < 0 {
        out.push('-');
    } else if choices.below(2) == 0 {
        out.push('+');
    }
    for _ in 0..choices.below(3) {
        out.push('0');
    }
    out.push_str(&exp.unsigned_abs().to_string());
}

/// One of the many literals of `d`'s value, chosen at random.
fn spell(d: &Decimal, choices: &mut Choices) -> String {
    let mut out = String::new();
    if d.digits == "0" {
        if choices.below(2) == 0 {
            out.push('-');
        }
        out.push('0');
        if choices.below(2) == 0 {
            out.push('.');
            out.push_str(&"0".repeat(1 + choices.below(3) as usize));
        }
        if choices.below(2) == 0 {
            let exp = choices.below(800) as i64 - 400;
            push_exponent(exp, choices, &mut out);
        }
        return out;
    }
    if d.negative {
        out.push('-');
    }
    // Extra trailing zeros, compensated in the exponent.
    let extra = choices.below(3) as usize;
    let m = format!("{}{}", d.digits, "0".repeat(extra));
    let e = d.exp - extra as i64;
    let len = m.len() as i64;
    match choices.below(3) {
        0 => {
            out.push_str(&m);
            push_exponent(e, choices, &mut out);
        }
        1 if e >= 0 => {
            out.push_str(&m);
            out.push_str(&"0".repeat(e as usize));
        }
        1 if len + e > 0 => {
            let point = (len + e) as usize;
            out.push_str(&m[..point]);
            out.push('.');
            out.push_str(&m[point..]);
        }
        1 => {
            out.push_str("0.");
            out.push_str(&"0".repeat((-e - len) as usize));
            out.push_str(&m);
        }
        _ => {
            out.push_str("0.");
            out.push_str(&m);
            push_exponent(e + len, choices, &mut out);
        }
    }
    out
}

/// Changes the `target`-th leaf value (strings and numbers, not member names) to a different
/// value; returns whether it got there (else `target` is decreased by the leaves it passed).
fn mutate(model: &mut Model, target: &mut usize) -> bool {
    match model {
        Model::String(s) => {
            if *target == 0 {
                s.push('x');
                return true;
            }
            *target -= 1;
            false
        }
        Model::Number(d) => {
            if *target == 0 {
                *d = if d.digits == "0" {
                    Decimal::new(false, "1", 0)
                } else {
                    Decimal::new(d.negative, &format!("{}1", d.digits), d.exp)
                };
                return true;
            }
            *target -= 1;
            false
        }
        Model::Array(items) => items.iter_mut().any(|item| mutate(item, target)),
        Model::Object(members) => members.iter_mut().any(|(_, value)| mutate(value, target)),
        Model::Null | Model::Bool(_) => false,
    }
}

/// How many string and number values (not member names) `model` holds.
fn count_leaves(model: &Model) -> usize {
    match model {
        Model::String(_) | Model::Number(_) => 1,
        Model::Array(items) => items.iter().map(count_leaves).sum(),
        Model::Object(members) => members.iter().map(|(_, value)| count_leaves(value)).sum(),
        Model::Null | Model::Bool(_) => 0,
    }
}

const LIMITS: Limits = Limits {
    max_depth: 128,
    max_bytes: usize::MAX,
};

fn canonical(text: &str) -> (String, String) {
    let value = parse(text.as_bytes(), &LIMITS).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    (to_key_form(&value), to_jcs(&value))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn key_form_ignores_whitespace_order_escapes_and_number_spelling(model in model(), a: u64, b: u64) {
        let first = render(&model, &mut Choices(a | 1));
        let second = render(&model, &mut Choices(b | 1));
        let (key_a, jcs_a) = canonical(&first);
        let (key_b, jcs_b) = canonical(&second);
        prop_assert_eq!(key_a, key_b, "{} vs {}", first, second);
        prop_assert_eq!(jcs_a, jcs_b);
    }

    #[test]
    fn canonical_forms_are_idempotent(model in model(), seed: u64) {
        let (key, jcs) = canonical(&render(&model, &mut Choices(seed | 1)));
        prop_assert_eq!(&canonical(&jcs).1, &jcs);
        prop_assert_eq!(&canonical(&key).0, &key);
    }

    #[test]
    fn one_changed_leaf_changes_the_key_form(model in model(), target: usize, a: u64, b: u64) {
        let leaves = count_leaves(&model);
        prop_assume!(leaves > 0);
        let mut changed = model.clone();
        prop_assert!(mutate(&mut changed, &mut (target % leaves)));
        let (key_a, _) = canonical(&render(&model, &mut Choices(a | 1)));
        let (key_b, _) = canonical(&render(&changed, &mut Choices(b | 1)));
        prop_assert_ne!(key_a, key_b);
    }

    #[test]
    fn numbers_share_a_key_form_exactly_when_equal(x in decimal(), y in decimal(), a: u64, b: u64) {
        let nx = Number::from_literal(&spell(&x, &mut Choices(a | 1))).unwrap();
        let ny = Number::from_literal(&spell(&y, &mut Choices(b | 1))).unwrap();
        prop_assert_eq!(nx.key_form() == ny.key_form(), x == y, "{} vs {}", nx, ny);
        // The key form is a literal of the same value.
        let back = Number::from_literal(&nx.key_form()).unwrap();
        prop_assert_eq!(back.key_form(), nx.key_form());
        prop_assert_eq!(back.to_f64(), nx.to_f64());
    }

    #[test]
    fn key_form_equals_jcs_for_shortest_double_literals(bits: u64) {
        let double = f64::from_bits(bits);
        prop_assume!(double.is_finite());
        let number = Number::from_f64(double).unwrap();
        prop_assert_eq!(number.key_form(), number.jcs());
        prop_assert_eq!(number.to_f64(), if double == 0.0 { 0.0 } else { double });
        let spelled = Number::from_literal(&format!("{double:e}")).unwrap();
        prop_assert_eq!(spelled.jcs(), number.jcs());
    }

    #[test]
    fn utf16_order_matches_encode_utf16(a in text(), b in text()) {
        prop_assert_eq!(cmp_utf16(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
    }
}
