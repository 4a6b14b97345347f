//! What the console tests share: a few deliveries over two tenants (a processed capture, a
//! quarantined one per tenant, a type name carrying markup) and an HTTP client that keeps the
//! console's session cookie and follows no redirect, so each answer can be checked as sent.

use crate::harness::{capture, Service, INGEST};

/// The deliveries `seed` made.
pub struct Seeded {
    pub acme_first: String,
    pub acme_quarantined: String,
    pub acme_key: String,
    pub beta_first: String,
    pub beta_quarantined: String,
    pub beta_key: String,
    /// A delivery whose event type is `<script>alert("x")</script>` (reconciled, unknown type).
    pub acme_markup: String,
}

/// The event type of the markup delivery, as a payload sends it.
pub const MARKUP_TYPE: &str = "<script>alert(\"x\")</script>";

pub async fn seed(s: &Service) -> Seeded {
    let mut ids = Vec::new();
    for (tenant, payment) in [("acme", "pay_acme"), ("beta", "pay_beta")] {
        let first = s
            .payflow(
                tenant,
                &capture(payment, "cap_1", "1000", "2024-05-01T10:00:00Z"),
            )
            .await;
        assert_eq!(first.str("action"), "process", "{}", first.text);
        let other = s
            .payflow(
                tenant,
                &capture(payment, "cap_1", "2000", "2024-05-01T10:01:00Z"),
            )
            .await;
        assert_eq!(other.str("action"), "quarantine", "{}", other.text);
        ids.push((
            first.str("delivery_id").to_owned(),
            other.str("delivery_id").to_owned(),
            other.str("effect_key").to_owned(),
        ));
    }
    let markup = s
        .deliver(
            "acme",
            "payflow",
            "live",
            INGEST,
            format!(
                r#"{{"type":{},"data":{{"amount":1}}}}"#,
                serde_json::to_string(MARKUP_TYPE).unwrap()
            )
            .as_bytes(),
        )
        .await;
    assert_eq!(markup.str("action"), "reconcile", "{}", markup.text);
    let (beta, acme) = (ids.pop().unwrap(), ids.pop().unwrap());
    Seeded {
        acme_first: acme.0,
        acme_quarantined: acme.1,
        acme_key: acme.2,
        beta_first: beta.0,
        beta_quarantined: beta.1,
        beta_key: beta.2,
        acme_markup: markup.str("delivery_id").to_owned(),
    }
}

/// An answer of the console: status, headers and the page.
#[derive(Debug)]
pub struct Page {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Page {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The value of the CSRF field the page's forms carry.
    pub fn csrf(&self) -> String {
        let at = self
            .text
            .find(r#"name="csrf" value=""#)
            .unwrap_or_else(|| panic!("no CSRF field in the page: {}", self.text));
        let rest = &self.text[at + r#"name="csrf" value=""#.len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

/// A browser-like client of the console: it keeps the session cookie by hand and never follows
/// redirects.
pub struct Console {
    pub base: String,
    http: reqwest::Client,
    pub cookie: Option<String>,
}

impl Console {
    pub fn new(s: &Service) -> Console {
        Console {
            base: s.base.clone(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookie: None,
        }
    }

    async fn page(&mut self, r: reqwest::RequestBuilder) -> Page {
        let r = match &self.cookie {
            Some(c) => r.header("cookie", format!("oncegate_console={c}")),
            None => r,
        };
        let resp = r.send().await.expect("the console answers");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        if let Some(set) = headers.get("set-cookie").and_then(|v| v.to_str().ok()) {
            let value = set
                .strip_prefix("oncegate_console=")
                .and_then(|v| v.split(';').next())
                .unwrap_or_default();
            self.cookie = (!value.is_empty()).then(|| value.to_owned());
        }
        let text = resp.text().await.expect("a body");
        Page {
            status,
            headers,
            text,
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let r = self.http.get(format!("{}{path}", self.base));
        self.page(r).await
    }

    pub async fn post(
        &mut self,
        path: &str,
        form: &[(&str, &str)],
        extra: &[(&str, &str)],
    ) -> Page {
        let mut r = self.http.post(format!("{}{path}", self.base)).form(form);
        for (k, v) in extra {
            r = r.header(*k, *v);
        }
        self.page(r).await
    }

    /// Signs in with `token` and returns the answer (303 and a cookie on success).
    pub async fn sign_in(&mut self, token: &str) -> Page {
        self.post("/console/signin", &[("token", token)], &[]).await
    }
}
