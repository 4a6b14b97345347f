//! SQLite's WAL is copied back into the database file by the store's own checkpoint thread,
//! never by the writer (which runs with `wal_autocheckpoint = 0`): with the thread gone, the
//! database file would stay as the migrations left it for as long as the store is open.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_reaches_the_database_file_while_the_store_runs() {
    let backend = Backend::sqlite().await;
    let path = backend
        .url
        .strip_prefix("sqlite://")
        .expect("a sqlite URL")
        .to_owned();
    let store = backend.open().await;
    let before = std::fs::metadata(&path).expect("the database file").len();
    for n in 0..400 {
        store.journal(reception(n)).await.expect("journaled");
    }
    // 400 journal entries of 2 KiB each are far more than the file held after the migrations;
    // they reach it once a checkpoint copied them there.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = std::fs::metadata(&path).expect("the database file").len();
        if now >= before + 400 * 2048 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the database file stayed at {now} bytes (it was {before} before 800 KiB were journaled): no checkpoint ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let journaled = store.deliveries(&Default::default()).await.expect("listed");
    assert!(!journaled.is_empty());
    drop(store);
    backend.cleanup().await;
}
