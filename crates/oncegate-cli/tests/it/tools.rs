//! `canon`, `check` and `key` as a user runs them.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const CONTRACT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/oncegate.toml");

fn oncegate(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(args)
        .env_remove("ONCEGATE_CONTRACT")
        .env_remove("ONCEGATE_KEY_SALT")
        .env_remove("ONCEGATE_KEY_SALT_FILE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn canon_prints_rfc_8785_bytes() {
    let out = oncegate(
        &["canon"],
        "{ \"b\" : 1.0, \"a\" : \"\\u20ac\", \"c\": [1e21, -0] }",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "{\"a\":\"€\",\"b\":1,\"c\":[1e+21,0]}\n");
    let bad = oncegate(&["canon"], "{\"a\":1,\"a\":2}");
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("duplicate object key \"a\" at byte"),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn canon_lines_reports_each_bad_line_and_fails_at_the_end() {
    let out = oncegate(
        &["canon", "--lines"],
        "{\"b\":2,\"a\":1}\n[1,\n\"\\ud800\"\n{}\n",
    );
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[0], "{\"a\":1,\"b\":2}");
    assert!(
        lines[1].starts_with("{\"error\":{\"line\":2,"),
        "{}",
        lines[1]
    );
    assert!(lines[2].contains("lone UTF-16 surrogate"), "{}", lines[2]);
    assert_eq!(lines[3], "{}");
    assert!(text(&out.stderr).contains("2 of 4 lines"));
    let ok = oncegate(&["canon", "--lines"], "1\n\"x\"\n");
    assert!(ok.status.success());
}

#[test]
fn check_prints_every_hierarchy() {
    let out = oncegate(&["check", CONTRACT], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for part in [
        "refund-request-ref@1",
        "refund-fingerprint@1",
        "business_ref",
        "fingerprint",
        "type products/update",
        "unordered /product/tags",
    ] {
        assert!(stdout.contains(part), "{part} missing from:\n{stdout}");
    }
    assert!(
        text(&out.stderr).contains("warning:"),
        "the example's weak-fingerprint warning is shown"
    );
}

#[test]
fn check_warns_about_a_plain_http_authority_off_loopback() {
    let example = std::fs::read_to_string(CONTRACT).unwrap();
    // The shipped example asks 127.0.0.1: loopback, no warning.
    let out = oncegate(&["check", CONTRACT], "");
    assert!(
        !text(&out.stderr).contains("plain http://"),
        "{}",
        text(&out.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    for (host, warned) in [
        ("http://api.payflow.example", true),
        ("http://192.0.2.10:8080", true),
        ("http://localhost:8089", false),
        ("http://[::1]:8089", false),
        ("https://api.payflow.example", false),
    ] {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, example.replace("http://127.0.0.1:8089", host)).unwrap();
        let out = oncegate(&["check", path.to_str().unwrap()], "");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert_eq!(
            err.contains("warning:") && err.contains("plain http://") && err.contains(host),
            warned,
            "{host}: {err}"
        );
        if warned {
            assert!(err.contains("type \"refund.created\""), "{err}");
        }
    }
}

#[test]
fn check_shows_where_each_type_is_forwarded() {
    let example = std::fs::read_to_string(CONTRACT).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let forward = "\n[providers.payflow.forward]\nurl = \"https://billing.internal/hooks\"\nmax_attempts = 3\nsigning_secret_env = \"FORWARD_SECRET\"\n";
    std::fs::write(&path, format!("{example}{forward}")).unwrap();
    let out = oncegate(&["check", path.to_str().unwrap()], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    assert!(
        listing.contains("forwarded to https://billing.internal/hooks (10s timeout, 3 attempts, backoff 1s..10m, signed)"),
        "{listing}"
    );
    let out = oncegate(&["check", path.to_str().unwrap(), "--json"], "");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let payflow = doc["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "payflow")
        .unwrap();
    let forward = &payflow["types"][0]["forward"];
    assert_eq!(forward["max_attempts"], 3, "{doc}");
    assert_eq!(forward["timeout_ms"], 10_000);
    assert_eq!(forward["signed"], true);
    // A bad forward is refused with its place.
    std::fs::write(
        &path,
        format!("{example}\n[providers.payflow.forward]\nmax_attempts = 0\n"),
    )
    .unwrap();
    let out = oncegate(&["check", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("provider \"payflow\"") && err.contains("forward.url"),
        "{err}"
    );
    assert!(err.contains("forward.max_attempts"), "{err}");
}

#[test]
fn check_refuses_a_bad_contract_with_its_location() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[providers.p]\nevent_type = \"type\"\n").unwrap();
    let out = oncegate(&["check", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("bad.toml:1: provider \"p\", field \"event_type\""),
        "{err}"
    );
}

#[test]
fn key_explains_which_strategy_made_the_key() {
    let refund = r#"{"type":"refund.created","sent_at":"2024-05-01T10:00:00Z","data":{"payment_id":"pay_1","amount":1500,"currency":"EUR","customer_email":"jane@example.com"}}"#;
    // A type with sensitive fields needs the salt.
    let out = oncegate(
        &["key", "--provider", "payflow", "--contract", CONTRACT],
        refund,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("ONCEGATE_KEY_SALT"));
    let run = |body: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_oncegate"))
            .args(["key", "--provider", "payflow", "--contract", CONTRACT])
            .env("ONCEGATE_KEY_SALT", "salt")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(body.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run(refund);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "skipped:    refund-request-ref@1 (business_ref): field /data/request_ref is absent"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("strategy:   refund-fingerprint@1 level fingerprint confidence weak"),
        "{stdout}"
    );
    assert!(!stdout.contains("jane@example.com"), "{stdout}");
    let key_line = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("key:"))
            .unwrap()
            .to_owned()
    };
    let retry = r#"{"data":{"currency":"EUR","amount":15e2,"customer_email":"jane@example.com","payment_id":"pay_1"},"sent_at":"2024-05-01T10:09:00Z","type":"refund.created"}"#;
    assert_eq!(key_line(&stdout), key_line(&text(&run(retry).stdout)));
}

#[test]
fn demo_tells_the_story_and_ends_with_a_zero_gap() {
    let out = oncegate(&["demo"], "");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let step = |n: &str| {
        let start = stdout
            .find(&format!("\n{n}. "))
            .unwrap_or_else(|| panic!("step {n} missing:\n{stdout}"));
        stdout[start..]
            .lines()
            .nth(2)
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        step("2").contains("IGNORE"),
        "the re-encoded capture is ignored:\n{stdout}"
    );
    assert!(
        step("4").contains("RECONCILE"),
        "the second refund is held, not dropped:\n{stdout}"
    );
    assert!(
        stdout.contains("resolved distinct (authoritative ref re_3Kd8) by the reconciler"),
        "the reconciler settles the second refund against the authority:\n{stdout}"
    );
    assert!(
        stdout.contains("resolved duplicate (authoritative ref re_1Fa2) by the reconciler"),
        "the retry of the first refund is recognized:\n{stdout}"
    );
    assert!(
        stdout.contains("skipped    refund-request-ref@1: field /data/request_ref is absent"),
        "{stdout}"
    );
    assert!(
        stdout.contains("6. the queue: 0 open item(s)"),
        "the service settled both refunds itself, woken by their queueing:\n{stdout}"
    );
    assert!(stdout.contains("unexplained gap: 0"), "{stdout}");
    assert!(
        !stdout.contains("jane@example.com"),
        "sensitive values never shown"
    );
}

/// What differs from one run of the demo to the next, masked: each id becomes its kind and the
/// order of its first appearance (`<dlv 3>`), so a transcript that names another delivery or
/// effect where it should name the same one still differs; times, the port, the temporary path
/// and the reconciler's delay become placeholders.
pub(crate) fn masked(transcript: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    let mut out = String::new();
    let b = transcript.as_bytes();
    let mut i = 0;
    let at_word_start = |i: usize| i == 0 || !b[i - 1].is_ascii_alphanumeric();
    'scan: while i < b.len() {
        for kind in ["dlv_", "eff_", "q_"] {
            let end = i + kind.len() + 26;
            if at_word_start(i)
                && transcript[i..].starts_with(kind)
                && end <= b.len()
                && b[i + kind.len()..end]
                    .iter()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
            {
                let id = &transcript[i..end];
                let n = match seen.iter().position(|s| s == id) {
                    Some(n) => n,
                    None => {
                        seen.push(id.to_owned());
                        seen.len() - 1
                    }
                };
                out.push_str(&format!("<{} {n}>", kind.trim_end_matches('_')));
                i = end;
                continue 'scan;
            }
        }
        // 2026-11-30T06:35:12.144Z
        if i + 20 <= b.len()
            && b[i..i + 4].iter().all(u8::is_ascii_digit)
            && b[i + 4] == b'-'
            && b[i + 10] == b'T'
        {
            if let Some(z) = transcript[i..].find('Z') {
                out.push_str("<time>");
                i += z + 1;
                continue;
            }
        }
        let not_digit: fn(u8) -> bool = |c| !c.is_ascii_digit();
        let paren: fn(u8) -> bool = |c| c == b')';
        for (prefix, stop, placeholder) in [
            ("127.0.0.1:", not_digit, "127.0.0.1:<port>"),
            ("(/tmp/", paren, "(<temporary file>"),
        ] {
            if transcript[i..].starts_with(prefix) {
                let rest = &b[i + prefix.len()..];
                let len = rest.iter().position(|&c| stop(c)).unwrap_or(rest.len());
                out.push_str(placeholder);
                i += prefix.len() + len;
                continue 'scan;
            }
        }
        if b[i].is_ascii_digit() && at_word_start(i) {
            let len = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
            if transcript[i + len..].starts_with(" ms after") {
                out.push_str("<n>");
                i += len;
                continue;
            }
        }
        let c = transcript[i..].chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The README's demo transcript is one real run: it cannot drift from what `demo` prints.
#[test]
fn the_readmes_demo_transcript_is_what_demo_prints() {
    let readme = include_str!("../../../../README.md");
    let start = readme
        .find("```text\noncegate demo:")
        .expect("the README holds the demo's transcript");
    let block = &readme[start + "```text\n".len()..];
    let block = &block[..block.find("```").expect("the block ends")];
    let out = oncegate(&["demo"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let (expected, actual) = (masked(block), masked(&printed));
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "the README's transcript differs from the demo's output at line {}:\n  README: {:?}\n  demo:   {:?}\nreplace the README's block with a fresh run of `oncegate demo`",
            line + 1,
            expected.lines().nth(line).unwrap_or("<end>"),
            actual.lines().nth(line).unwrap_or("<end>"),
        );
    }
}

#[test]
fn the_mask_keeps_which_id_is_which() {
    let a = "dlv_01m8njm9bj5dpk2e29r0nd63hn then dlv_01m8njm9c0ahgzxaxqd6ss7bw0 then dlv_01m8njm9bj5dpk2e29r0nd63hn";
    let b = "dlv_01m8xc8y9xcyqt7rmdtedcwcn5 then dlv_01m8xc8ya3g91g1ht658dmxqvf then dlv_01m8xc8y9xcyqt7rmdtedcwcn5";
    let c = "dlv_01m8xc8y9xcyqt7rmdtedcwcn5 then dlv_01m8xc8ya3g91g1ht658dmxqvf then dlv_01m8xc8ya3g91g1ht658dmxqvf";
    assert_eq!(masked(a), masked(b));
    assert_ne!(
        masked(a),
        masked(c),
        "another delivery where the same one was named"
    );
    assert_eq!(
        masked(
            "at 2026-11-30T06:35:12.15Z on http://127.0.0.1:34605 (/tmp/.tmpQ/demo.db) 5 ms after"
        ),
        "at <time> on http://127.0.0.1:<port> (<temporary file>) <n> ms after"
    );
}

#[test]
fn explain_and_report_read_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("o.db");
    let db = &format!("sqlite://{}", db.display());
    let out = oncegate(
        &["explain", "dlv_01m8njka0ssncqxyz2b0jcyphq", "--store", db],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no delivery dlv_01m8njka0ssncqxyz2b0jcyphq"),
        "{}",
        text(&out.stderr)
    );
    let out = oncegate(
        &["explain", "eff_01m8njka0ssncqxyz2b0jcyphq", "--store", db],
        "",
    );
    assert!(
        text(&out.stderr).contains("not a valid delivery id"),
        "{}",
        text(&out.stderr)
    );
    let out = oncegate(
        &["report", "--store", db, "--since", "2020-01-01T00:00:00Z"],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("unexplained gap: 0"));
    let out = oncegate(&["report", "--store", db, "--since", "yesterday"], "");
    assert!(text(&out.stderr).contains("not an RFC 3339 instant"));
}
