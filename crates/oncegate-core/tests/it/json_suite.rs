//! The strict reader against JSONTestSuite, exact error offsets, and JCS agreement with serde_jcs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use oncegate_core::canon::to_jcs;
use oncegate_core::json::{parse, JsonError, JsonErrorKind, Limits, Number, Value};

const SUITE_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/corpora/JSONTestSuite/test_parsing"
);
const WEBHOOKS_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/corpora/github-webhooks"
);

/// The files of the suite whose names start with `prefix`, as (name, bytes), sorted by name.
fn suite_files(prefix: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(SUITE_DIR)
        .unwrap_or_else(|e| panic!("cannot read {SUITE_DIR}: {e}"))
        .map(|entry| entry.expect("directory entry").path())
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_owned();
            name.starts_with(prefix).then(|| {
                let bytes = std::fs::read(&path).expect("readable test file");
                (name, bytes)
            })
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no {prefix}* files in {SUITE_DIR}");
    files
}

fn read(body: &[u8]) -> Result<Value, JsonError> {
    parse(body, &Limits::default())
}

/// The reason a body is refused, without its details, for tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    TooLarge,
    TooDeep,
    DuplicateKey,
    InvalidUtf8,
    LoneSurrogate,
    NumberOverflow,
    Syntax,
}

fn refusal(kind: &JsonErrorKind) -> Refusal {
    match kind {
        JsonErrorKind::TooLarge { .. } => Refusal::TooLarge,
        JsonErrorKind::TooDeep { .. } => Refusal::TooDeep,
        JsonErrorKind::DuplicateKey(_) => Refusal::DuplicateKey,
        JsonErrorKind::InvalidUtf8 => Refusal::InvalidUtf8,
        JsonErrorKind::LoneSurrogate => Refusal::LoneSurrogate,
        JsonErrorKind::NumberOverflow => Refusal::NumberOverflow,
        JsonErrorKind::Syntax(_) => Refusal::Syntax,
    }
}

/// `y_` files we refuse on purpose: I-JSON (RFC 7493 section 2.3) forbids duplicate names.
const REFUSED_Y: [&str; 2] = [
    "y_object_duplicated_key.json",
    "y_object_duplicated_key_and_value.json",
];

#[test]
fn every_y_file_is_accepted_except_duplicate_keys() {
    for (name, body) in suite_files("y_") {
        let result = read(&body);
        if REFUSED_Y.contains(&name.as_str()) {
            let err = result.expect_err(&name);
            assert!(
                matches!(err.kind, JsonErrorKind::DuplicateKey(ref k) if k == "a"),
                "{name}: {err}"
            );
        } else if let Err(err) = result {
            panic!("{name} was refused: {err}");
        }
    }
}

#[test]
fn every_n_file_is_refused() {
    for (name, body) in suite_files("n_") {
        if let Ok(value) = read(&body) {
            panic!("{name} was accepted as {value:?}");
        }
    }
}

/// What we do with each implementation-defined (`i_`) file, and why (see the `json` module docs).
/// `None` means accepted.
const I_POLICY: &[(&str, Option<Refusal>)] = &[
    // Numbers: infinite as a double is refused; underflow and big integers keep their literal.
    ("i_number_double_huge_neg_exp.json", None),
    ("i_number_huge_exp.json", Some(Refusal::NumberOverflow)),
    (
        "i_number_neg_int_huge_exp.json",
        Some(Refusal::NumberOverflow),
    ),
    (
        "i_number_pos_double_huge_exp.json",
        Some(Refusal::NumberOverflow),
    ),
    (
        "i_number_real_neg_overflow.json",
        Some(Refusal::NumberOverflow),
    ),
    (
        "i_number_real_pos_overflow.json",
        Some(Refusal::NumberOverflow),
    ),
    ("i_number_real_underflow.json", None),
    ("i_number_too_big_neg_int.json", None),
    ("i_number_too_big_pos_int.json", None),
    ("i_number_very_big_negative_int.json", None),
    // Escaped lone surrogates cannot become UTF-8 text.
    (
        "i_object_key_lone_2nd_surrogate.json",
        Some(Refusal::LoneSurrogate),
    ),
    (
        "i_string_1st_surrogate_but_2nd_missing.json",
        Some(Refusal::LoneSurrogate),
    ),
    (
        "i_string_1st_valid_surrogate_2nd_invalid.json",
        Some(Refusal::LoneSurrogate),
    ),
    (
        "i_string_incomplete_surrogate_and_escape_valid.json",
        Some(Refusal::LoneSurrogate),
    ),
    (
        "i_string_incomplete_surrogate_pair.json",
        Some(Refusal::LoneSurrogate),
    ),
    (
        "i_string_incomplete_surrogates_escape_valid.json",
        Some(Refusal::LoneSurrogate),
    ),
    (
        "i_string_invalid_lonely_surrogate.json",
        Some(Refusal::LoneSurrogate),
    ),
    (
        "i_string_invalid_surrogate.json",
        Some(Refusal::LoneSurrogate),
    ),
    (
        "i_string_inverted_surrogates_U+1D11E.json",
        Some(Refusal::LoneSurrogate),
    ),
    (
        "i_string_lone_second_surrogate.json",
        Some(Refusal::LoneSurrogate),
    ),
    // Bodies must be UTF-8 (RFC 8259 section 8.1).
    (
        "i_string_UTF-16LE_with_BOM.json",
        Some(Refusal::InvalidUtf8),
    ),
    (
        "i_string_UTF-8_invalid_sequence.json",
        Some(Refusal::InvalidUtf8),
    ),
    (
        "i_string_UTF8_surrogate_U+D800.json",
        Some(Refusal::InvalidUtf8),
    ),
    ("i_string_invalid_utf-8.json", Some(Refusal::InvalidUtf8)),
    ("i_string_iso_latin_1.json", Some(Refusal::InvalidUtf8)),
    (
        "i_string_lone_utf8_continuation_byte.json",
        Some(Refusal::InvalidUtf8),
    ),
    (
        "i_string_not_in_unicode_range.json",
        Some(Refusal::InvalidUtf8),
    ),
    (
        "i_string_overlong_sequence_2_bytes.json",
        Some(Refusal::InvalidUtf8),
    ),
    (
        "i_string_overlong_sequence_6_bytes.json",
        Some(Refusal::InvalidUtf8),
    ),
    (
        "i_string_overlong_sequence_6_bytes_null.json",
        Some(Refusal::InvalidUtf8),
    ),
    ("i_string_truncated-utf-8.json", Some(Refusal::InvalidUtf8)),
    // UTF-16 without a byte order mark: its 'é' (E9 00) is not UTF-8, and the whole body is
    // checked before the grammar.
    ("i_string_utf16BE_no_BOM.json", Some(Refusal::InvalidUtf8)),
    ("i_string_utf16LE_no_BOM.json", Some(Refusal::InvalidUtf8)),
    // Structure: deeper than the default limit of 128; a UTF-8 byte order mark is refused.
    ("i_structure_500_nested_arrays.json", Some(Refusal::TooDeep)),
    (
        "i_structure_UTF-8_BOM_empty_object.json",
        Some(Refusal::Syntax),
    ),
];

#[test]
fn i_files_follow_the_policy_table() {
    for (name, body) in suite_files("i_") {
        let Some(&(_, expected)) = I_POLICY.iter().find(|(n, _)| *n == name) else {
            panic!("{name} is not in I_POLICY: decide what the reader should do with it");
        };
        let outcome = read(&body).map(|_| ()).map_err(|e| refusal(&e.kind));
        assert_eq!(outcome.err(), expected, "{name}");
    }
}

#[test]
fn i_policy_table_lists_exactly_the_i_files() {
    let on_disk: BTreeSet<String> = suite_files("i_")
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let in_table: BTreeSet<String> = I_POLICY
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect();
    assert_eq!(
        in_table.len(),
        I_POLICY.len(),
        "I_POLICY lists a file twice"
    );
    assert_eq!(on_disk, in_table);
}

/// Reads `input` with the default limits and returns the error, which must be there.
fn refused(input: &[u8]) -> JsonError {
    match read(input) {
        Ok(value) => panic!(
            "{:?} was accepted as {value:?}",
            String::from_utf8_lossy(input)
        ),
        Err(err) => err,
    }
}

fn syntax(message: &str, offset: usize) -> JsonError {
    JsonError {
        kind: JsonErrorKind::Syntax(message.to_owned()),
        offset,
    }
}

fn error(kind: JsonErrorKind, offset: usize) -> JsonError {
    JsonError { kind, offset }
}

#[test]
fn errors_carry_exact_offsets() {
    use JsonErrorKind::*;
    let rows: &[(&[u8], JsonError)] = &[
        (br#"{"a":1,"a":2}"#, error(DuplicateKey("a".into()), 7)),
        (
            br#"{"a":1,"b":{"c":[],"c":0},"a":2}"#,
            error(DuplicateKey("c".into()), 19),
        ),
        // Escapes are decoded before names are compared.
        (
            br#"{"\u0061":1, "a":2}"#,
            error(DuplicateKey("a".into()), 13),
        ),
        (b"[\"ab\xFFc\"]", error(InvalidUtf8, 4)),
        (b"[\"\xE6\x97\xA5\xD1\x88\xFA\"]", error(InvalidUtf8, 7)),
        (b"[1, \xC3]", error(InvalidUtf8, 4)),
        (br#""\uD800""#, error(LoneSurrogate, 1)),
        (br#""\uDC00""#, error(LoneSurrogate, 1)),
        (br#""ab\uD800\u0041""#, error(LoneSurrogate, 3)),
        (br#""\uD800\n""#, error(LoneSurrogate, 1)),
        (br#"[1, 1e400]"#, error(NumberOverflow, 4)),
        (br#"-1e400"#, error(NumberOverflow, 0)),
        (br#"[1.8e308]"#, error(NumberOverflow, 1)),
        (
            b"\xEF\xBB\xBF{}",
            syntax("byte order mark is not allowed", 0),
        ),
        (b"", syntax("expected a JSON value, found an empty body", 0)),
        (
            b" \n",
            syntax("expected a JSON value, found an empty body", 2),
        ),
        (
            b"{} x",
            syntax("unexpected 'x' after the top-level value", 3),
        ),
        (
            br#"{"a":1 "b":2}"#,
            syntax("expected ',' or '}' after an object member, found '\"'", 7),
        ),
        (
            br#"{"a":1,}"#,
            syntax("expected a member name after ',', found '}'", 7),
        ),
        (
            br#"{"a" 1}"#,
            syntax("expected ':' after a member name, found '1'", 5),
        ),
        (
            b"[1,2",
            syntax(
                "expected ',' or ']' after an array element, found the end of the body",
                4,
            ),
        ),
        (
            b"[01]",
            syntax("leading zeros are not allowed in a number", 1),
        ),
        (
            b"[1.]",
            syntax("expected a digit after the decimal point", 3),
        ),
        (b"[.5]", syntax("expected a value, found '.'", 1)),
        (b"[+1]", syntax("expected a value, found '+'", 1)),
        (b"[1e]", syntax("expected a digit in the exponent", 3)),
        (
            b"[-]",
            syntax("expected a digit at the start of a number", 2),
        ),
        (b"[tru]", syntax("invalid literal, expected `true`", 1)),
        (
            b"[\"a\tb\"]",
            syntax("control character U+0009 must be escaped in a string", 3),
        ),
        (
            br#"["\x"]"#,
            syntax("invalid escape sequence '\\x' in a string", 2),
        ),
        (
            br#"["\u12G4"]"#,
            syntax("expected four hex digits after \\u", 6),
        ),
        (
            b"[\"abc",
            syntax("unexpected end of the body inside a string", 5),
        ),
        (
            b"[\x0c]",
            syntax("expected a value, found character U+000C", 1),
        ),
        (
            b"\x00",
            syntax("expected a value, found character U+0000", 0),
        ),
    ];
    for (input, expected) in rows {
        assert_eq!(
            &refused(input),
            expected,
            "input {:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn errors_display_as_sentences() {
    assert_eq!(
        refused(br#"{"a":1,"a":2}"#).to_string(),
        r#"duplicate object key "a" at byte 7"#
    );
    assert_eq!(
        refused(br#""\uD800""#).to_string(),
        "lone UTF-16 surrogate in a string at byte 1"
    );
    let limits = Limits {
        max_depth: 128,
        max_bytes: 4,
    };
    assert_eq!(
        parse(b"[1,2]", &limits).unwrap_err().to_string(),
        "body of 5 bytes is over the limit of 4 bytes at byte 4"
    );
}

#[test]
fn surrogate_pairs_decode() {
    let value = read(br#"["\uD834\uDD1E", "\ud83d\ude00"]"#).unwrap();
    assert_eq!(
        value,
        Value::Array(vec![Value::String("𝄞".into()), Value::String("😀".into())])
    );
}

fn nested(depth: usize) -> Vec<u8> {
    let mut body = vec![b'['; depth];
    body.resize(2 * depth, b']');
    body
}

#[test]
fn depth_limit_counts_containers() {
    assert!(read(&nested(128)).is_ok());
    assert_eq!(
        refused(&nested(129)),
        error(JsonErrorKind::TooDeep { limit: 128 }, 128)
    );
    let objects = "{\"a\":".repeat(129) + "1" + &"}".repeat(129);
    assert_eq!(
        refused(objects.as_bytes()).kind,
        JsonErrorKind::TooDeep { limit: 128 }
    );
    let limits = Limits {
        max_depth: 0,
        max_bytes: 100,
    };
    assert!(parse(b"1", &limits).is_ok());
    assert_eq!(
        parse(b"[]", &limits).unwrap_err().kind,
        JsonErrorKind::TooDeep { limit: 0 }
    );
}

#[test]
fn hundred_thousand_open_brackets_do_not_crash() {
    let body = vec![b'['; 100_000];
    assert_eq!(
        refused(&body),
        error(JsonErrorKind::TooDeep { limit: 128 }, 128)
    );
    // Deep input within a large limit is read without recursion: this ends as a syntax error.
    let limits = Limits {
        max_depth: 1_000_000,
        max_bytes: 1_000_000,
    };
    let err = parse(&body, &limits).unwrap_err();
    assert_eq!(err.offset, 100_000);
    assert!(matches!(err.kind, JsonErrorKind::Syntax(_)), "{err}");
}

#[test]
fn size_limit_is_checked_first() {
    let limits = Limits {
        max_depth: 128,
        max_bytes: 10,
    };
    assert!(parse(b"[1,2,3,4]", &limits).is_ok());
    assert_eq!(
        parse(b"\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF", &limits).unwrap_err(),
        error(
            JsonErrorKind::TooLarge {
                limit: 10,
                size: 11
            },
            10
        )
    );
}

#[test]
fn large_objects_find_the_first_second_occurrence() {
    // More members than the pairwise check handles, so the sorted path runs.
    let mut body = String::from("{");
    for i in 0..40 {
        body.push_str(&format!("\"k{i}\":{i},"));
    }
    let second_k7 = body.len();
    body.push_str("\"k7\":0,\"k3\":0}");
    assert_eq!(
        refused(body.as_bytes()),
        error(JsonErrorKind::DuplicateKey("k7".into()), second_k7)
    );
}

#[test]
fn numbers_keep_their_literal() {
    let value = read(b"[1E+2, -0.0, 123e-10000000, 100000000000000000000000]").unwrap();
    let literals: Vec<&str> = value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_number().unwrap().literal())
        .collect();
    assert_eq!(
        literals,
        ["1E+2", "-0.0", "123e-10000000", "100000000000000000000000"]
    );
    assert_eq!(
        value.as_array().unwrap()[2].as_number().unwrap().to_f64(),
        0.0
    );
}

#[test]
fn from_literal_follows_the_grammar() {
    for ok in [
        "0",
        "-0",
        "1.5",
        "1e-400000000000000000000000000000000000000000000",
        "1E+2",
    ] {
        assert!(Number::from_literal(ok).is_some(), "{ok}");
    }
    for bad in [
        "", "-", "01", "1.", ".5", "+1", "1e", "1e+", " 1", "1 ", "NaN", "Infinity", "0x10",
        "1e400", "-1e309",
    ] {
        assert!(Number::from_literal(bad).is_none(), "{bad:?}");
    }
    assert_eq!(Number::from_i64(-42).literal(), "-42");
    assert_eq!(Number::from_u64(u64::MAX).literal(), "18446744073709551615");
    assert_eq!(Number::from_f64(0.1).unwrap().literal(), "0.1");
    assert!(Number::from_f64(f64::NAN).is_none());
}

#[test]
fn value_accessors_name_their_kinds() {
    let value = read(br#"{"s":"x","a":[null,true,1]}"#).unwrap();
    let object = value.as_object().unwrap();
    assert_eq!(object.get("s").and_then(Value::as_str), Some("x"));
    let kinds: Vec<&str> = object
        .get("a")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(Value::kind_name)
        .collect();
    assert_eq!(kinds, ["null", "boolean", "number"]);
    assert_eq!(value.kind_name(), "object");
    assert_eq!(Value::String(String::new()).kind_name(), "string");
    assert_eq!(Value::Array(Vec::new()).kind_name(), "array");
}

/// Every `*.json` file under `dir`.
fn json_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
    {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            json_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "json") {
            found.push(path);
        }
    }
}

fn serde_jcs_of(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    serde_jcs::to_string(&value).ok()
}

#[test]
fn jcs_matches_serde_jcs_on_github_webhooks() {
    let mut paths = Vec::new();
    json_files(Path::new(WEBHOOKS_DIR), &mut paths);
    assert!(
        paths.len() > 100,
        "expected the GitHub webhook corpus under {WEBHOOKS_DIR}"
    );
    // The corpus has index files of 1.5 MB, over the default body limit.
    let limits = Limits {
        max_depth: 128,
        max_bytes: usize::MAX,
    };
    for path in paths {
        let body = std::fs::read(&path).unwrap();
        let ours = parse(&body, &limits).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let theirs =
            serde_jcs_of(&body).unwrap_or_else(|| panic!("serde_jcs failed on {}", path.display()));
        assert!(to_jcs(&ours) == theirs, "JCS differs on {}", path.display());
    }
}

#[test]
fn jcs_matches_serde_jcs_on_y_files() {
    let mut compared = 0;
    for (name, body) in suite_files("y_") {
        if REFUSED_Y.contains(&name.as_str()) {
            continue;
        }
        let ours = to_jcs(&read(&body).unwrap());
        let theirs = serde_jcs_of(&body).unwrap_or_else(|| panic!("serde_jcs failed on {name}"));
        assert_eq!(ours, theirs, "{name}");
        compared += 1;
    }
    assert_eq!(compared, 93);
}
