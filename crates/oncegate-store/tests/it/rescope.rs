//! Conformance of operation scope: a key scoped by a declared operation is one effect for
//! every type declaring it, and keys written under their event type before that are moved to
//! the operation's scope once, with the effects that were reserved twice counted, not lost.

use oncegate_core::ids::DeliveryId;
use oncegate_core::matrix::{Action, Confidence};
use oncegate_store::{
    DecideOutcome, DecideRequest, EffectKey, Horizon, KeyScope, NewReception, OperationScope,
    QueueFilter, RescopeCounts, Store, StrategyRef,
};
use time::{Duration, OffsetDateTime};

use crate::harness::{strong_critical, Backend};

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

const TYPES: [&str; 2] = ["payment.succeeded", "charge.captured"];

fn capture_scope() -> OperationScope {
    OperationScope {
        provider: "pay".to_owned(),
        event_types: TYPES.iter().map(|t| t.to_string()).collect(),
        strategy: "capture-id".to_owned(),
        version: 1,
        operation: "capture".to_owned(),
    }
}

async fn deliver(
    store: &Store,
    event_type: &str,
    key: &str,
    amount: &str,
    scope: KeyScope,
    at: OffsetDateTime,
) -> (DeliveryId, DecideOutcome) {
    let id = store
        .journal(NewReception {
            tenant: "acme".to_owned(),
            provider: "pay".to_owned(),
            env: "live".to_owned(),
            event_type: Some(event_type.to_owned()),
            received_at: at,
            size: 2,
            body_sha256: format!("{event_type}-{key}-{amount}"),
            headers_json: "{}".to_owned(),
            payload: Some(b"{}".to_vec()),
            transport_key: None,
            correlation_id: None,
        })
        .await
        .expect("journal");
    let request = DecideRequest {
        delivery: id.clone(),
        event_type: Some(event_type.to_owned()),
        key: Some(EffectKey {
            strategy: StrategyRef {
                name: "capture-id".to_owned(),
                version: 1,
                level: "business_ref".to_owned(),
            },
            value: key.to_owned(),
            scope,
            confidence: Confidence::Strong,
            horizon: Horizon::Durable,
            discriminants: [("amount".to_owned(), amount.to_owned())].into(),
        }),
        lease: Duration::seconds(30),
        details_json: "{}".to_owned(),
        now: at,
        resource: Some(key.to_owned()),
        critical: true,
    };
    let outcome = store
        .decide(request, &strong_critical)
        .await
        .expect("decide");
    (id, outcome)
}

pub async fn an_operation_key_is_one_effect_across_types(b: &Backend) {
    let store = b.open().await;
    let op = || KeyScope::Operation("capture".to_owned());
    let (first, a) = deliver(&store, TYPES[0], "p1", "5", op(), t0()).await;
    assert_eq!(a.decision.action, Action::Process);
    let (_, b2) = deliver(&store, TYPES[1], "p1", "5", op(), t0()).await;
    assert_eq!(b2.decision.action, Action::Ignore);
    assert_eq!(b2.effect, a.effect);
    assert_eq!(b2.reference_delivery, Some(first));
    let (_, c) = deliver(&store, TYPES[1], "p1", "7", op(), t0()).await;
    assert_eq!(c.decision.action, Action::Quarantine);
    assert_eq!(c.effect, a.effect);
    // A type-scoped key of the same value stays apart: the scopes differ.
    let (_, d) = deliver(&store, TYPES[1], "p1", "5", KeyScope::EventType, t0()).await;
    assert_eq!(d.decision.action, Action::Process);
    assert_ne!(d.effect, a.effect);
}

pub async fn keys_written_under_the_event_type_move_to_the_operation(b: &Backend) {
    let store = b.open().await;
    // What the store wrote before keys were scoped by the operation: each type hashed in.
    let legacy = || KeyScope::EventType;
    let (first, a) = deliver(&store, TYPES[0], "p1", "5", legacy(), t0()).await;
    let (_, twice) = deliver(
        &store,
        TYPES[1],
        "p1",
        "5",
        legacy(),
        t0() + Duration::seconds(1),
    )
    .await;
    assert_eq!(
        twice.decision.action,
        Action::Process,
        "the old scoping reserved the effect once per type"
    );
    let (_, c) = deliver(&store, TYPES[0], "p2", "5", legacy(), t0()).await;
    let (_, q) = deliver(&store, TYPES[0], "p2", "6", legacy(), t0()).await;
    assert_eq!(q.decision.action, Action::Quarantine);
    // A type outside the operation is left alone.
    let (_, other_type) = deliver(&store, "refund.created", "p1", "5", legacy(), t0()).await;
    assert_eq!(other_type.decision.action, Action::Process);

    let moved = store.rescope(&[capture_scope()]).await.expect("rescope");
    // Each effect holds its key's slot itself (schema version 13), so the slots move with
    // their effects: no `effect_index` entry is left to move.
    assert_eq!(
        moved,
        RescopeCounts {
            effects: 3,
            index_entries: 0,
            queue_items: 1,
            doubled: 1,
        }
    );
    assert_eq!(
        store.rescope(&[capture_scope()]).await.expect("again"),
        RescopeCounts::default(),
        "a second run moves nothing"
    );

    // Now both types find the first effect of each key.
    let op = || KeyScope::Operation("capture".to_owned());
    let later = t0() + Duration::seconds(10);
    let (_, r1) = deliver(&store, TYPES[1], "p1", "5", op(), later).await;
    assert_eq!(r1.decision.action, Action::Ignore);
    assert_eq!(r1.effect, a.effect);
    assert_eq!(r1.reference_delivery, Some(first));
    let (_, r2) = deliver(&store, TYPES[1], "p2", "5", op(), later).await;
    assert_eq!(r2.decision.action, Action::Ignore);
    assert_eq!(r2.effect, c.effect);
    // The doubled effect and the quarantine are still there, nothing deleted.
    assert!(store
        .effect(twice.effect.as_ref().unwrap())
        .await
        .unwrap()
        .is_some());
    let queue = store.queue_list(&QueueFilter::default()).await.unwrap();
    assert!(queue.iter().any(|i| Some(&i.id) == q.queue_item.as_ref()));
    // The refund of the same value was never part of the operation.
    let (_, r3) = deliver(&store, "refund.created", "p1", "5", legacy(), later).await;
    assert_eq!(r3.decision.action, Action::Ignore);
    assert_eq!(r3.effect, other_type.effect);
}
