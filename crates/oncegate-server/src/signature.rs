//! Provider signatures: Standard Webhooks and the generic HMAC-SHA-256 header scheme.
//!
//! Both check the MAC with `hmac`'s constant-time `verify_slice`, and both bound the signed
//! timestamp by the contract's tolerance so a captured request cannot be replayed days later.
//! A replay inside the tolerance is not refused here: it is a transport duplicate, recognized
//! by the store and answered `ignore`.

use axum::http::HeaderMap;
use base64::Engine;
use hmac::{Hmac, Mac};
use oncegate_core::contract::{Encoding, Signature};
use sha2::Sha256;
use time::OffsetDateTime;

type HmacSha256 = Hmac<Sha256>;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

fn mac(secret: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length")
}

/// Checks a signed timestamp (Unix seconds) against the tolerance.
fn fresh(
    name: &str,
    value: &str,
    tolerance: std::time::Duration,
    now: OffsetDateTime,
) -> Result<(), String> {
    let ts: i64 = value
        .parse()
        .map_err(|_| format!("the {name} header is not a Unix timestamp in seconds"))?;
    let skew = (now.unix_timestamp() - ts).unsigned_abs();
    if skew > tolerance.as_secs() {
        return Err(format!(
            "the signed timestamp is {skew} s away from the service's clock, over the tolerance of {} s (a stale or replayed request)",
            tolerance.as_secs()
        ));
    }
    Ok(())
}

/// Verifies a delivery's signature under the provider's scheme. The error is a sentence
/// fragment for the rejection; it never contains the secret or the expected MAC.
pub(crate) fn verify(
    scheme: &Signature,
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
    now: OffsetDateTime,
) -> Result<(), String> {
    match scheme {
        Signature::StandardWebhooks { tolerance, .. } => {
            let id = header(headers, "webhook-id")
                .filter(|v| !v.is_empty())
                .ok_or("the webhook-id header is missing")?;
            let ts = header(headers, "webhook-timestamp")
                .ok_or("the webhook-timestamp header is missing")?;
            let sigs = header(headers, "webhook-signature")
                .ok_or("the webhook-signature header is missing")?;
            fresh("webhook-timestamp", ts, *tolerance, now)?;
            let mut base = mac(secret);
            base.update(id.as_bytes());
            base.update(b".");
            base.update(ts.as_bytes());
            base.update(b".");
            base.update(body);
            // The header is a space-separated list (several during a secret rotation); any
            // `v1` entry that verifies is enough.
            let mut saw_v1 = false;
            for entry in sigs.split_whitespace() {
                let Some(b64) = entry.strip_prefix("v1,") else {
                    continue;
                };
                saw_v1 = true;
                if let Ok(sig) = base64::engine::general_purpose::STANDARD.decode(b64) {
                    if base.clone().verify_slice(&sig).is_ok() {
                        return Ok(());
                    }
                }
            }
            Err(if saw_v1 {
                "the webhook-signature does not match the body".to_owned()
            } else {
                "the webhook-signature header has no v1 signature".to_owned()
            })
        }
        Signature::HmacSha256 {
            header: name,
            encoding,
            prefix,
            timestamp_header,
            tolerance,
            ..
        } => {
            let value =
                header(headers, name).ok_or_else(|| format!("the {name} header is missing"))?;
            let value = match prefix {
                Some(p) => value
                    .strip_prefix(p.as_str())
                    .ok_or_else(|| format!("the {name} header does not start with {p:?}"))?,
                None => value,
            };
            let sig = match encoding {
                Encoding::Hex => hex::decode(value).ok(),
                Encoding::Base64 => base64::engine::general_purpose::STANDARD.decode(value).ok(),
            }
            .ok_or_else(|| {
                format!(
                    "the {name} header is not {}",
                    match encoding {
                        Encoding::Hex => "hex",
                        Encoding::Base64 => "base64",
                    }
                )
            })?;
            let mut m = mac(secret);
            if let Some(ts_name) = timestamp_header {
                let ts = header(headers, ts_name)
                    .ok_or_else(|| format!("the {ts_name} header is missing"))?;
                fresh(ts_name, ts, *tolerance, now)?;
                m.update(ts.as_bytes());
                m.update(b".");
            }
            m.update(body);
            m.verify_slice(&sig)
                .map_err(|_| format!("the {name} signature does not match the body"))
        }
    }
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
    use oncegate_core::contract::SecretSource;
    use std::time::Duration;

    fn sw() -> Signature {
        Signature::StandardWebhooks {
            secret: SecretSource::Env("X".into()),
            tolerance: Duration::from_secs(300),
        }
    }

    fn hm(ts: bool) -> Signature {
        Signature::HmacSha256 {
            header: "x-sig".into(),
            encoding: Encoding::Hex,
            prefix: Some("sha256=".into()),
            timestamp_header: ts.then(|| "x-ts".to_owned()),
            tolerance: Duration::from_secs(300),
            secret: SecretSource::Env("X".into()),
        }
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
        assert_eq!(verify(&sw(), b"key", &h, body, now()), Ok(()));
        assert!(verify(&sw(), b"other", &h, body, now()).is_err());
        assert!(verify(&sw(), b"key", &h, br#"{"a":2}"#, now()).is_err());
        let late = now() + time::Duration::seconds(301);
        let err = verify(&sw(), b"key", &h, body, late).unwrap_err();
        assert!(err.contains("tolerance"), "{err}");
        let missing = headers(&[("webhook-id", "msg_1".into())]);
        assert!(verify(&sw(), b"key", &missing, body, now()).is_err());
    }

    #[test]
    fn hmac_scheme_checks_prefix_encoding_and_timestamp() {
        let body = b"{}";
        let sig = sign_hmac(b"k", Encoding::Hex, Some(1_700_000_000), body);
        let h = headers(&[
            ("x-sig", format!("sha256={sig}")),
            ("x-ts", "1700000000".into()),
        ]);
        assert_eq!(verify(&hm(true), b"k", &h, body, now()), Ok(()));
        assert!(verify(&hm(false), b"k", &h, body, now()).is_err());
        let unprefixed = headers(&[("x-sig", sig), ("x-ts", "1700000000".into())]);
        assert!(verify(&hm(true), b"k", &unprefixed, body, now()).is_err());
        let plain = sign_hmac(b"k", Encoding::Hex, None, body);
        let h = headers(&[("x-sig", format!("sha256={plain}"))]);
        assert_eq!(verify(&hm(false), b"k", &h, body, now()), Ok(()));
    }
}
