//! `archive export|verify`, `purge --archive` and `explain --archive` as an operator runs them:
//! the real binary on a SQLite store holding deliveries older than the example contract's
//! proof retention. A proof purged from the store reads back from its archive exactly as it
//! read before; a purge whose archive cannot be written removes nothing; a changed archive does
//! not verify.

use std::path::Path;
use std::sync::Arc;

use oncegate::{Gate, GateConfig, Reception};
use time::{Duration, OffsetDateTime};

const CONTRACT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/oncegate.toml");
const SALT: &str = "archive-salt";

fn ok(args: &[&str]) -> String {
    crate::binary::ok(Some(SALT), args)
}

fn fails(args: &[&str], status: i32) -> String {
    crate::binary::fails_with(Some(SALT), args, status)
}

/// Refund `n` delivered through a gate whose clock reads `at`; an effect to run is run and
/// its result recorded.
pub(crate) async fn refund(url: &str, at: OffsetDateTime, n: u32) -> String {
    let contract = oncegate_core::contract::parse(
        "oncegate.toml",
        &std::fs::read_to_string(CONTRACT).unwrap(),
    )
    .unwrap();
    let store = oncegate::store::open(url).await.unwrap();
    let mut config = GateConfig::new(Arc::new(contract), store, SALT.as_bytes().to_vec());
    config.clock = Arc::new(move || at);
    let gate = Gate::new(config);
    let body = format!(
        r#"{{"type":"refund.created","data":{{"payment_id":"pay_{n}","request_ref":"rr-{n}","amount":100,"currency":"EUR"}}}}"#
    );
    let outcome = gate
        .deliver(Reception::new("acme", "payflow", "live", body.into_bytes()))
        .await
        .unwrap();
    let id = outcome.proof().delivery.as_str().to_owned();
    if let oncegate::Outcome::Process(held) = outcome {
        held.complete(&format!(r#"{{"refund":"re_{n}"}}"#))
            .await
            .unwrap();
    }
    id
}

fn flip_a_byte(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(file, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_proof_reads_back_from_its_verified_archive() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    let store = ["--store", url.as_str()];
    // Older than the contract's 400 days of proof retention, and one of yesterday.
    let old = OffsetDateTime::now_utc() - Duration::days(500);
    let first = refund(&url, old, 1).await;
    let again = refund(&url, old + Duration::minutes(1), 1).await;
    let other = refund(&url, old + Duration::minutes(2), 2).await;
    let recent = refund(&url, OffsetDateTime::now_utc() - Duration::days(1), 3).await;
    let text = |id: &str| ok(&[&["explain", id][..], &store].concat());
    let json = |id: &str| ok(&[&["explain", "--json", id][..], &store].concat());
    let before: Vec<(String, String)> = [&first, &again, &other]
        .iter()
        .map(|id| (text(id), json(id)))
        .collect();
    assert!(before[1].0.contains("ignore"), "{}", before[1].0);

    // An export copies: verified, and the store still holds everything.
    let cut = (old + Duration::days(1)).date().to_string();
    let exported = dir.path().join("exported");
    let line = ok(&[
        &["archive", "export", "--before", &cut, "--out"][..],
        &[exported.to_str().unwrap()],
        &store,
    ]
    .concat());
    assert!(line.contains("3 deliveries, 3 proofs"), "{line}");
    let verified = ok(&["archive", "verify", exported.to_str().unwrap()]);
    assert!(verified.starts_with("verified archive"), "{verified}");
    assert_eq!(text(&first), before[0].0);

    // A purge whose archive cannot be written (a directory in use) removes nothing.
    let refused = fails(
        &[
            &["purge", "--contract", CONTRACT, "--archive"][..],
            &[exported.to_str().unwrap()],
            &store,
        ]
        .concat(),
        2,
    );
    assert!(refused.contains("not empty"), "{refused}");
    assert_eq!(text(&first), before[0].0, "nothing was removed");

    // The purge archives, verifies, then removes the three old deliveries.
    let archived = dir.path().join("2025");
    let purged = ok(&[
        &["purge", "--contract", CONTRACT, "--archive"][..],
        &[archived.to_str().unwrap()],
        &store,
    ]
    .concat());
    assert!(purged.contains("3 deliveries"), "{purged}");
    assert!(purged.contains("deliveries removed     3"), "{purged}");
    let gone = fails(&[&["explain", first.as_str()][..], &store].concat(), 2);
    assert!(gone.contains("no delivery"), "{gone}");
    assert!(
        text(&recent).contains("process"),
        "the recent delivery stays"
    );

    // Each purged proof reads back from the archive as it read from the store.
    let from = |id: &str, json: bool| {
        let mut args = vec!["explain", "--archive", archived.to_str().unwrap(), id];
        if json {
            args.insert(1, "--json");
        }
        ok(&args)
    };
    for (id, (text, json)) in [&first, &again, &other].iter().zip(&before) {
        assert_eq!(&from(id, false), text, "explain --archive {id}");
        assert_eq!(&from(id, true), json, "explain --archive --json {id}");
    }
    let absent = fails(
        &["explain", "--archive", archived.to_str().unwrap(), &recent],
        2,
    );
    assert!(absent.contains("no delivery"), "{absent}");

    // A changed archive neither verifies nor reads back.
    flip_a_byte(&archived.join("deliveries.jsonl.gz"));
    let bad = fails(&["archive", "verify", archived.to_str().unwrap()], 1);
    assert!(bad.contains("deliveries.jsonl.gz has SHA-256"), "{bad}");
    let unread = fails(
        &["explain", "--archive", archived.to_str().unwrap(), &first],
        2,
    );
    assert!(unread.contains("SHA-256"), "{unread}");
}
