//! Conformance of the shadow index and disagreements (schema v4): the first delivery of a
//! shadow key is remembered with its discriminants, later ones see it until it expires, and
//! disagreements are recorded once and counted per type.

use std::collections::BTreeMap;
use std::sync::Arc;

use oncegate_core::ids::DeliveryId;
use oncegate_store::{NewReception, ShadowDisagreement, ShadowObservation, Store, TenantFilter};
use time::{Duration, OffsetDateTime};

use crate::harness::Backend;

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

async fn delivery(store: &Arc<Store>, at: OffsetDateTime) -> DeliveryId {
    store
        .journal(NewReception {
            tenant: "acme".to_owned(),
            provider: "payflow".to_owned(),
            env: "live".to_owned(),
            event_type: Some("refund.created".to_owned()),
            received_at: at,
            size: 2,
            body_sha256: "body".to_owned(),
            headers_json: "{}".to_owned(),
            payload: None,
            transport_key: None,
            correlation_id: None,
        })
        .await
        .unwrap()
}

fn observation(d: &DeliveryId, amount: &str, at: OffsetDateTime) -> ShadowObservation {
    ShadowObservation {
        tenant: "acme".to_owned(),
        provider: "payflow".to_owned(),
        env: "live".to_owned(),
        event_type: "refund.created".to_owned(),
        strategy: "refund-amount".to_owned(),
        version: 1,
        key: "k".to_owned(),
        scope: Default::default(),
        delivery: d.clone(),
        discriminants: BTreeMap::from([("/data/amount".to_owned(), amount.to_owned())]),
        expires_at: Some(at + Duration::hours(1)),
        now: at,
    }
}

pub async fn a_shadow_key_remembers_its_first_delivery_until_it_expires(b: &Backend) {
    let store: Arc<Store> = b.open().await;
    let first = delivery(&store, t0()).await;
    assert_eq!(
        store
            .shadow_observe(&observation(&first, "1500", t0()))
            .await
            .unwrap(),
        None
    );
    let later = t0() + Duration::minutes(5);
    let second = delivery(&store, later).await;
    let prior = store
        .shadow_observe(&observation(&second, "1600", later))
        .await
        .unwrap()
        .expect("the key is held");
    assert_eq!(prior.first_delivery, first);
    assert_eq!(prior.discriminants["/data/amount"], "1500");
    // Past the shadow's horizon the key is free again, and the newcomer takes it.
    let past = t0() + Duration::hours(2);
    let third = delivery(&store, past).await;
    assert_eq!(
        store
            .shadow_observe(&observation(&third, "1500", past))
            .await
            .unwrap(),
        None
    );
    let after = store
        .shadow_observe(&observation(&first, "1500", past + Duration::seconds(1)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.first_delivery, third);

    let d = ShadowDisagreement {
        delivery: second.clone(),
        tenant: "acme".to_owned(),
        provider: "payflow".to_owned(),
        env: "live".to_owned(),
        event_type: "refund.created".to_owned(),
        strategy: "refund-amount".to_owned(),
        version: 1,
        shadow_action: "quarantine".to_owned(),
        actual_action: "reconcile".to_owned(),
        at: later,
    };
    store.shadow_disagreement(&d).await.unwrap();
    store.shadow_disagreement(&d).await.unwrap();
    let counts = store.shadow_counts(t0()).await.unwrap();
    assert_eq!(counts.len(), 1);
    assert_eq!(counts[0].strategy, "refund-amount@1");
    assert_eq!(
        counts[0].disagreements, 1,
        "recorded once per delivery and shadow"
    );
    let report = store.report(&TenantFilter::All, t0()).await.unwrap();
    assert_eq!(report.total.shadow_disagreements, 1);
}
