//! Gateway mode over HTTP: the shipped contract with a `forward` on payflow, a real
//! destination on 127.0.0.1:0 playing the consumer's endpoint. The provider hears 200 with no
//! reservation; the forward, its attempts and its dead letter are read and re-sent through
//! `/v1/forwards`, and the proof shows every attempt.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use oncegate_core::contract;
use serde_json::Value;

use crate::console_support::Console;
use crate::harness::*;

type Script = Arc<Mutex<(VecDeque<(u16, &'static str)>, Vec<String>)>>;

async fn hook(State(script): State<Script>, body: String) -> (StatusCode, String) {
    let mut s = script.lock().unwrap();
    s.1.push(body);
    let (status, answer) = s.0.pop_front().unwrap_or((200, r#"{"ok":true}"#));
    (StatusCode::from_u16(status).unwrap(), answer.to_owned())
}

async fn destination(replies: &[(u16, &'static str)]) -> (Script, String) {
    let script: Script = Arc::new(Mutex::new((replies.iter().copied().collect(), Vec::new())));
    let app = Router::new()
        .route("/hooks/payflow", post(hook))
        .with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (script, format!("http://{addr}/hooks/payflow"))
}

async fn until_forward(s: &Service, effect: &str, state: &str) -> Value {
    let start = std::time::Instant::now();
    loop {
        let list = s.get("/v1/forwards?limit=100", Some(OPERATOR)).await;
        assert_eq!(list.status, 200, "{}", list.text);
        let found = list.body["forwards"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["effect_id"] == effect)
            .cloned();
        if let Some(f) = found.filter(|f| f["state"] == state) {
            return f;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the forward of {effect} never became {state}: {}",
            list.text
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn a_forwarded_delivery_is_answered_without_a_token_and_its_dead_letter_resent(
    kind: Kind,
) {
    let (script, url) = destination(&[(500, "boom"), (200, r#"{"capture":"cap_http"}"#)]).await;
    let text = format!(
        "{CONTRACT}\n[providers.payflow.forward]\nurl = \"{url}\"\ntimeout = \"2s\"\nmax_attempts = 1\n"
    );
    let contract = Arc::new(contract::parse("oncegate.toml", &text).expect("the contract parses"));
    let s = Service::start_with(kind, |c| c.contract = contract).await;

    let body = capture("pay_gw", "cap_gw", "1500", "2024-05-01T10:00:00Z");
    let a = s.payflow("acme", &body).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.str("action"), "process");
    assert!(
        a.body["reservation"].is_null(),
        "the forwarder holds the effect: {}",
        a.text
    );
    let effect = a.body["effect"]["id"].as_str().unwrap().to_owned();
    let delivery = a.str("delivery_id").to_owned();

    // One attempt allowed: the 500 makes a dead letter.
    let dead = until_forward(&s, &effect, "dead").await;
    assert_eq!(dead["last_status"], 500);
    assert_eq!(dead["log"][0]["outcome"], "dead");
    let listed = s.get("/v1/forwards?state=dead", Some(OPERATOR)).await;
    assert_eq!(
        listed.body["forwards"].as_array().unwrap().len(),
        1,
        "{}",
        listed.text
    );
    let beta = s.get("/v1/forwards?state=dead", Some(OPERATOR_BETA)).await;
    assert!(
        beta.body["forwards"].as_array().unwrap().is_empty(),
        "another tenant's"
    );
    let queue = s.get("/v1/queue", Some(OPERATOR)).await;
    assert_eq!(queue.body["counts"]["dead_letters"], 1, "{}", queue.text);
    let queue = s.get("/v1/queue", Some(OPERATOR_BETA)).await;
    assert_eq!(queue.body["counts"]["dead_letters"], 0, "{}", queue.text);
    let bad = s.get("/v1/forwards?state=lost", Some(OPERATOR)).await;
    assert_eq!((bad.status, bad.error_code()), (400, "invalid_request"));
    assert!(bad.text.contains("lost"), "{}", bad.text);
    let m = s.get("/metrics", Some(OPERATOR)).await;
    assert!(
        m.text.contains("oncegate_forward_dead_letters_total"),
        "{}",
        m.text
    );

    // Re-sent from the queue: a fresh series, delivered with the 200's body.
    let path = format!("/v1/forwards/{effect}/resend");
    let hidden = s
        .request(reqwest::Method::POST, &path, Some(OPERATOR_BETA), &[], None)
        .await;
    assert_eq!(hidden.status, 404, "{}", hidden.text);
    // The console's queue page shows the dead letter with its form (another tenant's does
    // not), and the form re-sends it.
    let mut beta = Console::new(&s);
    assert_eq!(beta.sign_in(OPERATOR_BETA).await.status, 303);
    let hidden_page = beta.get("/console/queue").await;
    assert!(
        !hidden_page.text.contains(&effect),
        "another tenant's dead letter is hidden"
    );
    let mut console = Console::new(&s);
    assert_eq!(console.sign_in(OPERATOR).await.status, 303);
    let page = console.get("/console/queue").await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("Dead letters (1)"), "{}", page.text);
    let form = format!("/console/forwards/{effect}/resend");
    assert!(page.text.contains(&form), "{}", page.text);
    let forged = console.post(&form, &[("csrf", "forged")], &[]).await;
    assert_eq!(forged.status, 403, "{}", forged.text);
    let r = console.post(&form, &[("csrf", &page.csrf())], &[]).await;
    assert_eq!(r.status, 303, "{}", r.text);
    let delivered = until_forward(&s, &effect, "delivered").await;
    assert_eq!(delivered["series"], 2);
    assert_eq!(delivered["log"].as_array().unwrap().len(), 2);
    let again = s
        .request(reqwest::Method::POST, &path, Some(OPERATOR), &[], None)
        .await;
    assert_eq!((again.status, again.error_code()), (409, "not_dead"));

    // The proof shows every attempt; the destination got the body as received, twice.
    let proof = s.proof(&delivery).await;
    assert_eq!(proof.body["effect"]["state"], "completed", "{}", proof.text);
    assert_eq!(proof.body["effect"]["result"]["capture"], "cap_http");
    let log = proof.body["forward"]["log"].as_array().unwrap();
    let statuses: Vec<_> = log
        .iter()
        .map(|a| (a["status"].clone(), a["outcome"].clone()))
        .collect();
    assert_eq!(
        statuses,
        vec![
            (Value::from(500), Value::from("dead")),
            (Value::from(200), Value::from("delivered"))
        ]
    );
    assert_eq!(script.lock().unwrap().1, vec![body.clone(), body.clone()]);

    // The provider's retry is ignored with the result.
    let retry = s.payflow("acme", &body).await;
    assert_eq!(retry.str("action"), "ignore", "{}", retry.text);
    assert_eq!(retry.body["effect"]["result"]["capture"], "cap_http");
    s.stop().await;
}
