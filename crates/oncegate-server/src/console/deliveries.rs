//! The deliveries page: search by delivery id or effect key, filter by provider, environment,
//! type, action and time range, newest first, one page at a time.

use axum::extract::State;
use axum::response::Response;
use maud::{html, Markup};
use oncegate::store::DeliveryFilter;
use oncegate_core::ids::DeliveryId;
use oncegate_core::matrix::Action;
use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::layout::{self, Nav};
use super::{html, see_other, ConsoleQuery, PageError, Signed};
use crate::error::ApiError;
use crate::state::AppState;

/// Rows per page: a screenful, and a bounded store read whatever the store holds.
const PAGE: u32 = 50;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct SearchQuery {
    /// A delivery id (opens its proof) or an effect key.
    #[serde(default)]
    q: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    env: String,
    #[serde(default, rename = "type")]
    event_type: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    /// Paging: the last delivery id of the previous page.
    #[serde(default)]
    before: String,
}

fn some(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

/// Reads a time from a form: RFC 3339, or the browser's `datetime-local` form
/// (`2024-05-01T10:00`, with or without seconds), taken as UTC.
pub(crate) fn parse_time(field: &str, s: &str) -> Result<Option<OffsetDateTime>, ApiError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    // A `datetime-local` value is an RFC 3339 date-time without seconds or offset: complete it
    // as UTC rather than bringing in a second time parser.
    let completed = match s.len() {
        16 => format!("{s}:00Z"),
        19 => format!("{s}Z"),
        _ => s.to_owned(),
    };
    OffsetDateTime::parse(&completed, &Rfc3339)
        .map(Some)
        .map_err(|_| {
            ApiError::bad_request(
                "invalid_request",
                format!("{field} {s:?} is not a time such as 2024-05-01T10:00 (UTC) or an RFC 3339 date-time."),
            )
        })
}

impl SearchQuery {
    /// The query string of these filters, with `before` replaced, for the next-page link.
    fn with_before(&self, before: &str) -> String {
        let pairs = [
            ("q", &self.q),
            ("provider", &self.provider),
            ("env", &self.env),
            ("type", &self.event_type),
            ("action", &self.action),
            ("since", &self.since),
            ("until", &self.until),
        ];
        let before = before.to_owned();
        let kept: Vec<(&str, &String)> = pairs
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .chain([("before", &before)])
            .collect();
        serde_urlencoded::to_string(kept).expect("string pairs encode")
    }
}

pub(crate) async fn search(
    State(state): State<AppState>,
    Signed(s): Signed,
    ConsoleQuery(q): ConsoleQuery<SearchQuery>,
) -> Result<Response, PageError> {
    let text = q.q.trim();
    // A delivery id opens its proof directly (the proof page applies the tenant filter).
    if text.starts_with("dlv_") && text.parse::<DeliveryId>().is_ok() {
        return Ok(see_other(&format!("/console/deliveries/{text}")));
    }
    let action = match q.action.trim() {
        "" | "all" => None,
        a => Some(Action::parse(a).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                format!("action {a:?} is not process, ignore, quarantine, reconcile or reject."),
            )
        })?),
    };
    let before = match q.before.trim() {
        "" => None,
        b => Some(b.parse::<DeliveryId>().map_err(|_| {
            ApiError::bad_request(
                "invalid_request",
                format!("before {b:?} is not a delivery id."),
            )
        })?),
    };
    let filter = DeliveryFilter {
        tenants: s.caller.tenants.clone(),
        provider: some(&q.provider),
        env: some(&q.env),
        event_type: some(&q.event_type),
        action,
        key: some(text),
        since: parse_time("since", &q.since)?,
        until: parse_time("until", &q.until)?,
        before,
        // One more than shown says whether there is a next page.
        limit: PAGE + 1,
        ..DeliveryFilter::default()
    };
    let mut rows = state.gate.deliveries(&filter).await?;
    // The store filters by tenant in its query; checking again keeps a restricted session's
    // view closed even if a filter were ever dropped on the way.
    rows.retain(|r| s.caller.sees(&r.delivery.tenant));
    let more = rows.len() > PAGE as usize;
    rows.truncate(PAGE as usize);
    let next = more
        .then(|| rows.last().map(|r| q.with_before(r.delivery.id.as_str())))
        .flatten();
    let body = html! {
        (filters(&q))
        @if rows.is_empty() {
            p.muted #no-deliveries { "No delivery matches these filters." }
        } @else {
            table #deliveries {
                thead { tr {
                    th { "Received (UTC)" } th { "Delivery" } th { "Tenant" } th { "Provider / env" }
                    th { "Type" } th { "Action" } th { "Reason" } th { "Effect key" }
                } }
                tbody {
                    @for r in &rows {
                        tr {
                            td.mono.nowrap { (layout::short_when(r.delivery.received_at)) }
                            td.nowrap { (layout::delivery_link(r.delivery.id.as_str())) }
                            td { (r.delivery.tenant) }
                            td { (r.delivery.provider) " / " (r.delivery.env) }
                            td { (r.delivery.event_type.as_deref().unwrap_or("(unknown)")) }
                            td { @match r.action {
                                Some(a) => (layout::badge(a.as_str())),
                                None => span.muted { "no decision" },
                            } }
                            td { (r.reason.as_deref().unwrap_or_default()) }
                            td { @if let Some(k) = &r.key { (layout::key_link(k)) } }
                        }
                    }
                }
            }
        }
        @if let Some(next) = next {
            p.pager { a #older href={ "/console/deliveries?" (next) } { "Older deliveries →" } }
        }
    };
    Ok(html(layout::page("Deliveries", &s, Nav::Deliveries, body)))
}

fn filters(q: &SearchQuery) -> Markup {
    let actions = ["process", "ignore", "quarantine", "reconcile", "reject"];
    html! {
        form.filters method="get" action="/console/deliveries" {
            label { "Delivery id or effect key"
                input #q type="search" name="q" value=(q.q) size="36" placeholder="dlv_… or an effect key"; }
            label { "Provider" input name="provider" value=(q.provider) size="10"; }
            label { "Env" input name="env" value=(q.env) size="6"; }
            label { "Type" input name="type" value=(q.event_type) size="16"; }
            label { "Action"
                select name="action" {
                    option value="" { "any" }
                    @for a in actions {
                        option value=(a) selected[q.action == a] { (a) }
                    }
                }
            }
            label { "Since (UTC)" input type="datetime-local" name="since" value=(q.since); }
            label { "Until (UTC)" input type="datetime-local" name="until" value=(q.until); }
            button #search type="submit" { "Search" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_rfc3339_or_datetime_local_in_utc() {
        let t = parse_time("since", "2024-05-01T10:00").unwrap().unwrap();
        assert_eq!(layout::when(t), "2024-05-01T10:00:00Z");
        let t = parse_time("since", "2024-05-01T12:00:00+02:00")
            .unwrap()
            .unwrap();
        assert_eq!(layout::when(t), "2024-05-01T10:00:00Z");
        assert_eq!(parse_time("until", " ").unwrap(), None);
        let e = parse_time("until", "yesterday").unwrap_err();
        assert!(e.message.contains("until") && e.message.contains("yesterday"));
    }

    #[test]
    fn the_next_page_link_keeps_the_filters_and_encodes_them() {
        let q = SearchQuery {
            q: "a b&c".to_owned(),
            provider: "payflow".to_owned(),
            ..SearchQuery::default()
        };
        assert_eq!(
            q.with_before("dlv_1"),
            "q=a+b%26c&provider=payflow&before=dlv_1"
        );
    }
}
