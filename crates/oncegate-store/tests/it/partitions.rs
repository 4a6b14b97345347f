//! Time partitions on PostgreSQL: a store converted to daily partitions keeps every row and its
//! indexes' names, places each delivery and proof in its day, reads only the days of the
//! transport window when it decides (a retry past the window is decided by its key), and
//! retention drops the days past it whole, except a day an open queue item still needs.

use std::sync::Arc;

use oncegate_core::ids::DeliveryId;
use oncegate_core::matrix::{Action, Layer};
use oncegate_store::{DecideOutcome, DecideRequest, NewReception, PurgePolicy, Store};
use time::{Duration, OffsetDateTime};

use crate::batches::{reception, request};
use crate::harness::{strong_critical, Backend};
use crate::scale::scans;

fn day(t: OffsetDateTime) -> String {
    format!("{:04}{:02}{:02}", t.year(), u8::from(t.month()), t.day())
}

/// Delivery `n` (strong transport key `evt_n`) received and decided at `at` under `key` with
/// this amount; a reserved effect is completed at once.
pub(crate) async fn deliver(
    store: &Arc<Store>,
    n: usize,
    at: OffsetDateTime,
    key: &str,
    amount: &str,
) -> (DeliveryId, DecideOutcome) {
    let mut req = DecideRequest {
        now: at,
        ..request(n, key, "{}")
    };
    if let Some(k) = req.key.as_mut() {
        k.discriminants
            .insert("amount".to_owned(), amount.to_owned());
    }
    let received = NewReception {
        received_at: at,
        ..reception(n)
    };
    let (id, outcome) = store
        .journal_and_decide(received, req, &strong_critical)
        .await
        .expect("journaled");
    let outcome = outcome.expect("decided");
    if let Some(r) = &outcome.reservation {
        store
            .complete(&r.effect, r.fencing_token, "{}", at)
            .await
            .expect("completed");
    }
    (id, outcome)
}

/// The partition a row of `table` with this id is stored in.
async fn home(
    admin: &tokio_postgres::Client,
    table: &str,
    column: &str,
    id: &DeliveryId,
) -> String {
    admin
        .query_one(
            &format!("SELECT tableoid::regclass::text FROM {table} WHERE {column} = $1"),
            &[&id.as_str()],
        )
        .await
        .expect("the row")
        .get(0)
}

async fn exists(admin: &tokio_postgres::Client, table: &str) -> bool {
    admin
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_store_keeps_its_rows_and_reads_only_its_window() {
    let b = Backend::postgres().await;
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    let store = b.open().await;
    let now = OffsetDateTime::now_utc();
    let (earliest, _) = deliver(&store, 1, now - Duration::days(90), "k1", "1000").await;

    // Converted as of 60 days ago, 65 days ahead: every day from then to 5 days from now.
    let start = now - Duration::days(60);
    let made = store.partition(65, start).await.expect("partitioned");
    assert!(made.converted);
    for t in [start + Duration::days(1), now, now + Duration::days(5)] {
        let name = format!("deliveries_{}", day(t));
        assert!(made.created.contains(&name), "{name} in {:?}", made.created);
    }
    let indexes: Vec<String> = admin
        .query(
            "SELECT indexname::text FROM pg_indexes WHERE tablename = 'deliveries' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for name in [
        "deliveries_pkey",
        "deliveries_strong_transport",
        "deliveries_effect",
        "deliveries_key",
    ] {
        assert!(indexes.iter().any(|i| i == name), "{name} in {indexes:?}");
    }
    assert_eq!(
        home(&admin, "deliveries", "id", &earliest).await,
        "deliveries_history"
    );
    assert!(
        store.proof(&earliest).await.unwrap().is_some(),
        "the history reads"
    );

    let (old, _) = deliver(&store, 2, now - Duration::days(40), "k2", "1000").await;
    let (recent, _) = deliver(&store, 3, now - Duration::hours(1), "k3", "1000").await;
    let old_day = format!("deliveries_{}", day(now - Duration::days(40)));
    assert_eq!(home(&admin, "deliveries", "id", &old).await, old_day);
    assert_eq!(
        home(&admin, "deliveries", "id", &recent).await,
        format!("deliveries_{}", day(now - Duration::hours(1)))
    );
    assert!(
        store.proof(&recent).await.unwrap().is_some(),
        "a day's partition holds its proofs"
    );

    // Run again, it converts nothing and adds only the days still missing.
    let again = store.partition(5, now).await.unwrap();
    assert!(!again.converted && again.created.is_empty(), "{again:?}");
    let ahead = store.extend_partitions(10, now).await.unwrap();
    assert_eq!(ahead.created.len(), 5, "days 6 to 10 ahead: {ahead:?}");
    drop(store);

    // Redeliveries now: within the window a transport duplicate; past it, decided by the key.
    let before = scans(&admin).await;
    let store = b.open().await;
    let (_, retry) = deliver(&store, 3, now, "k3", "1000").await;
    assert_eq!(
        (retry.decision.action, retry.decision.layer),
        (Action::Ignore, Some(Layer::Transport))
    );
    let (_, late) = deliver(&store, 2, now, "k2", "1000").await;
    // A redelivery 40 days on is no provider retry: its key decides it, and past the key's
    // 3-day horizon that is "purged", which a critical type sends to reconciliation.
    assert_eq!(
        (late.decision.action, late.decision.layer),
        (Action::Reconcile, None)
    );
    drop(store);
    let after = scans(&admin).await;
    let window = now - Duration::days(32);
    let mut read_outside = Vec::new();
    for (name, count) in &after {
        let delta = count - before.get(name).copied().unwrap_or(0);
        let Some(day_of) = name
            .split(' ')
            .nth(1)
            .and_then(|t| t.strip_prefix("deliveries_"))
        else {
            continue;
        };
        let outside = day_of == "history" || (day_of.len() == 8 && day_of < day(window).as_str());
        if delta > 0 && outside {
            read_outside.push(format!("{name} (+{delta})"));
        }
    }
    assert!(
        read_outside.is_empty(),
        "decisions read days outside the window: {read_outside:?}"
    );
    let recent_day = format!("index deliveries_{}", day(now));
    assert!(
        after
            .iter()
            .any(|(n, c)| n.starts_with(&recent_day) && *c > before.get(n).copied().unwrap_or(0)),
        "the window's own days were read"
    );
    drop(admin);
    b.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_whole_days_and_keeps_a_day_an_open_item_needs() {
    let b = Backend::postgres().await;
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    let store = b.open().await;
    let now = OffsetDateTime::now_utc();
    let start = now - Duration::days(10);
    store.partition(12, start).await.expect("partitioned");
    let (a, b2, c) = (
        start + Duration::days(2),
        start + Duration::days(3),
        start + Duration::days(8),
    );
    let (a1, _) = deliver(&store, 10, a, "ka", "1000").await;
    let (a2, _) = deliver(&store, 11, a, "ka2", "1000").await;
    let (b_first, _) = deliver(&store, 12, b2, "kb", "1000").await;
    let (b_collision, q) = deliver(&store, 13, b2, "kb", "2000").await;
    assert_eq!(
        q.decision.action,
        Action::Quarantine,
        "an open queue item on day B"
    );
    let (c1, _) = deliver(&store, 14, c, "kc", "1000").await;

    let policy = PurgePolicy {
        payload_retention: Duration::days(1),
        proof_retention: Duration::days(5),
    };
    let dry = store.purge(&policy, now, true).await.unwrap();
    assert!(
        exists(&admin, &format!("deliveries_{}", day(a))).await,
        "a dry run drops nothing"
    );
    let real = store.purge(&policy, now, false).await.unwrap();
    assert_eq!(real, dry, "a dry run counts exactly what the purge does");
    assert_eq!(
        (real.deliveries, real.proofs),
        (3, 3),
        "day A whole, day B's first delivery"
    );
    assert!(
        !exists(&admin, &format!("deliveries_{}", day(a))).await,
        "day A's partition dropped"
    );
    assert!(
        exists(&admin, &format!("deliveries_{}", day(b2))).await,
        "day B's partition kept"
    );
    for gone in [&a1, &a2, &b_first] {
        assert!(
            store.delivery(gone).await.unwrap().is_none(),
            "{gone} purged"
        );
    }
    for kept in [&b_collision, &c1] {
        assert!(store.proof(kept).await.unwrap().is_some(), "{kept} kept");
    }
    assert_eq!(
        store.purge(&policy, now, false).await.unwrap().deliveries,
        0,
        "a purge is idempotent"
    );
    drop(admin);
    b.cleanup().await;
}
