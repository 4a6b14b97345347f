//! The gate's upkeep on a real SQLite store: while its handle lives, an abandoned reservation
//! is turned `unknown` by the lease sweep; once the handle is dropped, nothing sweeps any more.

use std::sync::Arc;
use std::time::Duration;

use oncegate::{Gate, GateConfig, Outcome, Reception, ReconcilerSettings, UpkeepSettings};
use oncegate_core::ids::EffectId;
use oncegate_store::testing::TestDatabase;
use oncegate_store::EffectState;

fn refund(reference: &str) -> Reception {
    let body = format!(
        r#"{{"type":"refund.created","sent_at":"2026-03-05T16:02:11Z","attempt":1,"data":{{"payment_id":"pay_1","request_ref":"{reference}","amount":1500,"currency":"EUR"}}}}"#
    );
    Reception::new("acme", "payflow", "live", body.into_bytes())
}

/// Delivers a new refund and abandons its reservation (the holder never reports).
async fn abandoned(gate: &Gate, reference: &str) -> EffectId {
    match gate.deliver(refund(reference)).await.unwrap() {
        Outcome::Process(held) => held.effect().clone(),
        other => panic!("a new refund runs, not {:?}", other.action()),
    }
}

async fn state(gate: &Gate, effect: &EffectId) -> EffectState {
    gate.effect(effect).await.unwrap().unwrap().state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_runs_while_the_upkeep_lives_and_stops_when_it_is_dropped() {
    let db = TestDatabase::sqlite();
    let store = oncegate_store::open(&db.url).await.unwrap();
    let contract = oncegate_core::contract::parse(
        "examples/oncegate.toml",
        include_str!("../../../examples/oncegate.toml"),
    )
    .unwrap();
    let mut config = GateConfig::new(Arc::new(contract), store, b"salt".to_vec());
    config.lease = Some(Duration::from_secs(1));
    let gate = Gate::new(config);
    let settings = UpkeepSettings {
        lease_sweep: true,
        purge_every: None,
        reconciler: ReconcilerSettings {
            every: None,
            ..ReconcilerSettings::default()
        },
        ca_file: None,
        ..UpkeepSettings::default()
    };

    let upkeep = gate.upkeep(settings).unwrap();
    let first = abandoned(&gate, "RR-1").await;
    assert_eq!(state(&gate, &first).await, EffectState::Reserved);
    // The sweep runs every second (half the lease, at least 1 s): the lease passes after 1 s.
    let mut swept = false;
    for _ in 0..100 {
        if state(&gate, &first).await == EffectState::Unknown {
            swept = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        swept,
        "the living upkeep turns an abandoned reservation unknown"
    );

    drop(upkeep);
    let second = abandoned(&gate, "RR-2").await;
    // Well past the lease and two sweep periods: no task is left to sweep it.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(
        state(&gate, &second).await,
        EffectState::Reserved,
        "a dropped upkeep sweeps nothing"
    );
    db.cleanup().await;
}

/// The background purge with an archive root: the deliveries past the proof retention are
/// archived below it, the archive verifies and reads them back, and only then are they gone
/// from the store; a recent delivery stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_purge_archives_what_it_removes_first() {
    let db = TestDatabase::sqlite();
    let store = oncegate_store::open(&db.url).await.unwrap();
    let contract = Arc::new(
        oncegate_core::contract::parse(
            "examples/oncegate.toml",
            include_str!("../../../examples/oncegate.toml"),
        )
        .unwrap(),
    );
    // Delivered 500 days ago: past the example contract's 400 days of proof retention.
    let mut past = GateConfig::new(contract.clone(), store.clone(), b"salt".to_vec());
    past.clock = Arc::new(|| time::OffsetDateTime::now_utc() - time::Duration::days(500));
    let past = Gate::new(past);
    let old = past.deliver(refund("RR-OLD")).await.unwrap();
    let old = old.proof().delivery.clone();
    let gate = Gate::new(GateConfig::new(contract, store, b"salt".to_vec()));
    let recent = gate.deliver(refund("RR-NEW")).await.unwrap();
    let recent = recent.proof().delivery.clone();

    let root = tempfile::tempdir().unwrap();
    let upkeep = gate
        .upkeep(UpkeepSettings {
            lease_sweep: false,
            purge_every: Some(Duration::from_secs(1)),
            purge_archive: Some(root.path().to_owned()),
            reconciler: ReconcilerSettings {
                every: None,
                ..ReconcilerSettings::default()
            },
            ..UpkeepSettings::default()
        })
        .unwrap();
    let all = oncegate::store::TenantFilter::All;
    let mut purged = false;
    for _ in 0..150 {
        if gate.delivery_proof(&old, &all).await.unwrap().is_none() {
            purged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(purged, "the old delivery is purged");
    // Later runs remove nothing and leave no directory: one archive, the first run's.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    drop(upkeep);
    let dirs: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let verified = oncegate::store::archive::verify(&dirs[0]).expect("the archive verifies");
    assert_eq!(verified.manifest.tables[0].rows, 1, "one delivery archived");
    let archived = oncegate::ArchivedDelivery::open(&dirs[0], &old)
        .await
        .unwrap()
        .expect("the archive holds it");
    let proof = archived
        .gate()
        .delivery_proof(&old, &all)
        .await
        .unwrap()
        .expect("its proof reads back");
    assert_eq!(proof.decision.unwrap().action.as_str(), "process");
    assert!(gate.delivery_proof(&recent, &all).await.unwrap().is_some());
    db.cleanup().await;
}

/// A gate whose clock reads `at`, on the store at `url`, with the example contract.
async fn gate_at(url: &str, at: time::OffsetDateTime) -> Gate {
    let store = oncegate_store::open(url).await.unwrap();
    let contract = oncegate_core::contract::parse(
        "examples/oncegate.toml",
        include_str!("../../../examples/oncegate.toml"),
    )
    .unwrap();
    let mut config = GateConfig::new(Arc::new(contract), store, b"salt".to_vec());
    config.clock = Arc::new(move || at);
    Gate::new(config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upkeep_counts_the_reports_totals_unless_told_not_to() {
    let hour_ago = time::OffsetDateTime::now_utc() - time::Duration::hours(1);
    for every in [None, Some(Duration::from_secs(1))] {
        let db = TestDatabase::sqlite();
        let gate = gate_at(&db.url, hour_ago).await;
        abandoned(&gate, "RR-1").await;
        let upkeep = gate
            .upkeep(UpkeepSettings {
                lease_sweep: false,
                purge_every: None,
                report_totals: every,
                reconciler: ReconcilerSettings {
                    every: None,
                    ..ReconcilerSettings::default()
                },
                ..UpkeepSettings::default()
            })
            .unwrap();
        // The first count runs as the upkeep starts; an hour of minutes takes milliseconds.
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        drop(upkeep);
        let left = gate.count_report_totals().await.unwrap();
        assert!(left.caught_up, "{left:?}");
        match every {
            // From an hour ago to two minutes and five seconds ago: 57 or 58 minutes.
            None => assert!(left.minutes >= 57, "nothing was counted before: {left:?}"),
            Some(_) => assert_eq!(left.minutes, 0, "the upkeep counted them all: {left:?}"),
        }
    }
}
