//! The OpenAPI document against the router over real HTTP: every operation it describes is
//! answered by a handler (never by the router's "no route" or "method not allowed"), and no
//! method it does not describe is served on its paths.

use reqwest::Method;
use serde_json::Value;

use crate::harness::{Kind, Service, ADMIN};

/// Every method a route could be served under.
const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
];

/// The path with each `{parameter}` filled in.
fn filled(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if segment.starts_with('{') && segment.ends_with('}') {
                "probe"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

pub async fn the_document_describes_exactly_the_routes_served(kind: Kind) {
    let s = Service::start(kind).await;
    // Open: no token, JSON, OpenAPI 3.1.
    let doc = s.get("/v1/openapi.json", None).await;
    assert_eq!(doc.status, 200, "{}", doc.text);
    assert_eq!(doc.body["openapi"], "3.1.0");
    let raw = s
        .http
        .get(format!("{}/v1/openapi.json", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        raw.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    assert_eq!(
        doc.body["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );

    // What the router answers for what it does not serve, read from the service itself.
    let no_route = s.get("/v1/no-such-route", Some(ADMIN)).await;
    assert_eq!(no_route.status, 404);
    let paths = doc.body["paths"].as_object().expect("paths");
    assert!(paths.len() >= 12, "{:?}", paths.keys());
    let mut probed = 0;
    for (path, item) in paths {
        assert!(path.starts_with("/v1/"), "{path} is not a /v1 route");
        let url = filled(path);
        for method in METHODS {
            let documented = item.get(method.as_str().to_lowercase()).is_some();
            let body = (method != Method::GET).then(|| b"{}".to_vec());
            let headers = [("content-type", "application/json".to_owned())];
            let a = s
                .request(method.clone(), &url, Some(ADMIN), &headers, body)
                .await;
            if documented {
                probed += 1;
                assert_ne!(
                    a.status, 405,
                    "{method} {path} is documented but not served: {}",
                    a.text
                );
                assert!(
                    !(a.status == 404 && a.body == no_route.body),
                    "{method} {path} is documented but no route matches it: {}",
                    a.text
                );
                // Every answer is JSON: the document or an error in the error shape.
                assert!(
                    a.body.is_object(),
                    "{method} {path} answered {}: {}",
                    a.status,
                    a.text
                );
                if a.status >= 400 {
                    assert!(a.body["error"]["code"].is_string(), "{}", a.text);
                }
            } else {
                assert_eq!(
                    (a.status, a.body["error"]["code"].clone()),
                    (405, Value::from("method_not_allowed")),
                    "{method} {path} is served but not documented"
                );
            }
        }
    }
    assert!(probed >= 13, "only {probed} operations were probed");
    s.stop().await;
}

/// The error codes an answer's description names: the backticked words outside parentheses,
/// before the first colon ("`not_found` (…), `not_decided` (…)"; "`forbidden`: … `admin`").
fn codes_named(description: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut depth = 0;
    for c in description.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ':' if depth == 0 => break,
            c if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    plain
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// `docs/api.md` lists exactly the error codes the OpenAPI document says the service answers,
/// each with its status, and every field of a report row.
#[tokio::test]
async fn the_api_reference_lists_every_error_code_and_report_field() {
    let s = Service::start(Kind::Sqlite).await;
    let doc = s.get("/v1/openapi.json", None).await;
    let mut answered = std::collections::BTreeSet::new();
    for ops in doc.body["paths"].as_object().unwrap().values() {
        for op in ops.as_object().unwrap().values() {
            for (status, response) in op["responses"].as_object().into_iter().flatten() {
                if status.starts_with('4') || status.starts_with('5') {
                    let description = response["description"].as_str().unwrap_or_default();
                    for code in codes_named(description) {
                        answered.insert((code, status.clone()));
                    }
                }
            }
        }
    }
    let reference = include_str!("../../../../docs/api.md");
    let section = |title: &str| {
        let start = reference
            .find(title)
            .unwrap_or_else(|| panic!("docs/api.md has a section {title}"));
        let rest = &reference[start + title.len()..];
        rest[..rest.find("\n## ").unwrap_or(rest.len())].to_owned()
    };
    let rows = |text: &str| -> Vec<Vec<String>> {
        text.lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| l.split('|').map(|c| c.trim().to_owned()).collect())
            .collect()
    };
    let listed: std::collections::BTreeSet<(String, String)> = rows(&section("## Error codes"))
        .into_iter()
        .map(|r| (r[1].trim_matches('`').to_owned(), r[2].clone()))
        .collect();
    let missing: Vec<_> = answered.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&answered).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/api.md's error codes against the OpenAPI document: missing {missing:?}, never answered {stale:?}"
    );

    let fields: Vec<String> = doc.body["components"]["schemas"]["ReportRowBody"]["properties"]
        .as_object()
        .expect("the report row's schema")
        .keys()
        .cloned()
        .collect();
    let documented: Vec<String> = rows(&section("## The report's fields"))
        .into_iter()
        .flat_map(|r| {
            r[1].split(", ")
                .map(|f| f.trim_matches('`').to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    for f in &fields {
        assert!(
            documented.contains(f),
            "docs/api.md does not explain the report's `{f}`"
        );
    }
    for f in &documented {
        assert!(
            fields.contains(f),
            "docs/api.md explains `{f}`, which the report does not have"
        );
    }
    s.stop().await;
}
