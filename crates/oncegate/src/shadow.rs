//! Shadow strategies on live traffic: each delivery of a type that declares `[[…shadow]]`
//! entries is also keyed by every shadow, looked up in the shadows' own index, and run through
//! the same decision matrix — never acting. Where a shadow would have decided otherwise, the
//! proof says so (`shadow`), a metric counts it and the store keeps it for the report, so a new
//! strategy version shows what it would change before it is cut over.

use oncegate_core::contract::EventType;
use oncegate_core::identity::{self, Origin};
use oncegate_core::ids::DeliveryId;
use oncegate_core::json;
use oncegate_core::matrix::{self, Action, Keyed, Prior, Situation, TransportMatch};
use oncegate_store::{KeyScope, ShadowDisagreement, ShadowObservation};
use time::OffsetDateTime;

use crate::details::ShadowVerdict;
use crate::gate::{to_time, Gate};

/// The verdict of every shadow of the type, recording each shadow key in the shadows' index.
/// A store error only loses the shadow's opinion on this delivery: it is logged, never allowed
/// to fail or slow the real decision further.
pub(crate) async fn verdicts(
    gate: &Gate,
    t: &EventType,
    r: &crate::reception::Reception,
    doc: &json::Value,
    event_type: &str,
    delivery: &DeliveryId,
    now: OffsetDateTime,
) -> Vec<ShadowVerdict> {
    let mut out = Vec::new();
    let origin = r.origin();
    for (s, id) in identity::shadow_identities(t, origin, doc, &r.headers, gate.salt()) {
        let label = s.label();
        let Some(k) = id.effect else {
            let missing = id
                .skipped
                .iter()
                .map(|s| s.why.clone())
                .collect::<Vec<_>>()
                .join("; ");
            let d = matrix::decide(&Situation::NoKey {
                criticality: t.criticality,
                missing,
            });
            out.push(ShadowVerdict {
                strategy: label,
                level: s.level.as_str().to_owned(),
                confidence: None,
                key: None,
                action: d.action.as_str().to_owned(),
                reason: d.reason,
                reference_delivery_id: None,
            });
            continue;
        };
        let discriminants: std::collections::BTreeMap<String, String> = id
            .discriminants
            .iter()
            .filter_map(|(f, v)| v.clone().map(|v| (f.clone(), v)))
            .collect();
        let observation = ShadowObservation {
            tenant: origin.tenant.to_owned(),
            provider: origin.provider.to_owned(),
            env: origin.env.to_owned(),
            event_type: event_type.to_owned(),
            strategy: k.strategy.clone(),
            version: k.version,
            key: k.key.clone(),
            scope: KeyScope::of(&k),
            delivery: delivery.clone(),
            discriminants,
            expires_at: (!t.durable).then(|| now + to_time(k.horizon)),
            now,
        };
        let prior = match gate.store().shadow_observe(&observation).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(strategy = %label, error = %e, "a shadow strategy could not read its index");
                continue;
            }
        };
        let (prior_state, differences, reference) = match &prior {
            None => (Prior::None, Vec::new(), None),
            Some(p) => {
                let existing: Vec<(String, Option<String>)> = p
                    .discriminants
                    .iter()
                    .map(|(f, v)| (f.clone(), Some(v.clone())))
                    .collect();
                (
                    // The shadow index knows keys, not outcomes: a match reads as applied.
                    Prior::Completed,
                    identity::differences(&existing, &id.discriminants),
                    Some(p.first_delivery.to_string()),
                )
            }
        };
        let d = matrix::decide(&Situation::Identified {
            criticality: t.criticality,
            authority: t.authority.is_some(),
            breaker_open: false,
            transport: TransportMatch::None,
            key: Keyed {
                confidence: k.confidence,
                prior: prior_state,
                differences,
            },
        });
        out.push(ShadowVerdict {
            strategy: label,
            level: k.level.as_str().to_owned(),
            confidence: Some(k.confidence.as_str().to_owned()),
            key: Some(k.key),
            action: d.action.as_str().to_owned(),
            reason: d.reason,
            reference_delivery_id: reference,
        });
    }
    out
}

/// Counts and records the disagreements of one decided delivery.
pub(crate) async fn settle(
    gate: &Gate,
    origin: Origin<'_>,
    event_type: &str,
    delivery: &DeliveryId,
    actual: Action,
    verdicts: &[ShadowVerdict],
    now: OffsetDateTime,
) -> Vec<ShadowVerdict> {
    let differ = crate::details::differing(verdicts, actual.as_str());
    for v in &differ {
        gate.metrics()
            .shadow
            .disagreement(origin.provider, origin.env, event_type, &v.strategy);
        let (name, version) = v
            .strategy
            .rsplit_once('@')
            .map(|(n, v)| (n.to_owned(), v.parse().unwrap_or(0)))
            .unwrap_or_else(|| (v.strategy.clone(), 0));
        let recorded = gate
            .store()
            .shadow_disagreement(&ShadowDisagreement {
                delivery: delivery.clone(),
                tenant: origin.tenant.to_owned(),
                provider: origin.provider.to_owned(),
                env: origin.env.to_owned(),
                event_type: event_type.to_owned(),
                strategy: name,
                version,
                shadow_action: v.action.clone(),
                actual_action: actual.as_str().to_owned(),
                at: now,
            })
            .await;
        if let Err(e) = recorded {
            tracing::warn!(strategy = %v.strategy, error = %e, "a shadow disagreement could not be recorded");
        }
    }
    differ
}
