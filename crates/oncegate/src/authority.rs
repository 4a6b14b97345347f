//! The authority adapter: asks a provider's API for the real operations of one resource.
//!
//! Used only by the reconciler and the invisible-losses sweep, never on the ingestion path,
//! so a slow or dead authority can delay a reconciliation but never a delivery post. Each call
//! has a timeout, a few attempts with exponential backoff, and every authority has a circuit:
//! after repeated failures it is not asked again until a cool-down passed, so a dead API is
//! not hammered by every queue item in turn.
//!
//! `https://` authorities are reached through rustls, trusting the system's roots plus the
//! extra CAs of [`crate::trust`] (`ONCEGATE_CA_FILE`, an authority's `ca_file`), all read when
//! the client is built, so a bad CA file stops the start, not a later reconciliation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use oncegate_core::contract::{Authority, Contract, EventType, SecretSource};
use oncegate_core::json::{self, Limits, Value};
use oncegate_core::pointer::Pointer;
use oncegate_core::reconcile::{self, AnswerError, AuthorityOperation};

use crate::trust::{self, CaFile, TrustError};

/// How the adapter treats authorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthorityPolicy {
    /// One HTTP request, connection included.
    pub timeout: Duration,
    /// Attempts per question (the first included).
    pub attempts: u32,
    /// The wait before the second attempt; doubled before each next one.
    pub backoff: Duration,
    /// Consecutive failed questions that open an authority's circuit.
    pub open_after: u32,
    /// How long an open circuit refuses to ask.
    pub cool_down: Duration,
}

impl Default for AuthorityPolicy {
    fn default() -> Self {
        AuthorityPolicy {
            timeout: Duration::from_secs(5),
            attempts: 3,
            backoff: Duration::from_millis(200),
            open_after: 5,
            cool_down: Duration::from_secs(60),
        }
    }
}

/// Why the authority gave no usable answer. Messages are for operators: they name the
/// authority by its URL template, never a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant's message says what it and its fields hold
pub enum AuthorityError {
    #[error("the authority {authority} failed repeatedly; it is not asked again for {seconds}s")]
    CircuitOpen { authority: String, seconds: u64 },
    #[error("the authority URL cannot be filled: {0}")]
    Url(String),
    #[error("the authority's secret is unavailable: {0}")]
    Secret(String),
    #[error("the authority {authority} did not answer: {cause}")]
    Transport { authority: String, cause: String },
    #[error("the authority {authority} answered HTTP {status}")]
    Status { authority: String, status: u16 },
    #[error("the authority {authority} answered with a body that is not JSON: {cause}")]
    Body { authority: String, cause: String },
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

/// What a delivery (or a resource) gives the URL template.
#[derive(Debug, Clone, Default)]
pub struct UrlContext<'a> {
    pub tenant: &'a str,
    pub provider: &'a str,
    pub env: &'a str,
    pub resource: Option<&'a str>,
    /// The delivery's parsed body, for `{/json/pointer}` holes.
    pub payload: Option<&'a Value>,
}

/// The authority's answer, read.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The URL asked (holes filled; it carries no secret).
    pub url: String,
    pub operations: Vec<AuthorityOperation>,
}

#[derive(Debug, Default)]
struct Circuit {
    failures: u32,
    open_until: Option<Instant>,
}

/// The HTTP clients and the circuits of every authority, shared by the reconciler's runs.
pub struct AuthorityClient {
    /// The client of the authorities that name no `ca_file`.
    http: reqwest::Client,
    /// One client per `ca_file` named by the contract's authorities (it also trusts
    /// `ONCEGATE_CA_FILE`'s CA).
    with_ca: HashMap<String, reqwest::Client>,
    policy: AuthorityPolicy,
    circuits: Mutex<HashMap<String, Circuit>>,
}

impl std::fmt::Debug for AuthorityClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorityClient")
            .field("policy", &self.policy)
            .finish()
    }
}

impl AuthorityClient {
    /// Builds the clients for the contract's authorities: each trusts the system's roots, the
    /// CA in `ca_file` (every authority: `ONCEGATE_CA_FILE` in the CLI) and its own `ca_file`.
    /// Every CA file is read here; one that cannot be used is an error naming it.
    pub fn new(
        policy: AuthorityPolicy,
        contract: &Contract,
        ca_file: Option<&Path>,
    ) -> Result<AuthorityClient, TrustError> {
        let shared = match ca_file {
            Some(path) => trust::read(&CaFile {
                path: path.to_owned(),
                origin: "ONCEGATE_CA_FILE".to_owned(),
            })?,
            None => Vec::new(),
        };
        let http = trust::client(policy.timeout, &shared)?;
        let mut with_ca = HashMap::new();
        for provider in contract.providers.values() {
            for t in provider.types.values() {
                let Some(own) = t.authority.as_ref().and_then(|a| a.ca_file.as_ref()) else {
                    continue;
                };
                if with_ca.contains_key(own) {
                    continue;
                }
                // A relative path is read from the working directory, like `auth_secret_file`.
                let mut certs = trust::read(&CaFile {
                    path: PathBuf::from(own),
                    origin: format!("the authority of {}/{}", provider.name, t.name),
                })?;
                certs.extend(shared.iter().cloned());
                with_ca.insert(own.clone(), trust::client(policy.timeout, &certs)?);
            }
        }
        Ok(AuthorityClient {
            http,
            with_ca,
            policy,
            circuits: Mutex::new(HashMap::new()),
        })
    }

    /// The client that trusts the system's roots and `ONCEGATE_CA_FILE` (the consumer's
    /// verification API uses it).
    pub(crate) fn shared_http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The client that trusts what `authority` asks for.
    fn http_for(&self, authority: &Authority) -> Result<&reqwest::Client, AuthorityError> {
        match &authority.ca_file {
            None => Ok(&self.http),
            // Never fall back to the system's roots alone: the contract asked for this CA.
            Some(file) => self
                .with_ca
                .get(file)
                .ok_or_else(|| AuthorityError::Transport {
                    authority: authority.url.clone(),
                    cause: format!("its CA file {file} was not loaded when the client was built"),
                }),
        }
    }

    /// Asks the type's authority for the operations of the context's resource.
    pub async fn operations(
        &self,
        t: &EventType,
        authority: &Authority,
        ctx: &UrlContext<'_>,
        salt: &[u8],
    ) -> Result<Answer, AuthorityError> {
        let name = authority.url.clone();
        let url = fill_url(&authority.url, ctx)?;
        if let Some(left) = self.open_for(&name) {
            return Err(AuthorityError::CircuitOpen {
                authority: name,
                seconds: left.as_secs().max(1),
            });
        }
        let secret = match (&authority.auth_header, &authority.auth_secret) {
            (Some(header), Some(source)) => Some((header.clone(), read_secret(source)?)),
            _ => None,
        };
        let http = self.http_for(authority)?;
        let mut wait = self.policy.backoff;
        let mut last = None;
        for attempt in 1..=self.policy.attempts.max(1) {
            match self.ask(http, &name, &url, secret.as_ref()).await {
                Ok(doc) => {
                    self.succeeded(&name);
                    let operations = reconcile::operations(t, authority, &doc, salt)?;
                    return Ok(Answer { url, operations });
                }
                Err(e) => {
                    let retryable = match &e {
                        AuthorityError::Status { status, .. } => {
                            *status >= 500 || *status == 429 || *status == 408
                        }
                        AuthorityError::Transport { .. } => true,
                        _ => false,
                    };
                    last = Some(e);
                    if !retryable {
                        break;
                    }
                    if attempt < self.policy.attempts {
                        tokio::time::sleep(wait).await;
                        wait = wait.saturating_mul(2);
                    }
                }
            }
        }
        self.failed(&name);
        Err(last.unwrap_or_else(|| AuthorityError::Transport {
            authority: name,
            cause: "no attempt was made".to_owned(),
        }))
    }

    async fn ask(
        &self,
        http: &reqwest::Client,
        name: &str,
        url: &str,
        secret: Option<&(String, String)>,
    ) -> Result<Value, AuthorityError> {
        let mut request = http.get(url).header("accept", "application/json");
        if let Some((header, value)) = secret {
            request = request.header(header.as_str(), value.as_str());
        }
        let response = request
            .send()
            .await
            .map_err(|e| AuthorityError::Transport {
                authority: name.to_owned(),
                cause: transport_cause(&e),
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(AuthorityError::Status {
                authority: name.to_owned(),
                status: status.as_u16(),
            });
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| AuthorityError::Transport {
                authority: name.to_owned(),
                cause: transport_cause(&e),
            })?;
        json::parse(&body, &Limits::default()).map_err(|e| AuthorityError::Body {
            authority: name.to_owned(),
            cause: e.to_string(),
        })
    }

    /// The time left on an open circuit, if it is open.
    fn open_for(&self, name: &str) -> Option<Duration> {
        let circuits = self.circuits.lock().expect("circuit lock");
        let until = circuits.get(name)?.open_until?;
        until.checked_duration_since(Instant::now())
    }

    fn succeeded(&self, name: &str) {
        self.circuits.lock().expect("circuit lock").remove(name);
    }

    fn failed(&self, name: &str) {
        let mut circuits = self.circuits.lock().expect("circuit lock");
        let c = circuits.entry(name.to_owned()).or_default();
        c.failures += 1;
        if c.failures >= self.policy.open_after {
            c.open_until = Some(Instant::now() + self.policy.cool_down);
            // Half-open after the cool-down: one more failure opens it again at once.
            c.failures = self.policy.open_after.saturating_sub(1);
            tracing::warn!(authority = %name, cool_down_s = self.policy.cool_down.as_secs(), "authority circuit opened after repeated failures");
        }
    }
}

/// A short cause without the URL (reqwest includes it, and a URL may carry an account id).
fn transport_cause(e: &reqwest::Error) -> String {
    if let Some(tls) = tls_cause(e) {
        return tls;
    }
    if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "connection refused or unreachable".to_owned()
    } else {
        "the request failed".to_owned()
    }
}

/// The TLS failure inside a transport error, in words an operator can act on. rustls' error
/// travels inside `io::Error`s (nested, by hyper-util and tokio-rustls), whose `source()` skips
/// what they wrap, so each link is also unwrapped with `get_ref`.
fn tls_cause(e: &reqwest::Error) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let mut inner = Some(err);
        while let Some(candidate) = inner {
            match candidate.downcast_ref::<rustls::Error>() {
                Some(rustls::Error::InvalidCertificate(why)) => {
                    return Some(format!(
                        "its TLS certificate was refused ({why:?}); if a private CA signs it, name that CA with the authority's `ca_file` or ONCEGATE_CA_FILE"
                    ))
                }
                Some(other) => return Some(format!("the TLS handshake failed ({other})")),
                None => {}
            }
            inner = candidate
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|i| i as &(dyn std::error::Error + 'static));
        }
        next = err.source();
    }
    None
}

fn read_secret(source: &SecretSource) -> Result<String, AuthorityError> {
    match source {
        SecretSource::Env(name) => std::env::var(name)
            .map_err(|_| AuthorityError::Secret(format!("environment variable {name} is not set"))),
        SecretSource::File(path) => std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .map_err(|_| AuthorityError::Secret(format!("file {path} cannot be read"))),
    }
}

/// Fills `{resource}`, `{env}`, `{tenant}`, `{provider}` and `{/json/pointer}` holes, each
/// value percent-encoded as one path segment.
pub fn fill_url(template: &str, ctx: &UrlContext<'_>) -> Result<String, AuthorityError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| AuthorityError::Url("an opening '{' has no closing '}'".to_owned()))?;
        let hole = &rest[open + 1..open + close];
        let value = match hole {
            "tenant" => ctx.tenant.to_owned(),
            "provider" => ctx.provider.to_owned(),
            "env" => ctx.env.to_owned(),
            "resource" => ctx
                .resource
                .ok_or_else(|| AuthorityError::Url("the delivery has no resource".to_owned()))?
                .to_owned(),
            p => {
                let pointer = Pointer::parse(p)
                    .map_err(|_| AuthorityError::Url(format!("{{{p}}} is not a JSON Pointer")))?;
                match ctx.payload.and_then(|doc| pointer.get(doc)) {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ (Value::Number(_) | Value::Bool(_))) => {
                        oncegate_core::canon::to_key_form(v)
                    }
                    _ => {
                        return Err(AuthorityError::Url(format!(
                            "the delivery has no value at {p} (its payload may have been purged)"
                        )))
                    }
                }
            }
        };
        out.push_str(&encode_segment(&value));
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn encode_segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_filled_and_encoded() {
        let doc = json::parse(br#"{"data":{"account":"acct 1/2"}}"#, &Limits::default()).unwrap();
        let ctx = UrlContext {
            tenant: "acme",
            provider: "payflow",
            env: "live",
            resource: Some("pay_1"),
            payload: Some(&doc),
        };
        assert_eq!(
            fill_url(
                "http://a/{tenant}/{env}/{provider}/{/data/account}/payments/{resource}/refunds",
                &ctx
            )
            .unwrap(),
            "http://a/acme/live/payflow/acct%201%2F2/payments/pay_1/refunds"
        );
        let no_resource = UrlContext {
            resource: None,
            ..ctx.clone()
        };
        assert!(matches!(
            fill_url("http://a/{resource}", &no_resource),
            Err(AuthorityError::Url(_))
        ));
        assert!(matches!(
            fill_url("http://a/{/data/missing}", &ctx),
            Err(AuthorityError::Url(_))
        ));
    }
}
