//! Group commit, on every backend: concurrent callers' journal entries, decisions and completes
//! share transactions (SQLite's writer, PostgreSQL's batches), yet every key keeps exactly one
//! winner, every answer is given only once its writes are visible to another connection, and a
//! member that fails on its own fails alone.

use std::sync::Arc;

use oncegate_core::ids::DeliveryId;
use oncegate_core::matrix::Confidence;
use oncegate_core::matrix::{Action, Prior};
use oncegate_store::{
    DecideOutcome, DecideRequest, EffectKey, EffectState, Horizon, NewReception, ResourceScope,
    Store, StoreError, StrategyRef, TransportKey, TransportStrength,
};
use time::{Duration, OffsetDateTime};

use crate::harness::{strong_critical, Backend, Kind};

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

pub(crate) fn reception(n: usize) -> NewReception {
    NewReception {
        tenant: "acme".to_owned(),
        provider: "stripe".to_owned(),
        env: "live".to_owned(),
        event_type: Some("refund.created".to_owned()),
        received_at: t0(),
        size: 10,
        body_sha256: format!("body-{n}"),
        headers_json: "{}".to_owned(),
        payload: Some(format!("payload-{n}").into_bytes()),
        transport_key: Some(TransportKey {
            value: format!("evt_{n}"),
            strength: TransportStrength::Strong,
        }),
        correlation_id: None,
    }
}

/// A request for delivery `n` under `key`; its `delivery` is filled in by the store when it
/// journals and decides in one call.
pub(crate) fn request(n: usize, key: &str, details: &str) -> DecideRequest {
    DecideRequest {
        delivery: DeliveryId::from_u128(0),
        event_type: Some("refund.created".to_owned()),
        key: Some(EffectKey {
            strategy: StrategyRef {
                name: "refund_ref".to_owned(),
                version: 1,
                level: "business_ref".to_owned(),
            },
            value: key.to_owned(),
            scope: Default::default(),
            confidence: Confidence::Strong,
            horizon: Horizon::For(Duration::days(3)),
            discriminants: [("amount".to_owned(), "1000".to_owned())]
                .into_iter()
                .collect(),
        }),
        lease: Duration::seconds(30),
        details_json: details.to_owned(),
        now: t0(),
        resource: Some(format!("pay_{n}")),
        critical: true,
    }
}

/// Delivery `n` journaled and decided: in one call for even `n`, in two for odd `n` (so both
/// paths share batches). The error is the decision's, once the delivery was journaled.
pub(crate) async fn receive(
    store: &Arc<Store>,
    n: usize,
    key: &str,
    details: &str,
) -> (DeliveryId, Result<DecideOutcome, StoreError>) {
    if n.is_multiple_of(2) {
        store
            .journal_and_decide(reception(n), request(n, key, details), &strong_critical)
            .await
            .expect("journaled")
    } else {
        let id = store.journal(reception(n)).await.expect("journaled");
        let req = DecideRequest {
            delivery: id.clone(),
            ..request(n, key, details)
        };
        (id.clone(), store.decide(req, &strong_critical).await)
    }
}

/// What another connection reads of a delivery right after its caller was answered: its proof's
/// action and, for `process`, the reserved effect's state.
async fn seen_elsewhere(
    other: &Arc<Store>,
    id: &DeliveryId,
    outcome: &DecideOutcome,
) -> (Option<Action>, Option<EffectState>) {
    let action = other
        .proof(id)
        .await
        .expect("read the proof")
        .map(|p| p.action);
    let state = match &outcome.reservation {
        Some(r) => other
            .effect(&r.effect)
            .await
            .expect("read the effect")
            .map(|e| e.state),
        None => None,
    };
    (action, state)
}

const DISTINCT: usize = 64;
const HOT: usize = 16;

pub async fn concurrent_callers_share_commits_and_keep_one_winner_per_key(b: &Backend) {
    let store = b.open().await;
    // A second store: its own connections, so what it reads has been committed.
    let other = b.open().await;
    let barrier = Arc::new(tokio::sync::Barrier::new(DISTINCT + HOT));
    let mut tasks = Vec::new();
    for n in 0..DISTINCT + HOT {
        let (store, other, barrier) = (store.clone(), other.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let key = if n < DISTINCT {
                format!("re_{n}")
            } else {
                "re_hot".to_owned()
            };
            barrier.wait().await;
            let (id, decided) = receive(&store, n, &key, "{}").await;
            let outcome = decided.expect("decided");
            let seen = seen_elsewhere(&other, &id, &outcome).await;
            (n, id, outcome, seen)
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.expect("a caller"));
    }
    for (n, _, outcome, seen) in &outcomes {
        // The answer left after the commit: another connection sees what it says.
        let expected_state = outcome.reservation.as_ref().map(|_| EffectState::Reserved);
        assert_eq!(
            seen,
            &(Some(outcome.decision.action), expected_state),
            "delivery {n}"
        );
        if *n < DISTINCT {
            assert_eq!(outcome.decision.action, Action::Process, "delivery {n}");
            assert_eq!(
                outcome.reservation.as_ref().map(|r| r.fencing_token),
                Some(1)
            );
        }
    }
    let hot: Vec<_> = outcomes.iter().filter(|(n, ..)| *n >= DISTINCT).collect();
    let winners: Vec<_> = hot
        .iter()
        .filter(|(_, _, o, _)| o.decision.action == Action::Process)
        .collect();
    assert_eq!(winners.len(), 1, "one winner for the hot key");
    let effect = winners[0].2.effect.clone().expect("the winner's effect");
    for (n, _, o, _) in &hot {
        if o.decision.action != Action::Process {
            assert_eq!(o.decision.action, Action::Ignore, "hot delivery {n}");
            assert_eq!(o.prior, Prior::InProgress, "hot delivery {n}");
            assert_eq!(o.effect.as_ref(), Some(&effect), "hot delivery {n}");
        }
    }
    let linked = other
        .effect(&effect)
        .await
        .unwrap()
        .expect("the hot effect");
    assert_eq!(
        linked.deliveries.len(),
        HOT,
        "every hot delivery linked once"
    );

    // Every holder completes at once, with one stale token among them: it alone is refused.
    let reservations: Vec<_> = outcomes
        .iter()
        .filter_map(|(_, _, o, _)| o.reservation.clone())
        .collect();
    let stale = reservations[0].clone();
    let mut tasks = Vec::new();
    for (i, r) in reservations.iter().cloned().enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .complete(&r.effect, r.fencing_token, &format!("{{\"n\":{i}}}"), t0())
                .await
        }));
    }
    let stale_try = {
        let store = store.clone();
        let stale = stale.clone();
        tokio::spawn(async move {
            store
                .complete(&stale.effect, stale.fencing_token + 1, "{}", t0())
                .await
        })
    };
    for t in tasks {
        t.await.unwrap().expect("the holder completes");
    }
    assert!(
        matches!(
            stale_try.await.unwrap(),
            Err(StoreError::StaleToken {
                current: 1,
                presented: 2,
                ..
            })
        ),
        "a token the effect never had is stale"
    );
    for r in &reservations {
        let e = other.effect(&r.effect).await.unwrap().expect("the effect");
        assert_eq!(e.state, EffectState::Completed);
    }
    assert_batches_shared(&store);
    drop((store, other));
}

/// The store's group commits held several calls at a time: fewer batches than calls.
fn assert_batches_shared(store: &Arc<Store>) {
    let seen = store.batch_sizes().snapshot();
    assert!(seen.batches > 0, "batches were counted: {seen:?}");
    assert!(
        seen.calls > seen.batches,
        "concurrent callers shared batches: {seen:?}"
    );
    assert_eq!(
        seen.per_bucket.iter().sum::<u64>(),
        seen.batches,
        "every batch is in one bucket: {seen:?}"
    );
}

/// Every kind of decision at once: a takeover of a retryable failure (an update of its effect
/// under the next token), new reservations (inserts into the unique index), a retry of a
/// completed effect (a link) and a collision (a queue item), sharing batches with their journal
/// entries; each is decided as it would be alone.
pub async fn every_kind_of_decision_shares_a_batch(b: &Backend) {
    let store = b.open().await;
    let (_, retried) = receive(&store, 1000, "re_retry", "{}").await;
    let retried = retried.expect("decided").reservation.expect("reserved");
    store
        .fail(&retried.effect, 1, true, "timeout", t0())
        .await
        .expect("a retryable failure");
    let (_, done) = receive(&store, 1002, "re_done", "{}").await;
    let done = done.expect("decided").reservation.expect("reserved");
    store
        .complete(&done.effect, 1, r#"{"refund":"re_done"}"#, t0())
        .await
        .expect("completed");

    const NEW: usize = 24;
    let barrier = Arc::new(tokio::sync::Barrier::new(NEW + 3));
    let mut tasks = Vec::new();
    for n in 2000..2000 + NEW + 3 {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let (key, amount) = match n {
                2000 => ("re_retry".to_owned(), "1000"),
                2001 => ("re_done".to_owned(), "1000"),
                2002 => ("re_done".to_owned(), "2000"),
                _ => (format!("re_new_{n}"), "1000"),
            };
            let mut req = request(n, &key, "{}");
            if let Some(k) = req.key.as_mut() {
                k.discriminants
                    .insert("amount".to_owned(), amount.to_owned());
            }
            barrier.wait().await;
            let (_, decided) = store
                .journal_and_decide(reception(n), req, &strong_critical)
                .await
                .expect("journaled");
            (n, decided.expect("decided"))
        }));
    }
    for t in tasks {
        let (n, o) = t.await.expect("a caller");
        match n {
            2000 => {
                assert_eq!(o.decision.action, Action::Process, "the takeover");
                let r = o.reservation.expect("the takeover's reservation");
                assert_eq!((r.effect, r.fencing_token), (retried.effect.clone(), 2));
            }
            2001 => {
                assert_eq!(o.decision.action, Action::Ignore, "the retry");
                assert_eq!(o.effect.as_ref(), Some(&done.effect));
                assert_eq!(
                    o.existing_result.as_deref(),
                    Some(r#"{"refund":"re_done"}"#)
                );
            }
            2002 => {
                assert_eq!(o.decision.action, Action::Quarantine, "the collision");
                let item = o.queue_item.expect("a queue item");
                let stored = store.queue_item(&item).await.unwrap().expect("stored");
                assert_eq!(stored.existing_effect.as_ref(), Some(&done.effect));
            }
            _ => {
                assert_eq!(o.decision.action, Action::Process, "delivery {n}");
                assert_eq!(o.reservation.map(|r| r.fencing_token), Some(1));
            }
        }
    }
    let retried = store
        .effect(&retried.effect)
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(
        (retried.state, retried.fencing_token),
        (EffectState::Reserved, 2)
    );
    assert_batches_shared(&store);
}

/// Makes every write to `table` of a row where `refused` holds fail (an insert or an update),
/// as a constraint added under a running service would. `refused` is a condition on the row's
/// columns, spelled alike in SQLite's triggers (`NEW.` prefixed) and PostgreSQL's check.
async fn poison(b: &Backend, table: &str, refused: &str) {
    match b.kind {
        Kind::Sqlite => {
            let path = b.url.trim_start_matches("sqlite://");
            let conn = rusqlite::Connection::open(path).expect("open the test file");
            for event in ["INSERT", "UPDATE"] {
                conn.execute_batch(&format!(
                    "CREATE TRIGGER poison_{event} BEFORE {event} ON {table} WHEN NEW.{refused} \
                     BEGIN SELECT RAISE(ABORT, 'poisoned'); END;"
                ))
                .expect("create the trigger");
            }
        }
        Kind::Postgres => {
            oncegate_store::testing::pg_admin(&b.url)
                .await
                .batch_execute(&format!(
                    "ALTER TABLE {table} ADD CONSTRAINT poison CHECK (NOT ({refused}))"
                ))
                .await
                .expect("add the constraint");
        }
    }
}

const MEMBERS: usize = 32;

pub async fn a_member_that_fails_fails_alone(b: &Backend) {
    let store = b.open().await;
    // The proofs of decisions whose details are `{"poison":true}` (a proof is its delivery's
    // row, written with its journal entry or into it).
    poison(b, "deliveries", r#"details = '{"poison":true}'"#).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(MEMBERS));
    let mut tasks = Vec::new();
    for n in 0..MEMBERS {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            // Two poisoned members, one through each path.
            let details = if n == 6 || n == 11 {
                r#"{"poison":true}"#
            } else {
                "{}"
            };
            barrier.wait().await;
            let (id, decided) = receive(&store, n, &format!("re_{n}"), details).await;
            (n, id, decided)
        }));
    }
    for t in tasks {
        let (n, id, decided) = t.await.expect("a caller");
        // Journaled either way: every reception is.
        assert!(
            store.delivery(&id).await.unwrap().is_some(),
            "delivery {n} is journaled"
        );
        let scope = ResourceScope {
            tenant: "acme".into(),
            provider: "stripe".into(),
            env: "live".into(),
            event_type: "refund.created".into(),
            resource: format!("pay_{n}"),
        };
        let effects = store.resource_effects(&scope).await.unwrap();
        if n == 6 || n == 11 {
            assert!(decided.is_err(), "delivery {n} was poisoned: {decided:?}");
            assert!(store.proof(&id).await.unwrap().is_none(), "delivery {n}");
            assert!(
                effects.is_empty(),
                "nothing of delivery {n}'s decision is kept"
            );
        } else {
            let outcome = decided.unwrap_or_else(|e| panic!("delivery {n}: {e}"));
            assert_eq!(outcome.decision.action, Action::Process, "delivery {n}");
            // Decided once: one proof, one effect, one link, however often its batch ran.
            assert!(store.proof(&id).await.unwrap().is_some(), "delivery {n}");
            assert_eq!(effects.len(), 1, "delivery {n}");
            let effect = store.effect(&effects[0].id).await.unwrap().unwrap();
            assert_eq!(effect.deliveries.len(), 1, "delivery {n}");
        }
    }
    drop(store);
}

/// A journal entry that fails, alone or with its decision (one statement on PostgreSQL), is
/// answered its error; the members it shared a batch with are journaled and decided once.
pub async fn a_journal_entry_that_fails_fails_alone(b: &Backend) {
    let store = b.open().await;
    // The journal entries of deliveries 6 and 11.
    poison(b, "deliveries", "body_sha256 IN ('body-6', 'body-11')").await;
    let barrier = Arc::new(tokio::sync::Barrier::new(MEMBERS));
    let mut tasks = Vec::new();
    for n in 0..MEMBERS {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let answer = if n.is_multiple_of(2) {
                store
                    .journal_and_decide(
                        reception(n),
                        request(n, &format!("re_{n}"), "{}"),
                        &strong_critical,
                    )
                    .await
                    .map(|(id, decided)| (id, Some(decided)))
            } else {
                store.journal(reception(n)).await.map(|id| (id, None))
            };
            (n, answer)
        }));
    }
    for t in tasks {
        let (n, answer) = t.await.expect("a caller");
        if n == 6 || n == 11 {
            let e = answer.expect_err("a poisoned journal entry fails");
            // A rule refused it: permanent, not a 503 to retry.
            assert!(!e.is_unavailable(), "delivery {n} is refused for good: {e}");
            continue;
        }
        let (id, decided) = answer.unwrap_or_else(|e| panic!("delivery {n}: {e}"));
        assert!(
            store.delivery(&id).await.unwrap().is_some(),
            "delivery {n} is journaled"
        );
        if let Some(decided) = decided {
            let outcome = decided.unwrap_or_else(|e| panic!("delivery {n}: {e}"));
            assert_eq!(outcome.decision.action, Action::Process, "delivery {n}");
            assert!(store.proof(&id).await.unwrap().is_some(), "delivery {n}");
            let effect = outcome.effect.expect("a process has its effect");
            let effect = store.effect(&effect).await.unwrap().expect("the effect");
            assert_eq!(effect.deliveries.len(), 1, "delivery {n}");
        }
    }
    drop(store);
}

/// A reception journaled without an event type, decided with one, in a batch of callers, some
/// of whose keys collide (their decisions lose to each other and run again): each delivery's
/// entry ends with its decision's event type, as its proof does, and is journaled once.
pub async fn a_reception_is_journaled_with_its_decisions_event_type(b: &Backend) {
    let store = b.open().await;
    let barrier = Arc::new(tokio::sync::Barrier::new(MEMBERS));
    let mut tasks = Vec::new();
    for n in 0..MEMBERS {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let untyped = NewReception {
                event_type: None,
                ..reception(n)
            };
            barrier.wait().await;
            // Four callers per key.
            store
                .journal_and_decide(
                    untyped,
                    request(n, &format!("re_{}", n / 4), "{}"),
                    &strong_critical,
                )
                .await
        }));
    }
    let mut processed = 0;
    for (n, t) in tasks.into_iter().enumerate() {
        let (id, decided) = t.await.expect("a caller").expect("journaled");
        let outcome = decided.unwrap_or_else(|e| panic!("delivery {n}: {e}"));
        processed += usize::from(outcome.decision.action == Action::Process);
        let entry = store.delivery(&id).await.unwrap().expect("journaled");
        assert_eq!(
            entry.event_type.as_deref(),
            Some("refund.created"),
            "delivery {n}"
        );
        let proof = store.proof(&id).await.unwrap().expect("decided");
        assert_eq!(
            proof.event_type.as_deref(),
            Some("refund.created"),
            "delivery {n}"
        );
    }
    assert_eq!(processed, MEMBERS / 4, "one process per key");
    let listed = store
        .deliveries(&Default::default())
        .await
        .expect("the journal");
    assert_eq!(listed.len(), MEMBERS, "each reception journaled once");
    drop(store);
}

/// One journaled delivery decided by many callers at once (each through the store's own
/// path: the first joins a batch, the others read the delivery): one is answered its
/// decision, every other is refused as a conflict, and the delivery has that one proof.
pub async fn a_delivery_decided_by_many_callers_at_once_is_decided_once(b: &Backend) {
    let store = b.open().await;
    for round in 0..4 {
        let id = store.journal(reception(round)).await.expect("journaled");
        let barrier = Arc::new(tokio::sync::Barrier::new(MEMBERS / 4));
        let mut tasks = Vec::new();
        for n in 0..MEMBERS / 4 {
            let (store, barrier, id) = (store.clone(), barrier.clone(), id.clone());
            tasks.push(tokio::spawn(async move {
                let req = DecideRequest {
                    delivery: id,
                    key: None,
                    details_json: format!(r#"{{"caller":{n}}}"#),
                    ..request(round, "unused", "{}")
                };
                barrier.wait().await;
                store.decide(req, &strong_critical).await
            }));
        }
        let mut won = Vec::new();
        for t in tasks {
            match t.await.expect("a caller") {
                Ok(outcome) => won.push(outcome),
                Err(StoreError::Conflict(_)) => {}
                Err(e) => panic!("round {round}: a second decision must conflict, got {e}"),
            }
        }
        assert_eq!(won.len(), 1, "round {round}: decided once");
        let proof = store.proof(&id).await.unwrap().expect("its proof");
        assert_eq!(proof.action, won[0].decision.action, "round {round}");
    }
    drop(store);
}

/// A call alone takes only the round trips its work needs, the batch's commit in the last: a
/// decision two (its view, then its writes), a journal entry or a complete one (nothing to read
/// before writing); each is visible to another connection once answered. A refused entry fails
/// alone in its one round trip, and the next call runs on a connection left outside any
/// transaction. A store in process (SQLite) takes no round trip at all.
pub async fn a_call_alone_takes_only_the_round_trips_it_needs(b: &Backend) {
    let store = b.open().await;
    // A second store: its own connections, so what it reads has been committed.
    let other = b.open().await;
    poison(b, "deliveries", "body_sha256 = 'body-3'").await;
    let trip = match b.kind {
        Kind::Sqlite => 0,
        Kind::Postgres => 1,
    };
    let trips = || store.batch_sizes().snapshot().round_trips;

    let before = trips();
    let (id, decided) = store
        .journal_and_decide(reception(1), request(1, "re_1", "{}"), &strong_critical)
        .await
        .expect("journaled");
    let held = decided.expect("decided").reservation.expect("reserved");
    assert_eq!(trips() - before, 2 * trip, "a decision reads, then writes");
    assert!(
        other.proof(&id).await.unwrap().is_some(),
        "its proof committed"
    );

    let before = trips();
    store
        .complete(&held.effect, held.fencing_token, r#"{"ok":true}"#, t0())
        .await
        .expect("the holder completes");
    assert_eq!(trips() - before, trip, "a complete is one round trip");
    let effect = other
        .effect(&held.effect)
        .await
        .unwrap()
        .expect("the effect");
    assert_eq!(
        effect.state,
        EffectState::Completed,
        "the complete committed"
    );

    let before = trips();
    let journaled = store.journal(reception(2)).await.expect("journaled");
    assert_eq!(trips() - before, trip, "a journal entry is one round trip");
    assert!(
        other.delivery(&journaled).await.unwrap().is_some(),
        "the entry committed"
    );

    let before = trips();
    let e = store
        .journal(reception(3))
        .await
        .expect_err("a refused entry fails");
    assert!(!e.is_unavailable(), "refused for good: {e}");
    assert!(trips() - before >= trip, "it was sent");
    let after = store.journal(reception(4)).await.expect("the next entry");
    assert!(
        other.delivery(&after).await.unwrap().is_some(),
        "the next entry committed on its own"
    );
    drop((store, other));
}
