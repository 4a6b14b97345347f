//! The consumer's verification API: asked whether an effect whose outcome became unknown (its
//! reservation's lease passed with no outcome) actually ran.
//!
//! Only the consumer knows: it records the effect id in the same transaction as the effect, and
//! answers `GET …/effects/{effect_id}` with `{"applied": true, "result": {…}}` or
//! `{"applied": false}`. Anything else — another status, another shape, a timeout — is
//! inconclusive: the item waits for a person, with the answer shown. The provider's authority
//! is never asked this question (it knows what the provider did, not what the consumer did).

use crate::evidence::Evidence;
use oncegate_core::contract::{SecretSource, Verifier};
use oncegate_core::json::{self, Limits, Value};

/// What the consumer said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The effect ran; its result as JSON text.
    Applied {
        result: String,
    },
    NotApplied,
    Inconclusive {
        why: String,
    },
}

/// What identifies the effect in the URL.
pub(crate) struct Subject<'a> {
    pub effect_id: &'a str,
    pub tenant: &'a str,
    pub provider: &'a str,
    pub env: &'a str,
    pub event_type: &'a str,
}

/// The URL with its holes filled (each value percent-encoded as one path segment).
pub(crate) fn url(verifier: &Verifier, s: &Subject<'_>) -> String {
    let enc = |v: &str| {
        v.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                b => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    verifier
        .url
        .replace("{effect_id}", &enc(s.effect_id))
        .replace("{tenant}", &enc(s.tenant))
        .replace("{provider}", &enc(s.provider))
        .replace("{env}", &enc(s.env))
        .replace("{event_type}", &enc(s.event_type))
}

fn secret(source: &SecretSource) -> Result<String, String> {
    match source {
        SecretSource::Env(name) => std::env::var(name)
            .map_err(|_| format!("the verification secret's variable {name} is not set")),
        SecretSource::File(path) => std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .map_err(|_| format!("the verification secret's file {path} cannot be read")),
    }
}

/// Reads an answer body: what it means, judged strictly (a typo in `applied` is inconclusive,
/// never "not applied").
pub(crate) fn read(status: u16, body: &[u8]) -> Answer {
    let shown = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    if status != 200 {
        return Answer::Inconclusive {
            why: format!("the consumer's verification API answered {status}: a person decides"),
        };
    }
    let Ok(Value::Object(members)) = json::parse(body, &Limits::default()) else {
        return Answer::Inconclusive {
            why: format!("the consumer's verification API answered 200 with a body that is not a JSON object ({shown}): a person decides"),
        };
    };
    let get = |k: &str| members.get(k);
    match get("applied") {
        Some(Value::Bool(true)) => Answer::Applied {
            result: get("result")
                .map(oncegate_core::canon::to_jcs)
                .unwrap_or_else(|| "{}".to_owned()),
        },
        Some(Value::Bool(false)) => Answer::NotApplied,
        _ => Answer::Inconclusive {
            why: format!("the consumer's verification API answered 200 without a boolean \"applied\" ({shown}): a person decides"),
        },
    }
}

/// Asks the consumer; returns the URL asked, the answer, and the evidence to keep.
pub(crate) async fn ask(
    http: &reqwest::Client,
    verifier: &Verifier,
    subject: &Subject<'_>,
) -> (Answer, Evidence) {
    let url = url(verifier, subject);
    let mut request = http.get(&url).header("accept", "application/json");
    if let (Some(header), Some(source)) = (&verifier.auth_header, &verifier.auth_secret) {
        match secret(source) {
            Ok(value) => request = request.header(header.as_str(), value),
            Err(why) => {
                return (
                    Answer::Inconclusive { why: why.clone() },
                    Evidence {
                        asked: Some(url),
                        error: Some(why),
                        ..Evidence::default()
                    },
                )
            }
        }
    }
    let (answer, evidence) = match request.send().await {
        Err(e) => {
            let why = if e.is_timeout() {
                "the consumer's verification API did not answer in time: a person decides"
                    .to_owned()
            } else {
                "the consumer's verification API could not be reached: a person decides".to_owned()
            };
            (
                Answer::Inconclusive { why: why.clone() },
                Evidence {
                    error: Some(why),
                    ..Evidence::default()
                },
            )
        }
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response.bytes().await.unwrap_or_default();
            let shown = String::from_utf8_lossy(&body[..body.len().min(2048)]).into_owned();
            (
                read(status, &body),
                Evidence {
                    status: Some(status),
                    body: Some(shown),
                    ..Evidence::default()
                },
            )
        }
    };
    let evidence = Evidence {
        asked: Some(url),
        verdict: Some(
            match &answer {
                Answer::Applied { .. } => "applied",
                Answer::NotApplied => "not_applied",
                Answer::Inconclusive { .. } => "inconclusive",
            }
            .to_owned(),
        ),
        ..evidence
    };
    (answer, evidence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_strictly() {
        assert_eq!(
            read(200, br#"{"applied": true, "result": {"b": 1, "a": 2}}"#),
            Answer::Applied {
                result: r#"{"a":2,"b":1}"#.to_owned()
            }
        );
        assert_eq!(read(200, br#"{"applied":false}"#), Answer::NotApplied);
        for (status, body) in [
            (404, &br#"{"applied":false}"#[..]),
            (500, b"oops"),
            (200, br#"{"applied":"yes"}"#),
            (200, br#"{"aplied":false}"#),
            (200, b"[true]"),
            (200, b"not json"),
        ] {
            assert!(
                matches!(read(status, body), Answer::Inconclusive { .. }),
                "{status} {}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn holes_are_filled_and_encoded() {
        let v = Verifier {
            url: "http://127.0.0.1:9/t/{tenant}/effects/{effect_id}?type={event_type}".into(),
            auth_header: None,
            auth_secret: None,
        };
        let s = Subject {
            effect_id: "eff_1",
            tenant: "a/b",
            provider: "p",
            env: "live",
            event_type: "refund.created",
        };
        assert_eq!(
            url(&v, &s),
            "http://127.0.0.1:9/t/a%2Fb/effects/eff_1?type=refund.created"
        );
    }
}
