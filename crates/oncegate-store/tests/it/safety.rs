//! Conformance of the safety-net storage (schema v3) and of two report/proof details: the
//! collision breaker's window, its one-time opening under concurrency and its operator close;
//! report rows per tenant; a transport-layer ignore pointing at its effect's first delivery.

use std::sync::Arc;

use oncegate_core::matrix::{self, Confidence};
use oncegate_store::{
    BreakerRule, BreakerScope, BreakerState, BreakerTally, DecideRequest, EffectKey, Horizon,
    NewReception, PurgePolicy, Store, StoreError, StrategyRef, TenantFilter, TransportKey,
    TransportStrength,
};
use time::{Duration, OffsetDateTime};

use crate::harness::{strong_critical, Backend};

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

fn scope(strategy: &str) -> BreakerScope {
    BreakerScope {
        provider: "stripe".into(),
        env: "live".into(),
        event_type: "refund.created".into(),
        strategy: strategy.into(),
        version: 1,
    }
}

/// More than a fifth of at least five matches opens the breaker.
fn rule() -> BreakerRule {
    BreakerRule {
        threshold: 0.2,
        min_sample: 5,
        window: Duration::hours(24),
    }
}

pub async fn the_breaker_opens_once_past_the_threshold_and_an_operator_closes_it(b: &Backend) {
    let store = b.open().await;
    let s = scope("refund_ref");
    let fresh = store.breaker(&s, &rule(), t0()).await.unwrap();
    assert_eq!((fresh.state, fresh.matches), (BreakerState::Closed, 0));

    // One collision in four matches: under the sample.
    for (i, collision) in [true, false, false, false].into_iter().enumerate() {
        let r = store
            .breaker_record(
                &s,
                &BreakerTally::one(collision),
                &rule(),
                t0() + Duration::seconds(i as i64),
            )
            .await
            .unwrap();
        assert!(!r.opened_now && !r.breaker.is_open(), "{r:?}");
    }
    // The fifth match makes the sample: 1 of 5 is exactly 20 %, not more, so it stays closed.
    let r = store
        .breaker_record(
            &s,
            &BreakerTally::one(false),
            &rule(),
            t0() + Duration::seconds(5),
        )
        .await
        .unwrap();
    assert_eq!((r.breaker.matches, r.breaker.collisions), (5, 1));
    assert!(!r.breaker.is_open());

    // Eight recorders race collisions in: whichever lands first trips it (2 of 6), and exactly
    // one of them is told it opened it.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (store, s) = (store.clone(), s.clone());
        tasks.push(tokio::spawn(async move {
            store
                .breaker_record(
                    &s,
                    &BreakerTally::one(true),
                    &rule(),
                    t0() + Duration::seconds(10 + i),
                )
                .await
                .unwrap()
        }));
    }
    let mut opened = 0;
    for t in tasks {
        if t.await.unwrap().opened_now {
            opened += 1;
        }
    }
    assert_eq!(opened, 1, "exactly one recorder opens the breaker");
    let open = store
        .breaker(&s, &rule(), t0() + Duration::seconds(11))
        .await
        .unwrap();
    assert!(open.is_open());
    assert!(
        open.reason.as_deref().unwrap().contains("refund_ref@1"),
        "{open:?}"
    );
    assert!(open.opened_at.is_some());

    // Another strategy version is another breaker.
    let v2 = BreakerScope {
        version: 2,
        ..s.clone()
    };
    assert!(!store.breaker(&v2, &rule(), t0()).await.unwrap().is_open());

    // It stays open however many clean matches follow, until an operator closes it.
    for i in 0..20 {
        store
            .breaker_record(
                &s,
                &BreakerTally::one(false),
                &rule(),
                t0() + Duration::seconds(20 + i),
            )
            .await
            .unwrap();
    }
    assert!(store
        .breaker(&s, &rule(), t0() + Duration::minutes(1))
        .await
        .unwrap()
        .is_open());
    let listed = store
        .breakers(&rule(), t0() + Duration::minutes(1))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].is_open());

    let closed = store
        .breaker_close(
            &s,
            "checked: a provider correction",
            "sam",
            t0() + Duration::minutes(2),
        )
        .await
        .unwrap();
    assert_eq!(closed.state, BreakerState::Closed);
    assert_eq!(closed.closed_by.as_deref(), Some("sam"));
    assert_eq!(
        closed.note.as_deref(),
        Some("checked: a provider correction")
    );
    let after = store
        .breaker(&s, &rule(), t0() + Duration::minutes(2))
        .await
        .unwrap();
    assert_eq!(after.matches, 0, "closing clears the window");
    assert!(matches!(
        store
            .breaker_close(&s, "again", "sam", t0() + Duration::minutes(3))
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.breaker_close(&v2, "never", "sam", t0()).await,
        Err(StoreError::NotFound { .. })
    ));
}

/// A tally recorded in one write opens the breaker exactly when its matches recorded one by one
/// would have: here at its second match (2 collisions of 5), although the tally ends at 2 of 10,
/// under the threshold.
pub async fn a_tally_trips_the_breaker_where_one_of_its_matches_would(b: &Backend) {
    let store = b.open().await;
    let s = scope("refund_ref");
    let mut warm = BreakerTally::default();
    for collision in [true, false, false] {
        warm.push(collision);
    }
    let r = store
        .breaker_record(&s, &warm, &rule(), t0())
        .await
        .unwrap();
    assert!(!r.opened_now, "{r:?}");
    let mut tally = BreakerTally::one(false);
    tally.push(true);
    for _ in 0..6 {
        tally.push(false);
    }
    let r = store
        .breaker_record(&s, &tally, &rule(), t0() + Duration::seconds(1))
        .await
        .unwrap();
    assert!(r.opened_now && r.breaker.is_open(), "{r:?}");
    assert_eq!((r.breaker.matches, r.breaker.collisions), (11, 2));
    assert_eq!(
        (r.breaker.opened_matches, r.breaker.opened_collisions),
        (5, 2),
        "the counts recorded are those of the match that tripped it"
    );
    // A tally that never crosses the threshold on the way leaves a fresh scope closed.
    let other = scope("fingerprint");
    let mut clean = BreakerTally::default();
    for collision in [false, false, false, false, true, false] {
        clean.push(collision);
    }
    let r = store
        .breaker_record(&other, &clean, &rule(), t0())
        .await
        .unwrap();
    assert!(!r.opened_now && !r.breaker.is_open(), "{r:?}");
    assert_eq!((r.breaker.matches, r.breaker.collisions), (6, 1));
}

pub async fn old_matches_leave_the_breaker_window(b: &Backend) {
    let store = b.open().await;
    let s = scope("fingerprint");
    for i in 0..4 {
        store
            .breaker_record(
                &s,
                &BreakerTally::one(true),
                &rule(),
                t0() + Duration::seconds(i),
            )
            .await
            .unwrap();
    }
    assert_eq!(store.breaker(&s, &rule(), t0()).await.unwrap().matches, 4);
    // Two days later those four collisions no longer count: one more is not a sample.
    let later = t0() + Duration::hours(48);
    let r = store
        .breaker_record(&s, &BreakerTally::one(true), &rule(), later)
        .await
        .unwrap();
    assert_eq!((r.breaker.matches, r.breaker.collisions), (1, 1));
    assert!(!r.breaker.is_open());
}

/// Breaker counters are observations: past the proof retention, purge removes them (and only
/// them: a breaker's state stays), and a dry run removes nothing.
pub async fn purge_removes_old_breaker_counters(b: &Backend) {
    let store = b.open().await;
    let s = scope("fingerprint");
    for i in 0..3 {
        store
            .breaker_record(
                &s,
                &BreakerTally::one(true),
                &rule(),
                t0() + Duration::seconds(i),
            )
            .await
            .unwrap();
    }
    let policy = PurgePolicy {
        payload_retention: Duration::days(1),
        proof_retention: Duration::days(30),
    };
    let early = store
        .purge(&policy, t0() + Duration::days(2), false)
        .await
        .unwrap();
    assert_eq!(
        early.observations, 0,
        "counters inside the proof retention stay"
    );
    let late = t0() + Duration::days(31);
    let dry = store.purge(&policy, late, true).await.unwrap();
    assert_eq!(dry.observations, 1, "the three matches share one bucket");
    let gone = store.purge(&policy, late, false).await.unwrap();
    assert_eq!(gone.observations, 1);
    let again = store.purge(&policy, late, false).await.unwrap();
    assert_eq!(again.observations, 0);
    // Nothing of it counts any more, even when read with a window reaching back that far.
    let wide = BreakerRule {
        window: Duration::days(60),
        ..rule()
    };
    assert_eq!(store.breaker(&s, &wide, late).await.unwrap().matches, 0);
}

fn reception(tenant: &str, at: OffsetDateTime) -> NewReception {
    NewReception {
        tenant: tenant.to_owned(),
        provider: "stripe".to_owned(),
        env: "live".to_owned(),
        event_type: Some("refund.created".to_owned()),
        received_at: at,
        size: 2,
        body_sha256: "same-body".to_owned(),
        headers_json: "{}".to_owned(),
        payload: Some(b"{}".to_vec()),
        transport_key: Some(TransportKey {
            value: "evt_same".to_owned(),
            strength: TransportStrength::Strong,
        }),
        correlation_id: None,
    }
}

fn request(delivery: &oncegate_core::ids::DeliveryId, at: OffsetDateTime) -> DecideRequest {
    DecideRequest {
        delivery: delivery.clone(),
        event_type: Some("refund.created".to_owned()),
        key: Some(EffectKey {
            strategy: StrategyRef {
                name: "refund_ref".to_owned(),
                version: 1,
                level: "provider_id".to_owned(),
            },
            value: "re_1".to_owned(),
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

pub async fn a_transport_ignore_points_at_the_effects_first_delivery(b: &Backend) {
    let store: Arc<Store> = b.open().await;
    // Two packets with the same delivery id are journaled; the later one is decided first and
    // makes the effect, then the earlier one is ignored as its retry.
    let early = store.journal(reception("acme", t0())).await.unwrap();
    let late = store
        .journal(reception("acme", t0() + Duration::seconds(1)))
        .await
        .unwrap();
    let made = store
        .decide(
            request(&late, t0() + Duration::seconds(2)),
            &strong_critical,
        )
        .await
        .unwrap();
    assert_eq!(made.decision.action, matrix::Action::Process);
    store
        .decide(
            request(&early, t0() + Duration::seconds(3)),
            &strong_critical,
        )
        .await
        .unwrap();
    // A third packet: the earliest journaled packet is `early` (itself an ignore), but the
    // proof names the delivery whose effect it is.
    let third = store
        .journal(reception("acme", t0() + Duration::seconds(4)))
        .await
        .unwrap();
    let o = store
        .decide(
            request(&third, t0() + Duration::seconds(5)),
            &strong_critical,
        )
        .await
        .unwrap();
    assert_eq!(o.decision.action, matrix::Action::Ignore);
    assert_eq!(o.decision.layer, Some(matrix::Layer::Transport));
    assert_eq!(o.reference_delivery.as_ref(), Some(&late));
    let proof = store.proof(&third).await.unwrap().unwrap();
    assert_eq!(proof.reference_delivery.as_ref(), Some(&late));
}

pub async fn report_rows_are_per_tenant(b: &Backend) {
    let store: Arc<Store> = b.open().await;
    for (i, tenant) in ["acme", "beta", "beta"].into_iter().enumerate() {
        let at = t0() + Duration::seconds(i as i64);
        let mut r = reception(tenant, at);
        r.transport_key = None;
        let id = store.journal(r).await.unwrap();
        let mut req = request(&id, at);
        req.key = None;
        store.decide(req, &strong_critical).await.unwrap();
    }
    let report = store.report(&TenantFilter::All, t0()).await.unwrap();
    let rows: Vec<(&str, u64)> = report
        .rows
        .iter()
        .map(|r| (r.tenant.as_str(), r.counts.received))
        .collect();
    assert_eq!(rows, vec![("acme", 1), ("beta", 2)]);
    assert_eq!(report.total.received, 3);
    let only = store
        .report(&TenantFilter::Only(vec!["beta".into()]), t0())
        .await
        .unwrap();
    assert_eq!(only.rows.len(), 1);
    assert_eq!(only.rows[0].tenant, "beta");
}
