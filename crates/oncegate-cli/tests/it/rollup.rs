//! `oncegate rollup` as an operator runs it after an upgrade: it counts the report's minute
//! totals of a store's history once, a second run finds nothing left, and the report reads the
//! same figures from the totals as it did from the rows.

use time::{Duration, OffsetDateTime};

fn ok(args: &[&str]) -> String {
    crate::binary::ok(Some("archive-salt"), args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_is_counted_once_and_reports_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    let store = ["--store", url.as_str()];
    let hour_ago = OffsetDateTime::now_utc() - Duration::hours(1);
    crate::archive::refund(&url, hour_ago, 1).await;
    crate::archive::refund(&url, hour_ago + Duration::minutes(1), 1).await;
    crate::archive::refund(&url, hour_ago + Duration::minutes(5), 2).await;
    let since = (hour_ago - Duration::minutes(1))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let report = || ok(&[&["report", "--json", "--since", &since][..], &store].concat());
    let from_rows = report();
    assert!(from_rows.contains(r#""received":3"#), "{from_rows}");

    let first: serde_json::Value =
        serde_json::from_str(&ok(&[&["rollup", "--json"][..], &store].concat())).unwrap();
    assert!(first["minutes"].as_u64().unwrap() >= 57, "{first}");
    assert_eq!(first["deliveries"], 3, "{first}");
    let again = ok(&[&["rollup"][..], &store].concat());
    assert!(again.starts_with("counted 0 minutes"), "{again}");
    assert_eq!(report(), from_rows, "the totals read as the rows did");
}
