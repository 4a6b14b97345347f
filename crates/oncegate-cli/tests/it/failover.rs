//! A PostgreSQL failover under load: `oncegate serve` on a multi-host store string (a primary
//! and its synchronous standby, `target_session_attrs=read-write`), the primary killed with
//! SIGKILL mid-load and the standby promoted a second later. Nothing acknowledged is lost,
//! nothing is processed twice, the gap is answered 503 only, and the service resumes on the new
//! primary without a restart.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncegate::store::testing::cluster::Cluster;

use crate::serve::{start_with, stop};

/// One answer, as a provider saw it.
struct Seen {
    payment: String,
    at: Instant,
    status: u16,
    body: serde_json::Value,
}

fn capture(payment: &str) -> String {
    format!(
        r#"{{"type":"payment.captured","sent_at":"2026-03-02T09:14:07Z","attempt":1,"data":{{"payment_id":"{payment}","capture_id":"cap_{payment}","amount":4990,"currency":"EUR","captured_at":"2026-03-02T10:14:05+01:00","customer_email":"jane@example.com"}}}}"#
    )
}

/// A provider: delivers its payments one after the other, each retried on 503 until answered
/// 200, until `stop` says so.
async fn provider(
    base: String,
    worker: usize,
    until: Arc<Mutex<Option<Instant>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> Vec<String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let mut done = Vec::new();
    for n in 0.. {
        if until.lock().unwrap().is_some_and(|t| Instant::now() > t) {
            break;
        }
        let payment = format!("pay_w{worker}_{n}");
        loop {
            let answer = http
                .post(format!("{base}/v1/deliveries/acme/payflow/live"))
                .bearer_auth("ingest-token-1")
                .body(capture(&payment))
                .send()
                .await
                .expect("the service answers (it never stops)");
            let status = answer.status().as_u16();
            let body: serde_json::Value = answer.json().await.unwrap_or_default();
            seen.lock().unwrap().push(Seen {
                payment: payment.clone(),
                at: Instant::now(),
                status,
                body,
            });
            if status == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        done.push(payment);
    }
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_loses_nothing_doubles_nothing_and_needs_no_restart() {
    let mut primary = Cluster::primary(Some("standby")).await;
    let standby = Cluster::standby_of(&primary, "standby").await;
    // The form an operator writes for a primary and its standby (libpq's key=value).
    let store = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} dbname=postgres user=postgres target_session_attrs=read-write",
        primary.port, standby.port
    );
    let server = start_with(&store, &[]);

    let seen = Arc::new(Mutex::new(Vec::new()));
    let until = Arc::new(Mutex::new(None));
    let workers: Vec<_> = (0..6)
        .map(|w| {
            tokio::spawn(provider(
                server.base.clone(),
                w,
                until.clone(),
                seen.clone(),
            ))
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_kill = seen.lock().unwrap().len();
    assert!(before_kill > 0, "the load ran before the kill");
    primary.kill();
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    standby.promote().await;
    let promoted = Instant::now();
    *until.lock().unwrap() = Some(promoted + Duration::from_secs(3));
    let mut payments = Vec::new();
    for w in workers {
        payments.extend(w.await.expect("a provider"));
    }

    let seen = std::mem::take(&mut *seen.lock().unwrap());
    // Only 200, or 503 in the gap.
    let other: Vec<String> = seen
        .iter()
        .filter(|s| s.status != 200 && s.status != 503)
        .map(|s| format!("{} {}", s.status, s.body))
        .collect();
    assert!(
        other.is_empty(),
        "answers other than 200 and 503: {other:?}"
    );
    let unavailable = seen.iter().filter(|s| s.status == 503).count();
    let first_after = seen
        .iter()
        .filter(|s| s.status == 200 && s.at > killed)
        .map(|s| s.at)
        .min()
        .expect("the service answered 200 again after the failover, without a restart");
    let recovery = first_after - killed;
    let acknowledged = seen.iter().filter(|s| s.status == 200).count();
    eprintln!(
        "failover: {acknowledged} acknowledged, {unavailable} answered 503, first 200 {recovery:?} after the kill ({:?} after the promotion)",
        first_after.saturating_duration_since(promoted)
    );

    // What the new primary holds: every acknowledged decision (0 lost), one effect per payment,
    // reserved once (0 doubled).
    let db = standby.client().await;
    for s in seen.iter().filter(|s| s.status == 200) {
        let id = s.body["delivery_id"].as_str().expect("a delivery id");
        let proofs: i64 = db
            .query_one("SELECT count(*) FROM proofs WHERE delivery_id = $1", &[&id])
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            proofs, 1,
            "{}: acknowledged delivery {id} is on the new primary",
            s.payment
        );
    }
    for p in &payments {
        let processed = seen
            .iter()
            .filter(|s| &s.payment == p && s.status == 200 && s.body["action"] == "process")
            .count();
        assert!(
            processed <= 1,
            "{p} was answered `process` {processed} times"
        );
    }
    let effects: i64 = db
        .query_one("SELECT count(*) FROM effects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(effects as usize, payments.len(), "one effect per payment");
    stop(server);
}
