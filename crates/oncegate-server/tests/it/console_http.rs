//! The operator console over plain HTTP (no browser): the session cookie's flags and its
//! stateless checks, CSRF refusals, the tenant restriction on every page, escaping, the queue's
//! in-place and no-JavaScript resolutions, and the static files.

use crate::console_support::{seed, Console, MARKUP_TYPE};
use crate::harness::{Kind, Service, ADMIN, INGEST, OPERATOR, OPERATOR_ACME};

pub async fn console_the_session_cookie_is_strict_http_only_and_never_holds_the_token(kind: Kind) {
    let s = Service::start(kind).await;
    let mut c = Console::new(&s);

    let anon = c.get("/console/deliveries").await;
    assert_eq!(anon.status, 303);
    assert_eq!(anon.header("location"), "/console/signin");
    assert_eq!(c.get("/console/signin").await.status, 200);

    let ingest = c.sign_in(INGEST).await;
    assert_eq!(ingest.status, 403, "{}", ingest.text);
    assert!(
        ingest.text.contains("ingest token cannot sign in"),
        "{}",
        ingest.text
    );
    assert!(ingest.headers.get("set-cookie").is_none());
    let unknown = c.sign_in("not-a-configured-token").await;
    assert_eq!(unknown.status, 401);
    assert!(unknown.headers.get("set-cookie").is_none());

    // Another site's page cannot sign this browser in (login CSRF).
    let cross = c
        .post(
            "/console/signin",
            &[("token", OPERATOR_ACME)],
            &[("origin", "http://elsewhere.invalid")],
        )
        .await;
    assert_eq!(cross.status, 403, "{}", cross.text);
    assert!(cross.headers.get("set-cookie").is_none());
    let fetch = c
        .post(
            "/console/signin",
            &[("token", OPERATOR_ACME)],
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
    assert_eq!(fetch.status, 403, "{}", fetch.text);

    let ok = c.sign_in(OPERATOR_ACME).await;
    assert_eq!(ok.status, 303, "{}", ok.text);
    assert_eq!(ok.header("location"), "/console/deliveries");
    let set = ok.header("set-cookie").to_owned();
    assert!(set.starts_with("oncegate_console="), "{set}");
    for flag in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=28800",
    ] {
        assert!(set.contains(flag), "{flag} missing in {set}");
    }
    assert!(
        !set.contains("Secure"),
        "plain HTTP must not mark the cookie Secure: {set}"
    );
    assert!(
        !set.contains(OPERATOR_ACME),
        "the token is in the cookie: {set}"
    );
    let page = c.get("/console/deliveries").await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(
        page.text.contains("operator · tenant acme"),
        "{}",
        page.text
    );

    // Behind a TLS-terminating proxy the cookie is Secure.
    let mut proxied = Console::new(&s);
    let behind = proxied
        .post(
            "/console/signin",
            &[("token", OPERATOR)],
            &[("x-forwarded-proto", "https")],
        )
        .await;
    assert_eq!(behind.status, 303);
    assert!(
        behind.header("set-cookie").contains("; Secure"),
        "{:?}",
        behind.headers
    );

    // Signing out clears the cookie; without it the pages ask to sign in again.
    let csrf = page.csrf();
    let out = c.post("/console/signout", &[("csrf", &csrf)], &[]).await;
    assert_eq!(out.status, 303);
    assert!(
        out.header("set-cookie").contains("Max-Age=0"),
        "{:?}",
        out.headers
    );
    assert!(c.cookie.is_none());
    assert_eq!(c.get("/console/queue").await.status, 303);
    s.stop().await;
}

pub async fn console_a_session_holds_on_a_sibling_and_dies_with_its_token(kind: Kind) {
    let a = Service::start(kind).await;
    let mut c = Console::new(&a);
    assert_eq!(c.sign_in(OPERATOR_ACME).await.status, 303);
    let cookie = c.cookie.clone().expect("a session cookie");

    // A second instance with the same salt and tokens accepts it: nothing is kept per instance.
    let b = Service::start(kind).await;
    let mut on_b = Console::new(&b);
    on_b.cookie = Some(cookie.clone());
    let page = on_b.get("/console/deliveries").await;
    assert_eq!(page.status, 200, "{}", page.text);

    // An instance where that token was removed refuses it.
    let c2 = Service::start_with(kind, |config| {
        config.tokens.retain(|t| t.secret != OPERATOR_ACME);
    })
    .await;
    let mut on_c = Console::new(&c2);
    on_c.cookie = Some(cookie.clone());
    assert_eq!(on_c.get("/console/deliveries").await.status, 303);
    // So does one with another salt, and a tampered cookie.
    let d = Service::start_with(kind, |config| config.salt = b"another-salt".to_vec()).await;
    let mut on_d = Console::new(&d);
    on_d.cookie = Some(cookie.clone());
    assert_eq!(on_d.get("/console/deliveries").await.status, 303);
    on_b.cookie = Some(cookie.replacen("v1.operator.", "v1.admin.", 1));
    assert_eq!(on_b.get("/console/deliveries").await.status, 303);
    for s in [a, b, c2, d] {
        s.stop().await;
    }
}

pub async fn console_forms_without_the_session_csrf_token_are_refused(kind: Kind) {
    let s = Service::start(kind).await;
    let seeded = seed(&s).await;
    let mut c = Console::new(&s);
    assert_eq!(c.sign_in(OPERATOR).await.status, 303);
    let path = format!("/console/queue/{}/resolve", seeded.acme_quarantined);
    let wrong = c
        .post(
            &path,
            &[
                ("csrf", "0000"),
                ("outcome", "distinct"),
                ("note", "checked"),
            ],
            &[],
        )
        .await;
    assert_eq!(wrong.status, 403, "{}", wrong.text);
    assert!(wrong.text.contains("CSRF"), "{}", wrong.text);
    let missing = c
        .post(&path, &[("outcome", "distinct"), ("note", "checked")], &[])
        .await;
    assert!(
        (400..500).contains(&missing.status) && missing.status != 404,
        "{} {}",
        missing.status,
        missing.text
    );
    let out = c.post("/console/signout", &[("csrf", "0000")], &[]).await;
    assert_eq!(out.status, 403);
    assert!(c.cookie.is_some(), "a refused sign-out kept the session");
    let close = c
        .post(
            "/console/breakers/close",
            &[
                ("csrf", "0000"),
                ("provider", "payflow"),
                ("env", "live"),
                ("event_type", "payment.captured"),
                ("strategy", "capture_id"),
                ("version", "1"),
                ("note", "checked"),
            ],
            &[],
        )
        .await;
    assert_eq!(close.status, 403, "{}", close.text);
    // A post without any session is a 401 page, not a redirect that would lose the form.
    let mut anon = Console::new(&s);
    let no_session = anon
        .post(
            &path,
            &[("csrf", "x"), ("outcome", "distinct"), ("note", "n")],
            &[],
        )
        .await;
    assert_eq!(no_session.status, 401);
    // Nothing was resolved by any of it.
    let q = s.get("/v1/queue?status=open", Some(OPERATOR)).await;
    assert_eq!(q.body["items"].as_array().unwrap().len(), 3, "{}", q.text);
    s.stop().await;
}

pub async fn console_a_tenant_restricted_session_never_sees_another_tenant(kind: Kind) {
    let s = Service::start(kind).await;
    let seeded = seed(&s).await;
    let mut c = Console::new(&s);
    assert_eq!(c.sign_in(OPERATOR_ACME).await.status, 303);

    let list = c.get("/console/deliveries").await;
    assert_eq!(list.status, 200);
    assert!(list.text.contains(&seeded.acme_first), "{}", list.text);
    assert!(!list.text.contains(&seeded.beta_first), "{}", list.text);
    assert!(!list.text.contains(&seeded.beta_quarantined));
    // Searching beta's effect key finds nothing; opening beta's delivery is 404.
    let by_key = c
        .get(&format!(
            "/console/deliveries?q={}",
            urlencode(&seeded.beta_key)
        ))
        .await;
    assert!(
        by_key.text.contains("No delivery matches"),
        "{}",
        by_key.text
    );
    let own_key = c
        .get(&format!(
            "/console/deliveries?q={}",
            urlencode(&seeded.acme_key)
        ))
        .await;
    assert!(
        own_key.text.contains(&seeded.acme_quarantined),
        "{}",
        own_key.text
    );
    assert!(
        !own_key.text.contains(&seeded.acme_markup),
        "{}",
        own_key.text
    );
    let proof = c
        .get(&format!("/console/deliveries/{}", seeded.beta_quarantined))
        .await;
    assert_eq!(proof.status, 404, "{}", proof.text);
    let search = c
        .get(&format!("/console/deliveries?q={}", seeded.beta_first))
        .await;
    assert_eq!(search.status, 303);
    assert_eq!(
        c.get(search.header("location")).await.status,
        404,
        "a delivery id search of another tenant leads to a 404"
    );

    let queue = c.get("/console/queue").await;
    assert!(
        queue.text.contains(&seeded.acme_quarantined),
        "{}",
        queue.text
    );
    assert!(
        !queue.text.contains(&seeded.beta_quarantined),
        "{}",
        queue.text
    );
    assert!(
        queue.text.contains(r#"id="count-quarantine">1<"#),
        "{}",
        queue.text
    );
    let all = c.get("/console/queue?status=all").await;
    assert!(!all.text.contains(&seeded.beta_quarantined));
    let csrf = queue.csrf();
    let resolve = c
        .post(
            &format!("/console/queue/{}/resolve", seeded.beta_quarantined),
            &[("csrf", &csrf), ("outcome", "distinct"), ("note", "mine?")],
            &[],
        )
        .await;
    assert_eq!(resolve.status, 404, "{}", resolve.text);
    let beta_open = s.get("/v1/queue?status=open", Some(OPERATOR)).await;
    assert!(beta_open.text.contains(&seeded.beta_quarantined));

    let report = c.get("/console/report").await;
    assert!(report.text.contains("acme"), "{}", report.text);
    assert!(!report.text.contains("beta"), "{}", report.text);
    let decisions = c.get("/console/decisions").await;
    assert_eq!(decisions.status, 200, "{}", decisions.text);
    // Two acme captures and one reconcile in the last hour, nothing of beta's two.
    assert!(
        decisions.text.contains(r#"<td class="num">3</td></tr>"#),
        "{}",
        decisions.text
    );
    // A restricted session may not close a breaker (it guards every tenant).
    let breakers = c.get("/console/breakers").await;
    assert_eq!(breakers.status, 200);
    s.stop().await;
}

pub async fn console_markup_in_stored_values_renders_as_text(kind: Kind) {
    let s = Service::start(kind).await;
    let seeded = seed(&s).await;
    let mut c = Console::new(&s);
    assert_eq!(c.sign_in(ADMIN).await.status, 303);
    let escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;";
    for path in [
        "/console/deliveries".to_owned(),
        format!("/console/deliveries/{}", seeded.acme_markup),
        "/console/queue".to_owned(),
        "/console/report".to_owned(),
    ] {
        let page = c.get(&path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.text);
        assert!(
            !page.text.contains(MARKUP_TYPE),
            "{path} renders markup: {}",
            page.text
        );
        assert!(
            page.text.contains(escaped),
            "{path} lost the value: {}",
            page.text
        );
        // Every script and style comes from the service itself.
        assert!(!page.text.contains("://"), "{path} names an external URL");
        assert!(page
            .header("content-security-policy")
            .contains("script-src 'self'"));
        assert_eq!(page.header("cache-control"), "no-store");
    }
    let htmx = c.get("/console/assets/htmx.min.js?v=2.0.11").await;
    assert_eq!(htmx.status, 200);
    assert!(htmx.header("cache-control").contains("max-age=31536000"));
    assert!(htmx.text.contains("Zero-Clause BSD") && htmx.text.contains("htmx"));
    let css = c.get("/console/assets/console.css").await;
    assert!(css.header("content-type").starts_with("text/css"));
    s.stop().await;
}

pub async fn console_the_queue_resolves_in_place_or_by_redirect(kind: Kind) {
    let s = Service::start(kind).await;
    let seeded = seed(&s).await;
    let mut c = Console::new(&s);
    assert_eq!(c.sign_in(OPERATOR).await.status, 303);
    let queue = c.get("/console/queue").await;
    let csrf = queue.csrf();
    // The differences side by side: the reference's amount, then this one's.
    let at = queue.text.find(&seeded.acme_quarantined).unwrap();
    let card = &queue.text[at..];
    let (r, t) = (
        card.find("<code>1000</code>").unwrap(),
        card.find("<code>2000</code>").unwrap(),
    );
    assert!(r < t, "reference value first: {card}");

    let htmx = [("hx-request", "true")];
    let path = format!("/console/queue/{}/resolve", seeded.acme_quarantined);
    let no_note = c
        .post(
            &path,
            &[("csrf", &csrf), ("outcome", "distinct"), ("note", " ")],
            &htmx,
        )
        .await;
    assert_eq!(no_note.status, 200, "{}", no_note.text);
    assert!(no_note.text.contains("needs a note"), "{}", no_note.text);
    assert!(
        no_note.text.starts_with("<article"),
        "a fragment: {}",
        no_note.text
    );
    let done = c
        .post(
            &path,
            &[
                ("csrf", &csrf),
                ("outcome", "distinct"),
                ("note", "a second capture, confirmed"),
                ("authoritative_ref", "cap_2"),
            ],
            &htmx,
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert!(
        done.text.contains("Resolved <strong>distinct</strong>"),
        "{}",
        done.text
    );
    assert!(done.text.contains("cap_2"));
    assert!(
        !done.text.contains("<form"),
        "a resolved item has no form: {}",
        done.text
    );
    // The counts bar comes along, out of band: acme's quarantine is settled, beta's is open.
    assert!(done.text.contains(r#"hx-swap-oob="true""#), "{}", done.text);
    assert!(
        done.text.contains(r#"id="count-quarantine">1<"#),
        "{}",
        done.text
    );

    // Without JavaScript: a full post and a redirect back; a refusal is a page saying why.
    let plain = format!("/console/queue/{}/resolve", seeded.beta_quarantined);
    let refused = c
        .post(
            &plain,
            &[("csrf", &csrf), ("outcome", "distinct"), ("note", "")],
            &[],
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    let ok = c
        .post(
            &plain,
            &[
                ("csrf", &csrf),
                ("outcome", "duplicate"),
                ("note", "same capture"),
            ],
            &[],
        )
        .await;
    assert_eq!(ok.status, 303, "{}", ok.text);
    assert_eq!(ok.header("location"), "/console/queue");
    let again = c
        .post(
            &plain,
            &[("csrf", &csrf), ("outcome", "duplicate"), ("note", "twice")],
            &[],
        )
        .await;
    assert_eq!(again.status, 409, "{}", again.text);

    let open = c.get("/console/queue").await;
    assert!(!open.text.contains(&seeded.acme_quarantined));
    assert!(!open.text.contains(&seeded.beta_quarantined));
    let api = s.get("/v1/queue?status=resolved", Some(OPERATOR)).await;
    assert_eq!(
        api.body["items"].as_array().unwrap().len(),
        2,
        "{}",
        api.text
    );
    // The proof page shows the resolution and links the effect and the linked deliveries.
    let proof = c
        .get(&format!("/console/deliveries/{}", seeded.beta_quarantined))
        .await;
    assert!(proof.text.contains("duplicate by token:"), "{}", proof.text);
    assert!(proof.text.contains(&format!(
        r#"href="/console/deliveries/{}""#,
        seeded.beta_first
    )));
    s.stop().await;
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Delivers payout `n`, a type without a contract: one open reconcile item each.
async fn payout(http: &reqwest::Client, base: &str, n: u32) {
    let r = http
        .post(format!("{base}/v1/deliveries/acme/payflow/live"))
        .bearer_auth(INGEST)
        .header("content-type", "application/json")
        .body(format!(r#"{{"type":"payout.sent","data":{{"n":{n}}}}}"#))
        .send()
        .await
        .expect("a delivery post");
    assert_eq!(r.status(), 200);
}

pub async fn console_a_thousand_item_queue_is_paged_and_fast(kind: Kind) {
    let s = Service::start(kind).await;
    // A thousand deliveries of a type without a contract: each is one open reconcile item.
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (http, base) = (s.http.clone(), s.base.clone());
        tasks.push(tokio::spawn(async move {
            for i in (worker..1000).step_by(8) {
                payout(&http, &base, i).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut c = Console::new(&s);
    assert_eq!(c.sign_in(OPERATOR).await.status, 303);
    let started = std::time::Instant::now();
    let first = c.get("/console/queue").await;
    let elapsed = started.elapsed();
    assert_eq!(first.status, 200);
    assert_eq!(
        first.text.matches("<article").count(),
        25,
        "one page of items"
    );
    assert!(
        first.text.contains(r#"id="count-reconcile">1000<"#),
        "{}",
        &first.text[..2000]
    );
    assert!(first.text.contains("Showing 25 of 1000 matching items"));
    assert!(
        !first.text.contains(r#"id="previous-page""#),
        "no page before the first"
    );
    println!("console queue page over 1000 open items ({kind:?}): {elapsed:?}");
    assert!(
        elapsed < std::time::Duration::from_secs(5),
        "the queue page took {elapsed:?}"
    );

    // Every item once, oldest first, following the next-page links to the end...
    let mut forward: Vec<Vec<String>> = Vec::new();
    let mut page = first;
    loop {
        forward.push(card_ids(&page.text));
        let Some(next) = pager_link(&page.text, "next-page") else {
            break;
        };
        assert!(next.contains("after="), "{next}");
        page = c.get(&next).await;
        assert_eq!(page.status, 200, "{}", page.text);
        assert!(pager_link(&page.text, "previous-page").is_some());
        assert!(forward.len() <= 40, "paging must end");
    }
    assert_eq!(forward.len(), 40, "1000 items in pages of 25");
    let mut all: Vec<String> = forward.concat();
    assert_eq!(all.len(), 1000);
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 1000, "no item twice");
    // ... and the same pages again, backwards through the previous-page links.
    let mut backward = vec![card_ids(&page.text)];
    while let Some(previous) = pager_link(&page.text, "previous-page") {
        assert!(previous.contains("before="), "{previous}");
        page = c.get(&previous).await;
        assert_eq!(page.status, 200, "{}", page.text);
        backward.push(card_ids(&page.text));
        assert!(backward.len() <= 40, "paging must end");
    }
    backward.reverse();
    assert_eq!(
        backward, forward,
        "the previous-page links show the same pages"
    );
    // A page size of the query's own, kept by the links; a forged cursor is refused.
    let small = c.get("/console/queue?limit=7").await;
    assert_eq!(card_ids(&small.text), forward[0][..7]);
    assert!(pager_link(&small.text, "next-page")
        .unwrap()
        .contains("limit=7"));
    let forged = c.get("/console/queue?after=not-a-cursor").await;
    assert_eq!(forged.status, 400, "{}", forged.text);
    assert!(forged.text.contains("after"), "{}", forged.text);
    s.stop().await;
}

/// The queue item ids of a console queue page, in page order.
fn card_ids(html: &str) -> Vec<String> {
    html.split(r#"<article class="card"#)
        .skip(1)
        .filter_map(|card| {
            let at = card.find(r#"id="item-"#)? + r#"id="item-"#.len();
            Some(card[at..].split('"').next()?.to_owned())
        })
        .collect()
}

/// The href of the pager link with this id, with its HTML entities undone.
fn pager_link(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!(r#"id="{id}""#))?;
    let tag_start = html[..at].rfind('<')?;
    let tag = &html[tag_start..tag_start + html[tag_start..].find('>')?];
    let href = tag.split(r#"href=""#).nth(1)?.split('"').next()?;
    Some(href.replace("&amp;", "&"))
}

/// The received total of a report page (its `Total` row's first count).
fn report_total(page: &str) -> u64 {
    let at = page
        .find(r#"Total</th><td class="num">"#)
        .expect("a total row")
        + 26;
    page[at..]
        .split('<')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count after the total: {}", &page[at..at + 40]))
}

pub async fn console_the_report_page_reads_a_day_unless_asked_for_more(kind: Kind) {
    let s = Service::start(kind).await;
    payout(&s.http, &s.base, 1).await;
    s.advance(2 * 86_400);
    payout(&s.http, &s.base, 2).await;
    payout(&s.http, &s.base, 3).await;
    let mut c = Console::new(&s);
    assert_eq!(c.sign_in(OPERATOR).await.status, 303);
    for (query, received) in [
        ("", 2),
        ("?range=24h", 2),
        ("?range=7d", 3),
        ("?range=all", 3),
    ] {
        let page = c.get(&format!("/console/report{query}")).await;
        assert_eq!(page.status, 200, "{query}: {}", page.text);
        assert_eq!(report_total(&page.text), received, "/console/report{query}");
    }
    let selected = c.get("/console/report").await;
    assert!(
        selected.text.contains(r#"<option value="24h" selected>"#),
        "{}",
        selected.text
    );
    // A start of its own wins over the period.
    let since = (s.now() - time::Duration::days(3))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let page = c
        .get(&format!("/console/report?range=24h&since={}", &since[..16]))
        .await;
    assert_eq!(report_total(&page.text), 3, "{}", page.text);
    let bad = c.get("/console/report?range=year").await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    // The chart's hourly buckets hold each delivery once: two in the last hour.
    let decisions = c.get("/console/decisions").await;
    assert!(
        decisions.text.contains(r#"<td class="num">2</td></tr>"#),
        "{}",
        decisions.text
    );
    s.stop().await;
}
