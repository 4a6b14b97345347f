//! Conformance scenarios for reconciliation (schema v2): effects keep their resource and
//! criticality, expired leases become verifications (critical) or takeovers (reversible),
//! attempts and evidence are recorded on queue items, and the invisible-losses table feeds the
//! report.

use std::collections::BTreeMap;
use std::sync::Arc;

use oncegate_core::ids::DeliveryId;
use oncegate_core::matrix::{self, Action, Confidence, Criticality, Decision, Keyed, Situation};
use oncegate_store::{
    DecideOutcome, DecideRequest, EffectKey, EffectState, Horizon, MissingOperation, NewReception,
    QueueStatus, ReconcileAttempt, Resolution, ResolutionOutcome, ResourceScope, Store, StoreError,
    StrategyRef, TenantFilter,
};
use time::{Duration, OffsetDateTime};

use crate::harness::Backend;

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

const LEASE: Duration = Duration::seconds(30);

fn matrix_for(
    criticality: Criticality,
    confidence: Confidence,
) -> impl Fn(&oncegate_store::PriorView) -> Decision + Clone + Send + Sync {
    move |view| {
        matrix::decide(&Situation::Identified {
            criticality,
            authority: true,
            breaker_open: false,
            transport: view.transport,
            key: Keyed {
                confidence,
                prior: view.prior,
                differences: view.differences.clone(),
            },
        })
    }
}

fn key(value: &str, confidence: Confidence) -> EffectKey {
    EffectKey {
        strategy: StrategyRef {
            name: "refund-fingerprint".to_owned(),
            version: 1,
            level: "fingerprint".to_owned(),
        },
        value: value.to_owned(),
        scope: Default::default(),
        confidence,
        horizon: Horizon::Durable,
        discriminants: [("/data/amount".to_owned(), "1500".to_owned())]
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
    }
}

/// Journals and decides one delivery about `resource`.
async fn deliver(
    store: &Arc<Store>,
    body: &str,
    at: OffsetDateTime,
    resource: &str,
    critical: bool,
    key: EffectKey,
) -> (DeliveryId, DecideOutcome) {
    let id = store
        .journal(NewReception {
            tenant: "acme".to_owned(),
            provider: "payflow".to_owned(),
            env: "live".to_owned(),
            event_type: Some("refund.created".to_owned()),
            received_at: at,
            size: body.len() as u64,
            body_sha256: format!("sha-of-{body}"),
            headers_json: "{}".to_owned(),
            payload: Some(body.as_bytes().to_vec()),
            transport_key: None,
            correlation_id: None,
        })
        .await
        .expect("journal");
    let criticality = if critical {
        Criticality::Critical
    } else {
        Criticality::Reversible
    };
    let matrix = matrix_for(criticality, key.confidence);
    let outcome = store
        .decide(
            DecideRequest {
                delivery: id.clone(),
                event_type: Some("refund.created".to_owned()),
                key: Some(key),
                lease: LEASE,
                details_json: "{}".to_owned(),
                now: at,
                resource: Some(resource.to_owned()),
                critical,
            },
            &matrix,
        )
        .await
        .expect("decide");
    (id, outcome)
}

fn scope(resource: &str) -> ResourceScope {
    ResourceScope {
        tenant: "acme".to_owned(),
        provider: "payflow".to_owned(),
        env: "live".to_owned(),
        event_type: "refund.created".to_owned(),
        resource: resource.to_owned(),
    }
}

pub async fn effects_are_listed_by_resource(b: &Backend) {
    let store = b.open().await;
    let (_, a) = deliver(
        &store,
        "a",
        t0(),
        "pay_1",
        true,
        key("k1", Confidence::Strong),
    )
    .await;
    let (_, other) = deliver(
        &store,
        "b",
        t0(),
        "pay_2",
        false,
        key("k2", Confidence::Strong),
    )
    .await;
    assert_eq!(a.decision.action, Action::Process);
    let listed = store.resource_effects(&scope("pay_1")).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(Some(&listed[0].id), a.effect.as_ref());
    assert_eq!(listed[0].resource.as_deref(), Some("pay_1"));
    assert!(listed[0].critical);
    let listed = store.resource_effects(&scope("pay_2")).await.unwrap();
    assert_eq!(Some(&listed[0].id), other.effect.as_ref());
    assert!(!listed[0].critical);
    assert!(store
        .resource_effects(&scope("pay_3"))
        .await
        .unwrap()
        .is_empty());
    let seen = store
        .resources_seen("payflow", "refund.created", t0())
        .await
        .unwrap();
    assert_eq!(seen, vec![scope("pay_1"), scope("pay_2")]);
    assert!(store
        .resources_seen("payflow", "refund.created", t0() + Duration::seconds(1))
        .await
        .unwrap()
        .is_empty());
}

pub async fn expired_leases_verify_critical_and_release_reversible(b: &Backend) {
    let store = b.open().await;
    let (crit_delivery, crit) = deliver(
        &store,
        "c",
        t0(),
        "pay_1",
        true,
        key("k1", Confidence::Strong),
    )
    .await;
    let (_, rev) = deliver(
        &store,
        "r",
        t0(),
        "pay_2",
        false,
        key("k2", Confidence::Strong),
    )
    .await;
    let crit_res = crit.reservation.clone().unwrap();
    let rev_res = rev.reservation.clone().unwrap();
    let late = t0() + LEASE + Duration::seconds(1);
    let mut moved = store.expire_leases(late).await.unwrap();
    moved.sort();
    let mut expected = vec![crit_res.effect.clone(), rev_res.effect.clone()];
    expected.sort();
    assert_eq!(moved, expected);
    assert!(store.expire_leases(late).await.unwrap().is_empty());

    // Critical: unknown, same token, and one "verify before retry" item.
    let e = store.effect(&crit_res.effect).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Unknown);
    assert_eq!(e.fencing_token, crit_res.fencing_token);
    let items = store.open_reconcile_items(10, None).await.unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].delivery, crit_delivery);
    assert_eq!(items[0].existing_effect.as_ref(), Some(&crit_res.effect));
    assert_eq!(items[0].resource.as_deref(), Some("pay_1"));
    assert!(items[0].reason.contains("verify before retry"));

    // Reversible: released under the next token; the old holder is stale.
    let e = store.effect(&rev_res.effect).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Released);
    assert_eq!(e.fencing_token, rev_res.fencing_token + 1);
    match store
        .complete(&rev_res.effect, rev_res.fencing_token, "{}", late)
        .await
    {
        Err(StoreError::StaleToken { .. }) => {}
        other => panic!("expected StaleToken, got {other:?}"),
    }
    let claim = store
        .claim("w", &TenantFilter::All, LEASE, late)
        .await
        .unwrap()
        .expect("the released effect is claimable");
    assert_eq!(claim.effect, rev_res.effect);
    assert_eq!(claim.fencing_token, rev_res.fencing_token + 2);
    assert!(store
        .claim("w", &TenantFilter::All, LEASE, late)
        .await
        .unwrap()
        .is_none());
}

/// The lease sweeper reads the leases that expired since its last pass's bound, less a margin:
/// a completed effect's lease (a complete keeps it) is read and left alone, and a reservation
/// whose lease ended before the last pass but was written after it (a transaction that
/// committed late) is still released by the next pass.
pub async fn the_lease_sweep_reads_from_its_last_bound(b: &Backend) {
    let store = b.open().await;
    let (_, done) = deliver(
        &store,
        "d",
        t0(),
        "pay_1",
        false,
        key("k1", Confidence::Strong),
    )
    .await;
    let done = done.reservation.unwrap();
    store
        .complete(&done.effect, done.fencing_token, "{}", t0())
        .await
        .unwrap();
    let first = t0() + LEASE + Duration::seconds(1);
    assert!(store.expire_leases(first).await.unwrap().is_empty());
    let straggler_at = first - LEASE - Duration::seconds(5);
    let (_, straggler) = deliver(
        &store,
        "s",
        straggler_at,
        "pay_2",
        false,
        key("k2", Confidence::Strong),
    )
    .await;
    let straggler = straggler.reservation.unwrap();
    assert!(straggler.lease_until < first);
    assert_eq!(
        store
            .expire_leases(first + Duration::seconds(1))
            .await
            .unwrap(),
        vec![straggler.effect.clone()]
    );
    let e = store.effect(&done.effect).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Completed);
    assert_eq!(
        store
            .effect(&straggler.effect)
            .await
            .unwrap()
            .unwrap()
            .state,
        EffectState::Released
    );
    // A sibling whose clock is behind neither reads the straggler again nor moves the bound
    // back.
    assert!(store.expire_leases(first).await.unwrap().is_empty());
    let claim = store
        .claim("w", &TenantFilter::All, LEASE, first + Duration::seconds(2))
        .await
        .unwrap()
        .expect("the released straggler is claimable");
    assert_eq!(claim.effect, straggler.effect);
}

pub async fn attempts_and_evidence_are_recorded(b: &Backend) {
    let store = b.open().await;
    let weak = || key("fp", Confidence::Weak);
    let (_, first) = deliver(&store, "1", t0(), "pay_1", true, weak()).await;
    let r = first.reservation.unwrap();
    store
        .complete(&r.effect, r.fencing_token, "{}", t0())
        .await
        .unwrap();
    let (second, queued) = deliver(&store, "2", t0(), "pay_1", true, weak()).await;
    assert_eq!(queued.decision.action, Action::Reconcile);
    let item = queued.queue_item.unwrap();

    let at = t0() + Duration::seconds(5);
    let recorded = store
        .record_reconcile_attempts(&[(
            item.clone(),
            ReconcileAttempt {
                at,
                error: "the authority answered HTTP 503".to_owned(),
                evidence: None,
            },
        )])
        .await
        .unwrap();
    assert_eq!(recorded, vec![true]);
    let after = store.queue_item(&item).await.unwrap().unwrap();
    assert_eq!(after.status, QueueStatus::Open);
    assert_eq!(after.reconcile_attempts, 1);
    assert_eq!(after.last_attempt_at, Some(at));
    assert_eq!(
        after.last_error.as_deref(),
        Some("the authority answered HTTP 503")
    );
    let report = store.report(&TenantFilter::All, t0()).await.unwrap();
    assert_eq!(report.total.reconcile_pending, 1);

    let resolved = store
        .resolve_with_evidence(
            &item,
            Resolution {
                outcome: ResolutionOutcome::Distinct,
                authoritative_ref: Some("re_B".to_owned()),
                note: "unmatched operation".to_owned(),
                by: "reconciler".to_owned(),
                at,
            },
            r#"{"operations":[{"reference":"re_A"},{"reference":"re_B"}]}"#,
        )
        .await
        .unwrap();
    assert_eq!(resolved.status, QueueStatus::Resolved);
    assert!(resolved
        .resolution_evidence
        .as_deref()
        .unwrap()
        .contains("re_B"));
    let released = resolved.resolution.unwrap().effect.unwrap();
    let e = store.effect(&released).await.unwrap().unwrap();
    assert_eq!(e.authoritative_ref.as_deref(), Some("re_B"));
    assert_eq!(e.resource.as_deref(), Some("pay_1"));
    assert_eq!(e.first_delivery, second);
    assert_eq!(
        store.resource_effects(&scope("pay_1")).await.unwrap().len(),
        2
    );
    // A resolved item takes no more attempts.
    let late = ReconcileAttempt {
        at: at + Duration::seconds(1),
        error: "late".to_owned(),
        evidence: None,
    };
    assert_eq!(
        store
            .record_reconcile_attempts(&[(item.clone(), late)])
            .await
            .unwrap(),
        vec![false]
    );
    let unchanged = store.queue_item(&item).await.unwrap().unwrap();
    assert_eq!(unchanged.reconcile_attempts, 1);
    assert_eq!(unchanged.last_attempt_at, Some(at));
}

/// A pass's attempts go in one write: each open item takes its own, an item resolved meanwhile
/// takes none and refuses nothing of the rest; and the effects the items wait on are read in
/// one look-up, a reservation whose lease passed reading as unknown.
pub async fn a_pass_records_its_attempts_together(b: &Backend) {
    let store = b.open().await;
    let mut items = Vec::new();
    let mut effects = Vec::new();
    for n in 0..5 {
        let resource = format!("pay_{n}");
        let (_, first) = deliver(
            &store,
            "a",
            t0(),
            &resource,
            true,
            key(&resource, Confidence::Weak),
        )
        .await;
        effects.push(first.reservation.unwrap());
        let (_, queued) = deliver(
            &store,
            "b",
            t0(),
            &resource,
            true,
            key(&resource, Confidence::Weak),
        )
        .await;
        items.push(queued.queue_item.expect("a collision is queued"));
    }
    let at = t0() + Duration::seconds(5);
    store
        .resolve(
            &items[2],
            Resolution {
                outcome: ResolutionOutcome::Duplicate,
                authoritative_ref: None,
                note: "settled by a person".to_owned(),
                by: "ops".to_owned(),
                at,
            },
        )
        .await
        .unwrap();
    let attempts: Vec<_> = items
        .iter()
        .enumerate()
        .map(|(n, id)| {
            (
                id.clone(),
                ReconcileAttempt {
                    at,
                    error: format!("attempt on item {n}"),
                    evidence: (n == 4).then(|| r#"{"verdict":"inconclusive"}"#.to_owned()),
                },
            )
        })
        .collect();
    let recorded = store.record_reconcile_attempts(&attempts).await.unwrap();
    assert_eq!(recorded, vec![true, true, false, true, true]);
    for (n, id) in items.iter().enumerate() {
        let item = store.queue_item(id).await.unwrap().unwrap();
        if n == 2 {
            assert_eq!(item.status, QueueStatus::Resolved);
            assert_eq!(
                item.reconcile_attempts, 0,
                "a resolved item takes no attempt"
            );
            continue;
        }
        assert_eq!(item.status, QueueStatus::Open);
        assert_eq!(item.reconcile_attempts, 1);
        assert_eq!(item.last_attempt_at, Some(at));
        assert_eq!(item.last_error, Some(format!("attempt on item {n}")));
        assert_eq!(
            item.last_evidence.is_some(),
            n == 4,
            "each attempt keeps its own evidence"
        );
    }
    assert!(store
        .record_reconcile_attempts(&[])
        .await
        .unwrap()
        .is_empty());

    // The effects' states: the first completed, the rest reserved; read after their leases
    // passed, those reservations read as unknown. An id with no effect is absent.
    store
        .complete(&effects[0].effect, effects[0].fencing_token, "{}", t0())
        .await
        .unwrap();
    let mut ids: Vec<_> = effects.iter().map(|r| r.effect.clone()).collect();
    ids.push(oncegate_core::ids::EffectId::from_u128(7));
    let within = store
        .effect_states(&ids, t0() + Duration::seconds(1))
        .await
        .unwrap();
    let after = store.effect_states(&ids, t0() + LEASE).await.unwrap();
    assert_eq!(within.len(), 5, "{within:?}");
    assert_eq!(within[&ids[0]], EffectState::Completed);
    assert_eq!(after[&ids[0]], EffectState::Completed);
    for id in &ids[1..5] {
        assert_eq!(within[id], EffectState::Reserved);
        assert_eq!(
            after[id],
            EffectState::Unknown,
            "a lease that passed reads as unknown"
        );
    }
    assert!(!after.contains_key(&ids[5]));
    assert!(store.effect_states(&[], t0()).await.unwrap().is_empty());
}

pub async fn a_verified_unknown_outcome_is_completed_not_rerun(b: &Backend) {
    let store = b.open().await;
    let (_, crashed) = deliver(
        &store,
        "c",
        t0(),
        "pay_1",
        true,
        key("k1", Confidence::Strong),
    )
    .await;
    let r = crashed.reservation.unwrap();
    let late = t0() + LEASE + Duration::seconds(1);
    store.expire_leases(late).await.unwrap();
    let item = store
        .open_reconcile_items(10, None)
        .await
        .unwrap()
        .remove(0);
    store
        .resolve_with_evidence(
            &item.id,
            Resolution {
                outcome: ResolutionOutcome::Duplicate,
                authoritative_ref: Some("re_A".to_owned()),
                note: "the authority lists it".to_owned(),
                by: "reconciler".to_owned(),
                at: late,
            },
            "{}",
        )
        .await
        .unwrap();
    let e = store.effect(&r.effect).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Completed);
    assert_eq!(e.authoritative_ref.as_deref(), Some("re_A"));
    assert!(store
        .claim("w", &TenantFilter::All, LEASE, late)
        .await
        .unwrap()
        .is_none());
}

pub async fn missing_operations_reach_the_report(b: &Backend) {
    let store = b.open().await;
    deliver(
        &store,
        "a",
        t0(),
        "pay_1",
        true,
        key("k1", Confidence::Strong),
    )
    .await;
    let missing = |r: &str| MissingOperation {
        reference: r.to_owned(),
        discriminants: BTreeMap::new(),
    };
    let n = store
        .record_missing(&scope("pay_1"), &[missing("re_X"), missing("re_Y")], t0())
        .await
        .unwrap();
    assert_eq!(n, 2);
    let report = store.report(&TenantFilter::All, t0()).await.unwrap();
    assert_eq!(report.total.missing_at_source_check, 2);
    assert_eq!(report.total.unexplained_gap, 0);
    // The next sweep finds only one still missing; the other was settled.
    store
        .record_missing(
            &scope("pay_1"),
            &[missing("re_Y")],
            t0() + Duration::seconds(1),
        )
        .await
        .unwrap();
    let report = store.report(&TenantFilter::All, t0()).await.unwrap();
    assert_eq!(report.total.missing_at_source_check, 1);
    store
        .record_missing(&scope("pay_1"), &[], t0() + Duration::seconds(2))
        .await
        .unwrap();
    let report = store.report(&TenantFilter::All, t0()).await.unwrap();
    assert_eq!(report.total.missing_at_source_check, 0);

    // Settled sightings are observations: purge removes them past the proof retention, and
    // keeps one that is still open however old it is.
    let late = t0() + Duration::days(31);
    store
        .record_missing(
            &scope("pay_2"),
            &[missing("re_Z")],
            t0() + Duration::seconds(3),
        )
        .await
        .unwrap();
    let policy = oncegate_store::PurgePolicy {
        payload_retention: Duration::days(1),
        proof_retention: Duration::days(30),
    };
    assert_eq!(
        store
            .purge(&policy, late, false)
            .await
            .unwrap()
            .observations,
        2
    );
    assert_eq!(
        store
            .purge(&policy, late, false)
            .await
            .unwrap()
            .observations,
        0
    );
    let report = store.report(&TenantFilter::All, t0()).await.unwrap();
    assert_eq!(
        report.total.missing_at_source_check, 1,
        "the open one stays"
    );
}

pub async fn items_that_keep_failing_go_to_the_back(b: &Backend) {
    let store = b.open().await;
    let weak = || key("fp", Confidence::Weak);
    let (_, first) = deliver(&store, "1", t0(), "pay_1", true, weak()).await;
    let r = first.reservation.unwrap();
    store
        .complete(&r.effect, r.fencing_token, "{}", t0())
        .await
        .unwrap();
    let (older, _) = deliver(&store, "2", t0(), "pay_1", true, weak()).await;
    let (newer, _) = deliver(
        &store,
        "3",
        t0() + Duration::seconds(1),
        "pay_1",
        true,
        weak(),
    )
    .await;
    let order = |items: Vec<oncegate_store::QueueItem>| -> Vec<DeliveryId> {
        items.into_iter().map(|i| i.delivery).collect()
    };
    let items = store.open_reconcile_items(10, None).await.unwrap();
    assert_eq!(order(items.clone()), vec![older.clone(), newer.clone()]);
    store
        .record_reconcile_attempts(&[(
            items[0].id.clone(),
            ReconcileAttempt {
                at: t0() + Duration::seconds(5),
                error: "no answer".to_owned(),
                evidence: None,
            },
        )])
        .await
        .unwrap();
    let items = store.open_reconcile_items(10, None).await.unwrap();
    assert_eq!(order(items), vec![newer.clone(), older.clone()]);
    // A worker whose shortest wait has not passed since the attempt does not read that item;
    // the one never attempted is read whatever the bound.
    let by = |at| store.open_reconcile_items(10, Some(at));
    assert_eq!(
        order(by(t0() + Duration::seconds(4)).await.unwrap()),
        vec![newer.clone()]
    );
    assert_eq!(
        order(by(t0() - Duration::days(1)).await.unwrap()),
        vec![newer.clone()]
    );
    assert_eq!(
        order(by(t0() + Duration::seconds(5)).await.unwrap()),
        vec![newer, older],
        "an attempt at the bound itself is read"
    );
    assert_eq!(
        store.open_reconcile_items(1, None).await.unwrap().len(),
        1,
        "the limit holds"
    );
}
