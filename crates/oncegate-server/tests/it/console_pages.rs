//! The console's reading pages against what the API says: the proof page shows every part of
//! the `/v1` proof (skipped strategies and their reasons, fields, links), the deliveries search
//! filters and pages, and the breakers page closes an open breaker with a note only.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::console_support::{seed, Console};
use crate::harness::{capture, refund, Kind, Service, ADMIN, OPERATOR, OPERATOR_ACME};

/// What maud writes for a text: `&`, `<`, `>` and `"` escaped.
fn escaped(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub async fn console_the_proof_page_shows_what_the_proof_says(kind: Kind) {
    let s = Service::start(kind).await;
    let first = s
        .payflow("acme", &refund("pay_9", "2500", "2024-05-03T09:00:00Z"))
        .await;
    assert_eq!(first.str("action"), "process", "{}", first.text);
    let retry = s
        .payflow("acme", &refund("pay_9", "2500", "2024-05-03T09:04:00Z"))
        .await;
    let id = retry.str("delivery_id").to_owned();
    let proof = s.proof(&id).await;
    assert_eq!(proof.status, 200, "{}", proof.text);
    let skipped = proof.body["skipped_strategies"].as_array().unwrap();
    assert!(
        !skipped.is_empty(),
        "the example's refunds skip a strategy: {}",
        proof.text
    );

    let mut c = Console::new(&s);
    assert_eq!(c.sign_in(OPERATOR).await.status, 303);
    let page = c.get(&format!("/console/deliveries/{id}")).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let t = &page.text;
    for sk in skipped {
        let name = format!("{}@{}", sk["name"].as_str().unwrap(), sk["version"]);
        assert!(t.contains(&name), "skipped {name} missing");
        assert!(
            t.contains(&escaped(sk["why"].as_str().unwrap())),
            "its reason is missing"
        );
    }
    for f in proof.body["details"]["fields"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert!(
            t.contains(&escaped(f["shown"].as_str().unwrap())),
            "field {f} missing"
        );
    }
    for key in ["reason", "rule", "raw_sha256", "action"] {
        assert!(t.contains(&escaped(proof.str(key))), "{key} missing");
    }
    if let Some(k) = proof.body["effect_key"].as_str() {
        assert!(t.contains(k));
    }
    if let Some(scope) = proof.body["details"]["scope"].as_str() {
        assert!(t.contains(&escaped(scope)), "scope missing");
    }
    for link in proof.body["linked_deliveries"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let href = format!(
            r#"href="/console/deliveries/{}""#,
            link["delivery_id"].as_str().unwrap()
        );
        assert!(t.contains(&href), "linked delivery {link} is not a link");
    }
    if let Some(q) = proof.body["queue_item_id"].as_str() {
        assert!(t.contains(q), "queue item missing");
    }
    // The first delivery's page links its effect to the deliveries sharing its key.
    let first_page = c
        .get(&format!("/console/deliveries/{}", first.str("delivery_id")))
        .await;
    assert!(
        first_page.text.contains(r#"id="effect-link""#),
        "{}",
        first_page.text
    );
    assert!(first_page
        .text
        .contains(first.body["effect"]["id"].as_str().unwrap()));
    // An unknown id is a 404 page, not an error of the API's shape.
    let none = c
        .get("/console/deliveries/dlv_00000000000000000000000000")
        .await;
    assert_eq!(none.status, 404);
    assert!(none.header("content-type").starts_with("text/html"));
    s.stop().await;
}

pub async fn console_deliveries_filter_and_page(kind: Kind) {
    let s = Service::start(kind).await;
    let seeded = seed(&s).await; // 5 deliveries over acme and beta
    for i in 0..55 {
        let a = s
            .payflow(
                "acme",
                &capture(&format!("pay_p{i}"), "cap_1", "100", "2024-05-01T10:00:00Z"),
            )
            .await;
        assert_eq!(a.str("action"), "process", "{}", a.text);
    }
    let mut c = Console::new(&s);
    assert_eq!(c.sign_in(ADMIN).await.status, 303);
    let rows = |p: &str| {
        p.matches(r#"<td class="nowrap"><a class="mono" href="/console/deliveries/"#)
            .count()
    };
    let first = c.get("/console/deliveries").await;
    assert_eq!(rows(&first.text), 50, "one page of fifty");
    let at = first
        .text
        .find(r#"id="older" href=""#)
        .expect("an older-page link");
    let rest = &first.text[at + r#"id="older" href=""#.len()..];
    let next = rest[..rest.find('"').unwrap()].replace("&amp;", "&");
    let second = c.get(&next).await;
    assert_eq!(second.status, 200, "{}", second.text);
    assert_eq!(rows(&second.text), 10, "the remaining ten");
    assert!(!second.text.contains(r#"id="older""#));
    assert!(
        second.text.contains(&seeded.acme_first),
        "the oldest are on the last page"
    );

    for (query, expected) in [
        ("action=quarantine", 2),
        ("action=reconcile&provider=payflow&env=live", 1),
        ("type=payment.captured&action=process", 50),
        ("env=test", 0),
        ("provider=nobody", 0),
        ("since=2999-01-01T00%3A00", 0),
        ("until=2000-01-01T00%3A00", 0),
        ("since=2000-01-01T00%3A00&action=quarantine", 2),
    ] {
        let page = c.get(&format!("/console/deliveries?{query}")).await;
        assert_eq!(page.status, 200, "{query}: {}", page.text);
        assert_eq!(rows(&page.text), expected, "{query}");
    }
    let bad = c.get("/console/deliveries?action=maybe").await;
    assert_eq!(bad.status, 400);
    assert!(bad.text.contains("maybe") && bad.header("content-type").starts_with("text/html"));
    let bad_time = c.get("/console/deliveries?since=yesterday").await;
    assert_eq!(bad_time.status, 400);
    s.stop().await;
}

pub async fn console_an_open_breaker_closes_with_a_note_only(kind: Kind) {
    let s = Service::start_with(kind, |config| {
        let mut contract = (*config.contract).clone();
        contract.settings.breaker_min_sample = 4;
        contract.settings.breaker_threshold = 0.2;
        config.contract = Arc::new(contract);
    })
    .await;
    let sent = |minute: u32| format!("2024-05-01T10:{minute:02}:00Z");
    let first = s
        .payflow("acme", &capture("pay_b1", "cap_b1", "4990", &sent(0)))
        .await;
    assert_eq!(first.str("action"), "process");
    let done = s
        .post_json(
            &format!(
                "/v1/effects/{}/complete",
                first.body["effect"]["id"].as_str().unwrap()
            ),
            Some(crate::harness::INGEST),
            json!({"token": first.body["reservation"]["token"], "result": {"ok": true}}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);
    s.payflow("acme", &capture("pay_b1", "cap_b1", "5990", &sent(1)))
        .await;
    for minute in 2..5 {
        s.payflow("acme", &capture("pay_b1", "cap_b1", "4990", &sent(minute)))
            .await;
    }
    let open = |body: &Value| {
        body["breakers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["state"] == "open")
    };
    assert!(open(&s.get("/v1/breakers", Some(OPERATOR)).await.body));

    // A tenant-restricted session sees the breaker but cannot close it.
    let mut acme = Console::new(&s);
    assert_eq!(acme.sign_in(OPERATOR_ACME).await.status, 303);
    let page = acme.get("/console/breakers").await;
    assert!(page.text.contains("payment.captured"), "{}", page.text);
    assert!(!page.text.contains(r#"action="/console/breakers/close""#));
    let form = |csrf: &str, note: &str| -> Vec<(&'static str, String)> {
        vec![
            ("csrf", csrf.to_owned()),
            ("provider", "payflow".to_owned()),
            ("env", "live".to_owned()),
            ("event_type", "payment.captured".to_owned()),
            ("strategy", "capture-id".to_owned()),
            ("version", "1".to_owned()),
            ("note", note.to_owned()),
        ]
    };
    let f = form(&page.csrf(), "checked");
    let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let refused = acme.post("/console/breakers/close", &pairs, &[]).await;
    assert_eq!(refused.status, 403, "{}", refused.text);

    let mut admin = Console::new(&s);
    assert_eq!(admin.sign_in(ADMIN).await.status, 303);
    let page = admin.get("/console/breakers").await;
    assert!(
        page.text.contains(r#"action="/console/breakers/close""#),
        "{}",
        page.text
    );
    let csrf = page.csrf();
    let f = form(&csrf, "  ");
    let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let no_note = admin.post("/console/breakers/close", &pairs, &[]).await;
    assert_eq!(no_note.status, 400, "{}", no_note.text);
    assert!(no_note.text.contains("note"));
    let f = form(&csrf, "the collision was a real second capture");
    let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let closed = admin.post("/console/breakers/close", &pairs, &[]).await;
    assert_eq!(closed.status, 303, "{}", closed.text);
    let after = admin.get("/console/breakers").await;
    assert!(after.text.contains(r#"id="no-breakers""#), "{}", after.text);
    let api = s.get("/v1/breakers", Some(OPERATOR)).await;
    assert!(!open(&api.body), "{}", api.text);
    assert!(api.text.contains("the collision was a real second capture"));
    s.stop().await;
}
