//! The scenarios themselves, each a function of a backend.

use std::collections::BTreeMap;
use std::sync::Arc;

use oncegate_core::ids::{DeliveryId, EffectId};
use oncegate_core::matrix::{
    self, Action, Confidence, Criticality, Decision, Flag, Keyed, Layer, Prior, Rejection,
    Situation, TransportMatch,
};
use oncegate_store::{
    DecideOutcome, DecideRequest, DeliveryFilter, EffectKey, EffectState, Horizon, LinkKind,
    NewReception, Proposal, PurgePolicy, QueueFilter, QueueKind, QueueStatus, Resolution,
    ResolutionOutcome, Store, StoreError, StrategyRef, TenantFilter, TransportKey,
    TransportStrength,
};
use time::{Duration, OffsetDateTime};

use crate::harness::{Backend, Kind};

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

const LEASE: Duration = Duration::seconds(30);

/// The real matrix for an identified delivery of a type with this criticality and key strength.
fn matrix_for(
    criticality: Criticality,
    confidence: Confidence,
) -> impl Fn(&oncegate_store::PriorView) -> Decision + Clone + Send + Sync {
    move |view| {
        matrix::decide(&Situation::Identified {
            criticality,
            authority: false,
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

fn strong_critical() -> impl Fn(&oncegate_store::PriorView) -> Decision + Clone + Send + Sync {
    matrix_for(Criticality::Critical, Confidence::Strong)
}

fn rejected(_: &oncegate_store::PriorView) -> Decision {
    matrix::decide(&Situation::Rejected(Rejection {
        code: "bad_signature".into(),
        message: "the signature does not match".into(),
    }))
}

fn no_key_critical(_: &oncegate_store::PriorView) -> Decision {
    matrix::decide(&Situation::NoKey {
        criticality: Criticality::Critical,
        missing: "/data/id".into(),
    })
}

struct Delivery<'a> {
    tenant: &'a str,
    body: &'a str,
    transport: Option<&'a str>,
    at: OffsetDateTime,
}

impl<'a> Delivery<'a> {
    fn new(body: &'a str, at: OffsetDateTime) -> Self {
        Delivery {
            tenant: "acme",
            body,
            transport: None,
            at,
        }
    }
}

fn reception(d: &Delivery<'_>) -> NewReception {
    NewReception {
        tenant: d.tenant.to_owned(),
        provider: "stripe".to_owned(),
        env: "live".to_owned(),
        event_type: Some("refund.created".to_owned()),
        received_at: d.at,
        size: d.body.len() as u64,
        body_sha256: format!("sha-of-{}", d.body),
        headers_json: r#"{"content-type":"application/json"}"#.to_owned(),
        payload: Some(d.body.as_bytes().to_vec()),
        transport_key: d.transport.map(|t| TransportKey {
            value: t.to_owned(),
            strength: TransportStrength::Strong,
        }),
        correlation_id: Some(format!("corr-{}", d.body)),
    }
}

fn key(
    value: &str,
    confidence: Confidence,
    horizon: Horizon,
    discriminants: &[(&str, &str)],
) -> EffectKey {
    EffectKey {
        strategy: StrategyRef {
            name: "refund_ref".to_owned(),
            version: 2,
            level: "business_ref".to_owned(),
        },
        value: value.to_owned(),
        scope: Default::default(),
        confidence,
        horizon,
        discriminants: discriminants
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn strong(value: &str) -> EffectKey {
    key(
        value,
        Confidence::Strong,
        Horizon::For(Duration::days(3)),
        &[("amount", "1000"), ("currency", "EUR")],
    )
}

/// A strong key with a horizon of one hour and no discriminants.
fn for_an_hour(value: &str) -> EffectKey {
    key(
        value,
        Confidence::Strong,
        Horizon::For(Duration::hours(1)),
        &[],
    )
}

fn request(delivery: &DeliveryId, key: Option<EffectKey>, now: OffsetDateTime) -> DecideRequest {
    DecideRequest {
        delivery: delivery.clone(),
        event_type: Some("refund.created".to_owned()),
        key,
        lease: LEASE,
        details_json: r#"{"skipped":[]}"#.to_owned(),
        now,
        resource: Some("pay_1".to_owned()),
        critical: true,
    }
}

/// Journals a delivery and decides it at its reception time.
async fn deliver(
    store: &Arc<Store>,
    d: Delivery<'_>,
    key: Option<EffectKey>,
    matrix: &dyn oncegate_store::Matrix,
) -> (DeliveryId, DecideOutcome) {
    let id = store.journal(reception(&d)).await.expect("journal");
    let outcome = store
        .decide(request(&id, key, d.at), matrix)
        .await
        .expect("decide");
    (id, outcome)
}

fn reservation(o: &DecideOutcome) -> (EffectId, u64) {
    let r = o
        .reservation
        .as_ref()
        .expect("a process answer carries a reservation");
    (r.effect.clone(), r.fencing_token)
}

// -------------------------------------------------------------------------------------------------

pub async fn journal_and_read_back(b: &Backend) {
    let store = b.open().await;
    store.ping().await.expect("ping");
    let mut d = Delivery::new("r1", t0());
    d.transport = Some("evt_1");
    let (id, outcome) = deliver(&store, d, Some(strong("re_1")), &strong_critical()).await;
    assert_eq!(outcome.decision.action, Action::Process);
    assert_eq!(outcome.prior, Prior::None);

    let delivery = store.delivery(&id).await.unwrap().expect("the delivery");
    assert_eq!(delivery.tenant, "acme");
    assert_eq!(delivery.received_at, t0());
    assert_eq!(delivery.payload.as_deref(), Some(&b"r1"[..]));
    assert_eq!(
        delivery.transport_key.as_ref().map(|k| k.value.as_str()),
        Some("evt_1")
    );

    let proof = store.proof(&id).await.unwrap().expect("the proof");
    assert_eq!(proof.action, Action::Process);
    assert_eq!(proof.rule, "R3");
    assert_eq!(proof.matrix_version, matrix::MATRIX_VERSION);
    assert_eq!(
        proof
            .strategy
            .as_ref()
            .map(|s| (s.name.as_str(), s.version)),
        Some(("refund_ref", 2))
    );
    assert_eq!(proof.key.as_deref(), Some("re_1"));
    assert_eq!(proof.confidence, Some(Confidence::Strong));
    assert_eq!(proof.effect, outcome.effect);
    assert_eq!(proof.details_json, r#"{"skipped":[]}"#);
    assert!(proof.reason.starts_with("Processed"), "{}", proof.reason);

    let (effect, _) = reservation(&outcome);
    let record = store.effect(&effect).await.unwrap().expect("the effect");
    assert_eq!(record.state, EffectState::Reserved);
    assert_eq!(record.fencing_token, 1);
    assert_eq!(record.first_delivery, id);
    assert_eq!(
        record.discriminants.get("amount").map(String::as_str),
        Some("1000")
    );
    assert_eq!(record.deliveries.len(), 1);
    assert_eq!(record.deliveries[0].kind, LinkKind::Reserved);

    assert!(store
        .delivery(&DeliveryId::from_u128(42))
        .await
        .unwrap()
        .is_none());
    assert!(store
        .proof(&DeliveryId::from_u128(42))
        .await
        .unwrap()
        .is_none());
    assert!(store
        .effect(&EffectId::from_u128(42))
        .await
        .unwrap()
        .is_none());
}

/// Decides every request at once (each task waits for all the others at a barrier, then
/// decides on its store) and returns the outcomes in the requests' order.
async fn decide_at_once<M>(
    requests: Vec<(Arc<Store>, DecideRequest)>,
    matrix: M,
) -> Vec<DecideOutcome>
where
    M: oncegate_store::Matrix + Clone + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(requests.len()));
    let mut tasks = Vec::new();
    for (store, request) in requests {
        let (barrier, matrix) = (barrier.clone(), matrix.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store.decide(request, &matrix).await.expect("decide")
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    outcomes
}

/// The position of the one outcome that is `process`, failing unless there is exactly one.
fn the_one_winner(outcomes: &[DecideOutcome]) -> usize {
    let winners: Vec<usize> = (0..outcomes.len())
        .filter(|&i| outcomes[i].decision.action == Action::Process)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one process: {:?}",
        outcomes
            .iter()
            .map(|o| o.decision.action)
            .collect::<Vec<_>>()
    );
    winners[0]
}

pub async fn racing_reservations_have_exactly_one_winner(b: &Backend) {
    // Two stores on the same database, as two instances of the service would be.
    let stores = [b.open().await, b.open().await];
    let mut ids = Vec::new();
    for i in 0..64 {
        let body = format!("refund-{i}");
        let d = Delivery::new(&body, t0());
        ids.push(stores[i % 2].journal(reception(&d)).await.unwrap());
    }
    let requests = (ids.iter().enumerate())
        .map(|(i, id)| {
            let request = request(id, Some(strong("re_race")), t0());
            (stores[i % 2].clone(), request)
        })
        .collect();
    let decided = decide_at_once(requests, strong_critical()).await;
    let won = the_one_winner(&decided);
    let outcomes: Vec<(DeliveryId, DecideOutcome)> = ids.into_iter().zip(decided).collect();
    let (winner_delivery, winner) = (&outcomes[won].0, &outcomes[won].1);
    let (effect, token) = reservation(winner);
    assert_eq!(token, 1);
    for (_, o) in outcomes
        .iter()
        .filter(|(_, o)| o.decision.action != Action::Process)
    {
        assert_eq!(
            o.decision.action,
            Action::Ignore,
            "{:?} {}",
            o.prior,
            o.decision.reason
        );
        assert_eq!(o.decision.layer, Some(Layer::Effect));
        assert_eq!(o.prior, Prior::InProgress);
        assert_eq!(o.effect.as_ref(), Some(&effect));
        assert_eq!(o.reference_delivery.as_ref(), Some(winner_delivery));
        assert!(o.reservation.is_none());
    }
    let record = stores[0].effect(&effect).await.unwrap().unwrap();
    assert_eq!(
        record.deliveries.len(),
        64,
        "every delivery is linked to the one effect"
    );
    let report = stores[1].report(&TenantFilter::All, t0()).await.unwrap();
    assert_eq!(
        (
            report.total.received,
            report.total.processed,
            report.total.ignored_effect
        ),
        (64, 1, 63)
    );
    assert_eq!(report.total.unexplained_gap, 0);
}

pub async fn stale_tokens_are_refused(b: &Backend) {
    let store = b.open().await;
    let (_, outcome) = deliver(
        &store,
        Delivery::new("a", t0()),
        Some(strong("re_s")),
        &strong_critical(),
    )
    .await;
    let (effect, token) = reservation(&outcome);
    let at = t0() + Duration::seconds(1);
    match store.complete(&effect, token + 1, "{}", at).await {
        Err(StoreError::StaleToken {
            presented, current, ..
        }) => assert_eq!((presented, current), (2, 1)),
        other => panic!("expected StaleToken, got {other:?}"),
    }
    match store.heartbeat(&effect, 0, LEASE, at).await {
        Err(StoreError::StaleToken { .. }) => {}
        other => panic!("expected StaleToken, got {other:?}"),
    }
    let until = store
        .heartbeat(&effect, token, Duration::seconds(60), at)
        .await
        .unwrap();
    assert_eq!(until, at + Duration::seconds(60));
    store
        .complete(&effect, token, r#"{"refund":"re_s","rules":"v2"}"#, at)
        .await
        .unwrap();
    // An outcome is recorded once: the same holder cannot overwrite it.
    match store.fail(&effect, token, true, "boom", at).await {
        Err(StoreError::LeaseLost { .. }) => {}
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    let (_, again) = deliver(
        &store,
        Delivery::new("b", at),
        Some(strong("re_s")),
        &strong_critical(),
    )
    .await;
    assert_eq!(again.decision.action, Action::Ignore);
    assert_eq!(again.prior, Prior::Completed);
    assert_eq!(
        again.existing_result.as_deref(),
        Some(r#"{"refund":"re_s","rules":"v2"}"#)
    );
    let record = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(record.state, EffectState::Completed);
}

pub async fn a_retryable_failure_is_taken_over_with_the_next_token(b: &Backend) {
    let store = b.open().await;
    let (d1, first) = deliver(
        &store,
        Delivery::new("a", t0()),
        Some(strong("re_f")),
        &strong_critical(),
    )
    .await;
    let (effect, token) = reservation(&first);
    store
        .fail(
            &effect,
            token,
            true,
            "provider timed out",
            t0() + Duration::seconds(2),
        )
        .await
        .unwrap();

    let at = t0() + Duration::seconds(5);
    let (_, retry) = deliver(
        &store,
        Delivery::new("b", at),
        Some(strong("re_f")),
        &strong_critical(),
    )
    .await;
    assert_eq!(retry.decision.action, Action::Process);
    assert!(retry.decision.has(Flag::RetryAfterFailure));
    assert_eq!(retry.prior, Prior::Failed { retryable: true });
    assert_eq!(retry.reference_delivery.as_ref(), Some(&d1));
    let (same, next) = reservation(&retry);
    assert_eq!(same, effect, "a retry takes over the same effect");
    assert_eq!(next, token + 1);

    match store.complete(&effect, token, "{}", at).await {
        Err(StoreError::StaleToken { current, .. }) => assert_eq!(current, next),
        other => panic!("expected StaleToken, got {other:?}"),
    }
    store
        .complete(&effect, next, r#"{"ok":true}"#, at)
        .await
        .unwrap();

    // A permanent failure is not retried: the next delivery is ignored with the error.
    let (_, other) = deliver(
        &store,
        Delivery::new("c", at),
        Some(strong("re_p")),
        &strong_critical(),
    )
    .await;
    let (e2, t2) = reservation(&other);
    store.fail(&e2, t2, false, "card closed", at).await.unwrap();
    let (_, after) = deliver(
        &store,
        Delivery::new("d", at),
        Some(strong("re_p")),
        &strong_critical(),
    )
    .await;
    assert_eq!(after.decision.action, Action::Ignore);
    assert_eq!(after.existing_result.as_deref(), Some("card closed"));
}

pub async fn an_expired_lease_reads_as_unknown_and_is_never_rerun_blindly(b: &Backend) {
    let store = b.open().await;
    let (_, first) = deliver(
        &store,
        Delivery::new("a", t0()),
        Some(strong("re_l")),
        &strong_critical(),
    )
    .await;
    let (effect, token) = reservation(&first);

    // Within the lease, another delivery is ignored: the effect is under way.
    let (_, during) = deliver(
        &store,
        Delivery::new("b", t0() + Duration::seconds(10)),
        Some(strong("re_l")),
        &strong_critical(),
    )
    .await;
    assert_eq!(during.decision.action, Action::Ignore);
    assert_eq!(during.prior, Prior::InProgress);

    // Past the lease, before any sweep: read as unknown on access; critical → reconcile.
    let late = t0() + LEASE + Duration::seconds(1);
    let (_, after) = deliver(
        &store,
        Delivery::new("c", late),
        Some(strong("re_l")),
        &strong_critical(),
    )
    .await;
    assert_eq!(after.prior, Prior::Unknown);
    assert_eq!(after.decision.action, Action::Reconcile);
    assert!(after.reservation.is_none());
    assert!(after.queue_item.is_some());
    match store.complete(&effect, token, "{}", late).await {
        Err(StoreError::LeaseLost { .. }) => {}
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    match store.heartbeat(&effect, token, LEASE, late).await {
        Err(StoreError::LeaseLost { .. }) => {}
        other => panic!("expected LeaseLost, got {other:?}"),
    }

    // The sweep records it; nothing is re-run.
    assert_eq!(
        store
            .expire_leases(late - Duration::seconds(5))
            .await
            .unwrap(),
        Vec::<EffectId>::new()
    );
    assert_eq!(
        store.expire_leases(late).await.unwrap(),
        vec![effect.clone()]
    );
    assert_eq!(
        store.expire_leases(late).await.unwrap(),
        Vec::<EffectId>::new()
    );
    let record = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(record.state, EffectState::Unknown);
    assert_eq!(record.fencing_token, token);

    // A reversible type takes over: same effect, next token.
    let reversible = matrix_for(Criticality::Reversible, Confidence::Strong);
    let (_, takeover) = deliver(
        &store,
        Delivery::new("d", late + Duration::seconds(1)),
        Some(strong("re_l")),
        &reversible,
    )
    .await;
    assert_eq!(takeover.decision.action, Action::Process);
    assert!(takeover.decision.has(Flag::Takeover));
    assert_eq!(reservation(&takeover), (effect.clone(), token + 1));
    let report = store.report(&TenantFilter::All, t0()).await.unwrap();
    assert_eq!(report.total.unexplained_gap, 0);
}

/// A critical weak key matching a completed effect goes to reconciliation; resolving those
/// items as distinct makes released, claimable work.
async fn released_work(store: &Arc<Store>, count: usize, tenant: &'static str) -> Vec<EffectId> {
    let weak = || key("weak-fingerprint", Confidence::Weak, Horizon::Durable, &[]);
    let m = matrix_for(Criticality::Critical, Confidence::Weak);
    let mut d = Delivery::new("first", t0());
    d.tenant = tenant;
    let (_, first) = deliver(store, d, Some(weak()), &m).await;
    let (effect, token) = reservation(&first);
    store.complete(&effect, token, "{}", t0()).await.unwrap();
    let mut released = Vec::new();
    for i in 0..count {
        let body = format!("again-{i}");
        let mut d = Delivery::new(&body, t0() + Duration::seconds(1));
        d.tenant = tenant;
        let (_, o) = deliver(store, d, Some(weak()), &m).await;
        assert_eq!(
            o.decision.action,
            Action::Reconcile,
            "{}",
            o.decision.reason
        );
        let item = store
            .resolve(
                &o.queue_item.unwrap(),
                Resolution {
                    outcome: ResolutionOutcome::Distinct,
                    authoritative_ref: Some(format!("re_auth_{i}")),
                    note: "the provider lists two refunds".to_owned(),
                    by: "alice".to_owned(),
                    at: t0() + Duration::seconds(2),
                },
            )
            .await
            .unwrap();
        released.push(item.resolution.unwrap().effect.unwrap());
    }
    released
}

pub async fn two_claimers_never_get_the_same_work(b: &Backend) {
    let stores = [b.open().await, b.open().await];
    let released = released_work(&stores[0], 24, "acme").await;
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = stores[w % 2].clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(claim) = store
                .claim(
                    &format!("worker-{w}"),
                    &TenantFilter::All,
                    Duration::minutes(5),
                    t0() + Duration::seconds(3),
                )
                .await
                .unwrap()
            {
                assert_eq!(claim.fencing_token, 1);
                mine.push(claim);
            }
            mine
        }));
    }
    let mut claimed = Vec::new();
    for t in tasks {
        claimed.extend(t.await.unwrap());
    }
    let mut ids: Vec<EffectId> = claimed.iter().map(|c| c.effect.clone()).collect();
    ids.sort();
    let mut expected = released.clone();
    expected.sort();
    assert_eq!(
        ids, expected,
        "each released effect is claimed exactly once"
    );
    let claim = &claimed[0];
    assert!(claim
        .authoritative_ref
        .as_deref()
        .unwrap()
        .starts_with("re_auth_"));
    stores[1]
        .complete(
            &claim.effect,
            claim.fencing_token,
            "{}",
            t0() + Duration::seconds(4),
        )
        .await
        .unwrap();
    assert!(stores[0]
        .claim(
            "late",
            &TenantFilter::All,
            LEASE,
            t0() + Duration::seconds(5)
        )
        .await
        .unwrap()
        .is_none());
}

/// A key reserved before schema version 13 holds its slot in `effect_index`, not in its
/// effect: the view still finds the effect through it, so a retry of that key is a duplicate
/// after the upgrade, not a key whose horizon passed.
pub async fn a_slot_written_before_the_effects_held_them_still_answers(b: &Backend) {
    let store = b.open().await;
    let m = strong_critical();
    let durable = || key("legacy-1", Confidence::Strong, Horizon::Durable, &[]);
    let (_, first) = deliver(&store, Delivery::new("first", t0()), Some(durable()), &m).await;
    let (effect, token) = reservation(&first);
    store.complete(&effect, token, "{}", t0()).await.unwrap();
    // As version 12 left a reservation: its slot a row of `effect_index`.
    b.execute(&format!(
        "INSERT INTO effect_index (scope_hash, effect_id, expires_at) \
         SELECT scope_hash, id, NULL FROM effects WHERE id = '{effect}'; \
         UPDATE effects SET indexed = FALSE WHERE id = '{effect}'"
    ))
    .await;
    let (_, again) = deliver(
        &store,
        Delivery::new("again", t0() + Duration::seconds(1)),
        Some(durable()),
        &m,
    )
    .await;
    assert_eq!(again.decision.action, Action::Ignore, "{again:?}");
    assert_eq!(again.prior, Prior::Completed);
    assert_eq!(again.effect.as_ref(), Some(&effect));
}

pub async fn purge_keeps_proofs_and_durable_identities(b: &Backend) {
    let store = b.open().await;
    let m = strong_critical();
    let durable = || key("ledger-1", Confidence::Strong, Horizon::Durable, &[]);
    let short = || for_an_hour("notice-1");
    let (dd, od) = deliver(&store, Delivery::new("durable", t0()), Some(durable()), &m).await;
    let (ds, os) = deliver(&store, Delivery::new("short", t0()), Some(short()), &m).await;
    let (ed, td) = reservation(&od);
    let (es, ts) = reservation(&os);
    store
        .complete(&ed, td, r#"{"ledger":"L1"}"#, t0())
        .await
        .unwrap();
    store.complete(&es, ts, "{}", t0()).await.unwrap();

    let policy = PurgePolicy {
        payload_retention: Duration::hours(1),
        proof_retention: Duration::days(30),
    };
    let at = t0() + Duration::hours(2);
    let dry = store.purge(&policy, at, true).await.unwrap();
    // The short key's slot expired, but it is its effect's own row (schema version 13), kept
    // as long as the effect is: only slots of `effect_index` written before are rows to purge.
    assert_eq!(
        (
            dry.index_entries,
            dry.payloads,
            dry.proofs,
            dry.deliveries,
            dry.effects
        ),
        (0, 2, 0, 0, 0)
    );
    assert!(
        store
            .delivery(&dd)
            .await
            .unwrap()
            .unwrap()
            .payload
            .is_some(),
        "a dry run changes nothing"
    );
    let real = store.purge(&policy, at, false).await.unwrap();
    assert_eq!(real, dry, "a dry run counts exactly what the purge does");
    assert_eq!(
        store.purge(&policy, at, false).await.unwrap(),
        Default::default(),
        "a purge is idempotent"
    );

    let kept = store
        .delivery(&ds)
        .await
        .unwrap()
        .expect("the delivery row stays");
    assert!(kept.payload.is_none(), "the payload is dropped");
    assert_eq!(
        store
            .proof(&ds)
            .await
            .unwrap()
            .expect("the proof stays")
            .action,
        Action::Process
    );

    // The durable identity still answers through the index.
    let (_, again) = deliver(
        &store,
        Delivery::new("durable-again", at),
        Some(durable()),
        &m,
    )
    .await;
    assert_eq!(again.decision.action, Action::Ignore);
    assert_eq!(again.existing_result.as_deref(), Some(r#"{"ledger":"L1"}"#));

    // Past the proof retention: proofs and delivery rows go, durable identities stay.
    let much_later = t0() + Duration::days(40);
    let gone = store.purge(&policy, much_later, false).await.unwrap();
    assert_eq!((gone.proofs, gone.deliveries, gone.effects), (3, 3, 1));
    assert_eq!(
        gone.durable_identities_kept, 1,
        "the ledger identity outlives its proof"
    );
    assert!(store.proof(&dd).await.unwrap().is_none());
    assert!(store.delivery(&dd).await.unwrap().is_none());
    assert!(
        store.effect(&es).await.unwrap().is_none(),
        "a non-durable effect goes with its proofs"
    );
    let identity = store
        .effect(&ed)
        .await
        .unwrap()
        .expect("a durable identity stays forever");
    assert_eq!(identity.key.as_deref(), Some("ledger-1"));
    assert!(identity.durable);
    let (_, replay) = deliver(
        &store,
        Delivery::new("durable-replay", much_later),
        Some(durable()),
        &m,
    )
    .await;
    assert_eq!(replay.decision.action, Action::Ignore);
    assert_eq!(replay.prior, Prior::Completed);
    let (_, fresh) = deliver(
        &store,
        Delivery::new("short-again", much_later),
        Some(short()),
        &m,
    )
    .await;
    assert_eq!(fresh.decision.action, Action::Process);
    assert_eq!(fresh.prior, Prior::None);
}

pub async fn past_the_horizon_the_key_reads_as_purged(b: &Backend) {
    let store = b.open().await;
    let short = || for_an_hour("notice-2");
    let (d1, first) = deliver(
        &store,
        Delivery::new("a", t0()),
        Some(short()),
        &strong_critical(),
    )
    .await;
    let (e1, t1) = reservation(&first);
    store.complete(&e1, t1, "{}", t0()).await.unwrap();

    let later = t0() + Duration::hours(2);
    let (_, critical) = deliver(
        &store,
        Delivery::new("b", later),
        Some(short()),
        &strong_critical(),
    )
    .await;
    assert_eq!(critical.prior, Prior::Purged);
    assert_eq!(critical.decision.action, Action::Reconcile);
    assert_eq!(
        critical.reference_delivery.as_ref(),
        Some(&d1),
        "the earlier record is pointed to"
    );

    let reversible = matrix_for(Criticality::Reversible, Confidence::Strong);
    let (_, taken) = deliver(
        &store,
        Delivery::new("c", later),
        Some(short()),
        &reversible,
    )
    .await;
    assert_eq!(taken.decision.action, Action::Process);
    assert!(taken.decision.has(Flag::PriorPurged));
    let (e2, _) = reservation(&taken);
    assert_ne!(e2, e1);
    // The new effect holds the expired slot, so its own retries are recognized.
    let (_, retry) = deliver(
        &store,
        Delivery::new("d", later + Duration::seconds(10)),
        Some(short()),
        &reversible,
    )
    .await;
    assert_eq!(
        retry.decision.action,
        Action::Ignore,
        "{:?} {}",
        retry.prior,
        retry.decision.reason
    );
    assert_eq!(retry.effect, Some(e2));
}

/// A key past its horizon is reserved again by exactly one of many racing decisions, on eight
/// instances (an instance runs a batch's decisions of one key one after the other, so the race
/// is between instances): each made its view with the expired effect as the key's latest, so
/// each writes the same next number of the key, which only the first can hold; the others are
/// decided again and find the winner's effect.
pub async fn racing_reservations_past_the_horizon_have_exactly_one_winner(b: &Backend) {
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(b.open().await);
    }
    let short = || for_an_hour("notice-3");
    let reversible = matrix_for(Criticality::Reversible, Confidence::Strong);
    let (_, first) = deliver(
        &stores[0],
        Delivery::new("first", t0()),
        Some(short()),
        &reversible,
    )
    .await;
    let (expired, token) = reservation(&first);
    stores[0]
        .complete(&expired, token, "{}", t0())
        .await
        .unwrap();

    let later = t0() + Duration::hours(2);
    let mut ids = Vec::new();
    for i in 0..32 {
        let body = format!("again-{i}");
        let d = Delivery::new(&body, later);
        ids.push(stores[i % 8].journal(reception(&d)).await.unwrap());
    }
    let requests = (ids.iter().enumerate())
        .map(|(i, id)| (stores[i % 8].clone(), request(id, Some(short()), later)))
        .collect();
    let outcomes = decide_at_once(requests, reversible).await;
    let (effect, _) = reservation(&outcomes[the_one_winner(&outcomes)]);
    assert_ne!(effect, expired);
    for o in outcomes
        .iter()
        .filter(|o| o.decision.action != Action::Process)
    {
        assert_eq!(o.effect.as_ref(), Some(&effect), "{:?}", o.decision);
    }
}

pub async fn acknowledged_writes_survive_reopening(b: &Backend) {
    let store = b.open().await;
    let (d1, o1) = deliver(
        &store,
        Delivery::new("kept", t0()),
        Some(strong("re_k")),
        &strong_critical(),
    )
    .await;
    let (effect, token) = reservation(&o1);
    store
        .complete(&effect, token, r#"{"kept":true}"#, t0())
        .await
        .unwrap();
    let mut q = strong("re_k");
    q.discriminants.insert("amount".into(), "999".into());
    let (_, o2) = deliver(
        &store,
        Delivery::new("collides", t0()),
        Some(q),
        &strong_critical(),
    )
    .await;
    let item = o2.queue_item.clone().expect("quarantined");
    drop(store);

    let store = b.open().await;
    assert_eq!(
        store
            .delivery(&d1)
            .await
            .unwrap()
            .unwrap()
            .payload
            .as_deref(),
        Some(&b"kept"[..])
    );
    assert_eq!(
        store.proof(&d1).await.unwrap().unwrap().action,
        Action::Process
    );
    let record = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(
        (record.state, record.result.as_deref()),
        (EffectState::Completed, Some(r#"{"kept":true}"#))
    );
    assert_eq!(
        store.queue_item(&item).await.unwrap().unwrap().kind,
        QueueKind::Quarantine
    );
    let (_, again) = deliver(
        &store,
        Delivery::new("again", t0()),
        Some(strong("re_k")),
        &strong_critical(),
    )
    .await;
    assert_eq!(again.decision.action, Action::Ignore);
}

pub async fn a_store_that_is_down_is_unavailable(b: &Backend) {
    let url = b.unreachable_url();
    match oncegate_store::open(&url).await {
        Err(e) => {
            assert!(e.is_unavailable(), "{e:?}");
            let text = e.to_string();
            assert!(text.starts_with("the store is unavailable: "), "{text}");
            assert!(
                text.len() < 120,
                "a short cause, not the driver's text: {text}"
            );
        }
        Ok(_) => panic!("opening {url} should fail"),
    }
}

pub async fn a_database_that_goes_away_makes_every_call_unavailable(b: &Backend) {
    let store = b.open().await;
    let (d1, _) = deliver(
        &store,
        Delivery::new("before", t0()),
        Some(strong("re_d")),
        &strong_critical(),
    )
    .await;
    if !b.take_down().await {
        return;
    }
    let expect_unavailable = |what: &str, r: Result<(), StoreError>| match r {
        Err(e) => assert!(e.is_unavailable(), "{what}: {e:?}"),
        Ok(()) => panic!("{what} succeeded on a database that is gone"),
    };
    expect_unavailable("ping", store.ping().await);
    expect_unavailable(
        "journal",
        store
            .journal(reception(&Delivery::new("after", t0())))
            .await
            .map(|_| ()),
    );
    expect_unavailable("proof", store.proof(&d1).await.map(|_| ()));
    expect_unavailable(
        "decide",
        store
            .decide(request(&d1, Some(strong("re_d")), t0()), &strong_critical())
            .await
            .map(|_| ()),
    );
    expect_unavailable(
        "report",
        store.report(&TenantFilter::All, t0()).await.map(|_| ()),
    );
}

pub async fn a_newer_schema_is_refused(b: &Backend) {
    drop(b.open().await);
    b.force_schema_version(99).await;
    match oncegate_store::open(&b.url).await {
        Err(StoreError::SchemaTooNew { found, known }) => {
            assert_eq!(found, 99);
            assert!(known < 99);
        }
        Err(other) => panic!("expected SchemaTooNew, got {other:?}"),
        Ok(_) => panic!("expected SchemaTooNew, the store opened"),
    }
}

pub async fn report_explains_every_delivery(b: &Backend) {
    let store = b.open().await;
    let m = strong_critical();
    let at = t0();
    // Rejected before identification (its type is unknown).
    let mut bad = reception(&Delivery::new("garbage", at));
    bad.event_type = None;
    let rid = store.journal(bad).await.unwrap();
    let mut req = request(&rid, None, at);
    req.event_type = None;
    assert_eq!(
        store.decide(req, &rejected).await.unwrap().decision.action,
        Action::Reject
    );
    // Processed, then its packet retried, then another packet for the same effect.
    let mut d = Delivery::new("p1", at);
    d.transport = Some("evt_1");
    let (_, p1) = deliver(&store, d, Some(strong("re_1")), &m).await;
    let (e1, t1) = reservation(&p1);
    store.complete(&e1, t1, "{}", at).await.unwrap();
    let mut d = Delivery::new("p1", at);
    d.transport = Some("evt_1");
    let (_, retry) = deliver(&store, d, Some(strong("re_1")), &m).await;
    assert_eq!(
        (retry.decision.action, retry.decision.layer),
        (Action::Ignore, Some(Layer::Transport))
    );
    let mut d = Delivery::new("p1-bis", at);
    d.transport = Some("evt_2");
    let (_, dup) = deliver(&store, d, Some(strong("re_1")), &m).await;
    assert_eq!(
        (dup.decision.action, dup.decision.layer),
        (Action::Ignore, Some(Layer::Effect))
    );
    // A collision.
    let mut k = strong("re_1");
    k.discriminants.insert("amount".into(), "2000".into());
    let (_, q) = deliver(&store, Delivery::new("p1-other-amount", at), Some(k), &m).await;
    assert_eq!(q.decision.action, Action::Quarantine);
    // No key on a critical type.
    let (_, r) = deliver(&store, Delivery::new("no-key", at), None, &no_key_critical).await;
    assert_eq!(r.decision.action, Action::Reconcile);
    // Another effect that fails for good.
    let (_, p2) = deliver(&store, Delivery::new("p2", at), Some(strong("re_2")), &m).await;
    let (e2, t2) = reservation(&p2);
    store.fail(&e2, t2, false, "declined", at).await.unwrap();

    let report = store.report(&TenantFilter::All, at).await.unwrap();
    let c = report.total;
    assert_eq!(c.received, 7);
    assert_eq!(
        (
            c.rejected,
            c.processed,
            c.ignored_transport,
            c.ignored_effect
        ),
        (1, 2, 1, 1)
    );
    assert_eq!(
        (
            c.quarantined,
            c.collisions,
            c.reconcile,
            c.reconcile_pending,
            c.reconcile_resolved
        ),
        (1, 1, 1, 1, 0)
    );
    assert_eq!(
        (c.effects_completed, c.effects_failed, c.effects_unknown),
        (1, 1, 0)
    );
    assert_eq!(c.unexplained_gap, 0);
    assert_eq!(
        report.rows.len(),
        2,
        "the rejected delivery without a type has its own row"
    );
    assert!(report.rows.iter().all(|r| r.counts.unexplained_gap == 0));
    assert!(report
        .rows
        .iter()
        .any(|r| r.event_type.is_none() && r.counts.rejected == 1));

    // A delivery journaled but never decided is the gap the report exists to show.
    store
        .journal(reception(&Delivery::new("lost", at)))
        .await
        .unwrap();
    let report = store.report(&TenantFilter::All, at).await.unwrap();
    assert_eq!(
        (report.total.received, report.total.unexplained_gap),
        (8, 1)
    );
    let later = store
        .report(&TenantFilter::All, at + Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(later.total.received, 0, "`since` bounds the report");

    // `until` bounds it too: two periods cut at an hour add up to the whole.
    let hour = at + Duration::hours(1);
    let (_, p3) = deliver(&store, Delivery::new("p3", hour), Some(strong("re_3")), &m).await;
    assert_eq!(p3.decision.action, Action::Process);
    let all = store.report(&TenantFilter::All, at).await.unwrap().total;
    let first = store
        .report_until(&TenantFilter::All, at, Some(hour))
        .await
        .unwrap();
    let second = store
        .report_until(&TenantFilter::All, hour, Some(hour + Duration::hours(1)))
        .await
        .unwrap();
    assert_eq!(first.until, Some(hour));
    assert_eq!(
        (
            first.total.received,
            first.total.processed,
            first.total.unexplained_gap
        ),
        (8, 2, 1)
    );
    assert_eq!(
        (
            second.total.received,
            second.total.processed,
            second.total.unexplained_gap
        ),
        (1, 1, 0)
    );
    let mut sum = first.total;
    sum.add(&second.total);
    assert_eq!(
        sum, all,
        "the periods add up to the report from their start"
    );
}

pub async fn queue_resolution_releases_or_links(b: &Backend) {
    let store = b.open().await;
    let m = strong_critical();
    let (d1, o1) = deliver(&store, Delivery::new("ten", t0()), Some(strong("re_q")), &m).await;
    let (e1, t1) = reservation(&o1);
    store
        .complete(&e1, t1, r#"{"refund":"R1"}"#, t0())
        .await
        .unwrap();

    let mut k = strong("re_q");
    k.discriminants.insert("amount".into(), "2000".into());
    let (d2, o2) = deliver(&store, Delivery::new("twenty", t0()), Some(k), &m).await;
    assert_eq!(o2.decision.action, Action::Quarantine);
    let qid = o2.queue_item.clone().unwrap();
    let item = store.queue_item(&qid).await.unwrap().unwrap();
    assert_eq!(
        (item.kind, item.status, item.proposed),
        (QueueKind::Quarantine, QueueStatus::Open, Proposal::Distinct)
    );
    assert_eq!(item.delivery, d2);
    assert_eq!(item.existing_effect.as_ref(), Some(&e1));
    assert_eq!(item.first_delivery.as_ref(), Some(&d1));
    assert_eq!(item.existing_result.as_deref(), Some(r#"{"refund":"R1"}"#));
    assert_eq!(item.differences.len(), 1);
    assert_eq!(item.differences[0].field, "amount");
    assert_eq!(item.differences[0].existing.as_deref(), Some("1000"));
    assert_eq!(item.differences[0].incoming.as_deref(), Some("2000"));
    assert_eq!(
        store.proof(&d2).await.unwrap().unwrap().differences,
        item.differences
    );

    let at = t0() + Duration::minutes(5);
    let resolved = store
        .resolve(
            &qid,
            Resolution {
                outcome: ResolutionOutcome::Distinct,
                authoritative_ref: Some("re_second".into()),
                note: "two refunds listed".into(),
                by: "alice".into(),
                at,
            },
        )
        .await
        .unwrap();
    assert_eq!(resolved.status, QueueStatus::Resolved);
    let record = resolved.resolution.clone().unwrap();
    assert_eq!(
        (record.resolution.by.as_str(), record.resolution.at),
        ("alice", at)
    );
    let released = record.effect.unwrap();
    let effect = store.effect(&released).await.unwrap().unwrap();
    assert_eq!(effect.state, EffectState::Released);
    assert_eq!(effect.authoritative_ref.as_deref(), Some("re_second"));
    assert_eq!(
        effect.discriminants.get("amount").map(String::as_str),
        Some("2000")
    );
    assert_eq!(effect.deliveries[0].kind, LinkKind::ResolvedDistinct);
    let claim = store
        .claim("w", &TenantFilter::All, LEASE, at)
        .await
        .unwrap()
        .expect("claimable");
    assert_eq!(
        (
            claim.effect.clone(),
            claim.delivery.clone(),
            claim.queue_item.clone()
        ),
        (released.clone(), d2, Some(qid.clone()))
    );
    store
        .complete(&claim.effect, claim.fencing_token, "{}", at)
        .await
        .unwrap();

    match store
        .resolve(
            &qid,
            Resolution {
                outcome: ResolutionOutcome::Duplicate,
                authoritative_ref: None,
                note: String::new(),
                by: "bob".into(),
                at,
            },
        )
        .await
    {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("a second resolution must conflict, got {other:?}"),
    }

    // A weak key on a critical type is reconciled; a duplicate verdict links it.
    let weak = key("fp_q", Confidence::Weak, Horizon::Durable, &[]);
    let (d3, o3) = deliver(
        &store,
        Delivery::new("weak", at),
        Some(weak.clone()),
        &matrix_for(Criticality::Critical, Confidence::Weak),
    )
    .await;
    assert_eq!(o3.decision.action, Action::Process);
    let (e3, t3) = reservation(&o3);
    store.complete(&e3, t3, "{}", at).await.unwrap();
    let (d4, o4) = deliver(
        &store,
        Delivery::new("weak-2", at),
        Some(weak),
        &matrix_for(Criticality::Critical, Confidence::Weak),
    )
    .await;
    assert_eq!(o4.decision.action, Action::Reconcile);
    let q4 = store
        .queue_item(o4.queue_item.as_ref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (q4.kind, q4.proposed),
        (QueueKind::Reconcile, Proposal::Verify)
    );
    let linked = store
        .resolve(
            &q4.id,
            Resolution {
                outcome: ResolutionOutcome::Duplicate,
                authoritative_ref: None,
                note: "same refund".into(),
                by: "bob".into(),
                at,
            },
        )
        .await
        .unwrap();
    assert_eq!(linked.resolution.unwrap().effect.as_ref(), Some(&e3));
    let e3_record = store.effect(&e3).await.unwrap().unwrap();
    assert!(e3_record
        .deliveries
        .iter()
        .any(|l| l.delivery == d4 && l.kind == LinkKind::ResolvedDuplicate));
    assert!(e3_record
        .deliveries
        .iter()
        .any(|l| l.delivery == d3 && l.kind == LinkKind::Reserved));

    let open = store.queue_list(&QueueFilter::default()).await.unwrap();
    assert!(open.is_empty(), "{open:?}");
    let done = store
        .queue_list(&QueueFilter {
            status: Some(QueueStatus::Resolved),
            ..QueueFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(done.len(), 2);
    let report = store.report(&TenantFilter::All, t0()).await.unwrap();
    assert_eq!(
        (
            report.total.reconcile_pending,
            report.total.reconcile_resolved
        ),
        (0, 1)
    );
}

pub async fn listings_respect_the_tenant_filter(b: &Backend) {
    let store = b.open().await;
    let m = strong_critical();
    for (tenant, body) in [("acme", "a1"), ("acme", "a2"), ("globex", "g1")] {
        let mut d = Delivery::new(body, t0());
        d.tenant = tenant;
        deliver(&store, d, Some(strong(body)), &m).await;
    }
    released_work(&store, 1, "globex").await;
    let only = |t: &[&str]| TenantFilter::Only(t.iter().map(|s| s.to_string()).collect());

    let acme = store
        .deliveries(&DeliveryFilter {
            tenants: only(&["acme"]),
            ..DeliveryFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(acme.len(), 2);
    assert!(acme
        .iter()
        .all(|d| d.delivery.tenant == "acme" && d.delivery.payload.is_none()));
    assert!(acme[0].delivery.id > acme[1].delivery.id, "newest first");
    assert_eq!(acme[0].action, Some(Action::Process));
    let all = store.deliveries(&DeliveryFilter::default()).await.unwrap();
    assert_eq!(all.len(), 3 + 2);
    let none = store
        .deliveries(&DeliveryFilter {
            tenants: only(&[]),
            ..DeliveryFilter::default()
        })
        .await
        .unwrap();
    assert!(none.is_empty());
    let page = store
        .deliveries(&DeliveryFilter {
            limit: 2,
            ..DeliveryFilter::default()
        })
        .await
        .unwrap();
    let rest = store
        .deliveries(&DeliveryFilter {
            before: Some(page[1].delivery.id.clone()),
            ..DeliveryFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(page.len() + rest.len(), 5);
    let by_key = store
        .deliveries(&DeliveryFilter {
            key: Some("a2".into()),
            ..DeliveryFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(by_key.len(), 1);
    let by_corr = store
        .deliveries(&DeliveryFilter {
            correlation_id: Some("corr-g1".into()),
            ..DeliveryFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(by_corr[0].delivery.tenant, "globex");

    let queue = |t| QueueFilter {
        tenants: t,
        status: None,
        ..QueueFilter::default()
    };
    assert_eq!(
        store
            .queue_list(&queue(only(&["acme"])))
            .await
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        store
            .queue_list(&queue(only(&["globex"])))
            .await
            .unwrap()
            .len(),
        1
    );
    let report = store.report(&only(&["acme"]), t0()).await.unwrap();
    assert_eq!(report.total.received, 2);
    assert!(store
        .claim("w", &only(&["acme"]), LEASE, t0())
        .await
        .unwrap()
        .is_none());
    let claim = store
        .claim("w", &only(&["globex"]), LEASE, t0())
        .await
        .unwrap()
        .expect("globex work");
    assert_eq!(claim.tenant, "globex");
}

pub async fn transport_retries_and_reused_ids(b: &Backend) {
    let store = b.open().await;
    let m = strong_critical();
    let mut d = Delivery::new("body-1", t0());
    d.transport = Some("evt_9");
    let (d1, o1) = deliver(&store, d, Some(strong("re_t")), &m).await;
    assert_eq!(o1.transport, TransportMatch::None);
    // Same id, other body, other key: the id proves nothing, the key decides.
    let mut d = Delivery::new("body-2", t0());
    d.transport = Some("evt_9");
    let (d2, o2) = deliver(&store, d, Some(strong("re_other")), &m).await;
    assert_eq!(o2.transport, TransportMatch::SameIdOtherBody);
    assert_eq!(o2.decision.action, Action::Process);
    assert!(o2.decision.has(Flag::TransportIdReused));
    // Same id, same body: the packet again.
    let mut d = Delivery::new("body-1", t0());
    d.transport = Some("evt_9");
    let (_, o3) = deliver(&store, d, Some(strong("re_t")), &m).await;
    assert_eq!(o3.transport, TransportMatch::SameIdSameBody);
    assert_eq!(
        (o3.decision.action, o3.decision.layer),
        (Action::Ignore, Some(Layer::Transport))
    );
    assert_eq!(o3.reference_delivery, Some(d1));
    // The second body again: the earlier packet with the same body is the reference, though
    // an earlier one with the same id came first.
    let mut d = Delivery::new("body-2", t0());
    d.transport = Some("evt_9");
    let (_, o5) = deliver(&store, d, Some(strong("re_other")), &m).await;
    assert_eq!(o5.transport, TransportMatch::SameIdSameBody);
    assert_eq!(o5.reference_delivery, Some(d2));
    // A different tenant never shares transport ids or keys.
    let mut d = Delivery::new("body-1", t0());
    d.transport = Some("evt_9");
    d.tenant = "globex";
    let (_, o4) = deliver(&store, d, Some(strong("re_t")), &m).await;
    assert_eq!(
        (o4.transport, o4.decision.action),
        (TransportMatch::None, Action::Process)
    );
    // A weak transport key (the body hash) never says "same packet".
    let mut r = reception(&Delivery::new("body-1", t0()));
    r.transport_key = Some(TransportKey {
        value: "sha-of-body-1".into(),
        strength: TransportStrength::Weak,
    });
    let w1 = store.journal(r.clone()).await.unwrap();
    store
        .decide(request(&w1, Some(strong("re_w")), t0()), &m)
        .await
        .unwrap();
    let w2 = store.journal(r).await.unwrap();
    let o = store
        .decide(request(&w2, Some(strong("re_w")), t0()), &m)
        .await
        .unwrap();
    assert_eq!(
        (o.transport, o.decision.layer),
        (TransportMatch::None, Some(Layer::Effect))
    );
}

pub async fn possible_duplicates_get_their_own_effect(b: &Backend) {
    let store = b.open().await;
    let m = matrix_for(Criticality::Reversible, Confidence::Weak);
    let weak = || {
        key(
            "fp-1",
            Confidence::Weak,
            Horizon::For(Duration::days(1)),
            &[],
        )
    };
    let (d1, o1) = deliver(&store, Delivery::new("mail-1", t0()), Some(weak()), &m).await;
    let (e1, t1) = reservation(&o1);
    store.complete(&e1, t1, "{}", t0()).await.unwrap();
    let (_, o2) = deliver(&store, Delivery::new("mail-2", t0()), Some(weak()), &m).await;
    assert_eq!(o2.decision.action, Action::Process);
    assert!(o2.decision.has(Flag::PossibleDuplicate));
    let (e2, t2) = reservation(&o2);
    assert_ne!(e2, e1, "a possible duplicate is a new effect");
    store.complete(&e2, t2, "{}", t0()).await.unwrap();
    // The unique index still points at the first effect.
    let (_, o3) = deliver(&store, Delivery::new("mail-3", t0()), Some(weak()), &m).await;
    assert!(o3.decision.has(Flag::PossibleDuplicate));
    assert_eq!(o3.reference_delivery, Some(d1));
    assert_ne!(reservation(&o3).0, e1);
    // Unkeyed reversible deliveries are processed under their own identity.
    let unkeyed = |_: &oncegate_store::PriorView| {
        matrix::decide(&Situation::NoKey {
            criticality: Criticality::Reversible,
            missing: "/id".into(),
        })
    };
    let (_, o4) = deliver(&store, Delivery::new("mail-4", t0()), None, &unkeyed).await;
    assert!(o4.decision.has(Flag::Unkeyed));
    let (e4, _) = reservation(&o4);
    assert!(store.effect(&e4).await.unwrap().unwrap().key.is_none());
}

pub async fn misuse_gets_typed_errors(b: &Backend) {
    let store = b.open().await;
    let m = strong_critical();
    let (d1, _) = deliver(&store, Delivery::new("x", t0()), Some(strong("re_m")), &m).await;
    match store
        .decide(request(&d1, Some(strong("re_m")), t0()), &m)
        .await
    {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("deciding twice must conflict, got {other:?}"),
    }
    match store
        .decide(request(&DeliveryId::from_u128(7), None, t0()), &m)
        .await
    {
        Err(StoreError::NotFound {
            what: "delivery", ..
        }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    match store.complete(&EffectId::from_u128(7), 1, "{}", t0()).await {
        Err(StoreError::NotFound { what: "effect", .. }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    let missing = oncegate_core::ids::QueueItemId::from_u128(7);
    match store
        .resolve(
            &missing,
            Resolution {
                outcome: ResolutionOutcome::Duplicate,
                authoritative_ref: None,
                note: String::new(),
                by: "x".into(),
                at: t0(),
            },
        )
        .await
    {
        Err(StoreError::NotFound {
            what: "queue item", ..
        }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert_eq!(b.kind == Kind::Sqlite, store.backend() == "sqlite");
}

/// A time range over deliveries (the listing's `since` and `until`, the report's `since`, the
/// payload retention) is exact to the millisecond, though it is read as a range of ids.
pub async fn delivery_time_ranges_are_exact_to_the_millisecond(b: &Backend) {
    let store = b.open().await;
    let ms = Duration::milliseconds(1);
    let at = t0() + Duration::milliseconds(123);
    for (body, when) in [("before", at - ms), ("at", at), ("after", at + ms)] {
        store
            .journal(reception(&Delivery::new(body, when)))
            .await
            .unwrap();
    }
    let bodies = |list: Vec<oncegate_store::DeliverySummary>| {
        list.into_iter()
            .map(|d| d.delivery.correlation_id.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let listed = |since: Option<OffsetDateTime>, until: Option<OffsetDateTime>| {
        let store = &store;
        async move {
            store
                .deliveries(&DeliveryFilter {
                    since,
                    until,
                    ..DeliveryFilter::default()
                })
                .await
                .unwrap()
        }
    };
    assert_eq!(
        bodies(listed(Some(at), None).await),
        ["corr-after", "corr-at"]
    );
    assert_eq!(bodies(listed(None, Some(at)).await), ["corr-before"]);
    assert_eq!(bodies(listed(Some(at), Some(at + ms)).await), ["corr-at"]);
    assert_eq!(
        store
            .report(&TenantFilter::All, at)
            .await
            .unwrap()
            .total
            .received,
        2
    );
    assert_eq!(
        store
            .report(&TenantFilter::Only(vec!["acme".to_owned()]), at + ms)
            .await
            .unwrap()
            .total
            .received,
        1
    );
    // Payloads kept for a day: a purge one day after `at` drops the payload received before
    // it, and keeps the ones received at or after it.
    let policy = PurgePolicy {
        payload_retention: Duration::days(1),
        proof_retention: Duration::days(365),
    };
    let counts = store
        .purge(&policy, at + Duration::days(1), false)
        .await
        .unwrap();
    assert_eq!(counts.payloads, 1);
    assert_eq!(counts.deliveries, 0);
    // Proofs and deliveries kept for a day: the same cut-off drops the one row before it.
    let policy = PurgePolicy {
        payload_retention: Duration::days(1),
        proof_retention: Duration::days(1),
    };
    let counts = store
        .purge(&policy, at + Duration::days(1), false)
        .await
        .unwrap();
    assert_eq!(counts.deliveries, 1);
    assert_eq!(bodies(listed(None, None).await), ["corr-after", "corr-at"]);
}

/// A complete retried after it committed (its answer lost with the connection) is answered as
/// done when it presents the same result, spelled alike or not; another result is refused as
/// such, and the first result stands. Another token is still refused as stale.
pub async fn a_complete_retried_after_its_commit_is_done(b: &Backend) {
    let store = b.open().await;
    let (_, outcome) = deliver(
        &store,
        Delivery::new("a", t0()),
        Some(strong("re_retried")),
        &strong_critical(),
    )
    .await;
    let (effect, token) = reservation(&outcome);
    let at = t0() + Duration::seconds(1);
    let result = r#"{"refund":"re_1","amount":1000}"#;
    store.complete(&effect, token, result, at).await.unwrap();
    store
        .complete(&effect, token, result, at + Duration::seconds(2))
        .await
        .expect("the same result again is done");
    store
        .complete(
            &effect,
            token,
            r#"{ "amount": 1000, "refund": "re_1" }"#,
            at,
        )
        .await
        .expect("the same result spelled anew is done");
    match store
        .complete(&effect, token, r#"{"refund":"re_2"}"#, at)
        .await
    {
        Err(StoreError::OutcomeRecorded { token: t, .. }) => assert_eq!(t, token),
        other => panic!("expected OutcomeRecorded, got {other:?}"),
    }
    match store.complete(&effect, token + 1, result, at).await {
        Err(StoreError::StaleToken { .. }) => {}
        other => panic!("expected StaleToken, got {other:?}"),
    }
    let record = store.effect(&effect).await.unwrap().unwrap();
    assert_eq!(record.state, EffectState::Completed);
    assert_eq!(
        record.result.as_deref(),
        Some(result),
        "the first result stands"
    );
}
