//! Conformance scenarios for gateway mode (schema v6): a forward's attempts run one at a time
//! under the effect's fencing token, a late answer of an old attempt cannot complete a newer
//! holder, an attempt cut by a crash is handed to the unknown-outcome path, and a dead letter
//! is re-sent with a fresh series.

use std::collections::BTreeMap;
use std::sync::Arc;

use oncegate_core::ids::{DeliveryId, EffectId};
use oncegate_core::matrix::{Action, Confidence, Criticality};
use oncegate_store::{
    DecideRequest, EffectKey, EffectState, ForwardEnd, ForwardFilter, ForwardNext, ForwardState,
    ForwardType, Horizon, NewForward, NewReception, QueueFilter, QueueStatus, Store, StoreError,
    StrategyRef, TenantFilter,
};
use time::{Duration, OffsetDateTime};

use crate::harness::{strong, Backend};

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

const LEASE: Duration = Duration::seconds(30);

/// A delivery decided `process`: its effect, token and delivery.
async fn processed(store: &Arc<Store>, name: &str, critical: bool) -> (EffectId, u64, DeliveryId) {
    let id = store
        .journal(NewReception {
            tenant: "acme".to_owned(),
            provider: "payflow".to_owned(),
            env: "live".to_owned(),
            event_type: Some("refund.created".to_owned()),
            received_at: t0(),
            size: name.len() as u64,
            body_sha256: format!("sha-of-{name}"),
            headers_json: "{}".to_owned(),
            payload: Some(name.as_bytes().to_vec()),
            transport_key: None,
            correlation_id: None,
        })
        .await
        .expect("journal");
    let key = EffectKey {
        strategy: StrategyRef {
            name: "refund-ref".to_owned(),
            version: 1,
            level: "business_ref".to_owned(),
        },
        value: name.to_owned(),
        scope: Default::default(),
        confidence: Confidence::Strong,
        horizon: Horizon::Durable,
        discriminants: BTreeMap::new(),
    };
    let criticality = if critical {
        Criticality::Critical
    } else {
        Criticality::Reversible
    };
    let outcome = store
        .decide(
            DecideRequest {
                delivery: id.clone(),
                event_type: Some("refund.created".to_owned()),
                key: Some(key),
                lease: LEASE,
                details_json: "{}".to_owned(),
                now: t0(),
                resource: Some(format!("pay_{name}")),
                critical,
            },
            &strong(criticality),
        )
        .await
        .expect("decide");
    assert_eq!(outcome.decision.action, Action::Process);
    let r = outcome.reservation.expect("a reservation");
    (r.effect, r.fencing_token, id)
}

fn new_forward(
    effect: &EffectId,
    token: u64,
    delivery: &DeliveryId,
    at: OffsetDateTime,
) -> NewForward {
    NewForward {
        effect: effect.clone(),
        fencing_token: token,
        delivery: delivery.clone(),
        tenant: "acme".to_owned(),
        provider: "payflow".to_owned(),
        env: "live".to_owned(),
        event_type: Some("refund.created".to_owned()),
        due_at: at,
    }
}

fn end(at: OffsetDateTime, status: Option<u16>, next: ForwardNext) -> ForwardEnd {
    ForwardEnd {
        ended_at: at,
        status,
        latency: Duration::milliseconds(12),
        error: status.filter(|s| *s >= 300).map(|s| format!("HTTP {s}")),
        next,
    }
}

pub async fn attempts_run_one_at_a_time_and_a_2xx_completes(b: &Backend) {
    let store = b.open().await;
    let (effect, token, delivery) = processed(&store, "a", true).await;
    assert!(store
        .forward_enqueue(&new_forward(&effect, token, &delivery, t0()))
        .await
        .unwrap());
    assert!(
        !store
            .forward_enqueue(&new_forward(&effect, token, &delivery, t0()))
            .await
            .unwrap(),
        "the same token enqueues once"
    );
    assert_eq!(store.forward_next_due().await.unwrap(), Some(t0()));
    let due = store.forwards_due(t0(), 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].state, ForwardState::Pending);
    assert_eq!((due[0].series, due[0].attempts), (1, 0));

    // Two instances race to start the attempt: one wins.
    let other = b.open().await;
    let deadline = t0() + Duration::seconds(15);
    let (a, b2) = tokio::join!(
        store.forward_start(&effect, token, t0(), deadline),
        other.forward_start(&effect, token, t0(), deadline)
    );
    let started: Vec<_> = [a.unwrap(), b2.unwrap()].into_iter().flatten().collect();
    assert_eq!(started.len(), 1, "never two concurrent sends of one effect");
    assert_eq!((started[0].series, started[0].attempt), (1, 1));
    assert_eq!(started[0].delivery, delivery);
    let e = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(
        e.lease_until,
        Some(deadline),
        "the lease covers the attempt"
    );

    // A 500: retried after the pause, the lease extended over the wait.
    let at = t0() + Duration::seconds(1);
    let due_at = at + Duration::seconds(2);
    let lease_until = due_at + Duration::seconds(20);
    let state = store
        .forward_finish(
            &effect,
            token,
            1,
            1,
            &end(
                at,
                Some(500),
                ForwardNext::Retry {
                    due_at,
                    lease_until,
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(state, ForwardState::Pending);
    let e = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(
        (e.state, e.lease_until),
        (EffectState::Reserved, Some(lease_until))
    );
    assert!(
        store.forwards_due(at, 10).await.unwrap().is_empty(),
        "not due before its pause"
    );
    assert!(store
        .forward_start(&effect, token, at, deadline)
        .await
        .unwrap()
        .is_none());
    assert_eq!(store.forward_next_due().await.unwrap(), Some(due_at));
    let f = store.forward(&effect).await.unwrap().unwrap();
    assert_eq!(
        (f.last_status, f.last_error.as_deref()),
        (Some(500), Some("HTTP 500"))
    );

    // The second attempt gets a 200: the effect completes with its body.
    let s = store
        .forward_start(&effect, token, due_at, due_at + Duration::seconds(15))
        .await
        .unwrap()
        .expect("due now");
    assert_eq!(s.attempt, 2);
    let result = r#"{"refund":"re_1"}"#.to_owned();
    let state = store
        .forward_finish(
            &effect,
            token,
            1,
            2,
            &end(
                due_at,
                Some(200),
                ForwardNext::Delivered {
                    result: result.clone(),
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(state, ForwardState::Delivered);
    let e = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(
        (e.state, e.result.as_deref()),
        (EffectState::Completed, Some(result.as_str()))
    );
    let log = store.forward_attempts(&effect).await.unwrap();
    let outcomes: Vec<_> = log
        .iter()
        .map(|a| (a.attempt, a.status, a.outcome.as_deref()))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (1, Some(500), Some("retry")),
            (2, Some(200), Some("delivered"))
        ]
    );
    assert_eq!(log[0].started_at, t0());
    assert_eq!(log[0].latency_ms, Some(12));
    assert_eq!(
        store.forward_counts(&TenantFilter::All).await.unwrap(),
        Default::default()
    );
    let listed = store
        .forwards(&ForwardFilter {
            tenants: TenantFilter::Only(vec!["other".into()]),
            state: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert!(
        listed.is_empty(),
        "another tenant's forwards are not listed"
    );
}

pub async fn a_late_answer_of_an_old_attempt_cannot_complete_a_newer_one(b: &Backend) {
    let store = b.open().await;
    let (effect, token, delivery) = processed(&store, "r", false).await;
    store
        .forward_enqueue(&new_forward(&effect, token, &delivery, t0()))
        .await
        .unwrap();
    let deadline = t0() + Duration::seconds(5);
    store
        .forward_start(&effect, token, t0(), deadline)
        .await
        .unwrap()
        .expect("started");
    // The sender stalls past its deadline: a reversible lease is released, and the forwarder
    // claims it under the next token, starting series 2.
    let late = deadline + Duration::seconds(1);
    let due = store.forwards_due(late, 10).await.unwrap();
    assert_eq!(
        due[0].state,
        ForwardState::Sending,
        "a cut attempt is due for a look"
    );
    assert!(store.forward_interrupt(&effect, token, late).await.unwrap());
    assert!(
        !store.forward_interrupt(&effect, token, late).await.unwrap(),
        "once"
    );
    assert_eq!(
        store.expire_leases(late).await.unwrap(),
        vec![effect.clone()]
    );
    let types = [ForwardType {
        provider: "payflow".into(),
        event_type: "refund.created".into(),
    }];
    let none = [ForwardType {
        provider: "payflow".into(),
        event_type: "other".into(),
    }];
    assert!(
        store
            .forward_claim(&none, LEASE, late)
            .await
            .unwrap()
            .is_none(),
        "only forward types"
    );
    let claimed = store
        .forward_claim(&types, LEASE, late)
        .await
        .unwrap()
        .expect("released work");
    // The release took the next token, the claim the one after it.
    assert_eq!(claimed.fencing_token, token + 2);
    assert_eq!(
        (claimed.series, claimed.attempts, claimed.state),
        (2, 0, ForwardState::Pending)
    );
    // The old attempt's answer arrives now: refused as stale, logged, nothing completed.
    let state = store
        .forward_finish(
            &effect,
            token,
            1,
            1,
            &end(
                late,
                Some(200),
                ForwardNext::Delivered {
                    result: "{}".into(),
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(state, ForwardState::Superseded);
    let e = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(
        (e.state, e.fencing_token),
        (EffectState::Reserved, token + 2)
    );
    let f = store.forward(&effect).await.unwrap().unwrap();
    assert_eq!(
        f.state,
        ForwardState::Pending,
        "the new series is untouched"
    );
    let log = store.forward_attempts(&effect).await.unwrap();
    assert_eq!(log[0].outcome.as_deref(), Some("stale"));
    // The new series sends under the new token; the old token cannot start it.
    assert!(store
        .forward_start(&effect, token, late, late + Duration::seconds(5))
        .await
        .unwrap()
        .is_none());
    let s = store
        .forward_start(&effect, token + 2, late, late + Duration::seconds(5))
        .await
        .unwrap()
        .expect("the new holder");
    assert_eq!((s.series, s.attempt), (2, 1));
}

pub async fn an_interrupted_critical_attempt_is_verified_never_resent(b: &Backend) {
    let store = b.open().await;
    let (effect, token, delivery) = processed(&store, "c", true).await;
    store
        .forward_enqueue(&new_forward(&effect, token, &delivery, t0()))
        .await
        .unwrap();
    let deadline = t0() + Duration::seconds(5);
    store
        .forward_start(&effect, token, t0(), deadline)
        .await
        .unwrap()
        .expect("started");
    let late = deadline + Duration::seconds(1);
    assert!(store.forward_interrupt(&effect, token, late).await.unwrap());
    assert_eq!(
        store.expire_leases(late).await.unwrap(),
        vec![effect.clone()]
    );
    let e = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Unknown);
    let types = [ForwardType {
        provider: "payflow".into(),
        event_type: "refund.created".into(),
    }];
    assert!(
        store
            .forward_claim(&types, LEASE, late)
            .await
            .unwrap()
            .is_none(),
        "an unknown effect is not re-sent"
    );
    let items = store
        .queue_list(&QueueFilter {
            status: Some(QueueStatus::Open),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].existing_effect.as_ref(),
        Some(&effect),
        "a verify-before-retry item"
    );
    let f = store.forward(&effect).await.unwrap().unwrap();
    assert_eq!(f.state, ForwardState::Interrupted);
    let log = store.forward_attempts(&effect).await.unwrap();
    assert_eq!(
        (log[0].outcome.as_deref(), log[0].ended_at),
        (Some("unknown"), None)
    );
    assert!(store.forwards_due(late, 10).await.unwrap().is_empty());
}

pub async fn a_dead_letter_is_resent_with_a_fresh_series(b: &Backend) {
    let store = b.open().await;
    let (effect, token, delivery) = processed(&store, "d", true).await;
    store
        .forward_enqueue(&new_forward(&effect, token, &delivery, t0()))
        .await
        .unwrap();
    store
        .forward_start(&effect, token, t0(), t0() + Duration::seconds(5))
        .await
        .unwrap()
        .unwrap();
    let at = t0() + Duration::seconds(1);
    let dead = ForwardNext::Dead {
        error: "forward dead after 1 attempt: HTTP 503".into(),
    };
    assert_eq!(
        store
            .forward_finish(&effect, token, 1, 1, &end(at, Some(503), dead))
            .await
            .unwrap(),
        ForwardState::Dead
    );
    let e = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Failed { retryable: false });
    assert_eq!(
        store.forward_counts(&TenantFilter::All).await.unwrap().dead,
        1
    );
    let other = TenantFilter::Only(vec!["other".into()]);
    assert_eq!(
        store.forward_counts(&other).await.unwrap().dead,
        0,
        "per tenant"
    );
    let listed = store
        .forwards(&ForwardFilter {
            state: Some(ForwardState::Dead),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].effect, effect);

    let later = at + Duration::seconds(60);
    let f = store.forward_resend(&effect, LEASE, later).await.unwrap();
    assert_eq!(
        (f.state, f.series, f.attempts, f.fencing_token),
        (ForwardState::Pending, 2, 0, token + 1)
    );
    assert_eq!(f.due_at, later);
    let e = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(
        (e.state, e.fencing_token, e.error),
        (EffectState::Reserved, token + 1, None)
    );
    assert!(matches!(
        store.forward_resend(&effect, LEASE, later).await,
        Err(StoreError::Conflict(_))
    ));
    let unknown = EffectId::from_u128(7);
    assert!(matches!(
        store.forward_resend(&unknown, LEASE, later).await,
        Err(StoreError::NotFound {
            what: "forward",
            ..
        })
    ));
    let s = store
        .forward_start(&effect, token + 1, later, later + Duration::seconds(5))
        .await
        .unwrap()
        .expect("the fresh series starts");
    assert_eq!((s.series, s.attempt), (2, 1));
}
