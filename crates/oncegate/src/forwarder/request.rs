//! The HTTP request of one forward attempt: the journaled body as received, the Standard
//! Webhooks signature and oncegate's own headers, the answer read within the result bound.

use std::time::Duration;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use oncegate_core::contract::{Forward, SecretSource};
use oncegate_store::ForwardRecord;
use sha2::Sha256;
use time::OffsetDateTime;

use crate::gate::MAX_RESULT_BYTES;
use crate::trust;

/// What one send came to.
pub(super) enum Sent {
    Delivered { status: u16, result: String },
    Failed { status: Option<u16>, error: String },
}

/// Sends the body as received to the endpoint, signed, and reads the answer.
pub(super) async fn send(
    http: &reqwest::Client,
    forward: &Forward,
    f: &ForwardRecord,
    delivery: &str,
    headers_json: &str,
    body: Vec<u8>,
) -> Sent {
    let msg_id = f.effect.to_string();
    // The wall clock, not the gate's: the endpoint bounds the signed timestamp by its own.
    let timestamp = OffsetDateTime::now_utc().unix_timestamp().to_string();
    let mut request = http
        .post(&forward.url)
        .timeout(forward.timeout)
        .header("content-type", content_type(headers_json))
        .header("webhook-id", &msg_id)
        .header("webhook-timestamp", &timestamp)
        .header("oncegate-effect-id", &msg_id)
        .header("oncegate-delivery-id", delivery)
        .header("oncegate-fencing", f.fencing_token.to_string());
    if let Some(source) = &forward.signing_secret {
        match secret(source) {
            Ok(key) => {
                request = request.header(
                    "webhook-signature",
                    signature(&key, &msg_id, &timestamp, &body),
                );
            }
            Err(error) => {
                return Sent::Failed {
                    status: None,
                    error,
                }
            }
        }
    }
    let response = match request.body(body).send().await {
        Ok(r) => r,
        Err(e) => {
            let error = if e.is_timeout() {
                format!("no answer within {}", humanize(forward.timeout))
            } else if e.is_connect() {
                format!("the endpoint could not be reached: {}", trust::cause(&e))
            } else {
                format!("the request failed: {}", trust::cause(&e))
            };
            return Sent::Failed {
                status: None,
                error,
            };
        }
    };
    let status = response.status().as_u16();
    if !response.status().is_success() {
        return Sent::Failed {
            status: Some(status),
            error: format!("the endpoint answered HTTP {status}"),
        };
    }
    match bounded_body(response).await {
        Ok(bytes) => Sent::Delivered {
            status,
            result: result_of(&bytes),
        },
        // The consumer acted (it said 2xx) but its body was cut: the effect completes
        // without it rather than being sent again.
        Err(why) => Sent::Delivered {
            status,
            result: serde_json::json!({ "unreadable_body": why }).to_string(),
        },
    }
}

/// Reads at most `MAX_RESULT_BYTES` (and one more, to know it was longer).
async fn bounded_body(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| trust::cause(&e))? {
        out.extend_from_slice(&chunk);
        if out.len() > MAX_RESULT_BYTES {
            out.truncate(MAX_RESULT_BYTES + 1);
            break;
        }
    }
    Ok(out)
}

/// The effect's result from a 2xx body: the JSON itself when it parses and fits, else the
/// text as a JSON string, cut to fit; `null` for an empty body.
pub(crate) fn result_of(body: &[u8]) -> String {
    if body.iter().all(u8::is_ascii_whitespace) {
        return "null".to_owned();
    }
    if body.len() <= MAX_RESULT_BYTES && serde_json::from_slice::<serde_json::Value>(body).is_ok() {
        return String::from_utf8_lossy(body).into_owned();
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX_RESULT_BYTES)]).into_owned();
    let mut cut: &str = &text;
    loop {
        let json = serde_json::Value::String(cut.to_owned()).to_string();
        if json.len() <= MAX_RESULT_BYTES {
            return json;
        }
        let mut end = cut.len() * 3 / 4;
        while !cut.is_char_boundary(end) {
            end -= 1;
        }
        cut = &cut[..end];
    }
}

/// The original request's content type, else JSON.
fn content_type(headers_json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(headers_json)
        .ok()
        .and_then(|h| {
            let map = h.as_object()?.clone();
            map.into_iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                .and_then(|(_, v)| v.as_str().map(str::to_owned))
        })
        .unwrap_or_else(|| "application/json".to_owned())
}

/// The Standard Webhooks secret: `whsec_<base64>` decoded, any other value as its bytes.
fn secret(source: &SecretSource) -> Result<Vec<u8>, String> {
    let text = match source {
        SecretSource::Env(name) => std::env::var(name)
            .map_err(|_| format!("the forward's signing secret variable {name} is not set"))?,
        SecretSource::File(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("the forward's signing secret file {path} cannot be read: {e}"))?,
    };
    let text = text.trim();
    match text.strip_prefix("whsec_") {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| "the forward's whsec_ signing secret is not valid base64".to_owned()),
        None => Ok(text.as_bytes().to_vec()),
    }
}

/// `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`.
pub(crate) fn signature(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any size");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(tag)
    )
}

fn humanize(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_the_json_body_or_a_string_within_the_bound() {
        assert_eq!(result_of(br#"{"ok":true}"#), r#"{"ok":true}"#);
        assert_eq!(result_of(b"done"), r#""done""#);
        assert_eq!(result_of(b"  "), "null");
        let long = vec![b'"'; MAX_RESULT_BYTES * 2];
        let r = result_of(&long);
        assert!(r.len() <= MAX_RESULT_BYTES, "{}", r.len());
        assert!(serde_json::from_str::<String>(&r).is_ok());
    }

    #[test]
    fn the_signature_is_standard_webhooks() {
        // The Standard Webhooks specification's example: secret, id, timestamp and payload.
        let key = base64::engine::general_purpose::STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap();
        let sig = signature(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            "1614265330",
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }
}
