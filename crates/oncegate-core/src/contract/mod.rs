//! The contract file (TOML): which providers and event types oncegate knows, and for each type
//! what must happen once, within which scope, for how long and with what confidence.
//!
//! The text is parsed once into validated types. Every error names the file, the line, the
//! provider, the type and the field; a contract with any error is refused whole, never
//! half-applied. Reading the file is the caller's job: this module takes its text.

use crate::matrix::{Confidence, Criticality};
use crate::pointer::Pointer;
use crate::strategy::{Field, Level, Normalization, ScopeKind, Source, Strategy};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

mod check;
mod event_type;
mod forward;
mod raw;
mod verify;
pub use check::parse;
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
    /// When one request carries several notifications (`batch`): where they are and what the
    /// provider expects in reply. Every pointer of the provider's types (and `event_type`) is
    /// then read inside one item. `None`: one request, one delivery.
    pub batch: Option<crate::batch::Batch>,
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
/// The presets (`stripe`, `paddle`, `slack`, `github`, `shopify`, `square`, `adyen`) are fixed
/// formats;
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
    /// Square: `x-square-hmacsha256-signature: <base64>` over the notification URL followed by
    /// the body (no timestamp): the URL the subscription was registered with is signed too.
    Square {
        /// The notification URL exactly as registered with Square (`url`, required).
        url: String,
    },
    /// Adyen classic notifications: no header. Each `NotificationRequestItem` carries
    /// `additionalData.hmacSignature`, the base64 HMAC-SHA-256 under the hex-decoded key of
    /// `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`
    /// (an absent field is empty). Every item of the request must verify.
    Adyen,
}

impl Scheme {
    /// Every valid `scheme` value, as the contract spells it.
    pub const NAMES: [&'static str; 9] = [
        "standard-webhooks",
        "hmac-sha256",
        "stripe",
        "paddle",
        "slack",
        "github",
        "shopify",
        "square",
        "adyen",
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
            Scheme::Square { .. } => "square",
            Scheme::Adyen => "adyen",
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
            Scheme::HmacSha256 { .. }
            | Scheme::Github
            | Scheme::Shopify
            | Scheme::Square { .. }
            | Scheme::Adyen => None,
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
            Scheme::Stripe { .. }
            | Scheme::Paddle { .. }
            | Scheme::Github
            | Scheme::Shopify
            | Scheme::Square { .. }
            | Scheme::Adyen => None,
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
    /// The written reason for the type's choices (`why`): which field names the resource,
    /// which amount is the discriminant and in which unit. Shown by `oncegate check`; it does
    /// not change any key.
    pub why: String,
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
