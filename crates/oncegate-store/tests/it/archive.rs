//! Archives on every backend: an export holds every delivery received before its cut with its
//! proof, links, queue items and the effects they name (each effect once, across pages), none
//! after it; `verify` accepts it and refuses it once a byte or a count is changed; and one
//! delivery copied back into an empty store reads exactly as it read from the original.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use oncegate_core::ids::DeliveryId;
use oncegate_store::archive::{self, file::read_manifest, ArchiveError};
use oncegate_store::{DecideRequest, NewReception, Resolution, ResolutionOutcome, Store};
use time::{Duration, OffsetDateTime};

use crate::batches::{reception, request};
use crate::harness::{strong_critical, Backend};

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
}

/// Delivery `n` received at `at`, decided under `key` (journaled alone when `key` is `None`);
/// a reserved effect is completed at once, except `k1`'s, which stays in flight so its next
/// delivery goes to the queue.
async fn deliver(
    store: &Arc<Store>,
    n: usize,
    at: OffsetDateTime,
    key: Option<&str>,
) -> DeliveryId {
    let reception = NewReception {
        received_at: at,
        ..reception(n)
    };
    match key {
        None => store.journal(reception).await.expect("journaled"),
        Some(key) => {
            let req = DecideRequest {
                now: at,
                ..request(n, key, "{}")
            };
            let (id, outcome) = store
                .journal_and_decide(reception, req, &strong_critical)
                .await
                .expect("journaled");
            if let Some(r) = outcome.expect("decided").reservation {
                if key != "k1" {
                    store
                        .complete(&r.effect, r.fencing_token, "{}", at)
                        .await
                        .expect("completed");
                }
            }
            id
        }
    }
}

/// Each archived table's values of `column`, in file order.
fn column(dir: &Path, table: &str, name: &str) -> Vec<String> {
    let manifest = read_manifest(dir).expect("a manifest");
    let entry = manifest
        .tables
        .iter()
        .find(|t| t.table == table)
        .expect("the table");
    let file = std::fs::File::open(dir.join(&entry.file)).expect("the file");
    let text = std::io::read_to_string(flate2::read::GzDecoder::new(file)).expect("gzip");
    text.lines()
        .map(|l| {
            let row: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            row[name].as_str().unwrap_or("").to_owned()
        })
        .collect()
}

pub async fn an_archive_holds_every_row_before_its_cut_and_reads_back(b: &Backend) {
    let store = b.open().await;
    let at = |minutes: i64| t0() + Duration::minutes(minutes);
    // Pages of three deliveries (the `testing` page size): k0 comes back in a later page as a
    // duplicate, k1 as a delivery queued behind its effect still in flight, then resolved as
    // the same operation (a queue item and a link); each effect must still be archived once.
    let keys = [
        Some("k0"),
        Some("k1"),
        Some("k2"),
        Some("k0"),
        None,
        Some("k5"),
        Some("k1"),
    ];
    let mut before = Vec::new();
    for (n, key) in keys.iter().enumerate() {
        before.push(deliver(&store, n, at(n as i64), *key).await);
    }
    // The queued repeat of k1 resolved as the same operation: linked to k1's effect.
    let item = store
        .proof(&before[6])
        .await
        .unwrap()
        .unwrap()
        .queue_item
        .expect("queued");
    let resolution = Resolution {
        outcome: ResolutionOutcome::Duplicate,
        authoritative_ref: None,
        note: String::new(),
        by: "alice".to_owned(),
        at: at(10),
    };
    store.resolve(&item, resolution).await.expect("resolved");
    let cut = t0() + Duration::days(1);
    let after = [
        deliver(&store, 100, cut, Some("k2")).await,
        deliver(&store, 101, cut + Duration::minutes(1), Some("k9")).await,
    ];

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("2023-11");
    let now = cut + Duration::days(1);
    let manifest = store
        .archive_export(&out, cut, now)
        .await
        .expect("exported");
    let rows: Vec<(&str, u64)> = manifest
        .tables
        .iter()
        .map(|t| (t.table.as_str(), t.rows))
        .collect();
    assert_eq!(
        rows,
        [
            ("deliveries", 7),
            ("proofs", 6),
            ("links", 1),
            ("queue_items", 1),
            ("effects", 4)
        ],
        "every delivery before the cut, its proof and links, each named effect once"
    );
    let ids = column(&out, "deliveries", "id");
    let want: Vec<String> = before.iter().map(|d| d.as_str().to_owned()).collect();
    assert_eq!(ids, want, "the deliveries before the cut, in id order");
    let effects = column(&out, "effects", "id");
    assert_eq!(
        effects.iter().collect::<BTreeSet<_>>().len(),
        effects.len(),
        "each effect once: {effects:?}"
    );
    let verified = archive::verify(&out).expect("it verifies");
    assert_eq!(verified.manifest, manifest);

    // Read back into an empty store, a delivery reads as it did, with its proof and effect.
    for (id, fresh) in [(&before[3], "a"), (&before[4], "b"), (&before[6], "d")] {
        let scratch = dir.path().join(fresh);
        std::fs::create_dir(&scratch).unwrap();
        let target = oncegate_store::open(&format!("sqlite://{}", scratch.join("s.db").display()))
            .await
            .unwrap();
        assert!(target.archive_restore(&out, id).await.unwrap());
        assert_eq!(
            target.delivery(id).await.unwrap(),
            store.delivery(id).await.unwrap()
        );
        let proof = store.proof(id).await.unwrap();
        assert_eq!(target.proof(id).await.unwrap(), proof);
        if let Some(item) = proof.as_ref().and_then(|p| p.queue_item.clone()) {
            assert_eq!(
                target.queue_item(&item).await.unwrap(),
                store.queue_item(&item).await.unwrap()
            );
        }
        if let Some(effect) = proof.and_then(|p| p.effect) {
            assert_eq!(
                target.effect(&effect).await.unwrap(),
                store.effect(&effect).await.unwrap()
            );
        }
    }
    let scratch = dir.path().join("c");
    std::fs::create_dir(&scratch).unwrap();
    let target = oncegate_store::open(&format!("sqlite://{}", scratch.join("s.db").display()))
        .await
        .unwrap();
    assert!(
        !target.archive_restore(&out, &after[0]).await.unwrap(),
        "a delivery after the cut is not in the archive"
    );

    // An export never writes into a directory in use, nor archives a period still open.
    let again = store.archive_export(&out, cut, now).await.unwrap_err();
    assert!(again.to_string().contains("not empty"), "{again}");
    let future = store
        .archive_export(&dir.path().join("future"), now + Duration::days(1), now)
        .await
        .unwrap_err();
    assert!(future.to_string().contains("future"), "{future}");
    // The export copied: the store still holds everything.
    for id in before.iter().chain(&after) {
        assert!(store.delivery(id).await.unwrap().is_some());
    }
}

pub async fn a_changed_archive_does_not_verify(b: &Backend) {
    let store = b.open().await;
    for n in 0..4 {
        deliver(&store, n, t0() + Duration::minutes(n as i64), Some("k")).await;
    }
    let cut = t0() + Duration::days(1);
    let dir = tempfile::tempdir().unwrap();
    let copy = |name: &str| {
        let out = dir.path().join(name);
        std::fs::create_dir(&out).unwrap();
        for entry in std::fs::read_dir(dir.path().join("original")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), out.join(entry.file_name())).unwrap();
        }
        out
    };
    store
        .archive_export(&dir.path().join("original"), cut, cut)
        .await
        .unwrap();
    archive::verify(&dir.path().join("original")).expect("the original verifies");

    // One byte of a file changed: its checksum says so.
    let flipped = copy("flipped");
    let file = flipped.join("proofs.jsonl.gz");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 9;
    bytes[last] ^= 0x01;
    std::fs::write(&file, bytes).unwrap();
    let e = archive::verify(&flipped).unwrap_err();
    assert!(e.to_string().contains("proofs.jsonl.gz has SHA-256"), "{e}");

    // A count changed in the manifest: the rows are counted again.
    let recounted = copy("recounted");
    let path = recounted.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    manifest["tables"][0]["rows"] = serde_json::json!(3);
    std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let e = archive::verify(&recounted).unwrap_err();
    assert!(
        e.to_string().contains("holds 4 rows; the manifest says 3"),
        "{e}"
    );

    // No manifest: not an archive (an export cut off before its end leaves none).
    let unfinished = copy("unfinished");
    std::fs::remove_file(unfinished.join("manifest.json")).unwrap();
    assert!(matches!(
        archive::verify(&unfinished),
        Err(ArchiveError::Io { .. })
    ));
}
