//! Provider signatures: one verifier for every scheme, and the signers tests and `demo` use.
//!
//! Each scheme's header format is read by [`format`] into the bytes signed before the body, the
//! candidate MACs and the signed timestamp; this module then does the one thing all schemes
//! share: HMAC-SHA-256 under each of the provider's secrets (several during a rotation),
//! compared in constant time with `hmac`'s `verify_slice` against each candidate, and only for
//! an authentic delivery the timestamp bounded by the contract's tolerance, so a captured
//! request cannot be replayed days later. A replay inside the tolerance is not refused here: it
//! is a transport duplicate, recognized by the store and answered `ignore`.

mod adyen;
mod format;

pub use adyen::sign_adyen_item;

use axum::http::HeaderMap;
use base64::Engine;
use hmac::{Hmac, Mac};
use oncegate_core::contract::{Encoding, Scheme};
use sha2::Sha256;
use time::OffsetDateTime;

type HmacSha256 = Hmac<Sha256>;

/// Why a delivery's signature was refused. The message is a sentence fragment for the
/// rejection; it names headers, never a header's value, the secret or the expected MAC, because
/// it is journaled with the delivery and logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant's message says what its fields hold
pub enum SignatureError {
    /// The provider declares a scheme but none of its secrets is configured, so only bearer
    /// tokens can authenticate its deliveries.
    #[error("the provider's signing secret is not configured, so only bearer tokens are accepted")]
    NotConfigured,
    /// A header the scheme needs is absent or empty.
    #[error("the {header} header is missing")]
    Missing { header: String },
    /// A header is there but not in the scheme's format; `why` completes the sentence.
    #[error("the {header} header {why}")]
    Malformed { header: String, why: String },
    /// No MAC in the header verifies under any of the provider's secrets.
    #[error("the signature in the {header} header does not match the body")]
    Mismatch { header: String },
    /// Authentic, but signed further in the past than the tolerance (seconds).
    #[error("the signed timestamp is {skew} s in the past, over the tolerance of {tolerance} s (a stale or replayed request)")]
    Stale { skew: u64, tolerance: u64 },
    /// Authentic, but signed further in the future than the tolerance (seconds).
    #[error("the signed timestamp is {skew} s in the future, over the tolerance of {tolerance} s (the sender's clock runs ahead of the service's)")]
    Future { skew: u64, tolerance: u64 },
}

impl SignatureError {
    /// A one-word name of the refusal: `not_configured`, `missing`, `malformed`, `mismatch`,
    /// `stale` or `future`.
    pub fn kind(&self) -> &'static str {
        match self {
            SignatureError::NotConfigured => "not_configured",
            SignatureError::Missing { .. } => "missing",
            SignatureError::Malformed { .. } => "malformed",
            SignatureError::Mismatch { .. } => "mismatch",
            SignatureError::Stale { .. } => "stale",
            SignatureError::Future { .. } => "future",
        }
    }
}

fn mac(secret: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length")
}

/// Verifies a delivery's signature under `scheme` with any of `secrets` (raw key bytes).
pub(crate) fn verify(
    scheme: &Scheme,
    secrets: &[Vec<u8>],
    headers: &HeaderMap,
    body: &[u8],
    now: OffsetDateTime,
) -> Result<(), SignatureError> {
    if secrets.is_empty() {
        return Err(SignatureError::NotConfigured);
    }
    if *scheme == Scheme::Adyen {
        return adyen::verify(secrets, body);
    }
    let signed = format::read(scheme, headers)?;
    // Stopping at the first secret that verifies tells the timing which secret signed, never a
    // byte of a MAC: each comparison itself is constant-time.
    let authentic = secrets.iter().any(|secret| {
        let mut m = mac(secret);
        m.update(&signed.prefix);
        m.update(body);
        signed
            .candidates
            .iter()
            .any(|candidate| m.clone().verify_slice(candidate).is_ok())
    });
    if !authentic {
        return Err(SignatureError::Mismatch {
            header: signed.header,
        });
    }
    if let (Some(ts), Some(tolerance)) = (signed.timestamp, scheme.tolerance()) {
        let tolerance = tolerance.as_secs();
        let ahead = i128::from(now.unix_timestamp()) - i128::from(ts);
        let skew = u64::try_from(ahead.unsigned_abs()).unwrap_or(u64::MAX);
        if skew > tolerance {
            return Err(if ahead > 0 {
                SignatureError::Stale { skew, tolerance }
            } else {
                SignatureError::Future { skew, tolerance }
            });
        }
    }
    Ok(())
}

/// Signs like a provider would; used by tests and by `demo` to post genuine deliveries.
pub fn sign_standard_webhooks(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut m = mac(secret);
    m.update(format!("{id}.{timestamp}.").as_bytes());
    m.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(m.finalize().into_bytes())
    )
}

/// Signs like a provider using the HMAC-SHA-256 header scheme would (without the prefix).
pub fn sign_hmac(secret: &[u8], encoding: Encoding, timestamp: Option<i64>, body: &[u8]) -> String {
    let mut m = mac(secret);
    if let Some(ts) = timestamp {
        m.update(format!("{ts}.").as_bytes());
    }
    m.update(body);
    let bytes = m.finalize().into_bytes();
    match encoding {
        Encoding::Hex => hex::encode(bytes),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sw() -> Scheme {
        Scheme::StandardWebhooks {
            tolerance: Duration::from_secs(300),
        }
    }

    fn hm(ts: bool) -> Scheme {
        Scheme::HmacSha256 {
            header: "x-sig".into(),
            encoding: Encoding::Hex,
            prefix: Some("sha256=".into()),
            timestamp_header: ts.then(|| "x-ts".to_owned()),
            tolerance: Duration::from_secs(300),
        }
    }

    fn key(k: &[u8]) -> Vec<Vec<u8>> {
        vec![k.to_vec()]
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
    }

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn standard_webhooks_accepts_any_matching_v1_and_refuses_the_rest() {
        let body = br#"{"a":1}"#;
        let good = sign_standard_webhooks(b"key", "msg_1", 1_700_000_000, body);
        let h = headers(&[
            ("webhook-id", "msg_1".into()),
            ("webhook-timestamp", "1700000000".into()),
            ("webhook-signature", format!("v1,AAAA {good}")),
        ]);
        assert_eq!(verify(&sw(), &key(b"key"), &h, body, now()), Ok(()));
        assert!(verify(&sw(), &key(b"other"), &h, body, now()).is_err());
        assert!(verify(&sw(), &key(b"key"), &h, br#"{"a":2}"#, now()).is_err());
        let late = now() + time::Duration::seconds(301);
        let err = verify(&sw(), &key(b"key"), &h, body, late).unwrap_err();
        assert!(err.to_string().contains("tolerance"), "{err}");
        let missing = headers(&[("webhook-id", "msg_1".into())]);
        assert!(verify(&sw(), &key(b"key"), &missing, body, now()).is_err());
    }

    #[test]
    fn hmac_scheme_checks_prefix_encoding_and_timestamp() {
        let body = b"{}";
        let sig = sign_hmac(b"k", Encoding::Hex, Some(1_700_000_000), body);
        let h = headers(&[
            ("x-sig", format!("sha256={sig}")),
            ("x-ts", "1700000000".into()),
        ]);
        assert_eq!(verify(&hm(true), &key(b"k"), &h, body, now()), Ok(()));
        assert!(verify(&hm(false), &key(b"k"), &h, body, now()).is_err());
        let unprefixed = headers(&[("x-sig", sig), ("x-ts", "1700000000".into())]);
        assert!(verify(&hm(true), &key(b"k"), &unprefixed, body, now()).is_err());
        let plain = sign_hmac(b"k", Encoding::Hex, None, body);
        let h = headers(&[("x-sig", format!("sha256={plain}"))]);
        assert_eq!(verify(&hm(false), &key(b"k"), &h, body, now()), Ok(()));
    }

    /// A scheme, its secret, the signature headers, the signed body and the instant it is
    /// checked at.
    type Vector = (
        Scheme,
        &'static str,
        Vec<(&'static str, String)>,
        Vec<u8>,
        i64,
    );

    /// The providers' own published vectors (their SDK tests' header, secret and body, the
    /// body from the shared corpus): each verifies under its preset, and one changed byte of
    /// the body is a mismatch (answered 401 `bad_signature`).
    #[test]
    fn the_providers_published_vectors_verify_and_one_changed_byte_does_not() {
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/corpora/providers");
        let read = |f: &str| std::fs::read(corpus.join(f)).unwrap();
        let mut paddle_body = read("paddle/customer-created-signed.json");
        // Paddle's signature covers the body without the file's trailing newline.
        assert_eq!(paddle_body.pop(), Some(b'\n'));
        let razorpay_body = read("razorpay/payment-authorized-signed.json");
        let square_body = read("square/webhooks-test-notification-signed.json");
        let vectors: Vec<Vector> = vec![
            (
                Scheme::Paddle { tolerance: std::time::Duration::from_secs(5) },
                "pdl_ntfset_01hs0t3tw21j988db1pam5xg8m_GrOWLNef+vmtjJYq4mSnHNzvc8uWoJ1I",
                vec![("paddle-signature", "ts=1710498758;h1=558bf93944dbeb4790c7a8af6cb2ea435c8ca9c8396aafc1a4e37424ac132744".into())],
                paddle_body,
                1_710_498_758,
            ),
            (
                Scheme::Square { url: "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9".into() },
                "Ibxx_5AKakO-3qeNVR61Dw",
                vec![("x-square-hmacsha256-signature", "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4=".into())],
                square_body,
                1_700_000_000,
            ),
            (
                Scheme::HmacSha256 {
                    header: "x-razorpay-signature".into(),
                    encoding: Encoding::Hex,
                    prefix: None,
                    timestamp_header: None,
                    tolerance: std::time::Duration::from_secs(300),
                },
                "key_secret",
                vec![("x-razorpay-signature", "d60e67fd884556c045e9be7dad57903e33efc7172c17c6e3ef77db42d2b366e9".into())],
                razorpay_body,
                1_700_000_000,
            ),
        ];
        for (scheme, secret, pairs, body, at) in vectors {
            let now = OffsetDateTime::from_unix_timestamp(at).unwrap();
            let h = headers(&pairs);
            assert_eq!(
                verify(&scheme, &key(secret.as_bytes()), &h, &body, now),
                Ok(()),
                "{scheme:?}"
            );
            let mut changed = body.clone();
            changed[10] ^= 1;
            assert_eq!(
                verify(&scheme, &key(secret.as_bytes()), &h, &changed, now).map_err(|e| e.kind()),
                Err("mismatch"),
                "{scheme:?}"
            );
        }
    }

    #[test]
    fn any_secret_verifies_and_none_configured_is_its_own_refusal() {
        let body = b"{}";
        let sig = sign_hmac(b"new", Encoding::Hex, None, body);
        let h = headers(&[("x-sig", format!("sha256={sig}"))]);
        let rotated = vec![b"old".to_vec(), b"new".to_vec()];
        assert_eq!(verify(&hm(false), &rotated, &h, body, now()), Ok(()));
        let retired = vec![b"old".to_vec()];
        assert_eq!(
            verify(&hm(false), &retired, &h, body, now()).map_err(|e| e.kind()),
            Err("mismatch")
        );
        assert_eq!(
            verify(&hm(false), &[], &h, body, now()),
            Err(SignatureError::NotConfigured)
        );
    }
}
