//! The console's page shell (navigation, who is signed in, sign-out) and the small pieces every
//! page shares: times, action badges, JSON values.

use axum::http::StatusCode;
use maud::{html, Markup, DOCTYPE};
use oncegate::store::TenantFilter;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::assets;
use super::session::Session;

/// The pages of the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Deliveries,
    Queue,
    Report,
    Decisions,
    Breakers,
}

const NAV: [(Nav, &str, &str); 5] = [
    (Nav::Deliveries, "/console/deliveries", "Deliveries"),
    (Nav::Queue, "/console/queue", "Queue"),
    (Nav::Report, "/console/report", "Report"),
    (Nav::Decisions, "/console/decisions", "Decisions"),
    (Nav::Breakers, "/console/breakers", "Breakers"),
];

fn head(title: &str) -> Markup {
    html! {
        (DOCTYPE)
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            // htmx must not inject its own <style>: the page's policy allows styles from the
            // service's style sheet only.
            meta name="htmx-config" content=r#"{"includeIndicatorStyles":false}"#;
            title { (title) " · oncegate" }
            link rel="stylesheet" href=(assets::css_url());
            script src=(assets::htmx_url()) defer {}
        }
    }
}

/// Which tenants a session sees, in words.
pub(crate) fn tenants_text(t: &TenantFilter) -> String {
    match t {
        TenantFilter::All => "all tenants".to_owned(),
        TenantFilter::Only(list) => format!("tenant {}", list.join(", ")),
    }
}

/// A whole page for a signed-in operator.
pub(crate) fn page(title: &str, session: &Session, active: Nav, body: Markup) -> Markup {
    html! {
        (head(title))
        body {
            header.top {
                span.brand { "oncegate" }
                nav {
                    @for (nav, href, label) in NAV {
                        a href=(href) class=[(nav == active).then_some("active")] { (label) }
                    }
                }
                @if let Some(lag) = session.read_lag {
                    span.lag title="The lists, the report and proofs on this page are read from a streaming standby of the store" {
                        "read from a replica, " (lag.as_millis()) " ms behind"
                    }
                }
                span.who {
                    (session.caller.role.as_str()) " · " (tenants_text(&session.caller.tenants))
                    " · until " (hhmm(session.expires_at)) " UTC"
                    form method="post" action="/console/signout" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        button type="submit" id="signout" { "Sign out" }
                    }
                }
            }
            main { h1 { (title) } (body) }
        }
    }
}

/// A page without the navigation (sign-in, errors before a session exists).
pub(crate) fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (head(title))
        body {
            header.top { span.brand { "oncegate" } }
            main { (body) }
        }
    }
}

pub(crate) fn error_page(status: StatusCode, message: &str) -> Markup {
    bare(
        status.canonical_reason().unwrap_or("Error"),
        html! {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("Error")) }
            p.error { (message) }
            p { a href="/console" { "Back to the console" } }
        },
    )
}

/// A time as RFC 3339 (UTC), the form the API and the CLI use.
pub(crate) fn when(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// A time to the second, for lists (`2024-05-01 10:00:00`, UTC).
pub(crate) fn short_when(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{} {:02}:{:02}:{:02}",
        t.date(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

fn hhmm(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!("{:02}:{:02}", t.hour(), t.minute())
}

/// An effect key, shortened, as a link to the deliveries that share it.
pub(crate) fn key_link(key: &str) -> Markup {
    let query = serde_urlencoded::to_string([("q", key)]).expect("a string pair encodes");
    let short: String = key.chars().take(16).collect();
    html! {
        a.mono href={ "/console/deliveries?" (query) } title=(key) {
            (short) @if key.chars().count() > 16 { "…" }
        }
    }
}

pub(crate) fn badge(action: &str) -> Markup {
    html! { span class={ "badge " (action) } { (action) } }
}

/// A link to a delivery's proof page.
pub(crate) fn delivery_link(id: &str) -> Markup {
    html! { a.mono href={ "/console/deliveries/" (id) } { (id) } }
}

/// A JSON value shown as code (a stored canonical form, a keyed hash, an evidence document).
pub(crate) fn json(v: Option<&serde_json::value::RawValue>) -> Markup {
    match v {
        Some(v) => html! { code { (v.get()) } },
        None => html! { span.muted { "absent" } },
    }
}

/// A JSON value pretty-printed in a block.
pub(crate) fn json_block(v: &serde_json::value::RawValue) -> Markup {
    let pretty = serde_json::from_str::<serde_json::Value>(v.get())
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| v.get().to_owned());
    html! { pre { (pretty) } }
}
