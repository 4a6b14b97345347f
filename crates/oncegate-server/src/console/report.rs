//! The report page (received deliveries beside what became of them, per provider, environment
//! and type, the unexplained gap highlighted) and the decisions-over-time chart, both read from
//! the store's report for the tenants the session sees.

use axum::extract::State;
use axum::response::Response;
use maud::{html, Markup};
use oncegate::store::{ReportCounts, TenantFilter};
use serde::Deserialize;
use time::OffsetDateTime;

use super::chart;
use super::deliveries::parse_time;
use super::layout::{self, Nav};
use super::{html, ConsoleQuery, PageError, Signed};
use crate::error::ApiError;
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ReportPageQuery {
    /// A start of its own (UTC), which wins over `range`.
    #[serde(default)]
    since: String,
    /// `24h` (the default, as `oncegate report`'s), `7d`, `30d` or `all` (from the start).
    #[serde(default)]
    range: String,
}

/// The report page's periods: its value, its label and how far back it starts (`None`: from
/// the start). The default is a day, as `oncegate report`'s: the whole history of a large
/// store is many millions of rows to count, so reading it is a choice, never the landing page.
const PERIODS: [(&str, &str, Option<i64>); 4] = [
    ("24h", "last 24 hours", Some(1)),
    ("7d", "last 7 days", Some(7)),
    ("30d", "last 30 days", Some(30)),
    ("all", "from the start", None),
];

/// The start of the report page's period.
fn period_start(q: &ReportPageQuery, now: OffsetDateTime) -> Result<OffsetDateTime, PageError> {
    if let Some(since) = parse_time("since", &q.since)? {
        return Ok(since);
    }
    let range = if q.range.is_empty() {
        "24h"
    } else {
        q.range.as_str()
    };
    match PERIODS.iter().find(|(v, _, _)| *v == range) {
        Some((_, _, Some(days))) => Ok(now - time::Duration::days(*days)),
        Some((_, _, None)) => Ok(OffsetDateTime::UNIX_EPOCH),
        None => Err(ApiError::bad_request(
            "invalid_request",
            format!("range {range:?} is not 24h, 7d, 30d or all."),
        )
        .into()),
    }
}

fn cells(c: &ReportCounts) -> Markup {
    html! {
        td.num { (c.received) }
        td.num { (c.processed) }
        td.num { (c.ignored_transport + c.ignored_effect) }
        td.num { (c.quarantined) }
        td.num { (c.reconcile_pending) }
        td.num { (c.rejected) }
        td.num { (c.effects_completed) }
        td.num { (c.collisions) }
        @if c.unexplained_gap != 0 {
            td.num.gap title="Deliveries journaled without a documented outcome: investigate." { (c.unexplained_gap) }
        } @else {
            td.num { "0" }
        }
    }
}

pub(crate) async fn page(
    State(state): State<AppState>,
    Signed(s): Signed,
    ConsoleQuery(q): ConsoleQuery<ReportPageQuery>,
) -> Result<Response, PageError> {
    let since = period_start(&q, state.now())?;
    let report = state.gate.report(&s.caller.tenants, since).await?;
    let rows: Vec<_> = report
        .rows
        .iter()
        // The store filters by tenant in its query; checking again keeps a restricted
        // session's view closed even if a filter were ever dropped on the way.
        .filter(|r| s.caller.sees(&r.tenant))
        .collect();
    let gap = report.total.unexplained_gap;
    let body = html! {
        form.filters method="get" action="/console/report" {
            label { "Period" select name="range" {
                @for (v, text, _) in PERIODS {
                    option value=(v) selected[q.range == v || (q.range.is_empty() && v == "24h")] { (text) }
                }
            } }
            label { "Or received since (UTC)" input type="datetime-local" name="since" value=(q.since); }
            button type="submit" { "Show" }
        }
        @if gap != 0 {
            p.error #gap-warning { "Unexplained gap: " (gap) " deliveries were journaled without a documented outcome." }
        }
        table #report {
            thead { tr {
                th { "Tenant" } th { "Provider" } th { "Env" } th { "Type" }
                th.num { "Received" } th.num { "Processed" } th.num { "Ignored" } th.num { "Quarantined" }
                th.num { "Pending" } th.num { "Rejected" } th.num { "Effects" } th.num { "Collisions" } th.num { "Gap" }
            } }
            tbody {
                @for r in &rows {
                    tr {
                        td { (r.tenant) } td { (r.provider) } td { (r.env) }
                        td { (r.event_type.as_deref().unwrap_or("(unknown)")) }
                        (cells(&r.counts))
                    }
                }
                tr { th colspan="4" { "Total" } (cells(&report.total)) }
            }
        }
        p.muted { "Pending: reconcile items still open. Effects: effects completed. Ignored: transport and effect duplicates." }
    };
    Ok(html(layout::page("Report", &s, Nav::Report, body)))
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct DecisionsQuery {
    /// `24h` (hourly bars, the default), `7d` (six-hourly) or `30d` (daily).
    #[serde(default)]
    range: String,
}

/// The reads the chart needs: bucket edges from `now` back over the range.
fn edges(range: &str, now: OffsetDateTime) -> Result<Vec<OffsetDateTime>, ApiError> {
    let (n, step) = match range {
        "" | "24h" => (24, time::Duration::hours(1)),
        "7d" => (28, time::Duration::hours(6)),
        "30d" => (30, time::Duration::days(1)),
        r => {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("range {r:?} is not 24h, 7d or 30d."),
            ))
        }
    };
    // Edges fall on whole steps (hours, six-hour marks, days, in UTC) so a bar means the same
    // span on every visit; the last bar is the step under way.
    let step_s = step.whole_seconds();
    let end = (now.unix_timestamp().div_euclid(step_s) + 1) * step_s;
    (0..=n)
        .rev()
        .map(|i| {
            OffsetDateTime::from_unix_timestamp(end - step_s * i).map_err(|_| {
                ApiError::bad_request("invalid_request", "The clock is outside the charted range.")
            })
        })
        .collect()
}

pub(crate) async fn decisions(
    State(state): State<AppState>,
    Signed(s): Signed,
    ConsoleQuery(q): ConsoleQuery<DecisionsQuery>,
) -> Result<Response, PageError> {
    let edges = edges(&q.range, state.now())?;
    let tenants: &TenantFilter = &s.caller.tenants;
    // One bounded report per bucket: together they read the range's rows once (a report from
    // each edge to now would read the last bucket's rows once per bucket).
    let mut totals = Vec::with_capacity(edges.len());
    for e in edges.windows(2) {
        totals.push(state.gate.report_until(tenants, e[0], e[1]).await?.total);
    }
    let buckets = chart::buckets(&edges, &totals);
    let daily = q.range == "30d";
    let label = |t: OffsetDateTime| {
        if daily {
            format!("{:02}-{:02}", u8::from(t.month()), t.day())
        } else {
            format!("{:02}-{:02} {:02}h", u8::from(t.month()), t.day(), t.hour())
        }
    };
    let body = html! {
        form.filters method="get" action="/console/decisions" {
            label { "Range" select name="range" {
                @for (v, text) in [("24h", "last 24 hours, hourly"), ("7d", "last 7 days, 6-hourly"), ("30d", "last 30 days, daily")] {
                    option value=(v) selected[q.range == v || (q.range.is_empty() && v == "24h")] { (text) }
                }
            } }
            button type="submit" { "Show" }
        }
        (chart::svg(&buckets, label))
        h2 { "The counts" }
        table #decisions {
            thead { tr { th { "From (UTC)" } @for (a, _) in chart::ACTIONS { th.num { (a) } } th.num { "total" } } }
            tbody { @for b in buckets.iter().rev().filter(|b| b.total() > 0) {
                tr { td.mono { (layout::short_when(b.start)) } @for c in b.counts { td.num { (c) } } td.num { (b.total()) } }
            } }
        }
    };
    Ok(html(layout::page(
        "Decisions over time",
        &s,
        Nav::Decisions,
        body,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonzero_gap_is_highlighted_and_a_zero_one_is_not() {
        let gap = ReportCounts {
            received: 3,
            processed: 1,
            ..ReportCounts::default()
        }
        .with_gap();
        let html = cells(&gap).into_string();
        assert!(html.contains(r#"<td class="num gap""#), "{html}");
        assert!(html.contains(">2</td>"), "{html}");
        let none = cells(&ReportCounts::default().with_gap()).into_string();
        assert!(!none.contains("gap"), "{none}");
    }

    #[test]
    fn chart_edges_fall_on_whole_steps_and_end_after_now() {
        let now = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(); // 22:13:20 UTC
        let e = edges("", now).unwrap();
        assert_eq!(e.len(), 25);
        assert!(e.iter().all(|t| t.minute() == 0 && t.second() == 0));
        assert!(e[23] <= now && now < e[24]);
        let days = edges("30d", now).unwrap();
        assert_eq!(days.len(), 31);
        assert!(days.iter().all(|t| t.hour() == 0));
        assert!(edges("1y", now).unwrap_err().message.contains("1y"));
    }
}
