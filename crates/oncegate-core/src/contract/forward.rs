//! Gateway mode in the contract (`[providers.P.forward]`, and a type's own
//! `[providers.P.types."T".forward]` overriding it field by field): where oncegate forwards
//! the effects that must run, how long one attempt may take, how often it is tried and how
//! the forwarded request is signed.

use std::time::Duration;

use serde::Deserialize;

use super::check::{is_loopback, At, Checker};
use super::SecretSource;

/// Where and how the effects of a type are forwarded to the consumer's endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    /// The consumer's endpoint (`url`, http:// or https://): it receives the body as received.
    pub url: String,
    /// How long one attempt may take, connection to last byte (`timeout`, default 10 s).
    pub timeout: Duration,
    /// Attempts before the effect goes to the dead letter (`max_attempts`, default 8, 1–100).
    pub max_attempts: u32,
    /// The pause before the second attempt (`backoff = "1s..10m"`: its first bound, default
    /// 1 s); each later pause doubles, with jitter.
    pub backoff_first: Duration,
    /// The longest pause between two attempts (the backoff's second bound, default 10 min).
    pub backoff_max: Duration,
    /// Where the Standard Webhooks secret (`whsec_<base64>`, or raw bytes) that signs each
    /// forward is read from (`signing_secret_env` or `signing_secret_file`); `None` sends the
    /// forward unsigned (a warning of the contract).
    pub signing_secret: Option<SecretSource>,
}

/// A `forward` table as written: every field optional, so a type's table can override only
/// what differs from its provider's.
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForward {
    url: Option<String>,
    timeout: Option<String>,
    max_attempts: Option<u32>,
    backoff: Option<String>,
    signing_secret_env: Option<String>,
    signing_secret_file: Option<String>,
}

impl RawForward {
    /// This table's fields over `base`'s (a type's table over its provider's).
    pub(super) fn over(self, base: &RawForward) -> RawForward {
        // A type naming one secret source replaces the provider's, whichever kind it is.
        let own_secret = self.signing_secret_env.is_some() || self.signing_secret_file.is_some();
        RawForward {
            url: self.url.or_else(|| base.url.clone()),
            timeout: self.timeout.or_else(|| base.timeout.clone()),
            max_attempts: self.max_attempts.or(base.max_attempts),
            backoff: self.backoff.or_else(|| base.backoff.clone()),
            signing_secret_env: if own_secret {
                self.signing_secret_env
            } else {
                base.signing_secret_env.clone()
            },
            signing_secret_file: if own_secret {
                self.signing_secret_file
            } else {
                base.signing_secret_file.clone()
            },
        }
    }
}

/// The default timeout of one attempt.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default number of attempts.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;

pub(super) fn forward(c: &mut Checker<'_>, at: At<'_>, raw: RawForward) -> Option<Forward> {
    let before = c.errors.len();
    let url = match raw.url {
        Some(u) => u,
        None => {
            c.error(
                at,
                "forward.url",
                "a forward needs the consumer's endpoint: `url = \"https://…\"`",
            );
            String::new()
        }
    };
    if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
        c.error(at, "forward.url", "must be an http:// or https:// URL");
    }
    if let Some(rest) = url.strip_prefix("http://") {
        if !is_loopback(rest) {
            c.warn(at, format!(
                "the forward endpoint {url} is plain http:// on a host that is not loopback: the payloads travel in clear, so use https://"
            ));
        }
    }
    let timeout = c.duration(
        at,
        "forward.timeout",
        raw.timeout.as_deref(),
        DEFAULT_TIMEOUT,
    );
    let max_attempts = raw.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if !(1..=100).contains(&max_attempts) {
        c.error(
            at,
            "forward.max_attempts",
            format!("{max_attempts} is out of range: between 1 and 100 attempts"),
        );
    }
    let (backoff_first, backoff_max) = match raw.backoff.as_deref() {
        None => (Duration::from_secs(1), Duration::from_secs(600)),
        Some(text) => match text.split_once("..") {
            Some((a, b)) => {
                let first = c.duration(at, "forward.backoff", Some(a.trim()), Duration::ZERO);
                let max = c.duration(at, "forward.backoff", Some(b.trim()), Duration::ZERO);
                if first > max {
                    c.error(
                        at,
                        "forward.backoff",
                        format!("{text:?}: the first pause is longer than the longest"),
                    );
                }
                (first, max)
            }
            None => {
                c.error(
                    at,
                    "forward.backoff",
                    format!("{text:?} is not a range of pauses like \"1s..10m\""),
                );
                (Duration::ZERO, Duration::ZERO)
            }
        },
    };
    let signing_secret = match (raw.signing_secret_env, raw.signing_secret_file) {
        (None, None) => {
            c.warn(at, format!(
                "the forward to {url} is not signed (no signing_secret_env or signing_secret_file): the endpoint cannot tell oncegate from anyone else"
            ));
            None
        }
        (env, file) => c.secret(at, "forward.signing_secret", env, file),
    };
    if c.errors.len() > before {
        return None;
    }
    Some(Forward {
        url,
        timeout,
        max_attempts,
        backoff_first,
        backoff_max,
        signing_secret,
    })
}
