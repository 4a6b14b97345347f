//! The queue over HTTP as people and consoles walk it: every listed item resolved by the id
//! the listing shows (its `queue_item_id` or its `delivery_id`), an unknown outcome settled
//! once for all its items, pages with an opaque cursor, filters and counts per kind and status.

use oncegate_server::ServiceConfig;
use serde_json::{json, Value};

use crate::harness::*;

async fn list(s: &Service, query: &str, token: &str) -> Value {
    let q = s.get(&format!("/v1/queue{query}"), Some(token)).await;
    assert_eq!(q.status, 200, "{query}: {}", q.text);
    q.body
}

fn items(body: &Value) -> &Vec<Value> {
    body["items"].as_array().expect("items")
}

fn ids(body: &Value, field: &str) -> Vec<String> {
    items(body)
        .iter()
        .map(|i| i[field].as_str().unwrap().to_owned())
        .collect()
}

/// The listed item of one delivery (its only one).
fn item_of<'a>(body: &'a Value, delivery: &str) -> &'a Value {
    let found: Vec<&Value> = items(body)
        .iter()
        .filter(|i| i["delivery_id"] == delivery)
        .collect();
    assert_eq!(found.len(), 1, "{delivery} in {body}");
    found[0]
}

async fn resolve(s: &Service, id: &str, outcome: &str) -> Answer {
    s.post_json(
        &format!("/v1/queue/{id}/resolve"),
        Some(OPERATOR),
        json!({"outcome": outcome, "note": "checked the dashboard", "by": "alice"}),
    )
    .await
}

/// A critical refund processed and never completed (its worker crashed), its lease swept
/// into "verify before retry", and a retry of it queued against the same unknown effect.
/// Returns (processed delivery, retry delivery, effect id).
async fn crashed_and_retried(
    s: &Service,
    config: &ServiceConfig,
    payment: &str,
) -> (String, String, String) {
    let body = refund(payment, "700", "2024-05-03T09:00:00Z");
    let crashed = s.payflow("acme", &body).await;
    assert_eq!(crashed.str("action"), "process", "{}", crashed.text);
    let effect = crashed.body["effect"]["id"].as_str().unwrap().to_owned();
    s.advance(120);
    config.store.expire_leases(s.now()).await.unwrap();
    let retry = s.payflow("acme", &body).await;
    assert_eq!(retry.str("action"), "reconcile", "{}", retry.text);
    (
        crashed.str("delivery_id").to_owned(),
        retry.str("delivery_id").to_owned(),
        effect,
    )
}

pub async fn every_listed_item_is_resolvable_by_the_id_it_shows(kind: Kind) {
    let (s, config) = Service::without_the_poll(kind).await;

    // A collision (quarantine).
    s.payflow(
        "acme",
        &capture("pay_q1", "cap_q1", "1000", "2024-05-01T10:00:00Z"),
    )
    .await;
    let collided = s
        .payflow(
            "acme",
            &capture("pay_q1", "cap_q1", "2000", "2024-05-01T10:01:00Z"),
        )
        .await;
    assert_eq!(collided.str("action"), "quarantine", "{}", collided.text);
    // A weak key on a critical type (reconcile).
    let first = s
        .payflow("acme", &refund("pay_9", "2500", "2024-05-03T09:00:00Z"))
        .await;
    let eff = first.body["effect"]["id"].as_str().unwrap();
    let token = first.body["reservation"]["token"].as_str().unwrap();
    let done = s
        .post_json(
            &format!("/v1/effects/{eff}/complete"),
            Some(INGEST),
            json!({"token": token, "result": {"refund": "re_1"}}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);
    let weak = s
        .payflow("acme", &refund("pay_9", "2500", "2024-05-03T09:04:00Z"))
        .await;
    assert_eq!(weak.str("action"), "reconcile", "{}", weak.text);
    // Two unknown outcomes after lease expiry, each with a retry queued against it.
    let (crashed_a, retry_a, effect_a) = crashed_and_retried(&s, &config, "pay_5").await;
    let (crashed_b, retry_b, effect_b) = crashed_and_retried(&s, &config, "pay_6").await;

    let listed = list(&s, "", OPERATOR).await;
    assert_eq!(items(&listed).len(), 6, "{listed}");
    for i in items(&listed) {
        assert!(
            i["delivery_id"].as_str().unwrap().starts_with("dlv_"),
            "{i}"
        );
        assert!(
            i["queue_item_id"].as_str().unwrap().starts_with("q_"),
            "{i}"
        );
    }
    assert_eq!(
        listed["counts"],
        json!({"quarantine": {"open": 1, "resolved": 0}, "reconcile": {"open": 5, "resolved": 0}, "dead_letters": 0})
    );
    assert_eq!(listed["next"], Value::Null);
    // The lease-expiry item is listed under the delivery that was processed.
    let verify_a = item_of(&listed, &crashed_a);
    assert_eq!(verify_a["existing_effect_id"], effect_a.as_str());
    assert!(verify_a["reason"]
        .as_str()
        .unwrap()
        .contains("verify before retry"));
    let verify_b = item_of(&listed, &crashed_b)["queue_item_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let quarantine = item_of(&listed, collided.str("delivery_id"))["queue_item_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // By queue item id: the collision is a distinct capture.
    let r = resolve(&s, &quarantine, "distinct").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["status"], "resolved");
    // By delivery id: the weak key's refund is the first one again.
    let r = resolve(&s, weak.str("delivery_id"), "duplicate").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["resolution"]["effect_id"], eff);
    // By the processed delivery's id (answered 404 not_queued before): it did happen.
    let r = resolve(&s, &crashed_a, "duplicate").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["resolution"]["effect_id"], effect_a.as_str());
    let proof = s.proof(&crashed_a).await;
    assert_eq!(proof.body["effect"]["state"], "completed", "{}", proof.text);
    // The retry's item was settled with it, so resolving it now is a conflict, by either id.
    let settled = item_of(&list(&s, "?status=resolved", OPERATOR).await, &retry_a).clone();
    assert_eq!(settled["resolution"]["outcome"], "duplicate", "{settled}");
    assert_eq!(settled["resolution"]["by"], "alice");
    assert!(settled["resolution"]["note"]
        .as_str()
        .unwrap()
        .contains(verify_a["queue_item_id"].as_str().unwrap()));
    for id in [retry_a.as_str(), settled["queue_item_id"].as_str().unwrap()] {
        let again = resolve(&s, id, "distinct").await;
        assert_eq!(again.status, 409, "{}", again.text);
        assert_eq!(again.error_code(), "already_resolved");
    }
    // By queue item id: the second crash did not happen, so its one effect runs once more.
    let r = resolve(&s, &verify_b, "distinct").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["resolution"]["effect_id"], effect_b.as_str());
    // The claimable work: the distinct capture, and that one effect (never a second one).
    let work = claim(&s).await;
    assert_eq!(work.len(), 2, "{work:?}");
    assert_eq!(
        work.iter()
            .filter(|w| w["effect_id"] == effect_b.as_str())
            .count(),
        1,
        "{work:?}"
    );
    assert!(claim(&s).await.is_empty(), "released once, run once");
    let again = resolve(&s, &retry_b, "duplicate").await;
    assert_eq!(again.error_code(), "already_resolved", "{}", again.text);

    // Nothing is left open, and the effects tell one consistent story.
    let open = list(&s, "", OPERATOR).await;
    assert!(items(&open).is_empty(), "{open}");
    assert_eq!(
        open["counts"],
        json!({"quarantine": {"open": 0, "resolved": 1}, "reconcile": {"open": 0, "resolved": 5}, "dead_letters": 0})
    );
    let proof = s.proof(&retry_b).await;
    assert_eq!(
        proof.body["effect"]["id"],
        effect_b.as_str(),
        "{}",
        proof.text
    );

    // Ids that name nothing: unknown shapes, unknown items, deliveries never queued.
    let r = resolve(&s, "q_00000000000000000000000000", "duplicate").await;
    assert_eq!((r.status, r.error_code()), (404, "not_found"), "{}", r.text);
    let r = resolve(&s, "nonsense", "duplicate").await;
    assert_eq!(r.status, 404, "{}", r.text);
    let r = resolve(&s, first.str("delivery_id"), "duplicate").await;
    assert_eq!(
        (r.status, r.error_code()),
        (404, "not_queued"),
        "{}",
        r.text
    );
    // Another tenant's operator cannot reach an item by its queue item id.
    let r = s
        .post_json(
            &format!("/v1/queue/{quarantine}/resolve"),
            Some(OPERATOR_BETA),
            json!({"outcome": "duplicate"}),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    // People settled these items, and the metrics say so.
    let text = s.get("/metrics", Some(OPERATOR)).await.text;
    assert!(
        text.lines()
            .any(|l| l.starts_with("oncegate_queue_settled_total{by=\"person\"")),
        "{text}"
    );
    assert!(
        text.contains("oncegate_queue_settle_seconds_count{by=\"person\"}"),
        "{text}"
    );
    s.stop().await;
}

pub async fn the_queue_pages_filters_and_counts(kind: Kind) {
    let (s, _) = Service::without_the_poll(kind).await;
    let first = s
        .payflow("acme", &refund("pay_p", "100", "2024-05-03T09:00:00Z"))
        .await;
    let eff = first.body["effect"]["id"].as_str().unwrap();
    let token = first.body["reservation"]["token"].as_str().unwrap();
    s.post_json(
        &format!("/v1/effects/{eff}/complete"),
        Some(INGEST),
        json!({"token": token, "result": {}}),
    )
    .await;
    // Five reconcile items now, two more three hours later, and a collision of beta's.
    let mut early = Vec::new();
    for n in 0..5 {
        let a = s
            .payflow(
                "acme",
                &refund("pay_p", "100", &format!("2024-05-03T09:0{}:00Z", n + 1)),
            )
            .await;
        assert_eq!(a.str("action"), "reconcile", "{}", a.text);
        early.push(a.str("delivery_id").to_owned());
    }
    let cut = s.now() + time::Duration::seconds(1);
    s.advance(3 * 3600);
    let mut late = Vec::new();
    for n in 0..2 {
        let a = s
            .payflow(
                "acme",
                &refund("pay_p", "100", &format!("2024-05-03T10:0{n}:00Z")),
            )
            .await;
        late.push(a.str("delivery_id").to_owned());
    }
    s.payflow(
        "beta",
        &capture("pay_b", "cap_b", "1000", "2024-05-01T10:00:00Z"),
    )
    .await;
    let beta = s
        .payflow(
            "beta",
            &capture("pay_b", "cap_b", "2000", "2024-05-01T10:01:00Z"),
        )
        .await;
    assert_eq!(beta.str("action"), "quarantine", "{}", beta.text);

    // Pages of three, handed back by their opaque cursor, each item once, in order.
    let all = list(&s, "?limit=100", OPERATOR).await;
    let everything = ids(&all, "delivery_id");
    assert_eq!(everything.len(), 8, "{all}");
    let mut paged = Vec::new();
    let mut query = "?limit=3".to_owned();
    let mut pages = 0;
    loop {
        let page = list(&s, &query, OPERATOR).await;
        pages += 1;
        assert!(items(&page).len() <= 3);
        paged.extend(ids(&page, "delivery_id"));
        assert_eq!(page["counts"], all["counts"], "counts ignore the cursor");
        match page["next"].as_str() {
            Some(next) => query = format!("?limit=3&after={next}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(paged, everything);

    // Filters: kind, provider, type, age (durations and RFC 3339), tenant.
    let q = list(&s, "?kind=quarantine", OPERATOR).await;
    assert_eq!(
        ids(&q, "delivery_id"),
        vec![beta.str("delivery_id").to_owned()]
    );
    let q = list(&s, "?type=refund.created", OPERATOR).await;
    assert_eq!(items(&q).len(), 7);
    assert!(items(&list(&s, "?provider=shopline", OPERATOR).await).is_empty());
    assert!(items(&list(&s, "?type=refund.updated", OPERATOR).await).is_empty());
    let q = list(&s, "?older_than=2h", OPERATOR).await;
    assert_eq!(ids(&q, "delivery_id"), early);
    let q = list(&s, "?newer_than=2h&kind=reconcile", OPERATOR).await;
    assert_eq!(ids(&q, "delivery_id"), late);
    let stamp = cut
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let q = list(&s, &format!("?older_than={stamp}"), OPERATOR).await;
    assert_eq!(ids(&q, "delivery_id"), early);
    // The counts honour the tenant and every filter but kind and status.
    let q = list(&s, "?kind=quarantine&status=resolved", OPERATOR_ACME).await;
    assert!(items(&q).is_empty());
    assert_eq!(
        q["counts"],
        json!({"quarantine": {"open": 0, "resolved": 0}, "reconcile": {"open": 7, "resolved": 0}, "dead_letters": 0})
    );
    let q = list(&s, "?newer_than=2h", OPERATOR).await;
    assert_eq!(
        q["counts"],
        json!({"quarantine": {"open": 1, "resolved": 0}, "reconcile": {"open": 2, "resolved": 0}, "dead_letters": 0})
    );
    let q = list(&s, "", OPERATOR_BETA).await;
    assert_eq!(items(&q).len(), 1);
    assert_eq!(q["counts"]["reconcile"], json!({"open": 0, "resolved": 0}));

    // Bad input names what is wrong.
    for (query, names) in [
        ("?older_than=yesterday", "older_than"),
        ("?newer_than=-3", "newer_than"),
        ("?after=not-a-cursor", "after"),
        ("?status=closed", "status"),
    ] {
        let r = s.get(&format!("/v1/queue{query}"), Some(OPERATOR)).await;
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        assert_eq!(r.error_code(), "invalid_request");
        assert!(r.text.contains(names), "{query}: {}", r.text);
    }
    s.stop().await;
}
