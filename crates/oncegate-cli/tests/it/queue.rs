//! `oncegate queue list|show|resolve` on both stores: pages with `--limit`/`--after`, the
//! filters, the counts, and every item resolved by the id the listing shows (a lease-expiry
//! item by the delivery that was processed, others by their queue item id).

use std::process::Output;

use oncegate::store::testing::TestDatabase;
use serde_json::{json, Value};

const SALT: &str = "cli-queue-salt";
const INGEST: &str = "ingest-token-cli-queue";

/// The real service, in-process, on `url`, with this module's salt and tokens.
async fn start(url: &str) -> (String, tokio::sync::oneshot::Sender<()>) {
    crate::service::start(url, SALT, &format!("ingest:*:{INGEST}")).await
}

async fn post(base: &str, path: &str, body: String) -> Value {
    crate::service::post(base, INGEST, path, body).await
}

fn oncegate(args: &[&str]) -> Output {
    crate::binary::run(Some(SALT), args)
}

fn ok(args: &[&str]) -> String {
    crate::binary::ok(Some(SALT), args)
}

fn fails(args: &[&str]) -> String {
    crate::binary::fails_with(Some(SALT), args, 2)
}

fn refund(payment: &str, sent_at: &str) -> String {
    format!(
        r#"{{"type":"refund.created","sent_at":"{sent_at}","attempt":1,"data":{{"payment_id":"{payment}","amount":1500,"currency":"EUR"}}}}"#
    )
}

fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| c.is_whitespace() || c == '│')
}

/// The deliveries a listing shows, in order: each row's first column (a row also names its
/// reference delivery, further right).
fn deliveries(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| words(l).find(|w| !w.is_empty()))
        .filter(|w| w.starts_with("dlv_"))
        .map(str::to_owned)
        .collect()
}

/// The queue item id shown on the listing's row of `delivery`.
fn shown_item(listing: &str, delivery: &str) -> String {
    let line = listing
        .lines()
        .find(|l| words(l).find(|w| !w.is_empty()) == Some(delivery))
        .unwrap_or_else(|| panic!("{delivery} is not listed:\n{listing}"));
    words(line)
        .find(|w| w.starts_with("q_"))
        .unwrap_or_else(|| panic!("no queue item id on {line:?}"))
        .to_owned()
}

async fn walk_the_queue(url: &str) {
    let (base, stop) = start(url).await;
    let store = ["--store", url];
    let deliver = |body: String| post(&base, "/v1/deliveries/acme/payflow/live", body);

    // A weak key on a critical type (reconcile).
    let first = deliver(refund("pay_c9", "2024-05-01T10:00:00Z")).await;
    let effect = first["effect"]["id"].as_str().unwrap();
    let token = first["reservation"]["token"].as_str().unwrap();
    post(
        &base,
        &format!("/v1/effects/{effect}/complete"),
        json!({"token": token, "result": {}}).to_string(),
    )
    .await;
    let weak = deliver(refund("pay_c9", "2024-05-01T10:04:00Z")).await;
    assert_eq!(weak["action"], "reconcile", "{weak}");
    // A crash: its lease swept an hour later, and a retry queued against the unknown effect.
    let crashed = deliver(refund("pay_c8", "2024-05-01T11:00:00Z")).await;
    assert_eq!(crashed["action"], "process", "{crashed}");
    let swept = oncegate::store::open(url).await.unwrap();
    swept
        .expire_leases(time::OffsetDateTime::now_utc() + time::Duration::hours(1))
        .await
        .unwrap();
    drop(swept);
    let retry = deliver(refund("pay_c8", "2024-05-01T11:00:00Z")).await;
    assert_eq!(retry["action"], "reconcile", "{retry}");
    // Oldest first: the sweep ran "an hour later", so the lease-expiry item is the newest.
    let ids = [&weak, &retry, &crashed].map(|a| a["delivery_id"].as_str().unwrap().to_owned());

    // Pages of one, walked with the cursor each page prints.
    let mut listed = Vec::new();
    let mut args: Vec<String> = vec!["queue".into(), "list".into(), "--limit".into(), "1".into()];
    loop {
        let all: Vec<&str> = args.iter().map(String::as_str).chain(store).collect();
        let page = ok(&all);
        assert!(page.contains("reconcile: 3 open, 0 resolved"), "{page}");
        listed.extend(deliveries(&page));
        match page
            .lines()
            .find_map(|l| l.strip_prefix("next page: --after "))
        {
            Some(cursor) => {
                args.truncate(4);
                args.extend(["--after".into(), cursor.trim().to_owned()]);
            }
            None => break,
        }
        assert!(listed.len() <= 3, "paging must end");
    }
    assert_eq!(listed, ids, "each item once, oldest first");

    // Filters.
    let list = |extra: &[&str]| ok(&[&["queue", "list"], extra, &store].concat());
    assert!(list(&["--older-than", "1h"]).contains("no item"));
    let recent = list(&["--newer-than", "1h", "--type", "refund.created"]);
    assert_eq!(deliveries(&recent), ids, "{recent}");
    assert!(list(&["--provider", "shopline"]).contains("no item"));
    let bad = fails(&[&["queue", "list", "--older-than", "yesterday"][..], &store].concat());
    assert!(bad.contains("--older-than"), "{bad}");
    let bad = fails(&[&["queue", "list", "--after", "nope"][..], &store].concat());
    assert!(bad.contains("--after"), "{bad}");

    // Resolved by the ids shown: the processed delivery's own id for its lease-expiry item.
    let listing = list(&[]);
    let weak_item = shown_item(&listing, &ids[0]);
    let retry_item = shown_item(&listing, &ids[1]);
    let resolve = |id: &str, outcome: &str| {
        oncegate(
            &[
                &[
                    "queue",
                    "resolve",
                    id,
                    "--outcome",
                    outcome,
                    "--note",
                    "checked",
                    "--by",
                    "sam",
                ][..],
                &store,
            ]
            .concat(),
        )
    };
    let done = resolve(&ids[2], "duplicate");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    // The retry's item was settled with it.
    let again = resolve(&retry_item, "distinct");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already resolved"));
    let shown = ok(&[&["queue", "show", weak_item.as_str()][..], &store].concat());
    assert!(shown.contains(&ids[0]), "{shown}");
    let done = resolve(&weak_item, "distinct");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(String::from_utf8_lossy(&done.stdout).contains(&weak_item));

    let open = list(&[]);
    assert!(open.contains("no item"), "{open}");
    assert!(open.contains("reconcile: 0 open, 3 resolved"), "{open}");
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_walked_and_resolved_by_its_ids_on_sqlite() {
    let db = TestDatabase::sqlite();
    walk_the_queue(&db.url).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_walked_and_resolved_by_its_ids_on_postgres() {
    let db = TestDatabase::postgres("oncegate_cli_queue").await;
    walk_the_queue(&db.url).await;
    db.cleanup().await;
}
