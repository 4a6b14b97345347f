//! SQLite's WAL is copied back into the database file by the store's own checkpoint thread,
//! well before the writer's own checkpoint (at 1,000 pages) would; and the WAL still starts
//! over, so its file stays bounded however long the writes go on; and the retention purge gives
//! the pages it freed back, so the database file shrinks.

use std::time::{Duration, Instant};

use oncegate_store::NewReception;
use time::OffsetDateTime;

use crate::harness::Backend;

fn reception(n: usize) -> NewReception {
    NewReception {
        tenant: "acme".to_owned(),
        provider: "stripe".to_owned(),
        env: "live".to_owned(),
        event_type: Some("refund.created".to_owned()),
        received_at: OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(),
        size: 2048,
        body_sha256: format!("body-{n}"),
        headers_json: "{}".to_owned(),
        payload: Some(vec![b'x'; 2048]),
        transport_key: None,
        correlation_id: None,
    }
}

/// The SQLite database file of a test backend.
fn database_file(backend: &Backend) -> String {
    backend
        .url
        .strip_prefix("sqlite://")
        .expect("a sqlite URL")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_reaches_the_database_file_and_stays_bounded() {
    let backend = Backend::sqlite().await;
    let path = database_file(&backend);
    let size = |suffix: &str| {
        std::fs::metadata(format!("{path}{suffix}"))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let store = backend.open().await;
    let before = size("");
    // 100 entries of 2 KiB: a few hundred WAL pages, under the writer's threshold, so only the
    // checkpoint thread copies them into the database file.
    for n in 0..100 {
        store.journal(reception(n)).await.expect("journaled");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = size("");
        if now >= before + 100 * 2048 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the database file stayed at {now} bytes (it was {before} before 200 KiB were journaled): no checkpoint ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // 3,000 more, one transaction each (about 60 MB of WAL frames if the WAL never started over).
    for n in 100..3100 {
        store.journal(reception(n)).await.expect("journaled");
    }
    let wal = size("-wal");
    assert!(
        wal < 16 << 20,
        "the WAL grew to {wal} bytes: it never started over"
    );
    let listed = store
        .deliveries(&oncegate_store::DeliveryFilter {
            limit: 5000,
            ..Default::default()
        })
        .await
        .expect("listed");
    assert_eq!(listed.len(), 3100, "every entry is kept");
    drop(store);
    backend.cleanup().await;
}

/// The retention purge gives the pages it freed back to the file system: after a purge of
/// every delivery, the database file shrinks to a fraction of its size (at the next
/// checkpoint), and what the purge kept still reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_shrinks_after_a_purge() {
    let backend = Backend::sqlite().await;
    let path = database_file(&backend);
    let size = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let store = backend.open().await;
    for n in 0..1000 {
        store.journal(reception(n)).await.expect("journaled");
    }
    let kept = store
        .journal(NewReception {
            received_at: OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap(),
            ..reception(1000)
        })
        .await
        .expect("journaled");
    // About 3 MB of bodies: wait until the checkpoint thread has copied them into the file.
    let deadline = Instant::now() + Duration::from_secs(20);
    while size() < 2_000_000 {
        assert!(
            Instant::now() < deadline,
            "the file stayed at {} bytes",
            size()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let full = size();

    let policy = oncegate_store::PurgePolicy {
        payload_retention: time::Duration::days(1),
        proof_retention: time::Duration::days(1),
    };
    let at = OffsetDateTime::from_unix_timestamp(1_700_000_000 + 30 * 86_400).unwrap();
    let purged = store.purge(&policy, at, false).await.expect("purged");
    assert_eq!(purged.deliveries, 1000);

    let deadline = Instant::now() + Duration::from_secs(20);
    while size() > full / 4 {
        assert!(
            Instant::now() < deadline,
            "the file stayed at {} bytes after a purge of every delivery (it was {full})",
            size()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let record = store.delivery(&kept).await.expect("read").expect("kept");
    assert_eq!(record.payload.as_deref(), Some(&[b'x'; 2048][..]));
    drop(store);
    backend.cleanup().await;
}
