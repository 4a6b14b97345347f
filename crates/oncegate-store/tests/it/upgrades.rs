//! Stores of an earlier schema version carried over by opening them with this one: the rows
//! they hold keep what they meant.

use oncegate_core::ids::{DeliveryId, EffectId};
use oncegate_core::matrix::Action;
use oncegate_store::{DecideRequest, EffectState, StoreError, TenantFilter};
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

/// Schema v14 on a PostgreSQL store of v13 holding a decided delivery, one not decided, and a
/// proof whose delivery row is gone: each proof reads as it did, from its delivery's row; the
/// undecided delivery is decided once, and a second decision of either is refused, by the
/// store and by the row itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_14_keeps_every_proof_in_its_delivery_row() {
    let b = Backend::postgres().await;
    oncegate_store::testing::pg_migrate_through(&b.url, 13).await;
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    let t0 = OffsetDateTime::from_unix_timestamp(1_760_000_000).expect("a time");
    let ms = (t0.unix_timestamp_nanos() / 1_000_000) as i64;
    let id = |n: u128| DeliveryId::from_u128((ms as u128) << 80 | n);
    let (decided, undecided, orphan) = (id(1), id(2), id(3));
    let effect = EffectId::from_u128((ms as u128) << 80 | 9);
    for d in [&decided, &undecided] {
        admin
            .execute(
                "INSERT INTO deliveries (id, tenant, provider, env, event_type, received_at, size, body_sha256, headers_json) \
                 VALUES ($1, 'acme', 'payflow', 'live', NULL, $2, 10, 'h', '{}')",
                &[&d.as_str(), &ms],
            )
            .await
            .expect("a delivery of version 13");
    }
    for (d, action, effect) in [
        (&decided, "process", Some(effect.as_str())),
        (&orphan, "ignore", None),
    ] {
        admin
            .execute(
                "INSERT INTO proofs (delivery_id, tenant, provider, env, event_type, decided_at, strategy_name, \
                 strategy_version, strategy_level, key_value, confidence, prior, transport, action, layer, reason, flags, \
                 rule, matrix_version, effect_id, differences, details, link_kind) \
                 VALUES ($1, 'acme', 'payflow', 'live', 'payment.captured', $2, 'ref', 2, 'business_ref', 'k1', 'strong', \
                 'none', 'none', $3, NULL, 'why', '[]', 'R1', 1, $4, '[]', '{\"d\":1}', 'reserved')",
                &[&d.as_str(), &(ms + 5), &action, &effect],
            )
            .await
            .expect("a proof of version 13");
    }
    let store = b.open().await;
    let proof = store.proof(&decided).await.unwrap().expect("its proof");
    assert_eq!(proof.action, Action::Process);
    assert_eq!(proof.effect.as_ref(), Some(&effect));
    assert_eq!(proof.event_type.as_deref(), Some("payment.captured"));
    assert_eq!(proof.key.as_deref(), Some("k1"));
    assert_eq!(proof.details_json, r#"{"d":1}"#);
    let entry = store.delivery(&decided).await.unwrap().expect("its entry");
    assert_eq!(entry.event_type.as_deref(), Some("payment.captured"));
    assert!(store.proof(&undecided).await.unwrap().is_none());
    let kept = store
        .proof(&orphan)
        .await
        .unwrap()
        .expect("the orphan proof");
    assert_eq!(kept.action, Action::Ignore);
    let empty = store
        .delivery(&orphan)
        .await
        .unwrap()
        .expect("an entry of its own");
    assert_eq!((empty.size, empty.body_sha256.as_str()), (0, ""));

    let request = |delivery: &DeliveryId| DecideRequest {
        delivery: delivery.clone(),
        event_type: None,
        key: None,
        lease: Duration::seconds(30),
        details_json: "{}".to_owned(),
        now: t0 + Duration::seconds(1),
        resource: None,
        critical: true,
    };
    let first = store
        .decide(request(&undecided), &crate::harness::strong_critical)
        .await
        .expect("decided once");
    let proof = store.proof(&undecided).await.unwrap().expect("its proof");
    assert_eq!(proof.action, first.decision.action);
    for d in [&decided, &undecided] {
        let again = store
            .decide(request(d), &crate::harness::strong_critical)
            .await;
        assert!(
            matches!(again, Err(StoreError::Conflict(_))),
            "{d}: {again:?}"
        );
    }
    // The row itself refuses a second proof, whoever writes it.
    let twice = admin
        .execute(
            "UPDATE deliveries SET decided_at = CASE WHEN decided_at IS NULL THEN 1 END, action = 'ignore' WHERE id = $1",
            &[&decided.as_str()],
        )
        .await
        .expect_err("refused");
    let db = twice.as_db_error().expect("the server's refusal");
    assert_eq!(db.constraint(), Some("deliveries_decided_once"));
    drop(store);
    drop(admin);
    b.cleanup().await;
}
