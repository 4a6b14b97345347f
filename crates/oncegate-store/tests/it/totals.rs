//! The report's minute totals (`Store::roll_up`): a report reads the same figures from them as
//! from the rows, and stays exact when a counted minute changes after its count: a late
//! journal entry, an effect created late or whose state changes late, retention. On PostgreSQL a count waits
//! for the writes in progress, and the journal's trigger survives the conversion to
//! partitions.

use std::sync::Arc;

use oncegate_store::{
    DecideOutcome, DecideRequest, NewReception, PurgePolicy, Report, Store, TenantFilter,
};
use time::{Duration, OffsetDateTime};

use crate::batches::{reception, request};
use crate::harness::{strong_critical, Backend};
use crate::partitions::deliver;

/// Delivery `n` received and decided at `at` under `key`, its reservation left open.
async fn reserve(store: &Arc<Store>, n: usize, at: OffsetDateTime, key: &str) -> DecideOutcome {
    let req = DecideRequest {
        now: at,
        ..request(n, key, "{}")
    };
    let received = NewReception {
        received_at: at,
        ..reception(n)
    };
    let (_, outcome) = store
        .journal_and_decide(received, req, &strong_critical)
        .await
        .expect("journaled");
    outcome.expect("decided")
}

async fn report(store: &Arc<Store>, since: OffsetDateTime) -> Report {
    store
        .report(&TenantFilter::All, since)
        .await
        .expect("a report")
}

/// Counts every minute old enough, as the upkeep does. On PostgreSQL a count waits for every
/// transaction of the cluster in progress when it starts, other tests' too: `busy` is tried
/// again, as the upkeep does at its next tick.
pub(crate) async fn roll_up(store: &Arc<Store>) -> oncegate_store::RollUp {
    for _ in 0..10 {
        let done = store.roll_up(100_000).await.expect("counted");
        if !done.busy {
            assert!(done.caught_up, "{done:?}");
            return done;
        }
    }
    panic!("ten counts in a row found a transaction outliving the wait");
}

pub async fn totals_read_as_the_rows_and_follow_late_writes(b: &Backend) {
    let store = b.open().await;
    // Two hours ago, on a minute's start, so each delivery below has a minute of its own.
    let now = OffsetDateTime::now_utc();
    let base = now - Duration::hours(2) - Duration::seconds(i64::from(now.second()));
    let since = base - Duration::minutes(1);
    for n in 0..4 {
        let at = base + Duration::minutes(n as i64);
        let (_, p) = deliver(&store, n, at, &format!("re_{n}"), "1000").await;
        assert_eq!(p.decision.action, oncegate_core::matrix::Action::Process);
    }
    // A duplicate of the first effect, a collision with the second.
    deliver(&store, 10, base + Duration::seconds(30), "re_0", "1000").await;
    deliver(&store, 11, base + Duration::minutes(1), "re_1", "2000").await;
    // An effect whose reservation is still open when its minute is counted.
    let open = reserve(&store, 20, base + Duration::minutes(10), "re_20").await;
    assert!(open.reservation.is_some(), "reserved");

    let rows = report(&store, since).await;
    assert_eq!(
        (
            rows.total.received,
            rows.total.processed,
            rows.total.ignored_effect,
            rows.total.quarantined
        ),
        (7, 5, 1, 1)
    );
    let first = roll_up(&store).await;
    // From `base` to two minutes and five seconds ago: 117 or 118 minutes, by the second.
    assert!(
        first.minutes >= 117,
        "two hours of minutes counted: {first:?}"
    );
    assert_eq!(first.deliveries, 7);
    let totals = report(&store, since).await;
    assert_eq!(totals, rows, "the totals read as the rows do");
    let period = store
        .report_until(
            &TenantFilter::All,
            base + Duration::seconds(20),
            Some(base + Duration::minutes(2)),
        )
        .await
        .unwrap();
    assert_eq!(
        (period.total.received, period.total.processed),
        (3, 1),
        "a period that cuts a counted minute counts its part from the rows"
    );

    // Late writes into counted minutes: a delivery journaled and decided now for a time two
    // hours ago, and the open effect's lease found expired now.
    deliver(&store, 30, base + Duration::minutes(3), "re_30", "1000").await;
    assert_eq!(store.expire_leases(now).await.unwrap().len(), 1);
    let late = report(&store, since).await;
    assert_eq!(
        (
            late.total.received,
            late.total.processed,
            late.total.effects_completed,
            late.total.effects_unknown
        ),
        (
            rows.total.received + 1,
            rows.total.processed + 1,
            rows.total.effects_completed + 1,
            1
        ),
        "a late write is seen at once"
    );
    let again = roll_up(&store).await;
    assert_eq!(
        again.recounted, 2,
        "the two changed minutes are counted again: {again:?}"
    );
    assert_eq!(report(&store, since).await, late);
    assert_eq!(roll_up(&store).await.recounted, 0, "nothing stale is left");

    // Retention past the first two minutes: the report counts what is left.
    let cut = base + Duration::minutes(2);
    let policy = PurgePolicy {
        payload_retention: now - cut,
        proof_retention: now - cut,
    };
    let purged = store.purge(&policy, now, false).await.unwrap();
    // The collision's delivery stays while its quarantine item is open.
    assert_eq!(purged.deliveries, 3, "{purged:?}");
    let kept = report(&store, since).await;
    assert_eq!(
        (kept.total.received, kept.total.effects_completed),
        (
            late.total.received - purged.deliveries,
            late.total.effects_completed - purged.effects
        )
    );
    roll_up(&store).await;
    assert_eq!(report(&store, since).await, kept);
    assert_eq!(kept.total.unexplained_gap, 0);
}

/// PostgreSQL: a count waits for the transactions in progress when it starts, and answers
/// `busy` (counting nothing) when one outlives the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_waits_for_the_writes_in_progress() {
    let b = Backend::postgres().await;
    let store = b.open().await;
    let at = OffsetDateTime::now_utc() - Duration::hours(1);
    deliver(&store, 1, at, "k1", "1000").await;
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    admin
        .batch_execute("BEGIN; SELECT pg_current_xact_id();")
        .await
        .unwrap();
    let busy = store.roll_up(1440).await.unwrap();
    assert!(busy.busy && busy.minutes == 0, "{busy:?}");
    admin.batch_execute("COMMIT").await.unwrap();
    let done = roll_up(&store).await;
    assert!(done.minutes > 0, "{done:?}");
    b.cleanup().await;
}

/// PostgreSQL: the journal's late-write trigger is on the partitioned table once converted,
/// so a late delivery into a counted minute is still seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_journal_still_marks_its_late_writes() {
    let b = Backend::postgres().await;
    let store = b.open().await;
    let now = OffsetDateTime::now_utc();
    let at = now - Duration::hours(1);
    deliver(&store, 1, at, "k1", "1000").await;
    store
        .partition(3, now - Duration::days(1))
        .await
        .expect("partitioned");
    roll_up(&store).await;
    deliver(&store, 2, at, "k2", "1000").await;
    let r = report(&store, at - Duration::minutes(1)).await;
    assert_eq!((r.total.received, r.total.processed), (2, 2));
    b.cleanup().await;
}
