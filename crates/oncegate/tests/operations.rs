//! The operator's actions through the gate on a real SQLite store: a quarantined delivery is
//! found by its queue item id and by its delivery id, resolved once, and its proof read back
//! whole with the resolution; a delivery decided otherwise is not in the queue, and another
//! tenant's item or delivery does not exist for a reader restricted to its own.

use std::sync::Arc;

use oncegate::store::testing::TestDatabase;
use oncegate::store::{QueueRef, QueueStatus, Resolution, ResolutionOutcome, TenantFilter};
use oncegate::{Gate, GateConfig, Outcome, QueueLookupError, Reception, ResolveError};

fn refund(amount: u32) -> Reception {
    let body = format!(
        r#"{{"type":"refund.created","sent_at":"2026-03-05T16:02:11Z","attempt":1,"data":{{"payment_id":"pay_1","request_ref":"RR-1","amount":{amount},"currency":"EUR"}}}}"#
    );
    Reception::new("acme", "payflow", "live", body.into_bytes())
}

async fn gate(db: &TestDatabase) -> Gate {
    let store = oncegate::store::open(&db.url).await.unwrap();
    let contract = oncegate_core::contract::parse(
        "examples/oncegate.toml",
        include_str!("../../../examples/oncegate.toml"),
    )
    .unwrap();
    Gate::new(GateConfig::new(Arc::new(contract), store, b"salt".to_vec()))
}

fn named(raw: &str) -> QueueRef {
    raw.parse().unwrap()
}

fn verdict(gate: &Gate) -> Resolution {
    Resolution {
        outcome: ResolutionOutcome::Duplicate,
        authoritative_ref: None,
        note: "same refund, amount corrected by the provider".to_owned(),
        by: "ops".to_owned(),
        at: gate.now(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_delivery_is_found_by_either_id_and_resolved_once() {
    let db = TestDatabase::sqlite();
    let gate = gate(&db).await;
    let first = match gate.deliver(refund(1500)).await.unwrap() {
        Outcome::Process(held) => {
            let delivery = held.proof().unwrap().delivery.clone();
            held.complete(r#"{"refund":"re_1"}"#).await.unwrap();
            delivery
        }
        other => panic!("a new refund runs, not {:?}", other.action()),
    };
    // The same request reference with another amount: a collision, kept for a person.
    let proof = match gate.deliver(refund(2500)).await.unwrap() {
        Outcome::Quarantine(proof) => proof,
        other => panic!(
            "a differing amount is quarantined, not {:?}",
            other.action()
        ),
    };
    let item_id = proof.queue_item.clone().expect("a queue item");
    let delivery = proof.delivery.to_string();

    let by_item = gate
        .queue_item_named(&named(item_id.as_str()), &TenantFilter::All)
        .await
        .unwrap();
    let by_delivery = gate
        .queue_item_named(&named(&delivery), &TenantFilter::All)
        .await
        .unwrap();
    assert_eq!(by_item.id, item_id);
    assert_eq!(by_delivery.id, item_id);
    assert_eq!(by_item.status, QueueStatus::Open);

    // Another tenant's reader finds neither.
    let globex = TenantFilter::Only(vec!["globex".to_owned()]);
    assert!(matches!(
        gate.queue_item_named(&named(item_id.as_str()), &globex)
            .await,
        Err(QueueLookupError::NoItem(_))
    ));
    assert!(matches!(
        gate.queue_item_named(&named(&delivery), &globex).await,
        Err(QueueLookupError::NoDelivery(_))
    ));
    assert!(gate
        .delivery_proof(&proof.delivery, &globex)
        .await
        .unwrap()
        .is_none());
    // The first delivery was processed: it is not in the queue.
    match gate
        .queue_item_named(&named(first.as_str()), &TenantFilter::All)
        .await
    {
        Err(QueueLookupError::Decided { action, .. }) => assert_eq!(action.as_str(), "process"),
        other => panic!("a processed delivery is not queued: {other:?}"),
    }

    let resolved = gate
        .resolve_queue_item(&by_delivery, verdict(&gate))
        .await
        .unwrap();
    assert_eq!(resolved.status, QueueStatus::Resolved);
    // Once: the item as read before, or as read now, is resolved already.
    assert!(matches!(
        gate.resolve_queue_item(&by_delivery, verdict(&gate)).await,
        Err(ResolveError::AlreadyResolved(_))
    ));
    let again = gate
        .queue_item_named(&named(&delivery), &TenantFilter::All)
        .await
        .unwrap();
    assert!(matches!(
        gate.resolve_queue_item(&again, verdict(&gate)).await,
        Err(ResolveError::AlreadyResolved(_))
    ));

    let whole = gate
        .delivery_proof(&proof.delivery, &TenantFilter::All)
        .await
        .unwrap()
        .expect("the proof");
    assert_eq!(
        whole.decision.expect("a decision").action.as_str(),
        "quarantine"
    );
    let item = whole.queue_item.expect("its queue item");
    let resolution = item.resolution.expect("its resolution");
    assert_eq!(resolution.resolution.by, "ops");
    assert_eq!(resolution.resolution.outcome, ResolutionOutcome::Duplicate);
}
