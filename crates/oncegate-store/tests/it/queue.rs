//! Conformance scenarios for the queue as people and consoles walk it: an effect whose outcome
//! is unknown settled once for every item waiting on it, keyset pages that stay stable while
//! items are inserted, the filters, and the counts per kind and status.

use std::collections::BTreeMap;
use std::sync::Arc;

use oncegate_core::ids::{DeliveryId, QueueItemId};
use oncegate_core::matrix::{self, Action, Confidence, Criticality, Decision, Keyed, Situation};
use oncegate_store::{
    DecideOutcome, DecideRequest, EffectKey, EffectState, Horizon, LinkKind, NewReception,
    QueueCounts, QueueCursor, QueueFilter, QueueKind, QueueStatus, Resolution, ResolutionOutcome,
    StatusCounts, Store, StoreError, StrategyRef, TenantFilter,
};
use time::{Duration, OffsetDateTime};

use crate::harness::Backend;

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

const LEASE: Duration = Duration::seconds(30);

/// One delivery to journal and decide.
struct Shot<'a> {
    tenant: &'a str,
    provider: &'a str,
    event_type: &'a str,
    body: String,
    at: OffsetDateTime,
    key: &'a str,
    confidence: Confidence,
    amount: &'a str,
}

impl<'a> Shot<'a> {
    fn new(body: impl Into<String>, at: OffsetDateTime, key: &'a str) -> Self {
        Shot {
            tenant: "acme",
            provider: "payflow",
            event_type: "refund.created",
            body: body.into(),
            at,
            key,
            confidence: Confidence::Strong,
            amount: "1500",
        }
    }

    fn weak(mut self) -> Self {
        self.confidence = Confidence::Weak;
        self
    }
}

/// Journals and decides one delivery of a critical type, with the real matrix.
async fn deliver(store: &Arc<Store>, s: Shot<'_>) -> (DeliveryId, DecideOutcome) {
    let id = store
        .journal(NewReception {
            tenant: s.tenant.to_owned(),
            provider: s.provider.to_owned(),
            env: "live".to_owned(),
            event_type: Some(s.event_type.to_owned()),
            received_at: s.at,
            size: s.body.len() as u64,
            body_sha256: format!("sha-of-{}", s.body),
            headers_json: "{}".to_owned(),
            payload: Some(s.body.as_bytes().to_vec()),
            transport_key: None,
            correlation_id: None,
        })
        .await
        .expect("journal");
    let confidence = s.confidence;
    let m = move |view: &oncegate_store::PriorView| -> Decision {
        matrix::decide(&Situation::Identified {
            criticality: Criticality::Critical,
            authority: false,
            breaker_open: false,
            transport: view.transport,
            key: Keyed {
                confidence,
                prior: view.prior,
                differences: view.differences.clone(),
            },
        })
    };
    let key = EffectKey {
        strategy: StrategyRef {
            name: "refund".to_owned(),
            version: 1,
            level: "fingerprint".to_owned(),
        },
        value: s.key.to_owned(),
        scope: Default::default(),
        confidence,
        horizon: Horizon::Durable,
        discriminants: [("/data/amount".to_owned(), s.amount.to_owned())]
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
    };
    let outcome = store
        .decide(
            DecideRequest {
                delivery: id.clone(),
                event_type: Some(s.event_type.to_owned()),
                key: Some(key),
                lease: LEASE,
                details_json: "{}".to_owned(),
                now: s.at,
                resource: Some("pay_1".to_owned()),
                critical: true,
            },
            &m,
        )
        .await
        .expect("decide");
    (id, outcome)
}

fn by(who: &str, outcome: ResolutionOutcome, at: OffsetDateTime) -> Resolution {
    Resolution {
        outcome,
        authoritative_ref: None,
        note: "checked the dashboard".to_owned(),
        by: who.to_owned(),
        at,
    }
}

/// A processed critical delivery whose lease expired (its "verify before retry" item open),
/// and a retry of it queued against the same unknown effect. Returns (verify, retry, effect,
/// token, late).
async fn unknown_with_two_items(
    store: &Arc<Store>,
    key: &str,
) -> (
    QueueItemId,
    QueueItemId,
    oncegate_core::ids::EffectId,
    u64,
    OffsetDateTime,
) {
    let (first, crashed) = deliver(store, Shot::new(format!("{key}-1"), t0(), key)).await;
    let r = crashed.reservation.expect("processed");
    let late = t0() + LEASE + Duration::seconds(1);
    assert!(store.expire_leases(late).await.unwrap().contains(&r.effect));
    let verify = store
        .queue_list(&QueueFilter {
            delivery: Some(first.clone()),
            ..QueueFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(verify.len(), 1, "{verify:?}");
    let (_, retry) = deliver(store, Shot::new(format!("{key}-2"), late, key)).await;
    assert_eq!(
        retry.decision.action,
        Action::Reconcile,
        "{:?}",
        retry.decision
    );
    assert_eq!(retry.effect.as_ref(), Some(&r.effect));
    (
        verify[0].id.clone(),
        retry.queue_item.expect("queued"),
        r.effect,
        r.fencing_token,
        late,
    )
}

pub async fn a_verified_effect_settles_every_item_waiting_on_it(b: &Backend) {
    let store = b.open().await;
    let (verify, retry, effect, _, late) = unknown_with_two_items(&store, "k1").await;
    let at = late + Duration::seconds(1);
    let resolved = store
        .resolve(&verify, by("alice", ResolutionOutcome::Duplicate, at))
        .await
        .unwrap();
    assert_eq!(resolved.status, QueueStatus::Resolved);
    assert_eq!(resolved.resolution.unwrap().effect.as_ref(), Some(&effect));

    // The effect happened: completed, never claimable.
    let e = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Completed);
    assert!(e.result.as_deref().unwrap().contains("alice"), "{e:?}");
    assert!(store
        .claim("w", &TenantFilter::All, LEASE, at)
        .await
        .unwrap()
        .is_none());
    // The retry's item was settled with it, as a duplicate linked to the effect.
    let other = store.queue_item(&retry).await.unwrap().unwrap();
    assert_eq!(other.status, QueueStatus::Resolved);
    let record = other.resolution.unwrap();
    assert_eq!(record.resolution.outcome, ResolutionOutcome::Duplicate);
    assert_eq!(record.resolution.by, "alice");
    assert!(
        record.resolution.note.contains(verify.as_str()),
        "{:?}",
        record.resolution.note
    );
    assert_eq!(record.effect.as_ref(), Some(&effect));
    assert!(e
        .deliveries
        .iter()
        .any(|l| l.delivery == other.delivery && l.kind == LinkKind::ResolvedDuplicate));
    // Nothing stays open, and resolving the settled item again is a conflict.
    assert!(store
        .queue_list(&QueueFilter::default())
        .await
        .unwrap()
        .is_empty());
    match store
        .resolve(&retry, by("bob", ResolutionOutcome::Distinct, at))
        .await
    {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("expected Conflict, got {other:?}"),
    }
}

pub async fn a_retry_confirmed_duplicate_also_settles_the_verify_item(b: &Backend) {
    let store = b.open().await;
    let (verify, retry, effect, _, late) = unknown_with_two_items(&store, "k1").await;
    store
        .resolve(&retry, by("alice", ResolutionOutcome::Duplicate, late))
        .await
        .unwrap();
    let e = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Completed);
    let v = store.queue_item(&verify).await.unwrap().unwrap();
    assert_eq!(v.status, QueueStatus::Resolved);
    assert!(v
        .resolution
        .unwrap()
        .resolution
        .note
        .contains(retry.as_str()));
}

pub async fn a_verify_item_resolved_distinct_releases_the_same_effect_once(b: &Backend) {
    let store = b.open().await;
    let (verify, retry, effect, token, late) = unknown_with_two_items(&store, "k1").await;

    // The reconciler never releases an effect whose outcome is unknown.
    match store
        .resolve(&verify, by("reconciler", ResolutionOutcome::Distinct, late))
        .await
    {
        Err(StoreError::Conflict(why)) => assert!(why.contains("reconciler"), "{why}"),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(
        store.queue_item(&verify).await.unwrap().unwrap().status,
        QueueStatus::Open,
        "a refused resolution writes nothing"
    );

    // A person says it did not happen: the same effect, under its next token.
    let resolved = store
        .resolve(&verify, by("alice", ResolutionOutcome::Distinct, late))
        .await
        .unwrap();
    assert_eq!(resolved.resolution.unwrap().effect.as_ref(), Some(&effect));
    let e = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Released);
    assert_eq!(e.fencing_token, token + 1);
    assert_eq!(e.queue_item.as_ref(), Some(&verify));
    match store.complete(&effect, token, "{}", late).await {
        Err(StoreError::StaleToken { .. }) => {}
        other => panic!("the crashed holder is stale, got {other:?}"),
    }
    let claim = store
        .claim("w", &TenantFilter::All, LEASE, late)
        .await
        .unwrap()
        .expect("released once");
    assert_eq!(claim.effect, effect);
    assert!(
        store
            .claim("w", &TenantFilter::All, LEASE, late)
            .await
            .unwrap()
            .is_none(),
        "exactly one run"
    );
    // The retry is that same operation: settled as its duplicate, not released again.
    let r = store.queue_item(&retry).await.unwrap().unwrap();
    assert_eq!(r.status, QueueStatus::Resolved);
    let record = r.resolution.unwrap();
    assert_eq!(record.resolution.outcome, ResolutionOutcome::Duplicate);
    assert_eq!(record.effect.as_ref(), Some(&effect));
}

pub async fn a_retry_resolved_distinct_leaves_the_unknown_effect_alone(b: &Backend) {
    let store = b.open().await;
    let (verify, retry, effect, _, late) = unknown_with_two_items(&store, "k1").await;
    let resolved = store
        .resolve(&retry, by("alice", ResolutionOutcome::Distinct, late))
        .await
        .unwrap();
    let released = resolved.resolution.unwrap().effect.unwrap();
    assert_ne!(released, effect);
    assert_eq!(
        store.effect(&effect).await.unwrap().unwrap().state,
        EffectState::Unknown
    );
    assert_eq!(
        store.queue_item(&verify).await.unwrap().unwrap().status,
        QueueStatus::Open
    );
}

/// Opens one `reconcile` item: a weak key matching a completed critical effect.
async fn reconcile_item(store: &Arc<Store>, mut shot: Shot<'_>, n: usize) -> QueueItemId {
    shot.body = format!("{}-{n}", shot.body);
    let (_, o) = deliver(store, shot.weak()).await;
    assert_eq!(o.decision.action, Action::Reconcile, "{:?}", o.decision);
    o.queue_item.unwrap()
}

/// A completed critical effect under `key`, for weak retries to be reconciled against.
async fn completed(store: &Arc<Store>, shot: Shot<'_>) {
    let (_, o) = deliver(store, shot.weak()).await;
    let r = o.reservation.expect("processed");
    store
        .complete(&r.effect, r.fencing_token, "{}", t0())
        .await
        .unwrap();
}

pub async fn paging_returns_each_item_once_in_order_while_items_arrive(b: &Backend) {
    let store = b.open().await;
    completed(&store, Shot::new("base", t0(), "fp")).await;
    // 250 items over 25 distinct instants, so pages also cut between equal timestamps.
    let mut expected = Vec::new();
    for n in 0..250 {
        let at = t0() + Duration::seconds(1 + (n / 10) as i64);
        expected.push(reconcile_item(&store, Shot::new("old", at, "fp"), n).await);
    }
    let sorted = |ids: &[QueueItemId], items: &[oncegate_store::QueueItem]| {
        let mut v: Vec<_> = items
            .iter()
            .filter(|i| ids.contains(&i.id))
            .map(|i| (i.created_at, i.id.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
    };
    let all = store
        .queue_list(&QueueFilter {
            limit: 1000,
            ..QueueFilter::default()
        })
        .await
        .unwrap();
    let expected = sorted(&expected, &all);
    assert_eq!(expected.len(), 250);

    let mut seen: Vec<QueueItemId> = Vec::new();
    let mut after: Option<QueueCursor> = None;
    let mut pages = 0;
    let mut arrived = Vec::new();
    loop {
        let page = store
            .queue_page(&QueueFilter {
                limit: 100,
                after: after.clone(),
                ..QueueFilter::default()
            })
            .await
            .unwrap();
        pages += 1;
        assert!(page.items.len() <= 100);
        seen.extend(page.items.iter().map(|i| i.id.clone()));
        // New items arrive between pages (later, as arrivals are).
        for n in 0..7 {
            if pages <= 2 {
                let at = t0() + Duration::minutes(10 + pages);
                arrived.push(
                    reconcile_item(&store, Shot::new("new", at, "fp"), n + 10 * pages as usize)
                        .await,
                );
            }
        }
        match page.next {
            Some(next) => {
                // The cursor survives its text form, as a console hands it back.
                after = Some(next.to_string().parse().unwrap());
            }
            None => break,
        }
        assert!(pages < 10, "paging must end");
    }
    let old: Vec<_> = seen
        .iter()
        .filter(|id| expected.contains(id))
        .cloned()
        .collect();
    assert_eq!(old, expected, "each old item once, in order");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "no item twice");
    assert_eq!(
        seen.len(),
        250 + arrived.len(),
        "the arrivals show on later pages"
    );
    assert_eq!(
        &seen[..250],
        &expected[..],
        "arrivals come after the old items"
    );
    assert_eq!(pages, 3);
}

pub async fn paging_backwards_shows_the_same_pages_in_reverse(b: &Backend) {
    let store = b.open().await;
    completed(&store, Shot::new("base", t0(), "fp")).await;
    // 95 items over 19 instants: pages of 20 cut between equal timestamps.
    for n in 0..95 {
        let at = t0() + Duration::seconds(1 + (n / 5) as i64);
        reconcile_item(&store, Shot::new("old", at, "fp"), n).await;
    }
    let page = |after: Option<QueueCursor>, before: Option<QueueCursor>| {
        let store = store.clone();
        async move {
            store
                .queue_page(&QueueFilter {
                    limit: 20,
                    after,
                    before,
                    ..QueueFilter::default()
                })
                .await
                .unwrap()
        }
    };
    let ids =
        |p: &oncegate_store::QueuePage| p.items.iter().map(|i| i.id.clone()).collect::<Vec<_>>();
    let mut forward = Vec::new();
    let mut current = page(None, None).await;
    assert_eq!(
        current.previous, None,
        "the first page has no previous page"
    );
    loop {
        forward.push(ids(&current));
        let Some(next) = current.next.clone() else {
            break;
        };
        current = page(Some(next), None).await;
        assert!(
            current.previous.is_some(),
            "a later page has a previous page"
        );
        assert!(forward.len() < 10, "paging must end");
    }
    assert_eq!(
        forward.iter().map(Vec::len).collect::<Vec<_>>(),
        [20, 20, 20, 20, 15]
    );
    // From the last page back to the first, through `previous` and `before`.
    let mut backward = vec![ids(&current)];
    while let Some(previous) = current.previous.clone() {
        let text = previous.to_string();
        current = page(None, Some(text.parse().unwrap())).await;
        assert!(
            current.next.is_some(),
            "a page reached backwards has a next page"
        );
        backward.push(ids(&current));
        assert!(backward.len() < 10, "paging must end");
    }
    backward.reverse();
    assert_eq!(backward, forward, "the same pages, backwards");
    // A page reached backwards links forward to where the walk came from.
    let second = page(
        None,
        Some(QueueCursor::after(
            &store_item(&store, &forward[2][0]).await,
        )),
    )
    .await;
    assert_eq!(ids(&second), forward[1]);
    assert_eq!(
        page(second.next.clone(), None)
            .await
            .items
            .first()
            .map(|i| i.id.clone()),
        Some(forward[2][0].clone())
    );
}

async fn store_item(store: &Arc<Store>, id: &QueueItemId) -> oncegate_store::QueueItem {
    store
        .queue_item(id)
        .await
        .unwrap()
        .expect("the item exists")
}

pub async fn filters_and_counts_narrow_the_queue(b: &Backend) {
    let store = b.open().await;
    completed(&store, Shot::new("base", t0(), "fp")).await;
    let mut other_provider = Shot::new("base", t0(), "fp");
    other_provider.provider = "shopline";
    completed(&store, other_provider).await;
    let mut other_type = Shot::new("base", t0(), "fp");
    other_type.event_type = "refund.updated";
    completed(&store, other_type).await;
    let mut beta = Shot::new("base", t0(), "fp");
    beta.tenant = "beta";
    completed(&store, beta).await;

    let early = t0() + Duration::minutes(1);
    let later = t0() + Duration::hours(2);
    let a1 = reconcile_item(&store, Shot::new("a", early, "fp"), 1).await;
    let a2 = reconcile_item(&store, Shot::new("a", later, "fp"), 2).await;
    let mut s = Shot::new("s", early, "fp");
    s.provider = "shopline";
    let s1 = reconcile_item(&store, s, 1).await;
    let mut u = Shot::new("u", later, "fp");
    u.event_type = "refund.updated";
    let u1 = reconcile_item(&store, u, 1).await;
    let mut bt = Shot::new("b", early, "fp");
    bt.tenant = "beta";
    let b1 = reconcile_item(&store, bt, 1).await;
    // A collision: the strong key of a completed effect with another amount.
    let (_, first) = deliver(&store, Shot::new("q0", early, "strong-1")).await;
    let r = first.reservation.unwrap();
    store
        .complete(&r.effect, r.fencing_token, "{}", early)
        .await
        .unwrap();
    let mut q = Shot::new("q1", later, "strong-1");
    q.amount = "9999";
    let (_, collided) = deliver(&store, q).await;
    assert_eq!(collided.decision.action, Action::Quarantine);
    let q1 = collided.queue_item.unwrap();
    // One resolved reconcile item.
    store
        .resolve(&a1, by("alice", ResolutionOutcome::Duplicate, later))
        .await
        .unwrap();

    let ids = |f: QueueFilter| {
        let store = store.clone();
        async move {
            let mut v: Vec<QueueItemId> = store
                .queue_page(&f)
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|i| i.id)
                .collect();
            v.sort();
            v
        }
    };
    let sorted = |mut v: Vec<QueueItemId>| {
        v.sort();
        v
    };
    let any = || QueueFilter {
        status: None,
        ..QueueFilter::default()
    };
    assert_eq!(
        ids(any()).await,
        sorted(vec![
            a1.clone(),
            a2.clone(),
            s1.clone(),
            u1.clone(),
            b1.clone(),
            q1.clone()
        ])
    );
    assert_eq!(
        ids(QueueFilter::default()).await,
        sorted(vec![
            a2.clone(),
            s1.clone(),
            u1.clone(),
            b1.clone(),
            q1.clone()
        ]),
        "open by default"
    );
    assert_eq!(
        ids(QueueFilter {
            status: Some(QueueStatus::Resolved),
            ..any()
        })
        .await,
        vec![a1.clone()]
    );
    assert_eq!(
        ids(QueueFilter {
            kind: Some(QueueKind::Quarantine),
            ..any()
        })
        .await,
        vec![q1.clone()]
    );
    assert_eq!(
        ids(QueueFilter {
            provider: Some("shopline".to_owned()),
            ..any()
        })
        .await,
        vec![s1.clone()]
    );
    assert_eq!(
        ids(QueueFilter {
            event_type: Some("refund.updated".to_owned()),
            ..any()
        })
        .await,
        vec![u1.clone()]
    );
    assert_eq!(
        ids(QueueFilter {
            tenants: TenantFilter::Only(vec!["beta".to_owned()]),
            ..any()
        })
        .await,
        vec![b1.clone()]
    );
    let hour = t0() + Duration::hours(1);
    assert_eq!(
        ids(QueueFilter {
            created_before: Some(hour),
            ..any()
        })
        .await,
        sorted(vec![a1.clone(), s1.clone(), b1.clone()])
    );
    assert_eq!(
        ids(QueueFilter {
            created_since: Some(hour),
            ..any()
        })
        .await,
        sorted(vec![a2.clone(), u1.clone(), q1.clone()])
    );
    assert!(ids(QueueFilter {
        created_since: Some(hour),
        created_before: Some(hour),
        ..any()
    })
    .await
    .is_empty());

    // Counts: by kind and status, narrowed by everything but kind and status.
    let counts = |f: QueueFilter| {
        let store = store.clone();
        async move { store.queue_page(&f).await.unwrap().counts }
    };
    let c = |qo, qr, ro, rr| QueueCounts {
        quarantine: StatusCounts {
            open: qo,
            resolved: qr,
        },
        reconcile: StatusCounts {
            open: ro,
            resolved: rr,
        },
    };
    assert_eq!(counts(any()).await, c(1, 0, 4, 1));
    assert_eq!(
        counts(QueueFilter {
            kind: Some(QueueKind::Quarantine),
            status: Some(QueueStatus::Resolved),
            ..QueueFilter::default()
        })
        .await,
        c(1, 0, 4, 1),
        "kind and status do not narrow the counts"
    );
    assert_eq!(
        counts(QueueFilter {
            tenants: TenantFilter::Only(vec!["acme".to_owned()]),
            ..any()
        })
        .await,
        c(1, 0, 3, 1)
    );
    assert_eq!(
        counts(QueueFilter {
            provider: Some("payflow".to_owned()),
            event_type: Some("refund.created".to_owned()),
            created_before: Some(hour),
            ..any()
        })
        .await,
        c(0, 0, 1, 1)
    );
}

pub async fn a_delivery_id_names_its_one_open_item_or_is_ambiguous(b: &Backend) {
    use oncegate_store::DeliveryItems;
    let store = b.open().await;
    let (verify, retry, _, _, late) = unknown_with_two_items(&store, "k1").await;
    let of = |delivery: DeliveryId| {
        let store = store.clone();
        async move {
            store
                .queue_list(&QueueFilter {
                    status: None,
                    delivery: Some(delivery),
                    ..QueueFilter::default()
                })
                .await
                .unwrap()
        }
    };
    let v = store.queue_item(&verify).await.unwrap().unwrap();
    let items = of(v.delivery.clone()).await;
    assert_eq!(DeliveryItems::of(&items), DeliveryItems::Open(&v));
    assert_eq!(DeliveryItems::of(&[]), DeliveryItems::None);
    // Two open items under one delivery: neither is picked for the caller.
    let mut r = store.queue_item(&retry).await.unwrap().unwrap();
    r.delivery = v.delivery.clone();
    let both = vec![v.clone(), r.clone()];
    assert_eq!(
        DeliveryItems::of(&both),
        DeliveryItems::Ambiguous(vec![verify.clone(), retry.clone()])
    );
    // Once resolved, the delivery names its latest item, which is resolved.
    store
        .resolve(&verify, by("alice", ResolutionOutcome::Duplicate, late))
        .await
        .unwrap();
    let items = of(v.delivery.clone()).await;
    match DeliveryItems::of(&items) {
        DeliveryItems::Resolved(item) => assert_eq!(item.id, verify),
        other => panic!("expected Resolved, got {other:?}"),
    }
}
