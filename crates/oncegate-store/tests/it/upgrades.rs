//! Stores of an earlier schema version carried over by opening them with this one: the rows
//! they hold keep what they meant.

use oncegate_core::ids::{DeliveryId, EffectId};
use oncegate_store::{EffectState, TenantFilter};
use time::{Duration, OffsetDateTime};

use crate::harness::Backend;

/// Schema v12 on a PostgreSQL store of v11 holding a reserved effect whose lease expired before
/// the upgrade, one settled without a lease, and a released one: the sweeper's first pass
/// still releases the expired reservation, the settled effect is given a lease (so only the
/// released one is without), the claimers find the released one, and no index of `effects`
/// names `state` any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_12_keeps_expired_leases_and_released_effects_found() {
    let b = Backend::postgres().await;
    oncegate_store::testing::pg_migrate_through(&b.url, 11).await;
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    let t0 = OffsetDateTime::from_unix_timestamp(1_760_000_000).expect("a time");
    let ms = |t: OffsetDateTime| (t.unix_timestamp_nanos() / 1_000_000) as i64;
    let id = |n: u128| EffectId::from_u128((ms(t0) as u128) << 80 | n);
    let (expired, settled, released) = (id(1), id(2), id(3));
    let delivery = DeliveryId::from_u128((ms(t0) as u128) << 80);
    for (effect, state, lease) in [
        (&expired, "reserved", Some(ms(t0) + 30_000)),
        (&settled, "completed", None),
        (&released, "released", None),
    ] {
        admin
            .execute(
                "INSERT INTO effects (id, tenant, provider, env, durable, state, fencing_token, lease_until, \
                 discriminants, first_delivery, created_at, updated_at, resource, critical) \
                 VALUES ($1, 'acme', 'payflow', 'live', false, $2, 1, $3, '{}', $5, $4, $4, 'pay_1', false)",
                &[&effect.as_str(), &state, &lease, &ms(t0), &delivery.as_str()],
            )
            .await
            .expect("an effect of version 11");
    }
    let store = b.open().await;
    let indexes: Vec<String> = admin
        .query(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'effects' ORDER BY indexname",
            &[],
        )
        .await
        .expect("the indexes")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(indexes.iter().all(|i| !i.contains("state")), "{indexes:#?}");
    let settled_lease: Option<i64> = admin
        .query_one(
            "SELECT lease_until FROM effects WHERE id = $1",
            &[&settled.as_str()],
        )
        .await
        .expect("the settled effect")
        .get(0);
    assert_eq!(settled_lease, Some(ms(t0)));
    // Long after the upgrade, the expired reservation is still read by the first pass.
    let later = t0 + Duration::days(30);
    assert_eq!(
        store.expire_leases(later).await.expect("a pass"),
        vec![expired.clone()]
    );
    let mut claimed = Vec::new();
    while let Some(c) = store
        .claim("w", &TenantFilter::All, Duration::seconds(30), later)
        .await
        .expect("a claim")
    {
        claimed.push(c.effect);
    }
    claimed.sort();
    assert_eq!(claimed, vec![expired.clone(), released.clone()]);
    let e = store.effect(&settled).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Completed);
    drop(store);
    drop(admin);
    b.cleanup().await;
}
