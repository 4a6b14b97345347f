//! The contract file (TOML): which providers and event types oncegate knows, and for each type
//! what must happen once, within which scope, for how long and with what confidence.
//!
//! The text is parsed once into validated types. Every error names the file, the line, the
//! provider, the type and the field; a contract with any error is refused whole, never
//! half-applied. Reading the file is the caller's job: this module takes its text.

use crate::matrix::{Confidence, Criticality};
use crate::pointer::Pointer;
use crate::strategy::{Field, Level, Normalization, ScopeKind, Strategy};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;
use toml::Spanned;

mod forward;
mod verify;
pub use forward::{Forward, DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT};
pub use verify::{Verifier, VERIFY_HOLES};

/// A validated contract.
#[derive(Debug, Clone, PartialEq)]
pub struct Contract {
    /// Where the contract came from, for messages.
    pub source: String,
    /// The service-wide `[settings]`, each one defaulted where the file is silent.
    pub settings: Settings,
    /// Known environments; empty means any.
    pub environments: Vec<String>,
    /// The providers by name (the `[providers.<name>]` tables), each with the event types it
    /// sends.
    pub providers: BTreeMap<String, Provider>,
    /// Things that are allowed but deserve a second look.
    pub warnings: Vec<String>,
}

/// Service-wide settings (the `[settings]` table) with their defaults. Durations are written
/// in the file as `"30s"`, `"72h"`, `"7d"` and must be longer than zero.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How long a `process` reservation holds without a heartbeat (`lease`, default 30 s).
    /// When it runs out with no outcome the effect's outcome is unknown: it is never silently
    /// run again.
    pub lease: Duration,
    /// The default horizon: how long the fast dedup index keeps a key (`horizon`, default
    /// 72 h, a provider's retry window plus a margin). A type's or a strategy's own `horizon`
    /// overrides it; the proof outlives it.
    pub horizon: Duration,
    /// How long a delivery's raw body is kept (`payload_retention`, default 30 days); the
    /// delivery and its proof stay after the body is dropped.
    pub payload_retention: Duration,
    /// How long decision records (proofs, no payload) are kept (`proof_retention`, default
    /// 400 days). Never shorter than `payload_retention`.
    pub proof_retention: Duration,
    /// Largest body read, in bytes (`max_body_bytes`, default 1 MiB, above zero). A larger body
    /// is rejected, and its reception is still journaled with its size and hash.
    pub max_body_bytes: usize,
    /// Deepest nesting of arrays and objects a body may have (`max_depth`, default 128, between
    /// 1 and 1000): see [`crate::json::Limits::max_depth`].
    pub max_depth: usize,
    /// Share of recent matches that may be collisions before a strategy's breaker opens
    /// (`breaker_threshold`, between 0 and 1, default 0.005 = 0.5 %). Strictly more opens it.
    pub breaker_threshold: f64,
    /// Fewest recent matches of a strategy on which its breaker may open (`breaker_min_sample`,
    /// default 200), so a few early collisions do not turn every ignore into a reconcile.
    pub breaker_min_sample: u32,
    /// The store to use when the command line names none (`store`: a `postgres://…` URL or a
    /// SQLite path); `None` leaves the choice to the service's own default.
    pub store: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            lease: Duration::from_secs(30),
            horizon: Duration::from_secs(72 * 3600),
            payload_retention: Duration::from_secs(30 * 86400),
            proof_retention: Duration::from_secs(400 * 86400),
            max_body_bytes: 1024 * 1024,
            max_depth: 128,
            breaker_threshold: 0.005,
            breaker_min_sample: 200,
            store: None,
        }
    }
}

/// One provider the contract knows (`[providers.<name>]`): where its deliveries name their
/// event type, how they are signed, and the event types whose effects must happen once.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    /// The provider's name as the contract spells it (its table's key); part of every key's
    /// scope, so the same JSON from two providers never shares a key.
    pub name: String,
    /// Where each delivery names its event type: a place in the body or a header.
    pub event_type: EventTypeSource,
    /// Header carrying the provider's delivery id, if it sends one (a strong transport key).
    /// Stored lower-case.
    pub delivery_id_header: Option<String>,
    /// How the provider signs its deliveries. `None` when the contract names no `signature`:
    /// its deliveries are then accepted only with a bearer token.
    pub signature: Option<Signature>,
    /// The provider's event types by name. A delivery of a type not listed here has no
    /// contract and goes to reconciliation: it is kept, never dropped.
    pub types: BTreeMap<String, EventType>,
    /// Gateway mode (`[providers.<name>.forward]`): where the effects of its types are
    /// forwarded, unless a type overrides it. `None` when the provider's deliveries are
    /// answered to their caller, who runs the effect itself.
    pub forward: Option<Forward>,
}

/// Where a delivery says what type of event it is.
#[derive(Debug, Clone, PartialEq)]
pub enum EventTypeSource {
    /// The body's value at this JSON Pointer (`event_type = "/type"`), which must be a
    /// non-empty string.
    Pointer(Pointer),
    /// The value of this header (`event_type_header`), trimmed; the name is stored lower-case
    /// and matched regardless of case.
    Header(String),
}

/// Where a secret is read from. The contract never holds a secret itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The environment variable of this name holds the secret (`secret_env`).
    Env(String),
    /// The file at this path holds the secret (`secret_file`, e.g. `/run/secrets/…`).
    File(String),
}

/// How the generic `hmac-sha256` scheme writes the MAC in its header (`encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Hexadecimal, 64 characters for SHA-256 (`"hex"`, the default).
    Hex,
    /// Standard base64 with padding, RFC 4648 section 4 (`"base64"`).
    Base64,
}

/// How a provider signs its deliveries: the scheme, and where its signing secrets are.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    /// The header format the MAC arrives in and what it is computed over.
    pub scheme: Scheme,
    /// Where the signing secrets are read from, in the contract's order. There is more than one
    /// during a secret rotation: a delivery that verifies under any one of them is authentic.
    pub secrets: Vec<SecretSource>,
}

/// A signature scheme: the `scheme` value of a provider's `signature` table.
///
/// The presets (`stripe`, `paddle`, `slack`, `github`, `shopify`) are fixed header formats;
/// `hmac-sha256` is the generic HMAC-SHA-256 header scheme for providers none of them fits.
#[derive(Debug, Clone, PartialEq)]
pub enum Scheme {
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature` (`v1,<base64>`).
    StandardWebhooks {
        /// How far the signed timestamp may be from the service's clock, past or future
        /// (`tolerance`, default 5 min); a delivery signed further away is refused as stale.
        tolerance: Duration,
    },
    /// HMAC-SHA-256 of the body (or of `timestamp.body` when a timestamp header is named).
    HmacSha256 {
        /// The header carrying the MAC (`header`, required), stored lower-case.
        header: String,
        /// How the MAC is written in the header (`encoding`, default hex).
        encoding: Encoding,
        /// Text before the MAC in the header (`prefix`, e.g. `"sha256="`), removed before it is
        /// decoded; `None` when the header holds the MAC alone.
        prefix: Option<String>,
        /// The header carrying the signed Unix timestamp (`timestamp_header`), stored
        /// lower-case. When named, the MAC is over `<timestamp>.<body>` and the timestamp must
        /// lie within `tolerance`; when not, the MAC is over the body alone and its age is unchecked.
        timestamp_header: Option<String>,
        /// How far the signed timestamp may be from the service's clock, past or future
        /// (`tolerance`, default 5 min). Read only when `timestamp_header` is named.
        tolerance: Duration,
    },
    /// Stripe: `stripe-signature: t=<unix>,v1=<hex>[,v1=<hex>…]` over `<t>.<body>`. Some
    /// providers copy the format under their own header name, hence `header`.
    Stripe {
        /// The header carrying the signature (`header`, default `stripe-signature`), stored
        /// lower-case.
        header: String,
        /// How far the signed timestamp may be from the service's clock, past or future
        /// (`tolerance`, default 5 min); a delivery signed further away is refused as stale.
        tolerance: Duration,
    },
    /// Paddle Billing: `paddle-signature: ts=<unix>;h1=<hex>` over `<ts>:<body>`.
    Paddle {
        /// How far the signed timestamp may be from the service's clock, past or future
        /// (`tolerance`, default 5 min); a delivery signed further away is refused as stale.
        tolerance: Duration,
    },
    /// Slack: `x-slack-signature: v0=<hex>` over `v0:<ts>:<body>`, the timestamp in
    /// `x-slack-request-timestamp`.
    Slack {
        /// How far the signed timestamp may be from the service's clock, past or future
        /// (`tolerance`, default 5 min); a delivery signed further away is refused as stale.
        tolerance: Duration,
    },
    /// GitHub: `x-hub-signature-256: sha256=<hex>` over the body (no timestamp).
    Github,
    /// Shopify: `x-shopify-hmac-sha256: <base64>` over the body (no timestamp).
    Shopify,
}

impl Scheme {
    /// Every valid `scheme` value, as the contract spells it.
    pub const NAMES: [&'static str; 7] = [
        "standard-webhooks",
        "hmac-sha256",
        "stripe",
        "paddle",
        "slack",
        "github",
        "shopify",
    ];

    /// The `scheme` value this scheme is written as in the contract.
    pub fn name(&self) -> &'static str {
        match self {
            Scheme::StandardWebhooks { .. } => "standard-webhooks",
            Scheme::HmacSha256 { .. } => "hmac-sha256",
            Scheme::Stripe { .. } => "stripe",
            Scheme::Paddle { .. } => "paddle",
            Scheme::Slack { .. } => "slack",
            Scheme::Github => "github",
            Scheme::Shopify => "shopify",
        }
    }

    /// How far the signed timestamp may be from the service's clock, for the schemes that
    /// sign one (the generic scheme only when it names a timestamp header).
    pub fn tolerance(&self) -> Option<Duration> {
        match self {
            Scheme::StandardWebhooks { tolerance }
            | Scheme::Stripe { tolerance, .. }
            | Scheme::Paddle { tolerance }
            | Scheme::Slack { tolerance } => Some(*tolerance),
            Scheme::HmacSha256 {
                timestamp_header: Some(_),
                tolerance,
                ..
            } => Some(*tolerance),
            Scheme::HmacSha256 { .. } | Scheme::Github | Scheme::Shopify => None,
        }
    }

    /// A header that carries only the signed timestamp (never a MAC), worth keeping with the
    /// journaled delivery to investigate a stale-signature refusal.
    pub fn timestamp_header(&self) -> Option<&str> {
        match self {
            Scheme::StandardWebhooks { .. } => Some("webhook-timestamp"),
            Scheme::HmacSha256 {
                timestamp_header, ..
            } => timestamp_header.as_deref(),
            Scheme::Slack { .. } => Some("x-slack-request-timestamp"),
            Scheme::Stripe { .. } | Scheme::Paddle { .. } | Scheme::Github | Scheme::Shopify => {
                None
            }
        }
    }
}

/// A field declared with the reason for the declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// The field declared (never the whole document).
    pub pointer: Pointer,
    /// The written reason the field may be treated so (`why`, required and not blank): why a
    /// volatile field says nothing about the operation, or why an array's order means nothing.
    pub why: String,
}

/// An API of the provider that can confirm the real state.
#[derive(Debug, Clone, PartialEq)]
pub struct Authority {
    /// URL with `{resource}`, `{env}`, `{tenant}`, `{provider}` or `{/json/pointer}` holes.
    pub url: String,
    /// The header the authority's credential is sent in (`auth_header`, e.g.
    /// `authorization`), when it needs one.
    pub auth_header: Option<String>,
    /// Where that header's whole value is read from (`auth_secret_env` or `auth_secret_file`);
    /// set exactly when `auth_header` is.
    pub auth_secret: Option<SecretSource>,
    /// Where the list of operations is in the response.
    pub operations: Pointer,
    /// Where each operation's authoritative reference is.
    pub reference: Pointer,
    /// Type discriminant → where the same value is in an operation.
    pub fields: Vec<(Pointer, Pointer)>,
    /// The invisible-losses sweep: when set, the resources seen within this window are
    /// listed at the authority periodically and operations with no local effect reported.
    /// Off (`None`) unless the contract asks for it.
    pub sweep_window: Option<Duration>,
    /// A PEM file of extra CA certificates this authority's HTTPS connection trusts beside
    /// the system's roots (a provider's private CA). Only the path is recorded here: the core
    /// reads no file, the server loads it at start-up and refuses to start when it cannot.
    pub ca_file: Option<String>,
}

/// A validated event type (`[providers.<p>.types."<name>"]`): the identity contract of one
/// kind of delivery. What its effect is, what must agree for two deliveries to be the same
/// effect, how its key is made and how long it is remembered.
#[derive(Debug, Clone, PartialEq)]
pub struct EventType {
    /// The type's name as deliveries declare it (its table's key, e.g. `refund.created`).
    pub name: String,
    /// The name of the provider that sends it.
    pub provider: String,
    /// What a duplicate or a loss costs (`criticality`, required): an uncertain match of a
    /// reversible type is processed and flagged, one of a critical type is reconciled.
    pub criticality: Criticality,
    /// The business operation the type stands for (`operation`, default: the type's name).
    /// Types of one provider declaring the same operation share keys under an
    /// operation-scoped strategy.
    pub operation: String,
    /// The resource the effect acts on (`resource`, e.g. the payment's id), if declared: part
    /// of every key's scope and the authority's `{resource}`. A delivery where it is absent,
    /// null or blank gets no effect key.
    pub resource: Option<Pointer>,
    /// The essential fields (amount, currency, status…) that must agree when a key matches; a
    /// match where any differs is a collision and is quarantined. Never volatile.
    pub discriminants: Vec<Pointer>,
    /// Fields that change between retries of one event (send time, attempt counter), each with
    /// its reason: removed before anything is keyed.
    pub volatile: Vec<Declared>,
    /// False when the contract never said `volatile = [...]`: no fingerprint is allowed then.
    pub volatile_reviewed: bool,
    /// Arrays whose order means nothing (a set of tags), each with its reason: sorted by their
    /// elements' key form before keying. Every other array keeps its order, which is meaning.
    pub unordered: Vec<Declared>,
    /// Type-wide rewrites (`normalize`): each field's operations, applied in order before the
    /// resource, the discriminants and the keys are read. One that fails leaves the field as
    /// sent and is noted in the identity.
    pub normalize: Vec<(Pointer, Vec<Normalization>)>,
    /// Fields never shown in clear in keys, proofs or logs: they enter as an HMAC-SHA-256 under
    /// the salt the caller supplies.
    pub sensitive: Vec<Pointer>,
    /// Whether the effect's identity is kept forever, like a ledger line (`durable`, default
    /// false), instead of leaving the index at the horizon. Meant for financial types.
    pub durable: bool,
    /// How long the fast dedup index keeps the type's keys (`horizon`, default the settings'
    /// horizon); a strategy may set its own.
    pub horizon: Duration,
    /// The provider's API that confirms the real operations on a resource, asked when a
    /// delivery is reconciled; `None` when the type has none (the question then waits for a
    /// person).
    pub authority: Option<Authority>,
    /// The consumer's verification API (the type's own, else its provider's): asked whether
    /// an effect whose outcome became unknown ran, before anything else is done with it.
    pub verify: Option<Verifier>,
    /// Gateway mode for this type (its own `forward` table over its provider's, field by
    /// field): a `process` decision is answered once the effect's pending forward is durable,
    /// and oncegate delivers it to this endpoint. `None`: the caller runs the effect.
    pub forward: Option<Forward>,
    /// The key hierarchy (`[[…strategies]]`, at least one), in the contract's order, strongest
    /// first: the first strategy whose fields are all present makes the effect key.
    pub strategies: Vec<Strategy>,
    /// Shadow strategies (`[[…shadow]]`): computed on live traffic with their own index and
    /// reported when they would have decided differently, never acting. How a new version
    /// earns its cut-over.
    pub shadow: Vec<Strategy>,
    /// Line of the type's table in the contract, for messages.
    pub line: usize,
}

impl EventType {
    /// Whether the field at `p` is declared sensitive (compared as written in the contract).
    pub fn is_sensitive(&self, p: &Pointer) -> bool {
        self.sensitive.iter().any(|s| s == p)
    }
}

impl Contract {
    /// The provider called `name`, if the contract declares it.
    pub fn provider(&self, name: &str) -> Option<&Provider> {
        self.providers.get(name)
    }

    /// The contract of one event type of one provider; `None` when either is unknown, which
    /// sends the delivery to reconciliation.
    pub fn event_type(&self, provider: &str, event_type: &str) -> Option<&EventType> {
        self.providers.get(provider)?.types.get(event_type)
    }
}

/// One problem in a contract, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractError {
    /// The contract's name as given to [`parse`] (usually its path).
    pub file: String,
    /// The line (from 1) of the problem, or of the table that holds it, when known.
    pub line: Option<usize>,
    /// The provider whose table holds the problem.
    pub provider: Option<String>,
    /// The event type whose table holds the problem.
    pub event_type: Option<String>,
    /// The field at fault, as a path inside its table (`strategies[1].level`,
    /// `signature.scheme`, `settings.lease`).
    pub field: Option<String>,
    /// What is wrong, and what to write instead, in a plain sentence.
    pub message: String,
}

impl fmt::Display for ContractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        f.write_str(": ")?;
        if let Some(p) = &self.provider {
            write!(f, "provider {p:?}, ")?;
        }
        if let Some(t) = &self.event_type {
            write!(f, "type {t:?}, ")?;
        }
        if let Some(field) = &self.field {
            write!(f, "field {field:?}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in a contract; it is refused whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ContractErrors(pub Vec<ContractError>);

impl fmt::Display for ContractErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(
            f,
            "the contract has {n} error{}:",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

// ---- The file as written --------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContract {
    #[serde(default)]
    settings: RawSettings,
    #[serde(default)]
    environments: Vec<String>,
    #[serde(default)]
    providers: BTreeMap<String, Spanned<RawProvider>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    lease: Option<String>,
    horizon: Option<String>,
    payload_retention: Option<String>,
    proof_retention: Option<String>,
    max_body_bytes: Option<usize>,
    max_depth: Option<usize>,
    breaker_threshold: Option<f64>,
    breaker_min_sample: Option<u32>,
    store: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    event_type: Option<String>,
    event_type_header: Option<String>,
    delivery_id_header: Option<String>,
    signature: Option<RawSignature>,
    /// The consumer's verification API for every type of the provider (a type may override it).
    verify: Option<verify::RawVerifier>,
    /// Gateway mode for every type of the provider (a type may override fields of it).
    forward: Option<forward::RawForward>,
    #[serde(default)]
    types: BTreeMap<String, Spanned<RawType>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSignature {
    scheme: String,
    header: Option<String>,
    encoding: Option<String>,
    prefix: Option<String>,
    timestamp_header: Option<String>,
    tolerance: Option<String>,
    secret_env: Option<Names>,
    secret_file: Option<Names>,
}

/// One name or a list of names: `secret_env = "A"`, or `secret_env = ["A", "B"]` during a
/// secret rotation.
struct Names(Vec<String>);

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Names;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name or a list of names")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Names, E> {
                Ok(Names(vec![v.to_owned()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Names, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(Names(names))
            }
        }
        d.deserialize_any(Visit)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDeclared {
    field: String,
    why: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNormalize {
    field: String,
    ops: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawType {
    criticality: Option<String>,
    operation: Option<String>,
    resource: Option<String>,
    #[serde(default)]
    discriminants: Vec<String>,
    volatile: Option<Vec<RawDeclared>>,
    #[serde(default)]
    unordered: Vec<RawDeclared>,
    #[serde(default)]
    normalize: Vec<RawNormalize>,
    #[serde(default)]
    sensitive: Vec<String>,
    #[serde(default)]
    durable: bool,
    horizon: Option<String>,
    authority: Option<RawAuthority>,
    verify: Option<verify::RawVerifier>,
    forward: Option<forward::RawForward>,
    #[serde(default)]
    strategies: Vec<Spanned<RawStrategy>>,
    #[serde(default)]
    shadow: Vec<Spanned<RawStrategy>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuthority {
    url: String,
    auth_header: Option<String>,
    auth_secret_env: Option<String>,
    auth_secret_file: Option<String>,
    operations: String,
    reference: String,
    #[serde(default)]
    fields: BTreeMap<String, String>,
    sweep_window: Option<String>,
    ca_file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStrategy {
    name: String,
    version: u32,
    level: String,
    #[serde(default)]
    fields: Vec<String>,
    #[serde(default)]
    normalize: BTreeMap<String, Vec<String>>,
    confidence: Option<String>,
    horizon: Option<String>,
    scope: Option<String>,
}

// ---- Validation -----------------------------------------------------------------------------

/// Collects errors with their location while validating.
struct Checker<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<ContractError>,
    warnings: Vec<String>,
}

/// Where in the contract a check is being made.
#[derive(Clone, Copy)]
struct At<'a> {
    line: Option<usize>,
    provider: Option<&'a str>,
    event_type: Option<&'a str>,
}

impl<'a> Checker<'a> {
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .bytes()
            .filter(|b| *b == b'\n')
            .count()
            + 1
    }

    fn error(&mut self, at: At<'_>, field: &str, message: impl Into<String>) {
        self.errors.push(ContractError {
            file: self.file.to_owned(),
            line: at.line,
            provider: at.provider.map(str::to_owned),
            event_type: at.event_type.map(str::to_owned),
            field: (!field.is_empty()).then(|| field.to_owned()),
            message: message.into(),
        });
    }

    /// A warning at `at`: `file:line: provider "p", type "t": text`.
    fn warn(&mut self, at: At<'_>, text: impl fmt::Display) {
        let mut w = format!(
            "{}:{}: provider {:?}",
            self.file,
            at.line.unwrap_or(0),
            at.provider.unwrap_or("")
        );
        if let Some(t) = at.event_type {
            w.push_str(&format!(", type {t:?}"));
        }
        self.warnings.push(format!("{w}: {text}"));
    }

    fn pointer(&mut self, at: At<'_>, field: &str, text: &str) -> Option<Pointer> {
        match Pointer::parse(text) {
            Ok(p) => Some(p),
            Err(e) => {
                self.error(at, field, e.to_string());
                None
            }
        }
    }

    fn duration(
        &mut self,
        at: At<'_>,
        field: &str,
        text: Option<&str>,
        default: Duration,
    ) -> Duration {
        match text {
            None => default,
            Some(t) => match humantime::parse_duration(t) {
                Ok(d) if !d.is_zero() => d,
                Ok(_) => {
                    self.error(at, field, "a duration must be longer than zero");
                    default
                }
                Err(e) => {
                    self.error(
                        at,
                        field,
                        format!("{t:?} is not a duration like \"30s\", \"72h\" or \"7d\" ({e})"),
                    );
                    default
                }
            },
        }
    }

    fn secret(
        &mut self,
        at: At<'_>,
        field: &str,
        env: Option<String>,
        file: Option<String>,
    ) -> Option<SecretSource> {
        match (env, file) {
            (Some(e), None) => Some(SecretSource::Env(e)),
            (None, Some(f)) => Some(SecretSource::File(f)),
            (None, None) => {
                self.error(at, field, "name where the secret comes from: `secret_env` or `secret_file` (never the secret itself)");
                None
            }
            (Some(_), Some(_)) => {
                self.error(
                    at,
                    field,
                    "give either `secret_env` or `secret_file`, not both",
                );
                None
            }
        }
    }

    /// The signing secrets' sources: `secret_env` or `secret_file`, each one name or a list
    /// of distinct names (a rotation).
    fn secrets(
        &mut self,
        at: At<'_>,
        field: &str,
        env: Option<Names>,
        file: Option<Names>,
    ) -> Option<Vec<SecretSource>> {
        let (key, names, make): (_, _, fn(String) -> SecretSource) = match (env, file) {
            (Some(Names(e)), None) => ("secret_env", e, SecretSource::Env),
            (None, Some(Names(f))) => ("secret_file", f, SecretSource::File),
            // Neither or both: the single-secret check words that error for both uses.
            (env, file) => {
                self.secret(
                    at,
                    field,
                    env.map(|_| String::new()),
                    file.map(|_| String::new()),
                );
                return None;
            }
        };
        let field = format!("{field}.{key}");
        if names.is_empty() {
            self.error(
                at,
                &field,
                "the list names no secret: give at least one name",
            );
            return None;
        }
        let mut out: Vec<SecretSource> = Vec::with_capacity(names.len());
        for name in names {
            if name.trim().is_empty() {
                self.error(at, &field, "a secret's name is empty");
                return None;
            }
            let source = make(name);
            if out.contains(&source) {
                let (SecretSource::Env(n) | SecretSource::File(n)) = &source;
                self.error(at, &field, format!("{n:?} is named twice"));
                return None;
            }
            out.push(source);
        }
        Some(out)
    }
}

/// Parses and validates a contract. `file` names it in messages.
///
/// Every problem is collected before the contract is refused, each with its line, provider,
/// type and field; a contract is never half-applied. Things allowed but worth a second look
/// land in [`Contract::warnings`].
///
/// ```
/// use oncegate_core::contract::parse;
/// use oncegate_core::strategy::Level;
/// use std::time::Duration;
///
/// let text = r#"
/// [providers.payflow]
/// event_type = "/type"
///
/// [providers.payflow.types."refund.created"]
/// criticality = "critical"
/// resource = "/data/payment_id"
/// discriminants = ["/data/amount", "/data/currency"]
/// horizon = "7d"
///
///   [[providers.payflow.types."refund.created".strategies]]
///   name = "refund-request-ref"
///   version = 1
///   level = "business_ref"
///   fields = ["/data/payment_id", "/data/request_ref"]
/// "#;
/// let contract = parse("oncegate.toml", text).unwrap();
/// let refund = contract.event_type("payflow", "refund.created").unwrap();
/// assert_eq!(refund.operation, "refund.created"); // defaults to the type's name
/// assert_eq!(refund.horizon, Duration::from_secs(7 * 86400));
/// assert_eq!(refund.strategies[0].label(), "refund-request-ref@1");
/// assert_eq!(refund.strategies[0].level, Level::BusinessRef);
/// assert_eq!(contract.settings.lease, Duration::from_secs(30)); // the default lease
///
/// // A level that does not exist is refused with where it is and what would be valid.
/// let errors = parse("oncegate.toml", &text.replace("business_ref", "bizref")).unwrap_err();
/// let error = &errors.0[0];
/// assert_eq!(error.line, Some(11));
/// assert_eq!(error.event_type.as_deref(), Some("refund.created"));
/// assert_eq!(error.field.as_deref(), Some("strategies[0].level"));
/// assert!(error.message.contains("use provider_id, business_ref, semantic or fingerprint"));
/// ```
pub fn parse(file: &str, text: &str) -> Result<Contract, ContractErrors> {
    let raw: RawContract = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| {
            text[..s.start.min(text.len())]
                .bytes()
                .filter(|b| *b == b'\n')
                .count()
                + 1
        });
        ContractErrors(vec![ContractError {
            file: file.to_owned(),
            line,
            provider: None,
            event_type: None,
            field: None,
            message: e.message().trim().to_owned(),
        }])
    })?;
    let mut c = Checker {
        file,
        text,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let settings = settings(&mut c, raw.settings);
    let mut providers = BTreeMap::new();
    // name@version → (definition, where first seen), to refuse one label with two meanings.
    let mut labels: HashMap<(String, u32), (Strategy, String)> = HashMap::new();
    for (name, raw_provider) in raw.providers {
        let line = c.line_of(raw_provider.span().start);
        if let Some(p) = provider(
            &mut c,
            &name,
            line,
            raw_provider.into_inner(),
            &settings,
            &mut labels,
        ) {
            providers.insert(name, p);
        }
    }
    if c.errors.is_empty() {
        Ok(Contract {
            source: file.to_owned(),
            settings,
            environments: raw.environments,
            providers,
            warnings: c.warnings,
        })
    } else {
        Err(ContractErrors(c.errors))
    }
}

fn settings(c: &mut Checker<'_>, raw: RawSettings) -> Settings {
    let d = Settings::default();
    let at = At {
        line: None,
        provider: None,
        event_type: None,
    };
    let s = Settings {
        lease: c.duration(at, "settings.lease", raw.lease.as_deref(), d.lease),
        horizon: c.duration(at, "settings.horizon", raw.horizon.as_deref(), d.horizon),
        payload_retention: c.duration(
            at,
            "settings.payload_retention",
            raw.payload_retention.as_deref(),
            d.payload_retention,
        ),
        proof_retention: c.duration(
            at,
            "settings.proof_retention",
            raw.proof_retention.as_deref(),
            d.proof_retention,
        ),
        max_body_bytes: raw.max_body_bytes.unwrap_or(d.max_body_bytes),
        max_depth: raw.max_depth.unwrap_or(d.max_depth),
        breaker_threshold: raw.breaker_threshold.unwrap_or(d.breaker_threshold),
        breaker_min_sample: raw.breaker_min_sample.unwrap_or(d.breaker_min_sample),
        store: raw.store,
    };
    if !(0.0..=1.0).contains(&s.breaker_threshold) {
        c.error(
            at,
            "settings.breaker_threshold",
            "must be a share between 0 and 1 (0.005 is 0.5 %)",
        );
    }
    // Dropping and writing a parsed tree recurse once per level, so the depth limit is also
    // what keeps a hostile body from exhausting the stack.
    if s.max_depth > 1000 {
        c.error(
            at,
            "settings.max_depth",
            "must be at most 1000 (128 is the default)",
        );
    }
    if s.max_depth == 0 || s.max_body_bytes == 0 {
        c.error(
            at,
            "settings",
            "max_depth and max_body_bytes must be above zero",
        );
    }
    if s.proof_retention < s.payload_retention {
        c.error(
            at,
            "settings.proof_retention",
            "proofs must outlive payloads: proof_retention is shorter than payload_retention",
        );
    }
    s
}

fn provider(
    c: &mut Checker<'_>,
    name: &str,
    line: usize,
    raw: RawProvider,
    settings: &Settings,
    labels: &mut HashMap<(String, u32), (Strategy, String)>,
) -> Option<Provider> {
    let at = At {
        line: Some(line),
        provider: Some(name),
        event_type: None,
    };
    let errors_before = c.errors.len();
    let event_type = match (raw.event_type, raw.event_type_header) {
        (Some(p), None) => c
            .pointer(at, "event_type", &p)
            .map(EventTypeSource::Pointer),
        (None, Some(h)) => Some(EventTypeSource::Header(h.to_ascii_lowercase())),
        _ => {
            c.error(at, "event_type", "say where the event type is: `event_type = \"/json/pointer\"` or `event_type_header = \"name\"`, exactly one");
            None
        }
    };
    let signature = raw.signature.and_then(|s| signature(c, at, s));
    let provider_verify = raw.verify.and_then(|v| verify::verifier(c, at, v));
    let provider_forward = raw.forward.clone().and_then(|f| forward::forward(c, at, f));
    let mut types = BTreeMap::new();
    for (type_name, raw_type) in raw.types {
        let line = c.line_of(raw_type.span().start);
        let at = At {
            line: Some(line),
            provider: Some(name),
            event_type: Some(&type_name),
        };
        let mut raw_type = raw_type.into_inner();
        let own_forward = raw_type.forward.take();
        let type_forward = match (own_forward, &raw.forward) {
            (None, _) => provider_forward.clone(),
            // The provider's table was checked above: a type whose own table cannot be
            // completed is reported once, under the type.
            (Some(own), base) => {
                let merged = own.over(&base.clone().unwrap_or_default());
                forward::forward(c, at, merged)
            }
        };
        if let Some(t) = event_type_def(c, at, name, &type_name, raw_type, settings, labels) {
            let mut t = t;
            if t.verify.is_none() {
                t.verify = provider_verify.clone();
            }
            t.forward = type_forward;
            types.insert(type_name, t);
        }
    }
    if types.is_empty() && c.errors.len() == errors_before {
        c.warnings.push(format!("provider {name:?} declares no event type: all its deliveries will go to reconciliation"));
    }
    Some(Provider {
        name: name.to_owned(),
        event_type: event_type?,
        delivery_id_header: raw.delivery_id_header.map(|h| h.to_ascii_lowercase()),
        signature,
        types,
        forward: provider_forward,
    })
}

fn signature(c: &mut Checker<'_>, at: At<'_>, raw: RawSignature) -> Option<Signature> {
    let errors_before = c.errors.len();
    let secrets = c.secrets(at, "signature", raw.secret_env, raw.secret_file);
    let name = raw.scheme.as_str();
    if !Scheme::NAMES.contains(&name) {
        let valid = Scheme::NAMES.map(|n| format!("{n:?}")).join(", ");
        c.error(
            at,
            "signature.scheme",
            format!("{name:?} is not a signature scheme: use one of {valid}"),
        );
        return None;
    }
    // A field the scheme does not read is refused rather than ignored: a `header` left on a
    // preset would otherwise look like it is honoured while another header is checked.
    let mut misplaced = |field: &str, set: bool, only: &str| {
        if set {
            c.error(
                at,
                &format!("signature.{field}"),
                format!("the {name:?} scheme has a fixed format and takes no `{field}`; `{field}` is only for {only}"),
            );
        }
    };
    let generic = "\"hmac-sha256\"";
    if name != "hmac-sha256" {
        misplaced("encoding", raw.encoding.is_some(), generic);
        misplaced("prefix", raw.prefix.is_some(), generic);
        misplaced("timestamp_header", raw.timestamp_header.is_some(), generic);
        if name != "stripe" {
            misplaced(
                "header",
                raw.header.is_some(),
                "\"stripe\" (its format under another header name) and \"hmac-sha256\"",
            );
        }
    }
    if matches!(name, "github" | "shopify") && raw.tolerance.is_some() {
        c.error(
            at,
            "signature.tolerance",
            format!("the {name:?} scheme signs no timestamp, so there is no `tolerance` to set"),
        );
    }
    let tolerance = c.duration(
        at,
        "signature.tolerance",
        raw.tolerance.as_deref(),
        Duration::from_secs(300),
    );
    let scheme = match name {
        "standard-webhooks" => Scheme::StandardWebhooks { tolerance },
        "stripe" => Scheme::Stripe {
            header: raw
                .header
                .map_or_else(|| "stripe-signature".to_owned(), |h| h.to_ascii_lowercase()),
            tolerance,
        },
        "paddle" => Scheme::Paddle { tolerance },
        "slack" => Scheme::Slack { tolerance },
        "github" => Scheme::Github,
        "shopify" => Scheme::Shopify,
        _ => {
            let Some(header) = raw.header else {
                c.error(
                    at,
                    "signature.header",
                    "hmac-sha256 needs the header that carries the signature",
                );
                return None;
            };
            let encoding = match raw.encoding.as_deref().unwrap_or("hex") {
                "hex" => Encoding::Hex,
                "base64" => Encoding::Base64,
                other => {
                    c.error(
                        at,
                        "signature.encoding",
                        format!("{other:?} is not an encoding: use \"hex\" or \"base64\""),
                    );
                    return None;
                }
            };
            Scheme::HmacSha256 {
                header: header.to_ascii_lowercase(),
                encoding,
                prefix: raw.prefix,
                timestamp_header: raw.timestamp_header.map(|h| h.to_ascii_lowercase()),
                tolerance,
            }
        }
    };
    if c.errors.len() != errors_before {
        return None;
    }
    Some(Signature {
        scheme,
        secrets: secrets?,
    })
}

fn declared(c: &mut Checker<'_>, at: At<'_>, field: &str, raw: Vec<RawDeclared>) -> Vec<Declared> {
    let mut out = Vec::new();
    for (i, d) in raw.into_iter().enumerate() {
        let name = format!("{field}[{i}]");
        let why = d.why.map(|w| w.trim().to_owned()).unwrap_or_default();
        if why.is_empty() {
            c.error(
                at,
                &name,
                format!(
                    "declaring {:?} needs a `why`: the written reason this field may be treated so",
                    d.field
                ),
            );
        }
        if let Some(pointer) = c.pointer(at, &name, &d.field) {
            if pointer.is_root() {
                c.error(at, &name, "the whole document cannot be declared here");
            }
            out.push(Declared { pointer, why });
        }
    }
    out
}

fn normalizations(
    c: &mut Checker<'_>,
    at: At<'_>,
    field: &str,
    ops: &[String],
) -> Vec<Normalization> {
    let mut out = Vec::new();
    for op in ops {
        match Normalization::parse(op) {
            Some(n) => out.push(n),
            None => c.error(
                at,
                field,
                format!("{op:?} is not a normalization: use trim, lowercase, uppercase or utc"),
            ),
        }
    }
    out
}

fn event_type_def(
    c: &mut Checker<'_>,
    at: At<'_>,
    provider: &str,
    name: &str,
    raw: RawType,
    settings: &Settings,
    labels: &mut HashMap<(String, u32), (Strategy, String)>,
) -> Option<EventType> {
    let errors_before = c.errors.len();
    let criticality = match raw.criticality.as_deref() {
        Some(s) => Criticality::parse(s).or_else(|| {
            c.error(
                at,
                "criticality",
                format!("{s:?} is not a criticality: use \"reversible\" or \"critical\""),
            );
            None
        }),
        None => {
            c.error(
                at,
                "criticality",
                "say what a duplicate or a loss costs: \"reversible\" or \"critical\"",
            );
            None
        }
    };
    let resource = raw
        .resource
        .as_deref()
        .and_then(|r| c.pointer(at, "resource", r));
    let discriminants: Vec<Pointer> = raw
        .discriminants
        .iter()
        .enumerate()
        .filter_map(|(i, d)| c.pointer(at, &format!("discriminants[{i}]"), d))
        .collect();
    let volatile_reviewed = raw.volatile.is_some();
    let volatile = declared(c, at, "volatile", raw.volatile.unwrap_or_default());
    let unordered = declared(c, at, "unordered", raw.unordered);
    let mut normalize = Vec::new();
    for (i, n) in raw.normalize.iter().enumerate() {
        let field = format!("normalize[{i}]");
        if let Some(p) = c.pointer(at, &field, &n.field) {
            let ops = normalizations(c, at, &field, &n.ops);
            normalize.push((p, ops));
        }
    }
    let sensitive: Vec<Pointer> = raw
        .sensitive
        .iter()
        .enumerate()
        .filter_map(|(i, s)| c.pointer(at, &format!("sensitive[{i}]"), s))
        .collect();
    for d in &discriminants {
        if volatile.iter().any(|v| &v.pointer == d) {
            c.error(at, "discriminants", format!("{d} is declared volatile and a discriminant: a field that changes between retries cannot tell two operations apart"));
        }
    }
    for u in &unordered {
        if volatile.iter().any(|v| v.pointer == u.pointer) {
            c.error(
                at,
                "unordered",
                format!("{} is declared both volatile and unordered", u.pointer),
            );
        }
    }
    let horizon = c.duration(at, "horizon", raw.horizon.as_deref(), settings.horizon);
    let authority = raw
        .authority
        .and_then(|a| authority(c, at, a, resource.is_some()));
    let verify = raw.verify.and_then(|v| verify::verifier(c, at, v));

    let mut strategies: Vec<Strategy> = Vec::new();
    let mut shadow: Vec<Strategy> = Vec::new();
    if raw.strategies.is_empty() {
        c.error(
            at,
            "strategies",
            "a type needs at least one strategy to make its effect key",
        );
    }
    // Shadows are read exactly as strategies are (same shape, same checks, same global
    // name+version consistency); they only land in their own list.
    let listed = raw
        .strategies
        .into_iter()
        .enumerate()
        .map(|(i, s)| ("strategies", i, s))
        .chain(
            raw.shadow
                .into_iter()
                .enumerate()
                .map(|(i, s)| ("shadow", i, s)),
        );
    for (list, i, spanned) in listed {
        let line = c.line_of(spanned.span().start);
        let sat = At {
            line: Some(line),
            ..at
        };
        let field = format!("{list}[{i}]");
        let rs = spanned.into_inner();
        let Some(level) = Level::parse(&rs.level) else {
            c.error(
                sat,
                &format!("{field}.level"),
                format!(
                    "{:?} is not a level: use provider_id, business_ref, semantic or fingerprint",
                    rs.level
                ),
            );
            continue;
        };
        let confidence = match rs.confidence.as_deref() {
            None => level.default_confidence(),
            Some(s) => match Confidence::parse(s) {
                Some(conf) => conf,
                None => {
                    c.error(
                        sat,
                        &format!("{field}.confidence"),
                        format!("{s:?} is not a confidence: use strong, medium or weak"),
                    );
                    continue;
                }
            },
        };
        let scope = match rs.scope.as_deref() {
            None | Some("type") => ScopeKind::Type,
            Some("operation") => ScopeKind::Operation,
            Some(s) => {
                c.error(
                    sat,
                    &format!("{field}.scope"),
                    format!("{s:?} is not a scope: use \"type\" or \"operation\""),
                );
                continue;
            }
        };
        let mut fields = Vec::new();
        for (j, f) in rs.fields.iter().enumerate() {
            let fname = format!("{field}.fields[{j}]");
            if let Some(pointer) = c.pointer(sat, &fname, f) {
                let ops = rs
                    .normalize
                    .get(f)
                    .map(|ops| normalizations(c, sat, &format!("{field}.normalize"), ops))
                    .unwrap_or_default();
                fields.push(Field {
                    pointer,
                    normalize: ops,
                });
            }
        }
        for key in rs.normalize.keys() {
            if !rs.fields.contains(key) {
                c.error(
                    sat,
                    &format!("{field}.normalize"),
                    format!("{key} is normalized but is not one of the strategy's fields"),
                );
            }
        }
        if rs.version == 0 {
            c.error(sat, &format!("{field}.version"), "versions start at 1");
        }
        if level != Level::Fingerprint && fields.is_empty() && rs.fields.is_empty() {
            c.error(
                sat,
                &format!("{field}.fields"),
                format!("a {level} strategy needs the fields that make its key"),
            );
        }
        if level == Level::Fingerprint {
            if !volatile_reviewed {
                c.error(sat, &field, "a fingerprint strategy needs the type's volatile fields reviewed: declare `volatile = [...]` (an empty list if none, on purpose)");
            }
            if confidence == Confidence::Strong {
                c.error(sat, &format!("{field}.confidence"), "a fingerprint cannot be strong: two legitimate operations can have identical bodies");
            }
        }
        if let Some(prev) = strategies
            .iter()
            .chain(&shadow)
            .find(|s| s.name == rs.name && s.version == rs.version)
        {
            let _ = prev;
            c.error(
                sat,
                &format!("{field}.name"),
                format!(
                    "{}@{} appears twice in this type's hierarchy",
                    rs.name, rs.version
                ),
            );
            continue;
        }
        let strategy = Strategy {
            name: rs.name.clone(),
            version: rs.version,
            level,
            fields,
            confidence,
            horizon: c.duration(
                sat,
                &format!("{field}.horizon"),
                rs.horizon.as_deref(),
                horizon,
            ),
            scope,
        };
        let here = format!("{provider}/{name}");
        match labels.get(&(rs.name.clone(), rs.version)) {
            Some((existing, there)) if !same_definition(existing, &strategy) => {
                c.error(
                    sat,
                    &format!("{field}.name"),
                    format!(
                        "{} is already defined differently in {there}: a new definition needs a new version, so old keys are never reinterpreted",
                        strategy.label()
                    ),
                );
            }
            Some(_) => {}
            None => {
                labels.insert((rs.name.clone(), rs.version), (strategy.clone(), here));
            }
        }
        if list == "shadow" {
            shadow.push(strategy);
        } else {
            strategies.push(strategy);
        }
    }

    let criticality = criticality?;
    if let Some(last) = strategies.last() {
        if criticality == Criticality::Critical
            && last.level == Level::Fingerprint
            && last.confidence == Confidence::Weak
            && authority.is_none()
        {
            c.warnings.push(format!(
                "{}:{}: provider {provider:?}, type {name:?}: the critical type's last resort is a weak fingerprint ({}) and no authority is configured: every fingerprint match will wait for a person",
                c.file,
                at.line.unwrap_or(0),
                last.label()
            ));
        }
    }
    if c.errors.len() != errors_before {
        return None;
    }
    Some(EventType {
        name: name.to_owned(),
        provider: provider.to_owned(),
        criticality,
        operation: raw.operation.unwrap_or_else(|| name.to_owned()),
        resource,
        discriminants,
        volatile,
        volatile_reviewed,
        unordered,
        normalize,
        sensitive,
        durable: raw.durable,
        horizon,
        authority,
        verify,
        forward: None,
        strategies,
        shadow,
        line: at.line.unwrap_or(0),
    })
}

/// Two strategies with one label are the same if everything but the horizon agrees: the
/// horizon says how long the index remembers, not what the key means.
fn same_definition(a: &Strategy, b: &Strategy) -> bool {
    a.level == b.level && a.fields == b.fields && a.confidence == b.confidence && a.scope == b.scope
}

/// Whether the host of a URL (given without its scheme) is a loopback address: 127.0.0.0/8,
/// `::1` or `localhost` (RFC 6761 keeps `localhost` and its subdomains on the machine itself).
/// Pure text: no name is resolved.
fn is_loopback(after_scheme: &str) -> bool {
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    // Userinfo (`user:pass@`) comes before the host.
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}

fn authority(
    c: &mut Checker<'_>,
    at: At<'_>,
    raw: RawAuthority,
    has_resource: bool,
) -> Option<Authority> {
    let before = c.errors.len();
    // Every hole in the URL must be one we know how to fill.
    let mut rest = raw.url.as_str();
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            c.error(at, "authority.url", "an opening '{' has no closing '}'");
            break;
        };
        let hole = &rest[open + 1..open + close];
        match hole {
            "env" | "tenant" | "provider" => {}
            "resource" if has_resource => {}
            "resource" => c.error(at, "authority.url", "{resource} is used but the type declares no `resource`"),
            h if h.starts_with('/') => {
                c.pointer(at, "authority.url", h);
            }
            h => c.error(at, "authority.url", format!("{{{h}}} is not a known hole: use {{resource}}, {{env}}, {{tenant}}, {{provider}} or {{/json/pointer}}")),
        }
        rest = &rest[open + close + 1..];
    }
    if !(raw.url.starts_with("http://") || raw.url.starts_with("https://")) {
        c.error(at, "authority.url", "must be an http:// or https:// URL");
    }
    if let Some(rest) = raw.url.strip_prefix("http://") {
        if !is_loopback(rest) {
            c.warn(at, format!(
                "the authority {} is plain http:// on a host that is not loopback: its answers and its auth header travel unencrypted and unauthenticated; use https://",
                raw.url
            ));
        }
    }
    match raw.ca_file.as_deref() {
        Some("") => c.error(
            at,
            "authority.ca_file",
            "must name a PEM file of CA certificates",
        ),
        // A CA for a plain-HTTP authority would never be used: the contract says something
        // it does not mean.
        Some(_) if !raw.url.starts_with("https://") => {
            c.error(at, "authority.ca_file", "is only used for an https:// URL")
        }
        _ => {}
    }
    let auth_secret = match (&raw.auth_header, raw.auth_secret_env, raw.auth_secret_file) {
        (None, None, None) => None,
        (Some(_), env, file) => c.secret(at, "authority", env, file),
        (None, _, _) => {
            c.error(
                at,
                "authority.auth_header",
                "a secret is named but no header to send it in",
            );
            None
        }
    };
    let sweep_window = raw.sweep_window.as_deref().map(|w| {
        c.duration(
            at,
            "authority.sweep_window",
            Some(w),
            Duration::from_secs(86400),
        )
    });
    let operations = c.pointer(at, "authority.operations", &raw.operations);
    let reference = c.pointer(at, "authority.reference", &raw.reference);
    let mut fields = Vec::new();
    for (ours, theirs) in &raw.fields {
        if let (Some(a), Some(b)) = (
            c.pointer(at, "authority.fields", ours),
            c.pointer(at, "authority.fields", theirs),
        ) {
            fields.push((a, b));
        }
    }
    if c.errors.len() != before {
        return None;
    }
    Some(Authority {
        url: raw.url,
        auth_header: raw.auth_header,
        auth_secret,
        operations: operations?,
        reference: reference?,
        fields,
        sweep_window,
        ca_file: raw.ca_file,
    })
}
