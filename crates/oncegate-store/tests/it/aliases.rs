//! Conformance of key aliases (schema v4): a key recorded for an existing effect by
//! `oncegate migrate` is found by the decision when no effect holds the key itself, an alias
//! never takes a key an effect already holds, and recording twice records once.

use std::sync::Arc;

use oncegate_core::ids::DeliveryId;
use oncegate_core::matrix::{self, Confidence};
use oncegate_store::{
    DecideRequest, EffectKey, Horizon, NewAlias, NewReception, Store, StrategyRef,
};
use time::{Duration, OffsetDateTime};

use crate::harness::{strong_critical, Backend};

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

fn reception(at: OffsetDateTime, payload: Option<&[u8]>) -> NewReception {
    NewReception {
        tenant: "acme".to_owned(),
        provider: "payflow".to_owned(),
        env: "live".to_owned(),
        event_type: Some("payment.captured".to_owned()),
        received_at: at,
        size: 2,
        body_sha256: "body".to_owned(),
        headers_json: "{}".to_owned(),
        payload: payload.map(<[u8]>::to_vec),
        transport_key: None,
        correlation_id: None,
    }
}

fn request(delivery: &DeliveryId, version: u32, key: &str, at: OffsetDateTime) -> DecideRequest {
    DecideRequest {
        delivery: delivery.clone(),
        event_type: Some("payment.captured".to_owned()),
        key: Some(EffectKey {
            strategy: StrategyRef {
                name: "capture-id".to_owned(),
                version,
                level: "business_ref".to_owned(),
            },
            value: key.to_owned(),
            scope: Default::default(),
            confidence: Confidence::Strong,
            horizon: Horizon::Durable,
            discriminants: Default::default(),
        }),
        lease: Duration::seconds(30),
        details_json: "{}".to_owned(),
        now: at,
        resource: None,
        critical: true,
    }
}

fn alias(effect: &oncegate_core::ids::EffectId, key: &str) -> NewAlias {
    NewAlias {
        effect: effect.clone(),
        tenant: "acme".to_owned(),
        provider: "payflow".to_owned(),
        env: "live".to_owned(),
        event_type: Some("payment.captured".to_owned()),
        strategy: "capture-id".to_owned(),
        version: 2,
        key: key.to_owned(),
        scope: Default::default(),
        now: t0(),
    }
}

pub async fn an_aliased_key_finds_the_old_effect(b: &Backend) {
    let store: Arc<Store> = b.open().await;
    let first = store
        .journal(reception(t0(), Some(b"{\"v\":1}")))
        .await
        .unwrap();
    let made = store
        .decide(request(&first, 1, "k-v1", t0()), &strong_critical)
        .await
        .unwrap();
    assert_eq!(made.decision.action, matrix::Action::Process);
    let effect = made.effect.clone().expect("process makes an effect");

    let sources = store.migration_sources().await.unwrap();
    assert_eq!(sources.len(), 1);
    assert_eq!(sources[0].effect, effect);
    assert_eq!(sources[0].first_delivery, first);
    assert_eq!(sources[0].strategy, Some(("capture-id".to_owned(), 1)));
    assert_eq!(sources[0].payload.as_deref(), Some(&b"{\"v\":1}"[..]));

    assert!(store.record_alias(&alias(&effect, "k-v2")).await.unwrap());
    assert!(
        !store.record_alias(&alias(&effect, "k-v2")).await.unwrap(),
        "recorded once"
    );

    // A retry keyed by v2 finds the v1 effect: the strong key matches, so it is ignored.
    let retry = store
        .journal(reception(t0() + Duration::seconds(5), Some(b"{}")))
        .await
        .unwrap();
    let o = store
        .decide(
            request(&retry, 2, "k-v2", t0() + Duration::seconds(6)),
            &strong_critical,
        )
        .await
        .unwrap();
    assert_eq!(o.decision.action, matrix::Action::Ignore, "{o:?}");
    assert_eq!(o.effect.as_ref(), Some(&effect));

    // Another v2 key with no alias is a new effect: aliases never widen a key.
    let other = store
        .journal(reception(t0() + Duration::seconds(7), Some(b"{}")))
        .await
        .unwrap();
    let o = store
        .decide(
            request(&other, 2, "k-other", t0() + Duration::seconds(8)),
            &strong_critical,
        )
        .await
        .unwrap();
    assert_eq!(o.decision.action, matrix::Action::Process);
    // And that key, now held by its own effect, can no longer be aliased to another one.
    assert!(!store
        .record_alias(&alias(&effect, "k-other"))
        .await
        .unwrap());
}
