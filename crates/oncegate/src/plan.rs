//! What identification makes of a delivery before the store is asked: the matrix's question
//! (a key whose prior the store supplies, or a situation that does not depend on the store),
//! the store's key, the proof's details, and the journal entry.

use std::collections::BTreeMap;

use oncegate_core::contract::{EventType, EventTypeSource, Provider, Scheme};
use oncegate_core::identity::{self, Identity};
use oncegate_core::json;
use oncegate_core::matrix::{self, Confidence, Criticality, Keyed, Situation};
use oncegate_store::{
    EffectKey, Horizon, KeyScope, NewReception, PriorView, StrategyRef, TransportKey,
    TransportStrength,
};

use crate::details::{Details, UsedField};
use crate::gate::to_time;
use crate::reception::Reception;

/// Request headers worth keeping with a delivery: enough to investigate, never a signature or
/// a credential.
const KEPT_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "user-agent",
    "webhook-id",
    "webhook-timestamp",
    "x-request-id",
    "x-correlation-id",
];

/// What the matrix will be asked, decided before the store transaction: either an identified
/// key whose prior the store supplies, or a situation that does not depend on the store.
#[derive(Clone)]
pub(crate) enum Shape {
    Keyed {
        criticality: Criticality,
        authority: bool,
        confidence: Confidence,
    },
    Fixed(Situation),
}

impl Shape {
    pub(crate) fn decide(&self, view: &PriorView) -> matrix::Decision {
        match self {
            Shape::Keyed {
                criticality,
                authority,
                confidence,
            } => matrix::decide(&Situation::Identified {
                criticality: *criticality,
                authority: *authority,
                breaker_open: view.breaker_open,
                transport: view.transport,
                key: Keyed {
                    confidence: *confidence,
                    prior: view.prior,
                    // The store's list, so the proof and the queue item record exactly what
                    // the matrix saw.
                    differences: view.differences.clone(),
                },
            }),
            Shape::Fixed(s) => matrix::decide(s),
        }
    }
}

/// Everything identification produced for one delivery.
pub(crate) struct Plan {
    pub shape: Shape,
    pub key: Option<EffectKey>,
    pub strategy: Option<StrategyRef>,
    pub confidence: Option<Confidence>,
    pub details: Details,
    /// Kept on the effect for the reconciler (the resource the authority is asked about) and
    /// the lease sweeper (critical → verify before retry; reversible → takeover).
    pub resource: Option<String>,
    pub critical: bool,
}

impl Plan {
    pub(crate) fn identified(
        provider: Option<&Provider>,
        t: &EventType,
        r: &Reception,
        doc: &json::Value,
        salt: &[u8],
    ) -> Plan {
        let Identity {
            effect,
            skipped,
            discriminants,
            resource,
            notes,
        } = identity::identify(t, r.origin(), doc, &r.headers, salt);
        // `identify` walks the hierarchy in order and stops at the first key, so the skipped
        // strategies are the first ones of the type's list. The identity is this plan's own:
        // its parts move into the plan and its details, none copied.
        let criticality = Some(t.criticality.as_str().to_owned());
        let Some(k) = effect else {
            let missing = skipped
                .iter()
                .map(|s| format!("{}: {}", s.label(), s.why))
                .collect::<Vec<_>>()
                .join("; ");
            return Plan {
                shape: Shape::Fixed(Situation::NoKey {
                    criticality: t.criticality,
                    missing,
                }),
                key: None,
                strategy: None,
                confidence: None,
                details: Details {
                    skipped,
                    notes,
                    criticality,
                    ..Details::default()
                },
                resource,
                critical: t.criticality == Criticality::Critical,
            };
        };
        let scope = KeyScope::of(&k);
        // An operation-scoped key is one effect for every type declaring the operation: the
        // proof names them, so support can see why a `charge.captured` was ignored after a
        // `payment.succeeded`.
        let shared_by = match (&k.operation, provider) {
            (Some(op), Some(p)) => p
                .types
                .values()
                .filter(|o| &o.operation == op)
                .map(|o| o.name.clone())
                .collect(),
            _ => Vec::new(),
        };
        let details = Details {
            skipped,
            notes,
            criticality,
            scope: Some(k.scope),
            shared_by,
            confidence: Some(k.confidence.as_str().to_owned()),
            fields: k
                .fields
                .into_iter()
                .map(|f| UsedField {
                    pointer: f.pointer,
                    shown: f.shown,
                })
                .collect(),
            ..Details::default()
        };
        let strategy = StrategyRef {
            name: k.strategy,
            version: k.version,
            level: k.level.as_str().to_owned(),
        };
        let key = EffectKey {
            strategy: strategy.clone(),
            value: k.key,
            scope,
            confidence: k.confidence,
            horizon: if t.durable {
                Horizon::Durable
            } else {
                Horizon::For(to_time(k.horizon))
            },
            discriminants: discriminants
                .into_iter()
                .filter_map(|(f, v)| v.map(|v| (f, v)))
                .collect(),
        };
        Plan {
            shape: Shape::Keyed {
                criticality: t.criticality,
                authority: t.authority.is_some(),
                confidence: k.confidence,
            },
            key: Some(key),
            strategy: Some(strategy),
            confidence: Some(k.confidence),
            details,
            resource,
            critical: t.criticality == Criticality::Critical,
        }
    }

    pub(crate) fn no_contract(
        provider: &str,
        provider_known: bool,
        event_type: Option<&str>,
        note: Option<String>,
    ) -> Plan {
        Plan {
            shape: Shape::Fixed(Situation::NoContract {
                provider: provider.to_owned(),
                event_type: event_type.unwrap_or("(unnamed)").to_owned(),
                provider_known,
            }),
            key: None,
            strategy: None,
            confidence: None,
            details: Details {
                notes: note.into_iter().collect(),
                ..Details::default()
            },
            resource: None,
            // Without a contract nothing says the effect is harmless: verify, never re-run.
            critical: true,
        }
    }
}

/// The transport key: the provider's delivery-id header (for Standard Webhooks providers,
/// `webhook-id` when the contract names no header), else the raw body hash.
pub(crate) fn transport_key(r: &Reception, provider: Option<&Provider>) -> TransportKey {
    let id_header = provider.and_then(|p| {
        p.delivery_id_header
            .clone()
            .or_else(|| match p.signature.as_ref().map(|s| &s.scheme) {
                Some(Scheme::StandardWebhooks { .. }) => Some("webhook-id".to_owned()),
                _ => None,
            })
    });
    let id = id_header.as_deref().and_then(|h| r.header_value(h));
    // Only a body kept whole reaches here (a cut one is refused first), so its hash is the
    // hash of these bytes.
    let key = identity::transport_key_of_hash(r.origin(), id, r.body.sha256());
    TransportKey {
        value: key.key,
        strength: if key.strong {
            TransportStrength::Strong
        } else {
            TransportStrength::Weak
        },
    }
}

/// The journal entry of a reception: its origin, size, hash, the headers worth keeping and
/// the payload when it was kept whole.
pub(crate) fn journal_entry(
    r: &Reception,
    received_at: time::OffsetDateTime,
    event_type: Option<String>,
    transport_key: Option<TransportKey>,
    provider: Option<&Provider>,
) -> NewReception {
    // Borrowed: the names are the program's or the contract's, the values the reception's.
    let mut kept: BTreeMap<&str, &str> = BTreeMap::new();
    let event_type_header = provider.and_then(|p| match &p.event_type {
        EventTypeSource::Header(h) => Some(h.to_ascii_lowercase()),
        EventTypeSource::Pointer(_) => None,
    });
    let mut names: Vec<&str> = KEPT_HEADERS.to_vec();
    if let Some(p) = provider {
        names.extend(p.delivery_id_header.as_deref());
        names.extend(event_type_header.as_deref());
        // Headers a strategy keys on (`header:<name>`): a late replay recomputes the key
        // from them. An id, never a MAC or a credential.
        for t in p.types.values() {
            for s in t.strategies.iter().chain(&t.shadow) {
                for f in &s.fields {
                    if let oncegate_core::strategy::Source::Header(h) = &f.source {
                        if !names.contains(&h.as_str()) {
                            names.push(h);
                        }
                    }
                }
            }
        }
        // A scheme's timestamp header carries no MAC, and it explains a stale refusal.
        if let Some(h) = p
            .signature
            .as_ref()
            .and_then(|s| s.scheme.timestamp_header())
        {
            names.push(h);
        }
    }
    for name in names {
        if let Some(v) = r.header_value(name) {
            // At most 256 characters of a value are kept.
            let end = v.char_indices().nth(256).map_or(v.len(), |(at, _)| at);
            kept.insert(name, &v[..end]);
        }
    }
    NewReception {
        tenant: r.tenant.clone(),
        provider: r.provider.clone(),
        env: r.env.clone(),
        event_type,
        received_at,
        size: r.body.size(),
        body_sha256: r.body.sha256().to_owned(),
        headers_json: serde_json::to_string(&kept).expect("headers serialize"),
        payload: r.body.cut_by().is_none().then(|| r.body.bytes().to_vec()),
        transport_key,
        correlation_id: r.correlation_id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The journal keeps only the headers that explain a delivery, each to 256 characters, as a
    /// JSON object sorted by name; a credential is never among them.
    #[test]
    fn the_journal_keeps_the_explaining_headers_cut_to_256_characters() {
        let long: String = "é".repeat(300);
        let r = Reception::new("acme", "payflow", "live", b"{}".to_vec())
            .header("User-Agent", long.clone())
            .header("content-type", "application/json")
            .header("authorization", "Bearer secret-token");
        let entry = journal_entry(&r, time::OffsetDateTime::UNIX_EPOCH, None, None, None);
        let kept: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&entry.headers_json).unwrap();
        let names: Vec<&str> = kept.keys().map(String::as_str).collect();
        assert_eq!(names, ["content-type", "user-agent"]);
        let agent = kept["user-agent"].as_str().unwrap();
        assert_eq!(agent.chars().count(), 256);
        assert!(long.starts_with(agent));
        assert_eq!(kept["content-type"], "application/json");
        assert!(!entry.headers_json.contains("secret-token"));
    }
}
