//! `oncegate partition` as an operator runs it: the first run on a PostgreSQL store partitions
//! its journal (its proofs included) by day, later runs only add days ahead, and a SQLite store is told
//! plainly that partitions are PostgreSQL's.

use oncegate::store::testing::TestDatabase;

fn ok(args: &[&str]) -> String {
    crate::binary::ok(None, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_run_partitions_and_later_runs_add_days() {
    let db = TestDatabase::postgres("oncegate_cli_partition").await;
    let store = ["--store", db.url.as_str()];
    let first = ok(&[&["partition", "--days-ahead", "3"][..], &store].concat());
    assert!(first.contains("now partitioned by day"), "{first}");
    assert!(first.contains("created 3 partitions"), "{first}");
    let again = ok(&[&["partition", "--days-ahead", "5", "--json"][..], &store].concat());
    let doc: serde_json::Value = serde_json::from_str(&again).unwrap();
    assert_eq!(doc["converted"], false, "{again}");
    assert_eq!(
        doc["created"].as_array().unwrap().len(),
        2,
        "two more days: {again}"
    );
    db.cleanup().await;

    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    let refused = crate::binary::fails_with(None, &["partition", "--store", &sqlite], 2);
    assert!(refused.contains("PostgreSQL's"), "{refused}");
}
