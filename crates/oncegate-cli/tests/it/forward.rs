//! `oncegate forward list|resend`, `explain` and `queue list` on a store holding a dead
//! letter: a forward type's delivery decided by the real gate, its one attempt failed for good.

use std::process::Output;
use std::sync::Arc;

use oncegate::store::testing::TestDatabase;
use oncegate::store::{ForwardEnd, ForwardNext};
use oncegate::{Gate, GateConfig, Outcome, Reception};

fn oncegate(args: &[&str]) -> Output {
    crate::binary::run(None, args)
}

fn ok(args: &[&str]) -> String {
    let out = oncegate(args);
    assert!(
        out.status.success(),
        "oncegate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(args: &[&str]) -> String {
    let out = oncegate(args);
    assert_eq!(out.status.code(), Some(2), "oncegate {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const CONTRACT: &str = r#"
[providers.hooks]
event_type = "/type"

[providers.hooks.forward]
url = "http://127.0.0.1:9/hooks"
max_attempts = 1

[providers.hooks.types."note.added"]
criticality = "reversible"

  [[providers.hooks.types."note.added".strategies]]
  name = "note-ref"
  version = 1
  level = "business_ref"
  fields = ["/ref"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_listed_explained_and_resent() {
    let db = TestDatabase::sqlite();
    let contract = oncegate_core::contract::parse("c.toml", CONTRACT).unwrap();
    let store = oncegate::store::open(&db.url).await.unwrap();
    let gate = Gate::new(GateConfig::new(
        Arc::new(contract),
        store.clone(),
        b"s".to_vec(),
    ));
    let body = br#"{"type":"note.added","ref":"n-1"}"#.to_vec();
    let Outcome::Forwarded(proof) = gate
        .deliver(Reception::new("acme", "hooks", "live", body))
        .await
        .unwrap()
    else {
        panic!("a forward type's process is forwarded")
    };
    let effect = proof.effect.clone().unwrap();
    let delivery = proof.delivery.to_string();
    let token = store.effect(&effect).await.unwrap().unwrap().fencing_token;
    let now = gate.now();
    let started = store
        .forward_start(&effect, token, now, now + time::Duration::seconds(10))
        .await
        .unwrap()
        .expect("due");
    let end = ForwardEnd {
        ended_at: now,
        status: Some(502),
        latency: time::Duration::milliseconds(3),
        error: Some("the endpoint answered HTTP 502".to_owned()),
        next: ForwardNext::Dead {
            error: "forward dead after 1 attempt: the endpoint answered HTTP 502".to_owned(),
        },
    };
    store
        .forward_finish(&effect, token, started.series, started.attempt, &end)
        .await
        .unwrap();
    drop(gate);
    drop(store);

    let listing = ok(&["forward", "list", "--state", "dead", "--store", &db.url]);
    assert!(listing.contains(effect.as_str()), "{listing}");
    assert!(listing.contains("HTTP 502"), "{listing}");
    assert!(
        fails(&["forward", "list", "--state", "lost", "--store", &db.url]).contains("\"lost\"")
    );
    let queue = ok(&["queue", "list", "--store", &db.url]);
    assert!(queue.contains("dead letters: 1 forward"), "{queue}");
    let explained = ok(&["explain", &delivery, "--store", &db.url]);
    assert!(
        explained.contains("forward    dead (series 1, 1 attempt in it)"),
        "{explained}"
    );
    assert!(explained.contains("attempt    1.1"), "{explained}");
    assert!(explained.contains("dead, HTTP 502, 3 ms"), "{explained}");

    let resent = ok(&["forward", "resend", effect.as_str(), "--store", &db.url]);
    assert!(resent.contains("series 2 is pending"), "{resent}");
    assert!(
        fails(&["forward", "resend", effect.as_str(), "--store", &db.url]).contains("not dead")
    );
    assert!(
        fails(&["forward", "resend", "eff_nope", "--store", &db.url]).contains("not an effect id")
    );
    let pending = ok(&["forward", "list", "--state", "pending", "--store", &db.url]);
    assert!(pending.contains(effect.as_str()), "{pending}");
    db.cleanup().await;
}
