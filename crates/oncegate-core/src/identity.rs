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

mod normalized;
#[cfg(test)]
mod read_in_place;

pub use normalized::normalized;
use normalized::Normalized;

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
fn material(head: &[Option<&str>], pairs: Option<&[(&str, &str)]>) -> String {
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
    // Each field's form, kept apart only where the proof shows something else (a keyed hash
    // cut short, a fingerprint's digest); otherwise the form is what `used` shows.
    let mut forms: Vec<Option<String>> = Vec::new();
    let mut used = Vec::new();
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
            forms.push(Some(form));
        }
    } else {
        for f in &s.fields {
            let label = f.source.label();
            let read: Cow<'_, Value> = match &f.source {
                Source::Body(p) => Cow::Borrowed(
                    meaningful(doc.get(t, p)).map_err(|what| format!("field {p} is {what}"))?,
                ),
                Source::Header(name) => {
                    let v = header_value(headers, name);
                    meaningful(v.as_ref()).map_err(|what| format!("header {name} is {what}"))?;
                    Cow::Owned(v.expect("a meaningful value is present"))
                }
            };
            let v = if f.normalize.is_empty() {
                read
            } else {
                let mut v = read.into_owned();
                for op in &f.normalize {
                    op.apply(&mut v)
                        .map_err(|e| format!("field {label} could not be normalized: {e}"))?;
                }
                Cow::Owned(v)
            };
            if let Some(text) = v.as_str().filter(|x| s.placeholders.iter().any(|p| p == x)) {
                return Err(format!(
                    "field {label} holds {text:?}, a placeholder the provider's test tools reuse, not an id"
                ));
            }
            let sensitive = f.source.pointer().is_some_and(|p| t.is_sensitive(p));
            if sensitive {
                let form = mask(salt, &to_key_form(&v));
                // Enough of the keyed hash to investigate, never the value.
                let shown = format!("•••• ({})", &form[..form.len().min(17)]);
                used.push(UsedField {
                    pointer: label,
                    shown,
                });
                forms.push(Some(form));
            } else {
                used.push(UsedField {
                    pointer: label,
                    shown: to_key_form(&v),
                });
                forms.push(None);
            }
        }
    }
    let parts: Vec<(&str, &str)> = used
        .iter()
        .zip(&forms)
        .map(|(u, form)| (u.pointer.as_str(), form.as_deref().unwrap_or(&u.shown)))
        .collect();
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
    fn as_value(head: &[Option<&str>], pairs: Option<&[(&str, &str)]>) -> Value {
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
        let pairs_sets: [&[(&str, &str)]; 3] = [
            &[],
            &[("/a", "1")],
            &[("/a", texts[2]), (texts[3], texts[4])],
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
mod pinned_keys {
    use super::*;
    use crate::contract::parse;
    use crate::json::{parse as parse_json, Limits};

    const CONTRACT: &str = r#"
[providers.p]
event_type = "/type"

[providers.p.types."t"]
criticality = "critical"
resource = "/data/payment_id"
discriminants = ["/data/amount"]
sensitive = ["/data/email"]
volatile = [{ field = "/sent_at", why = "differs between sends" }]
normalize = [{ field = "/data/at", ops = ["utc"] }]
  [[providers.p.types."t".strategies]]
  name = "fields"
  version = 3
  level = "business_ref"
  fields = ["/data/id", "/data/email", "header:X-Ref", "/data/at", "/data/code"]
  normalize = { "/data/code" = ["trim", "lowercase"] }

[providers.p.types."f"]
criticality = "critical"
sensitive = ["/data/email"]
volatile = []
  [[providers.p.types."f".strategies]]
  name = "everything"
  version = 1
  level = "fingerprint"
  fields = []
"#;

    /// A stored effect is found again only if the same delivery makes the same key in every
    /// later version: these keys were made by an earlier build and must never change.
    #[test]
    fn keys_made_by_earlier_builds_are_made_again() {
        let contract = parse("c.toml", CONTRACT).unwrap();
        let origin = Origin {
            tenant: "acme",
            provider: "p",
            env: "live",
        };
        let body = r#"{"type":"t","sent_at":"x","data":{"payment_id":"pay_1","amount":1500,
            "id":"r1","email":"a@example.com","at":"2026-03-05T17:00:00+01:00","code":" AbC "}}"#;
        let doc = parse_json(body.as_bytes(), &Limits::default()).unwrap();
        let headers = [("x-ref".to_owned(), " ref-9 ".to_owned())];
        let t = contract.event_type("p", "t").unwrap();
        let made = identify(t, origin, &doc, &headers, b"pinned-salt");
        let key = made.effect.expect("a key");
        let shown: Vec<(&str, &str)> = key
            .fields
            .iter()
            .map(|f| (f.pointer.as_str(), f.shown.as_str()))
            .collect();
        assert_eq!(
            key.key,
            "90b6f89e2a0327332f384e48743d3da297597407aa46d8e21af089cc3a9d231e"
        );
        assert_eq!(
            shown,
            [
                ("/data/id", "\"r1\""),
                ("/data/email", "•••• (hmac:02af87e4342b)"),
                ("header:x-ref", "\"ref-9\""),
                ("/data/at", "\"2026-03-05T16:00:00Z\""),
                ("/data/code", "\"abc\""),
            ]
        );
        let f = contract.event_type("p", "f").unwrap();
        let whole = identify(f, origin, &doc, &headers, b"pinned-salt");
        let whole = whole.effect.expect("a key");
        assert_eq!(
            whole.key,
            "d2e309e022dd2c0e9f7a36435be9c8d75f1b128e89511402aa2e85bcc1de0dd6"
        );
        assert_eq!(whole.fields[0].shown, "sha256:bb658f47c6158077");
    }
}
