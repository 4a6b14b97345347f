//! Fuzzes each signature scheme's header parser through the service's verify entry point
//! (`ProviderSecrets::verify`), in two modes chosen by the input's second byte:
//!
//! - raw: arbitrary header values are refused (nobody forges an HMAC), never with a panic, and
//!   the reason never quotes a header's value;
//! - signed: well-formed headers carrying the true MAC of an arbitrary body, message id and
//!   timestamp are accepted, or refused only as stale or future (by the timestamp's distance
//!   from now) or as a timestamp out of range.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use base64::Engine;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use oncegate_core::contract::{Encoding, Scheme};
use oncegate_server::{ProviderSecrets, SignatureError};
use sha2::Sha256;
use time::OffsetDateTime;

const SECRET: &str = "fuzz-signing-secret";
const NOW: i64 = 1_700_000_000;
const TOLERANCE: u64 = 300;

/// Every scheme, the generic one in two configurations, with the headers each reads.
fn schemes() -> &'static [(Scheme, &'static [&'static str])] {
    static SCHEMES: OnceLock<Vec<(Scheme, &'static [&'static str])>> = OnceLock::new();
    SCHEMES.get_or_init(|| {
        let tolerance = Duration::from_secs(TOLERANCE);
        vec![
            (
                Scheme::StandardWebhooks { tolerance },
                &["webhook-id", "webhook-timestamp", "webhook-signature"][..],
            ),
            (
                Scheme::HmacSha256 {
                    header: "x-sig".into(),
                    encoding: Encoding::Hex,
                    prefix: Some("sha256=".into()),
                    timestamp_header: Some("x-ts".into()),
                    tolerance,
                },
                &["x-sig", "x-ts"][..],
            ),
            (
                Scheme::HmacSha256 {
                    header: "x-sig".into(),
                    encoding: Encoding::Base64,
                    prefix: None,
                    timestamp_header: None,
                    tolerance,
                },
                &["x-sig"][..],
            ),
            (
                Scheme::Stripe {
                    header: "stripe-signature".into(),
                    tolerance,
                },
                &["stripe-signature"][..],
            ),
            (Scheme::Paddle { tolerance }, &["paddle-signature"][..]),
            (
                Scheme::Slack { tolerance },
                &["x-slack-signature", "x-slack-request-timestamp"][..],
            ),
            (Scheme::Github, &["x-hub-signature-256"][..]),
            (Scheme::Shopify, &["x-shopify-hmac-sha256"][..]),
            (
                Scheme::Square {
                    url: "https://hooks.example/square".into(),
                },
                &["x-square-hmacsha256-signature"][..],
            ),
        ]
    })
}

fn mac(prefix: &[u8], body: &[u8]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("any key length");
    m.update(prefix);
    m.update(body);
    m.finalize().into_bytes().to_vec()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fuzz_target!(|data: &[u8]| {
    let [which, mode, rest @ ..] = data else {
        return;
    };
    let (scheme, names) = &schemes()[usize::from(*which) % schemes().len()];
    let mut secrets = ProviderSecrets::default();
    secrets
        .insert("p", scheme, SECRET)
        .expect("a non-empty secret");
    let now = OffsetDateTime::from_unix_timestamp(NOW).expect("a valid instant");
    let mut fields = rest.split(|b| *b == b'\n');
    if mode & 1 == 0 {
        raw(&secrets, scheme, names, &mut fields, now);
    } else {
        signed(&secrets, scheme, &mut fields, now);
    }
});

/// Arbitrary values for the scheme's headers, one per line, then the body.
fn raw<'a>(
    secrets: &ProviderSecrets,
    scheme: &Scheme,
    names: &[&'static str],
    fields: &mut impl Iterator<Item = &'a [u8]>,
    now: OffsetDateTime,
) {
    let mut headers = HeaderMap::new();
    let mut values = Vec::new();
    for name in names {
        let Some(field) = fields.next() else { break };
        // Only what a transport can deliver as a header value reaches the parser.
        if let Ok(value) = HeaderValue::from_bytes(field) {
            headers.insert(HeaderName::from_static(name), value);
            values.push(String::from_utf8_lossy(field).trim().to_owned());
        }
    }
    let body = fields.next().unwrap_or_default();
    let error = secrets
        .verify("p", scheme, &headers, body, now)
        .expect_err("an arbitrary header verified: an HMAC was forged");
    assert!(
        !matches!(
            error,
            SignatureError::Stale { .. } | SignatureError::Future { .. }
        ),
        "a timestamp judged before the MAC: {error}"
    );
    // The reason may name headers and use its own words, never quote a value: no value that
    // could be a MAC or a timestamp (a run of 8 or more base64 characters, 4 of them digits)
    // appears in it once the header names are taken out.
    let mut reason = error.to_string();
    for name in names {
        reason = reason.replace(name, "");
    }
    for value in values {
        if secret_like(&value) {
            assert!(
                !reason.contains(&value),
                "the reason {error} quotes {value:?}"
            );
        }
    }
}

fn secret_like(value: &str) -> bool {
    value
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '/'))
        .any(|run| run.len() >= 8 && run.bytes().filter(u8::is_ascii_digit).count() >= 4)
}

/// A message id, a timestamp (digits; empty for now) and a body, signed as the provider would.
fn signed<'a>(
    secrets: &ProviderSecrets,
    scheme: &Scheme,
    fields: &mut impl Iterator<Item = &'a [u8]>,
    now: OffsetDateTime,
) {
    let id: String = String::from_utf8_lossy(fields.next().unwrap_or_default())
        .chars()
        .filter(|c| (' '..='~').contains(c))
        .collect::<String>()
        .trim()
        .to_owned();
    let id = if id.is_empty() {
        "msg_1".to_owned()
    } else {
        id
    };
    let ts_field = fields.next().unwrap_or_default();
    let ts = if !ts_field.is_empty() && ts_field.iter().all(u8::is_ascii_digit) {
        String::from_utf8_lossy(ts_field).into_owned()
    } else {
        NOW.to_string()
    };
    let body = fields.next().unwrap_or_default();

    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: String| {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(&value).expect("a visible ASCII value"),
        );
    };
    let timestamped = match scheme {
        Scheme::StandardWebhooks { .. } => {
            let m = mac(format!("{id}.{ts}.").as_bytes(), body);
            set("webhook-id", id.clone());
            set("webhook-timestamp", ts.clone());
            // A rotation: an unknown version and a MAC of another secret beside the true one.
            set(
                "webhook-signature",
                format!("v2,abc v1,{} v1,{}", b64(&[0; 32]), b64(&m)),
            );
            true
        }
        Scheme::HmacSha256 {
            encoding: Encoding::Hex,
            ..
        } => {
            set(
                "x-sig",
                format!(
                    "sha256={}",
                    hex::encode(mac(format!("{ts}.").as_bytes(), body))
                ),
            );
            set("x-ts", ts.clone());
            true
        }
        Scheme::HmacSha256 { .. } => {
            set("x-sig", b64(&mac(b"", body)));
            false
        }
        Scheme::Stripe { .. } => {
            let m = hex::encode(mac(format!("{ts}.").as_bytes(), body));
            set("stripe-signature", format!("t={ts},v0=00,v1=zz,v1={m}"));
            true
        }
        Scheme::Paddle { .. } => {
            let m = hex::encode(mac(format!("{ts}:").as_bytes(), body));
            set("paddle-signature", format!("ts={ts};h1={m}"));
            true
        }
        Scheme::Slack { .. } => {
            let m = hex::encode(mac(format!("v0:{ts}:").as_bytes(), body));
            set("x-slack-signature", format!("v0={m}"));
            set("x-slack-request-timestamp", ts.clone());
            true
        }
        Scheme::Github => {
            set(
                "x-hub-signature-256",
                format!("sha256={}", hex::encode(mac(b"", body))),
            );
            false
        }
        Scheme::Shopify => {
            set("x-shopify-hmac-sha256", b64(&mac(b"", body)));
            false
        }
        Scheme::Square { url } => {
            set("x-square-hmacsha256-signature", b64(&mac(url.as_bytes(), body)));
            false
        }
        // Adyen's signatures are in the body, one per item: not a header scheme.
        Scheme::Adyen => return,
    };
    let result = secrets.verify("p", scheme, &headers, body, now);
    let expected = match (timestamped, ts.parse::<i64>()) {
        (false, _) => "ok",
        (true, Err(_)) => "malformed",
        (true, Ok(at)) => {
            let ahead = i128::from(NOW) - i128::from(at);
            if ahead.unsigned_abs() <= u128::from(TOLERANCE) {
                "ok"
            } else if ahead > 0 {
                "stale"
            } else {
                "future"
            }
        }
    };
    let got = result.as_ref().map_or_else(SignatureError::kind, |()| "ok");
    assert_eq!(
        got, expected,
        "{result:?} for a true MAC with timestamp {ts:?}"
    );
}
