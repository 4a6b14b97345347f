//! The consumer's verification API in the contract (`verify = { url = … }` on a type or a
//! provider): how oncegate asks the consumer whether an effect whose outcome became unknown
//! actually ran. Only the consumer can know; the provider's authority never settles it.

use serde::Deserialize;

use super::check::{is_loopback, At, Checker};
use super::SecretSource;

/// Where the consumer says whether an effect ran: `GET url` answers
/// `{"applied": true, "result": {…}}` or `{"applied": false}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    /// URL with an `{effect_id}` hole, and optionally `{tenant}`, `{provider}`, `{env}` and
    /// `{event_type}`.
    pub url: String,
    /// The header the consumer's credential is sent in (`auth_header`), stored lower-case,
    /// when its API needs one.
    pub auth_header: Option<String>,
    /// Where that header's whole value is read from (`auth_secret_env` or `auth_secret_file`);
    /// set exactly when `auth_header` is.
    pub auth_secret: Option<SecretSource>,
}

/// The holes a verification URL may use.
pub const VERIFY_HOLES: [&str; 5] = ["effect_id", "tenant", "provider", "env", "event_type"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVerifier {
    url: String,
    auth_header: Option<String>,
    auth_secret_env: Option<String>,
    auth_secret_file: Option<String>,
}

pub(super) fn verifier(c: &mut Checker<'_>, at: At<'_>, raw: RawVerifier) -> Option<Verifier> {
    let before = c.errors.len();
    let mut rest = raw.url.as_str();
    let mut has_effect = false;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            c.error(at, "verify.url", "an opening '{' has no closing '}'");
            break;
        };
        let hole = &rest[open + 1..open + close];
        if hole == "effect_id" {
            has_effect = true;
        } else if !VERIFY_HOLES.contains(&hole) {
            c.error(
                at,
                "verify.url",
                format!("{{{hole}}} is not a known hole: use {{effect_id}}, {{tenant}}, {{provider}}, {{env}} or {{event_type}}"),
            );
        }
        rest = &rest[open + close + 1..];
    }
    if !has_effect {
        c.error(
            at,
            "verify.url",
            "must contain {effect_id}: the consumer is asked about one effect",
        );
    }
    if !(raw.url.starts_with("http://") || raw.url.starts_with("https://")) {
        c.error(at, "verify.url", "must be an http:// or https:// URL");
    }
    if let Some(rest) = raw.url.strip_prefix("http://") {
        if !is_loopback(rest) {
            c.warn(at, format!(
                "the verification API {} is plain http:// on a host that is not loopback: its answers settle effects, so use https://",
                raw.url
            ));
        }
    }
    let auth_secret = match (&raw.auth_header, raw.auth_secret_env, raw.auth_secret_file) {
        (None, None, None) => None,
        (Some(_), env, file) => c.secret(at, "verify", env, file),
        (None, _, _) => {
            c.error(
                at,
                "verify.auth_header",
                "an auth secret needs the header that carries it",
            );
            None
        }
    };
    if c.errors.len() > before {
        return None;
    }
    Some(Verifier {
        url: raw.url,
        auth_header: raw.auth_header.map(|h| h.to_ascii_lowercase()),
        auth_secret,
    })
}
