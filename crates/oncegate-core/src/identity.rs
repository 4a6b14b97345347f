//! Identity: the transport key and the effect key of one delivery, computed from a contract's
//! key hierarchy, with the reason each skipped strategy was skipped.
//!
//! Keys are scoped (tenant, provider, environment, event type or operation, strategy
//! name+version, resource) and hashed with SHA-256 over an unambiguous JCS array, so the same
//! JSON from two providers or two environments never shares a key. Sensitive fields enter keys
//! only through HMAC-SHA-256 under a salt the caller supplies.

use crate::canon::{self, to_key_form};
use crate::contract::{EventType, EventTypeSource, Provider};
use crate::json::Value;
use crate::matrix::{Confidence, Difference, Keyed, Prior, Situation, TransportMatch};
use crate::pointer::Pointer;
use crate::strategy::{Level, ScopeKind, Source, Strategy};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::time::Duration;

/// Version of the key material layout; part of every key, so a layout change never collides.
pub const KEY_LAYOUT: &str = "oncegate-key/1";

/// Where a delivery came from: the scope shared by its keys.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The tenant the delivery was posted for: the outermost part of every key's scope.
    pub tenant: &'a str,
    /// The provider's name, as the contract spells it.
    pub provider: &'a str,
    /// The environment (`live`, `test`…): a provider that reuses ids across environments never
    /// has their deliveries share a key.
    pub env: &'a str,
}

/// The key of the packet itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportKey {
    /// SHA-256, in lower-case hex, of the JCS array `["oncegate-transport/1", tenant,
    /// provider, env, "id" or "body", the delivery id or the body's SHA-256]`.
    pub key: String,
    /// True when made from the provider's delivery-id header; false for the raw-body hash
    /// (two legitimate operations can be byte-identical, so that is only a weak hint).
    pub strong: bool,
    /// What it was made from, for proofs.
    pub source: String,
}

/// A field a strategy used, as a proof may show it (masked when sensitive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsedField {
    /// The field's JSON Pointer, as the contract writes it (`""` for a whole fingerprinted
    /// document).
    pub pointer: String,
    /// Its value as a proof may show it: the key form in clear, `•••• (hmac:…)` with the start
    /// of the keyed hash when the field is sensitive, or `sha256:` and the first 16 hex digits
    /// of a fingerprinted part's hash.
    pub shown: String,
}

/// The effect key made by the first strategy of the hierarchy whose fields were all present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectKey {
    /// SHA-256, in lower-case hex, of the JCS array of [`KEY_LAYOUT`], tenant, provider, env,
    /// scope, strategy name and version, resource (or `null`) and each field's `[pointer, key
    /// form]`: the value the store reserves.
    pub key: String,
    /// The name of the strategy that made the key.
    pub strategy: String,
    /// That strategy's version.
    pub version: u32,
    /// That strategy's level.
    pub level: Level,
    /// That strategy's confidence: how much a match of this key means to the matrix.
    pub confidence: Confidence,
    /// How long the fast dedup index keeps the key (the strategy's horizon); a durable type's
    /// effect identity outlives it.
    pub horizon: Duration,
    /// The scope in words: `tenant/provider/env/type:T[/resource]`, or
    /// `tenant/provider/env/operation:O[/resource]` for an operation-scoped strategy.
    pub scope: String,
    /// The declared operation when the strategy's scope is `operation`: the key is then shared
    /// by every type of the provider that declares this operation (one business effect seen
    /// through several event types), and whoever indexes the key must scope it by this
    /// operation, never by the event type. `None` for a type-scoped key.
    pub operation: Option<String>,
    /// The fields the key was made from, in the strategy's order, as a proof may show them.
    pub fields: Vec<UsedField>,
}

/// A strategy of the hierarchy that did not make the key, and why: the one shape a proof
/// stores, the API and `explain` show and `oncegate key --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Skipped {
    /// The strategy's name.
    pub name: String,
    /// Its version.
    pub version: u32,
    /// Why it made no key, in words (`field /data/request_ref is absent`, `the resource
    /// /data/payment_id is blank`…).
    pub why: String,
}

impl Skipped {
    /// `name@version`, as logs and messages name a strategy.
    pub fn label(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

/// What the contract makes of one parsed delivery of a known type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The effect key, made by the first strategy that could; `None` when none could (the
    /// type's criticality then decides what happens).
    pub effect: Option<EffectKey>,
    /// The strategies before the one that made the key (all of them when none did), in
    /// hierarchy order, each with why it was skipped.
    pub skipped: Vec<Skipped>,
    /// Each discriminant's canonical value (an HMAC when sensitive), `None` when absent.
    pub discriminants: Vec<(String, Option<String>)>,
    /// The resource the type names (masked when sensitive), if declared and present.
    pub resource: Option<String>,
    /// Declared normalizations that could not be applied (the field is then left as sent).
    pub notes: Vec<String>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// SHA-256 of the raw body, as journaled for every reception.
pub fn body_hash(body: &[u8]) -> String {
    sha256_hex(body)
}

/// The keyed hash a sensitive value enters keys and proofs as: `hmac:` and the HMAC-SHA-256 of
/// `value` under `salt`, in lower-case hex. The same value under the same salt always masks
/// the same, so identity and investigation survive without the value in clear.
pub fn mask(salt: &[u8], value: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(salt).expect("HMAC takes a key of any length");
    mac.update(value.as_bytes());
    format!("hmac:{}", hex::encode(mac.finalize().into_bytes()))
}

/// The JCS text of a key's material: an array of strings (`None` is `null`), then, when `pairs`
/// is given, an array of `[name, form]` pairs. Written straight into one buffer, the same bytes
/// `to_jcs` writes for that array as a `Value`, without building the value first (a key is
/// made for every delivery; the test `the_material_is_the_jcs_of_its_value` holds the two equal).
fn material(head: &[Option<&str>], pairs: Option<&[(String, String)]>) -> String {
    let mut out = String::with_capacity(256);
    out.push('[');
    for (i, part) in head.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match part {
            Some(s) => canon::write_string(s, &mut out),
            None => out.push_str("null"),
        }
    }
    if let Some(pairs) = pairs {
        out.push_str(if head.is_empty() { "[" } else { ",[" });
        for (i, (name, form)) in pairs.iter().enumerate() {
            out.push_str(if i > 0 { ",[" } else { "[" });
            canon::write_string(name, &mut out);
            out.push(',');
            canon::write_string(form, &mut out);
            out.push(']');
        }
        out.push(']');
    }
    out.push(']');
    out
}

/// The transport key: the provider's delivery id when it sends one, else the raw body hash.
///
/// A delivery id that is empty or only whitespace counts as none; one with surrounding spaces
/// is trimmed.
///
/// ```
/// use oncegate_core::identity::{transport_key, Origin};
///
/// let live = Origin { tenant: "acme", provider: "shopline", env: "live" };
/// let retry = transport_key(live, Some("dlv-81"), br#"{"attempt":1}"#);
/// let again = transport_key(live, Some("dlv-81"), br#"{"attempt":2}"#);
/// assert!(retry.strong);
/// assert_eq!(retry.key, again.key); // the header names the packet, whatever the body
///
/// // The provider reuses delivery ids across environments: the scope keeps them apart.
/// let sandbox = Origin { env: "test", ..live };
/// assert_ne!(transport_key(sandbox, Some("dlv-81"), b"{}").key, retry.key);
///
/// // No header: the raw body's hash, only a weak hint.
/// let unnamed = transport_key(live, None, br#"{"attempt":1}"#);
/// assert!(!unnamed.strong);
/// assert_eq!(unnamed.source, "raw body SHA-256");
/// ```
pub fn transport_key(origin: Origin<'_>, delivery_id: Option<&str>, body: &[u8]) -> TransportKey {
    transport_key_hashed(origin, delivery_id, || Cow::Owned(body_hash(body)))
}

/// [`transport_key`] for a body whose SHA-256 (hex, as [`body_hash`] writes it) is already
/// known, as it is for every reception once journaled: the body is not read again.
///
/// ```
/// use oncegate_core::identity::{body_hash, transport_key, transport_key_of_hash, Origin};
///
/// let live = Origin { tenant: "acme", provider: "payflow", env: "live" };
/// let body = br#"{"attempt":1}"#;
/// let hash = body_hash(body);
/// assert_eq!(transport_key_of_hash(live, None, &hash), transport_key(live, None, body));
/// assert_eq!(
///     transport_key_of_hash(live, Some("dlv-81"), &hash),
///     transport_key(live, Some("dlv-81"), body),
/// );
/// ```
pub fn transport_key_of_hash(
    origin: Origin<'_>,
    delivery_id: Option<&str>,
    body_sha256: &str,
) -> TransportKey {
    transport_key_hashed(origin, delivery_id, || Cow::Borrowed(body_sha256))
}

/// The key of the delivery id when there is one, else of the body's hash (computed only then).
fn transport_key_hashed<'a>(
    origin: Origin<'_>,
    delivery_id: Option<&'a str>,
    body_sha256: impl FnOnce() -> Cow<'a, str>,
) -> TransportKey {
    let Origin {
        tenant,
        provider,
        env,
    } = origin;
    let (kind, value, strong, source) = match delivery_id.map(str::trim).filter(|id| !id.is_empty())
    {
        Some(id) => ("id", Cow::Borrowed(id), true, "provider delivery id header"),
        None => ("body", body_sha256(), false, "raw body SHA-256"),
    };
    let material = material(
        &[
            Some("oncegate-transport/1"),
            Some(tenant),
            Some(provider),
            Some(env),
            Some(kind),
            Some(&value),
        ],
        None,
    );
    TransportKey {
        key: sha256_hex(material.as_bytes()),
        strong,
        source: source.to_owned(),
    }
}

/// Reads the event type a delivery declares, from the header or the place in the body the
/// provider's contract names. `Err` holds a sentence saying what was missing or of the wrong
/// kind (a header is matched regardless of case; an empty value counts as none).
pub fn event_type_of(
    provider: &Provider,
    headers: &[(String, String)],
    doc: &Value,
) -> Result<String, String> {
    match &provider.event_type {
        EventTypeSource::Header(name) => headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("the delivery has no {name} header naming its event type")),
        EventTypeSource::Pointer(p) => match p.get(doc) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(other) => Err(format!(
                "the event type at {p} is a {}, not a string",
                other.kind_name()
            )),
            None => Err(format!("the delivery has no event type at {p}")),
        },
    }
}

/// The body after the type's declared normalizations: volatile fields removed, declared
/// strings rewritten, declared unordered arrays sorted. Nothing undeclared is touched.
pub fn normalized(t: &EventType, doc: &Value) -> (Value, Vec<String>) {
    let mut doc = doc.clone();
    let mut notes = Vec::new();
    for v in &t.volatile {
        v.pointer.remove(&mut doc);
    }
    for (p, ops) in &t.normalize {
        if let Some(value) = p.get_mut(&mut doc) {
            for op in ops {
                if let Err(e) = op.apply(value) {
                    notes.push(format!("{p}: {e}"));
                    break;
                }
            }
        }
    }
    // Deepest first, so an unordered array inside another is sorted before its parent is.
    let mut unordered: Vec<&Pointer> = t.unordered.iter().map(|u| &u.pointer).collect();
    unordered.sort_by_key(|p| std::cmp::Reverse(p.as_str().matches('/').count()));
    for p in unordered {
        match p.get_mut(&mut doc) {
            Some(Value::Array(items)) => {
                let mut keyed: Vec<(String, Value)> =
                    items.drain(..).map(|v| (to_key_form(&v), v)).collect();
                keyed.sort_by(|a, b| a.0.cmp(&b.0));
                items.extend(keyed.into_iter().map(|(_, v)| v));
            }
            Some(other) => notes.push(format!(
                "{p}: declared unordered but is a {}, left as sent",
                other.kind_name()
            )),
            None => {}
        }
    }
    (doc, notes)
}

/// The body after the type's declared normalizations (`normalized`), made whole only when a
/// read needs it. Identification runs for every delivery, and most keys read a few fields,
/// never the whole body, so a type whose declarations each touch one place of their own reads
/// the body as received:
/// - a volatile field that is an object's member is absent, and any other place holds what it
///   held (removing a member moves nothing else);
/// - a declared normalization's place holds its own value rewritten, made from that value
///   alone (with the same notes, in the same order, as the whole copy's).
///
/// Only a read of a place that encloses one of those, or lies inside a rewritten one, or of the
/// whole body (a fingerprint), makes the normalized copy; so does every read of a type whose
/// declarations overlap (a volatile field inside a rewritten place, a rewritten place inside
/// another), removes an array's element or sorts an unordered array.
struct Normalized<'a> {
    received: &'a Value,
    /// The volatile members present in the body, when reading it as received is exact.
    removed: Option<Vec<&'a Pointer>>,
    /// Each declared normalization's place present in the body, with its value rewritten, when
    /// reading the body as received is exact.
    rewritten: Vec<(&'a Pointer, Value)>,
    copy: std::cell::OnceCell<Value>,
    notes: Vec<String>,
}

impl<'a> Normalized<'a> {
    fn of(t: &'a EventType, doc: &'a Value) -> Normalized<'a> {
        let copy = std::cell::OnceCell::new();
        if let Some((removed, rewritten, notes)) = Self::in_place(t, doc) {
            return Normalized {
                received: doc,
                removed: Some(removed),
                rewritten,
                copy,
                notes,
            };
        }
        let (normalized, notes) = normalized(t, doc);
        let _ = copy.set(normalized);
        Normalized {
            received: doc,
            removed: None,
            rewritten: Vec::new(),
            copy,
            notes,
        }
    }

    /// The removed members, the rewritten places and the notes, when the body read in place
    /// (with those) reads as the normalized copy does; `None` when it would not.
    #[allow(clippy::type_complexity)]
    fn in_place(
        t: &'a EventType,
        doc: &Value,
    ) -> Option<(Vec<&'a Pointer>, Vec<(&'a Pointer, Value)>, Vec<String>)> {
        if !t.unordered.is_empty() {
            return None;
        }
        let mut removed = Vec::new();
        for v in &t.volatile {
            match v.pointer.removal(doc) {
                Some(true) => removed.push(&v.pointer),
                // An array's element: the elements after it move down one place.
                Some(false) => return None,
                None => {}
            }
        }
        let mut rewritten = Vec::new();
        let mut notes = Vec::new();
        for (i, (p, ops)) in t.normalize.iter().enumerate() {
            // The volatile fields go first: a place inside one is gone before it is rewritten.
            if removed.iter().any(|r| p.is_within(r)) {
                continue;
            }
            let overlaps = removed.iter().any(|r| r.is_within(p))
                || t.normalize
                    .iter()
                    .enumerate()
                    .any(|(j, (q, _))| i != j && (q.is_within(p) || p.is_within(q)));
            if overlaps {
                return None;
            }
            let Some(value) = p.get(doc) else {
                continue;
            };
            let mut value = value.clone();
            for op in ops {
                if let Err(e) = op.apply(&mut value) {
                    notes.push(format!("{p}: {e}"));
                    break;
                }
            }
            rewritten.push((p, value));
        }
        Some((removed, rewritten, notes))
    }

    /// The normalized body, whole.
    fn whole(&self, t: &EventType) -> &Value {
        self.copy.get_or_init(|| normalized(t, self.received).0)
    }

    /// The value at `p` in the normalized body.
    fn get(&self, t: &EventType, p: &Pointer) -> Option<&Value> {
        let Some(removed) = &self.removed else {
            return p.get(self.whole(t));
        };
        if removed.iter().any(|r| p.is_within(r)) {
            return None;
        }
        for (n, value) in &self.rewritten {
            if p.as_str() == n.as_str() {
                return Some(value);
            }
            if p.is_within(n) || n.is_within(p) {
                return p.get(self.whole(t));
            }
        }
        if removed.iter().any(|r| r.is_within(p)) {
            p.get(self.whole(t))
        } else {
            p.get(self.received)
        }
    }
}

/// A present, meaningful value: absent, null and blank strings do not identify anything.
fn meaningful(v: Option<&Value>) -> Result<&Value, &'static str> {
    match v {
        None => Err("absent"),
        Some(Value::Null) => Err("null"),
        Some(Value::String(s)) if s.trim().is_empty() => Err("blank"),
        Some(v) => Ok(v),
    }
}

/// Computes the effect identity of a parsed delivery of a known type: the type's
/// normalizations, then its key hierarchy in order, the first strategy whose fields are all
/// present making the key. `headers` are the request's (name, value) pairs, read by strategy
/// fields written `header:<name>`; `salt` keys the HMAC of sensitive fields.
///
/// ```
/// use oncegate_core::contract::parse;
/// use oncegate_core::identity::{identify, Origin};
/// use oncegate_core::json::{self, Limits};
/// use oncegate_core::strategy::Level;
///
/// let contract = parse("oncegate.toml", r#"
/// [providers.payflow]
/// event_type = "/type"
///
/// [providers.payflow.types."refund.created"]
/// criticality = "critical"
/// resource = "/data/payment_id"
/// discriminants = ["/data/amount"]
/// volatile = [{ field = "/sent_at", why = "set at each send" }]
///
///   [[providers.payflow.types."refund.created".strategies]]
///   name = "refund-request-ref"
///   version = 1
///   level = "business_ref"
///   fields = ["/data/payment_id", "/data/request_ref"]
///
///   [[providers.payflow.types."refund.created".strategies]]
///   name = "refund-fingerprint"
///   version = 1
///   level = "fingerprint"
/// "#).unwrap();
/// let refund = contract.event_type("payflow", "refund.created").unwrap();
/// let origin = Origin { tenant: "acme", provider: "payflow", env: "live" };
/// let read = |body: &str| json::parse(body.as_bytes(), &Limits::default()).unwrap();
///
/// // No request reference: the hierarchy falls to the fingerprint, and says why.
/// let first = identify(refund, origin, &read(
///     r#"{"type":"refund.created","sent_at":"10:00","data":{"payment_id":"pay_1","amount":1500}}"#,
/// ), &[], b"salt");
/// let key = first.effect.as_ref().unwrap();
/// assert_eq!((key.strategy.as_str(), key.level), ("refund-fingerprint", Level::Fingerprint));
/// assert_eq!(key.scope, "acme/payflow/live/type:refund.created/pay_1");
/// assert_eq!(first.skipped[0].why, "field /data/request_ref is absent");
/// assert_eq!(first.discriminants, [("/data/amount".to_owned(), Some("1500".to_owned()))]);
///
/// // A retry differs only in a volatile field: the same key.
/// let retry = identify(refund, origin, &read(
///     r#"{"type":"refund.created","sent_at":"10:05","data":{"payment_id":"pay_1","amount":1500}}"#,
/// ), &[], b"salt");
/// assert_eq!(retry.effect.unwrap().key, key.key);
/// ```
pub fn identify(
    t: &EventType,
    origin: Origin<'_>,
    doc: &Value,
    headers: &[(String, String)],
    salt: &[u8],
) -> Identity {
    identify_with(t, &t.strategies, origin, doc, headers, salt)
}

/// The identity each of the type's shadow strategies would give the delivery, each on its own
/// (a shadow is one strategy observed beside the hierarchy, not a second hierarchy).
pub fn shadow_identities<'t>(
    t: &'t EventType,
    origin: Origin<'_>,
    doc: &Value,
    headers: &[(String, String)],
    salt: &[u8],
) -> Vec<(&'t Strategy, Identity)> {
    t.shadow
        .iter()
        .map(|s| {
            (
                s,
                identify_with(t, std::slice::from_ref(s), origin, doc, headers, salt),
            )
        })
        .collect()
}

fn identify_with(
    t: &EventType,
    strategies: &[Strategy],
    origin: Origin<'_>,
    doc: &Value,
    headers: &[(String, String)],
    salt: &[u8],
) -> Identity {
    let doc = Normalized::of(t, doc);
    let canonical = |p: &Pointer, v: &Value| {
        let form = to_key_form(v);
        if t.is_sensitive(p) {
            mask(salt, &form)
        } else {
            form
        }
    };
    let discriminants = t
        .discriminants
        .iter()
        .map(|p| {
            (
                p.as_str().to_owned(),
                meaningful(doc.get(t, p)).ok().map(|v| canonical(p, v)),
            )
        })
        .collect();
    let resource = match &t.resource {
        None => Ok(None),
        Some(p) => match meaningful(doc.get(t, p)) {
            Ok(Value::String(s)) if !t.is_sensitive(p) => Ok(Some(s.clone())),
            Ok(v) => Ok(Some(canonical(p, v))),
            Err(what) => Err(format!("the resource {p} is {what}")),
        },
    };
    let mut skipped = Vec::new();
    let mut effect = None;
    for s in strategies {
        let made = match &resource {
            Err(why) => Err(why.clone()),
            Ok(resource) => {
                let read = Read {
                    doc: &doc,
                    headers,
                    resource: resource.as_deref(),
                    salt,
                    notes: &doc.notes,
                };
                strategy_key(t, s, origin, &read)
            }
        };
        match made {
            Ok(key) => {
                effect = Some(key);
                break;
            }
            Err(why) => skipped.push(Skipped {
                name: s.name.clone(),
                version: s.version,
                why,
            }),
        }
    }
    Identity {
        effect,
        skipped,
        discriminants,
        resource: resource.ok().flatten(),
        notes: doc.notes,
    }
}

/// What a strategy reads its fields from.
struct Read<'a> {
    doc: &'a Normalized<'a>,
    headers: &'a [(String, String)],
    resource: Option<&'a str>,
    salt: &'a [u8],
    notes: &'a [String],
}

/// The value a header field holds: the first header of that name (regardless of case),
/// trimmed, as a string.
fn header_value(headers: &[(String, String)], name: &str) -> Option<Value> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| Value::String(v.trim().to_owned()))
}

fn strategy_key(
    t: &EventType,
    s: &Strategy,
    origin: Origin<'_>,
    read: &Read<'_>,
) -> Result<EffectKey, String> {
    let Read {
        doc,
        headers,
        resource,
        salt,
        notes,
    } = *read;
    let mut parts: Vec<(String, String)> = Vec::new();
    let mut used = Vec::new();
    let show = |p: &Pointer, form: &str| {
        if t.is_sensitive(p) {
            // Enough of the keyed hash to investigate, never the value.
            format!("•••• ({})", &form[..form.len().min(17)])
        } else {
            form.to_owned()
        }
    };
    if s.level == Level::Fingerprint {
        if let Some(n) = notes.first() {
            return Err(format!(
                "a declared normalization failed ({n}), so the fingerprint would not be stable"
            ));
        }
        // The whole document (or the declared parts), sensitive fields as keyed hashes.
        let mut masked = doc.whole(t).clone();
        for p in &t.sensitive {
            if let Some(v) = p.get_mut(&mut masked) {
                *v = Value::String(mask(salt, &to_key_form(v)));
            }
        }
        let roots: Vec<Pointer> = if s.fields.is_empty() {
            vec![Pointer::parse("").expect("the root pointer parses")]
        } else {
            // The contract refuses a header field in a fingerprint.
            s.fields
                .iter()
                .filter_map(|f| f.source.pointer().cloned())
                .collect()
        };
        for p in &roots {
            let v = meaningful(p.get(&masked)).map_err(|what| format!("field {p} is {what}"))?;
            let form = to_key_form(v);
            used.push(UsedField {
                pointer: p.as_str().to_owned(),
                shown: format!("sha256:{}", &sha256_hex(form.as_bytes())[..16]),
            });
            parts.push((p.as_str().to_owned(), form));
        }
    } else {
        for f in &s.fields {
            let label = f.source.label();
            let mut v = match &f.source {
                Source::Body(p) => meaningful(doc.get(t, p))
                    .map_err(|what| format!("field {p} is {what}"))?
                    .clone(),
                Source::Header(name) => {
                    let v = header_value(headers, name);
                    meaningful(v.as_ref()).map_err(|what| format!("header {name} is {what}"))?;
                    v.expect("a meaningful value is present")
                }
            };
            for op in &f.normalize {
                op.apply(&mut v)
                    .map_err(|e| format!("field {label} could not be normalized: {e}"))?;
            }
            if let Some(text) = v.as_str().filter(|x| s.placeholders.iter().any(|p| p == x)) {
                return Err(format!(
                    "field {label} holds {text:?}, a placeholder the provider's test tools reuse, not an id"
                ));
            }
            let sensitive = f.source.pointer().is_some_and(|p| t.is_sensitive(p));
            let form = if sensitive {
                mask(salt, &to_key_form(&v))
            } else {
                to_key_form(&v)
            };
            let shown = match f.source.pointer() {
                Some(p) => show(p, &form),
                None => form.clone(),
            };
            used.push(UsedField {
                pointer: label.clone(),
                shown,
            });
            parts.push((label, form));
        }
    }
    let scope_name = match s.scope {
        ScopeKind::Type => format!("type:{}", t.name),
        ScopeKind::Operation => format!("operation:{}", t.operation),
    };
    let version = s.version.to_string();
    let material = material(
        &[
            Some(KEY_LAYOUT),
            Some(origin.tenant),
            Some(origin.provider),
            Some(origin.env),
            Some(&scope_name),
            Some(&s.name),
            Some(&version),
            resource,
        ],
        Some(&parts),
    );
    let key = sha256_hex(material.as_bytes());
    let mut scope = format!(
        "{}/{}/{}/{}",
        origin.tenant, origin.provider, origin.env, scope_name
    );
    if let Some(r) = resource {
        scope.push('/');
        scope.push_str(r);
    }
    Ok(EffectKey {
        key,
        strategy: s.name.clone(),
        version: s.version,
        level: s.level,
        confidence: s.confidence,
        horizon: s.horizon,
        scope,
        operation: (s.scope == ScopeKind::Operation).then(|| t.operation.clone()),
        fields: used,
    })
}

/// Discriminants that disagree between a stored effect and an incoming delivery. A field
/// present on one side only is a difference too.
pub fn differences(
    existing: &[(String, Option<String>)],
    incoming: &[(String, Option<String>)],
) -> Vec<Difference> {
    let mut out = Vec::new();
    for (field, new) in incoming {
        let old = existing
            .iter()
            .find(|(f, _)| f == field)
            .and_then(|(_, v)| v.clone());
        if &old != new {
            out.push(Difference {
                field: field.clone(),
                existing: old,
                incoming: new.clone(),
            });
        }
    }
    for (field, old) in existing {
        if old.is_some() && !incoming.iter().any(|(f, _)| f == field) {
            out.push(Difference {
                field: field.clone(),
                existing: old.clone(),
                incoming: None,
            });
        }
    }
    out
}

/// Builds the matrix's input for an identified delivery from what the store found.
pub fn situation(
    t: &EventType,
    identity: &Identity,
    prior: Prior,
    prior_discriminants: &[(String, Option<String>)],
    transport: TransportMatch,
    breaker_open: bool,
) -> Situation {
    let Some(key) = &identity.effect else {
        let missing = identity
            .skipped
            .iter()
            .map(|s| format!("{}: {}", s.label(), s.why))
            .collect::<Vec<_>>()
            .join("; ");
        return Situation::NoKey {
            criticality: t.criticality,
            missing,
        };
    };
    let differences = if prior == Prior::None {
        Vec::new()
    } else {
        differences(prior_discriminants, &identity.discriminants)
    };
    Situation::Identified {
        criticality: t.criticality,
        authority: t.authority.is_some(),
        breaker_open,
        transport,
        key: Keyed {
            confidence: key.confidence,
            prior,
            differences,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canon::to_jcs;

    /// The value `material` stands for: its strings, then its pairs, as one JSON array.
    fn as_value(head: &[Option<&str>], pairs: Option<&[(String, String)]>) -> Value {
        let string = |s: &str| Value::String(s.to_owned());
        let mut items: Vec<Value> = head.iter().map(|h| h.map_or(Value::Null, string)).collect();
        if let Some(pairs) = pairs {
            items.push(Value::Array(
                pairs
                    .iter()
                    .map(|(a, b)| Value::Array(vec![string(a), string(b)]))
                    .collect(),
            ));
        }
        Value::Array(items)
    }

    #[test]
    fn the_material_is_the_jcs_of_its_value() {
        let texts = [
            "",
            "plain",
            "quote \" and backslash \\",
            "control \u{1} \n \t \u{1f}",
            "unicode é 😀 \u{2028}",
            "/data/amount",
        ];
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        let pairs_sets: [&[(String, String)]; 3] = [
            &[],
            &[pair("/a", "1")],
            &[pair("/a", texts[2]), pair(texts[3], texts[4])],
        ];
        for n in 0..texts.len() {
            for with_null in [false, true] {
                let mut head: Vec<Option<&str>> = texts[..n].iter().map(|t| Some(*t)).collect();
                if with_null {
                    head.push(None);
                }
                assert_eq!(material(&head, None), to_jcs(&as_value(&head, None)));
                for pairs in pairs_sets {
                    assert_eq!(
                        material(&head, Some(pairs)),
                        to_jcs(&as_value(&head, Some(pairs))),
                        "head {head:?}, pairs {pairs:?}"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod normalized_tests {
    use super::*;
    use crate::contract::parse;
    use crate::json::{parse as parse_json, Limits};

    const CONTRACT: &str = r#"
[providers.p]
event_type = "/type"

[providers.p.types."members"]
criticality = "critical"
discriminants = ["/data"]
volatile = [
  { field = "/sent_at", why = "differs between sends" },
  { field = "/data/meta/trace", why = "differs between sends" },
]
  [[providers.p.types."members".strategies]]
  name = "by-id"
  version = 1
  level = "business_ref"
  fields = ["/data/id"]

[providers.p.types."element"]
criticality = "critical"
volatile = [{ field = "/items/0", why = "a per-send stamp" }]
  [[providers.p.types."element".strategies]]
  name = "by-item"
  version = 1
  level = "business_ref"
  fields = ["/items/1"]

[providers.p.types."rewritten"]
criticality = "critical"
volatile = [{ field = "/sent_at", why = "differs between sends" }]
unordered = [{ field = "/tags", why = "sent in any order" }]
  [[providers.p.types."rewritten".strategies]]
  name = "by-top-id"
  version = 1
  level = "business_ref"
  fields = ["/id"]

[providers.p.types."dated"]
criticality = "critical"
volatile = [{ field = "/sent_at", why = "differs between sends" }]
normalize = [
  { field = "/data/at", ops = ["utc"] },
  { field = "/data/name", ops = ["trim", "lowercase"] },
  { field = "/items/1", ops = ["trim"] },
]
  [[providers.p.types."dated".strategies]]
  name = "by-at"
  version = 1
  level = "business_ref"
  fields = ["/data/id", "/data/at"]

[providers.p.types."dated-in-volatile"]
criticality = "critical"
volatile = [{ field = "/data/meta", why = "differs between sends" }]
normalize = [{ field = "/data/meta/at", ops = ["utc"] }, { field = "/data/at", ops = ["utc"] }]
  [[providers.p.types."dated-in-volatile".strategies]]
  name = "by-id"
  version = 1
  level = "business_ref"
  fields = ["/data/id"]

[providers.p.types."volatile-in-rewritten"]
criticality = "critical"
volatile = [{ field = "/data/meta/trace", why = "differs between sends" }]
normalize = [{ field = "/data/meta", ops = ["trim"] }]
  [[providers.p.types."volatile-in-rewritten".strategies]]
  name = "by-id"
  version = 1
  level = "business_ref"
  fields = ["/data/id"]

[providers.p.types."nested-rewrites"]
criticality = "critical"
normalize = [{ field = "/data", ops = ["trim"] }, { field = "/data/at", ops = ["utc"] }]
  [[providers.p.types."nested-rewrites".strategies]]
  name = "by-id"
  version = 1
  level = "business_ref"
  fields = ["/data/id"]
"#;

    const DOCS: [&str; 5] = [
        r#"{"type":"x","sent_at":"t1","id":"a","tags":["b","a"],"items":["stamp","id-1","id-2"],
            "data":{"id":"d1","meta":{"trace":"t","kept":1},"amount":5}}"#,
        r#"{"type":"x","id":"a","data":{"id":"d1","meta":"not an object"}}"#,
        r#"{"type":"x","sent_at":{"nested":true},"items":[],"data":null}"#,
        r#"{"type":"x","sent_at":"t2","items":["s"," id-1 "],"data":{"id":"d1","at":"2026-03-05T17:00:00+01:00",
            "name":" Ada ","meta":{"at":"2026-03-05T17:00:00+01:00","trace":"t"}}}"#,
        r#"{"type":"x","data":{"id":"d1","at":"not a date","name":7,"meta":{"at":12}}}"#,
    ];

    const PLACES: [&str; 19] = [
        "",
        "/data/at",
        "/data/name",
        "/data/meta/at",
        "/items/2",
        "/type",
        "/sent_at",
        "/sent_at/nested",
        "/sent_atx",
        "/data",
        "/data/id",
        "/data/meta",
        "/data/meta/trace",
        "/data/meta/kept",
        "/items",
        "/items/0",
        "/items/1",
        "/tags",
        "/tags/0",
    ];

    /// Every place reads in the view what it holds in the normalized copy, for a type whose
    /// volatile fields are members (read as received), one that removes an array element and
    /// one that rewrites (both read from the copy).
    #[test]
    fn the_view_reads_what_the_normalized_body_holds() {
        let contract = parse("c.toml", CONTRACT).unwrap();
        for name in [
            "members",
            "element",
            "rewritten",
            "dated",
            "dated-in-volatile",
            "volatile-in-rewritten",
            "nested-rewrites",
        ] {
            let t = contract.event_type("p", name).unwrap();
            for text in DOCS {
                let doc = parse_json(text.as_bytes(), &Limits::default()).unwrap();
                let (copy, notes) = normalized(t, &doc);
                let view = Normalized::of(t, &doc);
                assert_eq!(view.notes, notes);
                for place in PLACES {
                    let p = Pointer::parse(place).unwrap();
                    assert_eq!(view.get(t, &p), p.get(&copy), "{name}: {place} in {text}");
                }
                assert_eq!(view.whole(t), &copy);
            }
        }
        // The members' type reads as received: no copy is made for its key's fields.
        let t = contract.event_type("p", "members").unwrap();
        let doc = parse_json(DOCS[0].as_bytes(), &Limits::default()).unwrap();
        let view = Normalized::of(t, &doc);
        view.get(t, &Pointer::parse("/data/id").unwrap());
        view.get(t, &Pointer::parse("/sent_at").unwrap());
        assert!(view.copy.get().is_none());
        // A place enclosing a volatile field needs the copy.
        view.get(t, &Pointer::parse("/data").unwrap());
        assert!(view.copy.get().is_some());

        // A rewritten place reads its own rewritten value, with no copy of the body.
        let t = contract.event_type("p", "dated").unwrap();
        let doc = parse_json(DOCS[3].as_bytes(), &Limits::default()).unwrap();
        let view = Normalized::of(t, &doc);
        let at = view.get(t, &Pointer::parse("/data/at").unwrap());
        assert_eq!(at.and_then(Value::as_str), Some("2026-03-05T16:00:00Z"));
        let name = view.get(t, &Pointer::parse("/data/name").unwrap());
        assert_eq!(name.and_then(Value::as_str), Some("ada"));
        view.get(t, &Pointer::parse("/data/id").unwrap());
        assert!(view.copy.get().is_none());
        // A place enclosing a rewritten one needs the copy.
        view.get(t, &Pointer::parse("/data").unwrap());
        assert!(view.copy.get().is_some());
        // Overlapping declarations read from the copy from the start.
        for name in ["volatile-in-rewritten", "nested-rewrites"] {
            let t = contract.event_type("p", name).unwrap();
            let view = Normalized::of(t, &doc);
            assert!(view.removed.is_none(), "{name}");
        }
    }

    /// A date sent with an offset and the same instant sent in UTC make one key, and a failed
    /// rewrite is noted once, as the whole copy notes it.
    #[test]
    fn a_rewritten_field_keys_as_its_normal_form() {
        let contract = parse("c.toml", CONTRACT).unwrap();
        let t = contract.event_type("p", "dated").unwrap();
        let origin = Origin {
            tenant: "t",
            provider: "p",
            env: "live",
        };
        let key = |text: &str| {
            let doc = parse_json(text.as_bytes(), &Limits::default()).unwrap();
            identify(t, origin, &doc, &[], b"salt")
        };
        let offset = key(
            r#"{"type":"x","sent_at":"a","data":{"id":"d1","at":"2026-03-05T17:00:00+01:00"}}"#,
        );
        let utc =
            key(r#"{"type":"x","sent_at":"b","data":{"id":"d1","at":"2026-03-05T16:00:00Z"}}"#);
        let later = key(r#"{"type":"x","data":{"id":"d1","at":"2026-03-05T17:00:00Z"}}"#);
        let offset_key = offset.effect.expect("a key").key;
        assert_eq!(offset_key, utc.effect.expect("a key").key);
        assert_ne!(offset_key, later.effect.expect("a key").key);
        let failed = key(r#"{"type":"x","data":{"id":"d1","at":"not a date","name":" Ada "}}"#);
        assert_eq!(failed.notes.len(), 1, "{:?}", failed.notes);
        assert!(
            failed.notes[0].starts_with("/data/at: "),
            "{:?}",
            failed.notes
        );
    }
}
