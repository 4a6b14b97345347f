//! Reads off a replica: `oncegate serve --read-store` on a real streaming standby the test
//! starts. The report, the queue and delivery listings, proofs read back and the console are
//! read from the standby and say how stale they are (`oncegate-read-lag-ms`); decisions and
//! operator actions stay on the primary, so they work while the standby's replay is paused.

use std::time::{Duration, Instant};

use oncegate::store::testing::cluster::Cluster;
use serde_json::Value;

use crate::serve::{start_with, stop};

fn refund(n: usize) -> String {
    format!(
        r#"{{"type":"refund.created","sent_at":"2026-03-05T16:02:11Z","attempt":1,"data":{{"payment_id":"pay_r{n}","request_ref":"rr-{n}","amount":1500,"currency":"EUR"}}}}"#
    )
}

/// An admin GET: its status, its read-lag header (when it has one) and its JSON body.
async fn read(http: &reqwest::Client, url: &str) -> (u16, Option<u64>, Value) {
    let answer = http
        .get(url)
        .bearer_auth("admin-token-1")
        .send()
        .await
        .expect("the service answers");
    let status = answer.status().as_u16();
    let lag = answer
        .headers()
        .get("oncegate-read-lag-ms")
        .map(|v| v.to_str().unwrap().parse().expect("milliseconds"));
    let body = answer.json().await.unwrap_or_default();
    (status, lag, body)
}

/// The report's count of deliveries, as the replica answers it.
async fn reported(http: &reqwest::Client, base: &str) -> (u64, Option<u64>) {
    let (status, lag, body) = read(
        http,
        &format!("{base}/v1/report?since=2020-01-01T00:00:00Z"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    (
        body["total"]["received"]
            .as_u64()
            .expect("a delivery count"),
        lag,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_come_from_the_standby_and_say_how_stale_they_are() {
    let primary = Cluster::primary(None).await;
    let standby = Cluster::standby_of(&primary, "reader").await;
    let server = start_with(&primary.url(), &["--read-store", &standby.url()]);
    let http = reqwest::Client::new();
    let base = server.base.clone();

    let mut deliveries = Vec::new();
    for n in 0..3 {
        let answer = http
            .post(format!("{base}/v1/deliveries/acme/payflow/live"))
            .bearer_auth("ingest-token-1")
            .body(refund(n))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let body: Value = answer.json().await.unwrap();
        deliveries.push(body["delivery_id"].as_str().unwrap().to_owned());
    }

    // The standby catches up: the report read from it counts the three, and says its lag.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (count, lag) = reported(&http, &base).await;
        assert!(
            lag.is_some(),
            "an answer read from the replica carries its lag"
        );
        if count == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the standby never showed the deliveries ({count})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, lag, proof) =
        read(&http, &format!("{base}/v1/deliveries/{}", deliveries[0])).await;
    assert_eq!(status, 200, "{proof}");
    assert!(lag.is_some());
    let (status, lag, _) = read(&http, &format!("{base}/v1/queue")).await;
    assert_eq!((status, lag.is_some()), (200, true));
    // The console's pages say it in words, and in the header.
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed = browser
        .post(format!("{base}/console/signin"))
        .form(&[("token", "admin-token-1")])
        .send()
        .await
        .unwrap();
    let cookie = signed
        .headers()
        .get("set-cookie")
        .expect("a session cookie")
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = browser
        .get(format!("{base}/console/report"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers().get("oncegate-read-lag-ms").is_some());
    let html = page.text().await.unwrap();
    assert!(
        html.contains("read from a replica, ") && html.contains(" ms behind"),
        "{html}"
    );
    // What is not read from the replica says nothing of one.
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert!(health.headers().get("oncegate-read-lag-ms").is_none());

    // The standby stops replaying: decisions still go to the primary, while the replica's
    // answers stay behind and their lag grows.
    let admin = standby.client().await;
    admin
        .execute("SELECT pg_wal_replay_pause()", &[])
        .await
        .unwrap();
    for n in 3..5 {
        let answer = http
            .post(format!("{base}/v1/deliveries/acme/payflow/live"))
            .bearer_auth("ingest-token-1")
            .body(refund(n))
            .send()
            .await
            .unwrap();
        assert_eq!(
            answer.status(),
            200,
            "decided on the primary while the replica is paused"
        );
    }
    let on_primary: i64 = primary
        .client()
        .await
        .query_one("SELECT COUNT(*) FROM deliveries", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(on_primary, 5);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (count, lag) = reported(&http, &base).await;
    assert_eq!(count, 3, "the paused replica still answers what it had");
    assert!(
        lag.is_some_and(|ms| ms >= 250),
        "a replica behind its primary says so: {lag:?} ms"
    );

    // Replay resumes: the replica catches up and its lag returns to zero.
    admin
        .execute("SELECT pg_wal_replay_resume()", &[])
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (count, lag) = reported(&http, &base).await;
        if count == 5 && lag == Some(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never caught up: {count} deliveries, lag {lag:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(server);
}

#[test]
fn a_sqlite_store_has_no_replica() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("primary.db").display());
    let replica = format!("sqlite://{}", dir.path().join("replica.db").display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args([
            "serve",
            "--store",
            &store,
            "--read-store",
            &replica,
            "--listen",
            "127.0.0.1:0",
        ])
        .args([
            "--contract",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/oncegate.toml"),
        ])
        .env("ONCEGATE_KEY_SALT", "replica-test-salt")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a read store is a PostgreSQL streaming standby"),
        "{err}"
    );
}
