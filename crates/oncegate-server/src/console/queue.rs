//! The queue page: open (or resolved) items with their differences side by side, the existing
//! result, the proposed action and the reconciler's attempts and evidence; each open item
//! resolves as `distinct` or `duplicate` through the same code as the `/v1` route. With htmx the
//! item is swapped in place; without JavaScript the form posts and redirects back.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{html, Markup};
use oncegate::store::{QueueCounts, QueueCursor, QueueFilter, QueueKind, QueueStatus};
use serde::Deserialize;

use super::layout::{self, Nav};
use super::session::Session;
use super::{check_csrf, from_htmx, html, see_other, ConsoleForm, ConsoleQuery, PageError, Signed};
use crate::error::{ApiError, Problem};
use crate::routes::queue::{item_body, resolve_item};
use crate::state::AppState;
use crate::wire::{QueueItemBody, ResolveRequest};

/// Items per page unless the query asks for another size (`limit`, at most [`MAX_PAGE`]).
const PAGE: u32 = 25;
const MAX_PAGE: u32 = 100;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct QueuePageQuery {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    provider: String,
    /// Items per page.
    #[serde(default)]
    limit: Option<u32>,
    /// The next page: the items after this cursor (the previous page's last item).
    #[serde(default)]
    after: String,
    /// The previous page: the items before this cursor (the next page's first item).
    #[serde(default)]
    before: String,
}

impl QueuePageQuery {
    /// The query string of these filters and page size, at the cursor `at` (`after` or
    /// `before`; none for the first page), for the pager's links.
    fn link(&self, at: Option<(&str, &QueueCursor)>) -> String {
        let limit = self.limit.map(|l| l.to_string()).unwrap_or_default();
        let cursor = at.map(|(_, c)| c.to_string()).unwrap_or_default();
        let pairs = [
            ("kind", self.kind.as_str()),
            ("status", self.status.as_str()),
            ("provider", self.provider.as_str()),
            ("limit", limit.as_str()),
            (at.map_or("after", |(name, _)| name), cursor.as_str()),
        ];
        let kept: Vec<_> = pairs.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        serde_urlencoded::to_string(kept).expect("string pairs encode")
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResolveForm {
    csrf: String,
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    authoritative_ref: String,
    /// The page's provider filter, so the counts swapped in after a resolution are the page's.
    #[serde(default)]
    provider: String,
}

fn invalid(message: String) -> ApiError {
    ApiError::bad_request("invalid_request", message)
}

fn cursor(name: &str, text: &str) -> Result<Option<QueueCursor>, ApiError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|e| invalid(format!("{name}: {e}.")))
}

fn provider_of(text: &str) -> Option<String> {
    Some(text.trim().to_owned()).filter(|p| !p.is_empty())
}

fn parse_filter(q: &QueuePageQuery, s: &Session) -> Result<QueueFilter, ApiError> {
    let kind = match q.kind.as_str() {
        "" | "all" => None,
        k => Some(
            QueueKind::parse(k)
                .ok_or_else(|| invalid(format!("kind {k:?} is not quarantine or reconcile.")))?,
        ),
    };
    let status = match q.status.as_str() {
        "" => Some(QueueStatus::Open),
        "all" => None,
        st => Some(
            QueueStatus::parse(st)
                .ok_or_else(|| invalid(format!("status {st:?} is not open, resolved or all.")))?,
        ),
    };
    Ok(QueueFilter {
        tenants: s.caller.tenants.clone(),
        status,
        kind,
        provider: provider_of(&q.provider),
        limit: q.limit.unwrap_or(PAGE).clamp(1, MAX_PAGE),
        after: cursor("after", &q.after)?,
        before: cursor("before", &q.before)?,
        ..QueueFilter::default()
    })
}

/// How many items the filter's kind and status select among `counts`.
fn matching(counts: &QueueCounts, f: &QueueFilter) -> u64 {
    [QueueKind::Quarantine, QueueKind::Reconcile]
        .into_iter()
        .filter(|k| f.kind.is_none() || f.kind == Some(*k))
        .map(|k| {
            let c = match k {
                QueueKind::Quarantine => counts.quarantine,
                QueueKind::Reconcile => counts.reconcile,
            };
            match f.status {
                Some(QueueStatus::Open) => c.open,
                Some(QueueStatus::Resolved) => c.resolved,
                None => c.open + c.resolved,
            }
        })
        .sum()
}

/// The open items per kind the session sees under the provider filter, as the store counts
/// them with a page.
async fn count_open(
    state: &AppState,
    s: &Session,
    provider: Option<String>,
) -> Result<QueueCounts, PageError> {
    let page = state
        .gate
        .queue_page(&QueueFilter {
            tenants: s.caller.tenants.clone(),
            provider,
            limit: 1,
            ..QueueFilter::default()
        })
        .await?;
    Ok(page.counts)
}

/// The counts bar; `oob` marks it for htmx to replace the page's own after a resolution.
fn counts_markup(c: &QueueCounts, oob: bool) -> Markup {
    html! {
        div.counts #counts hx-swap-oob=[oob.then_some("true")] {
            span.count { b #count-quarantine { (c.quarantine.open) } "open quarantine" }
            span.count { b #count-reconcile { (c.reconcile.open) } "open reconcile" }
        }
    }
}

pub(crate) async fn page(
    State(state): State<AppState>,
    Signed(s): Signed,
    ConsoleQuery(q): ConsoleQuery<QueuePageQuery>,
) -> Result<Response, PageError> {
    let filter = parse_filter(&q, &s)?;
    // One page at the cursor, keyed on the items' (created_at, id) like `GET /v1/queue`, with
    // the counts read in the same transaction.
    let page = state.gate.queue_page(&filter).await?;
    let now = state.now();
    let shown: Vec<QueueItemBody> = page
        .items
        .iter()
        // The store filters by tenant in its query; checking again keeps the session's view
        // closed even if a filter were ever dropped on the way.
        .filter(|i| s.caller.sees(&i.tenant))
        .map(|i| item_body(i, now))
        .collect();
    let next = page.next.as_ref().map(|c| q.link(Some(("after", c))));
    let previous = page.previous.as_ref().map(|c| q.link(Some(("before", c))));
    let paged = filter.after.is_some() || filter.before.is_some();
    let first = q.link(None);
    let total = matching(&page.counts, &filter);
    let dead_letters = super::forwards::dead_letters(&state, &s).await?;
    let body = html! {
        (counts_markup(&page.counts, false))
        (dead_letters)
        form.filters method="get" action="/console/queue" {
            label { "Kind" select name="kind" {
                option value="" { "all" }
                @for k in ["quarantine", "reconcile"] { option value=(k) selected[q.kind == k] { (k) } }
            } }
            label { "Status" select name="status" {
                option value="" { "open" }
                @for st in ["resolved", "all"] { option value=(st) selected[q.status == st] { (st) } }
            } }
            label { "Provider" input name="provider" value=(q.provider) size="12"; }
            @if let Some(limit) = q.limit { input type="hidden" name="limit" value=(limit); }
            button type="submit" { "Filter" }
        }
        p.muted #queue-summary { "Showing " (shown.len()) " of " (total) " matching items, oldest first." }
        div #queue {
            @if shown.is_empty() { p.muted #queue-empty { "Nothing in the queue matches." } }
            @for item in &shown { (item_card(item, &s, &q.provider, None)) }
        }
        @if previous.is_some() || next.is_some() || paged {
            p.pager {
                @if let Some(previous) = &previous {
                    a #previous-page href={ "/console/queue?" (previous) } { "← Earlier items" } " "
                } @else if paged {
                    a #first-page href={ "/console/queue?" (first) } { "← First items" } " "
                }
                @if let Some(next) = &next {
                    a #next-page href={ "/console/queue?" (next) } { "Later items →" }
                }
            }
        }
    };
    Ok(html(layout::page("Queue", &s, Nav::Queue, body)))
}

/// One queue item as a card (its id in the page is `item-{queue item id}`), with the resolve
/// form when it is open and `error` when the last attempt to resolve it was refused.
fn item_card(i: &QueueItemBody, s: &Session, provider: &str, error: Option<&str>) -> Markup {
    let open = i.resolution.is_none();
    html! {
        article.card.resolved[!open] id={ "item-" (i.queue_item_id) } data-delivery=(i.delivery_id) {
            p {
                (layout::badge(i.kind)) " "
                (layout::delivery_link(&i.delivery_id)) " · "
                (i.tenant) " / " (i.provider) " / " (i.env) " · "
                (i.event_type.as_deref().unwrap_or("(unknown)")) " · "
                span.muted { (i.age_seconds) " s old" }
            }
            p { (i.reason) }
            table.kv {
                @if let Some(k) = &i.effect_key { tr { th { "Effect key" } td { code { (k) } } } }
                @if let Some(r) = &i.reference_delivery_id {
                    tr { th { "Reference delivery" } td { (layout::delivery_link(r)) } }
                }
                @if let Some(e) = &i.existing_effect_id { tr { th { "Existing effect" } td { code { (e) } } } }
                tr { th { "Existing result" } td { (layout::json(i.existing_result.as_deref())) } }
                tr { th { "Proposed action" } td { strong { (i.proposed_action) } } }
                tr { th { "Reconciliation" } td {
                    (i.reconcile_attempts) " attempt(s)"
                    @if let Some(t) = i.last_attempt_at { ", last at " (layout::when(t)) }
                    @if let Some(e) = &i.last_error { br; span.muted { (e) } }
                } }
                @if let Some(ev) = &i.last_evidence { tr { th { "Last evidence" } td { (layout::json_block(ev)) } } }
                @if let Some(ev) = &i.resolution_evidence { tr { th { "Resolution evidence" } td { (layout::json_block(ev)) } } }
            }
            @if !i.differences.is_empty() { (super::proof::differences(&i.differences)) }
            @if let Some(r) = &i.resolution {
                p.resolution {
                    "Resolved " strong { (r.outcome) } " by " (r.by) " at " (layout::when(r.at)) ": " (r.note)
                    @if let Some(a) = &r.authoritative_ref { " (authoritative ref " code { (a) } ")" }
                }
            }
            @if open {
                @if let Some(e) = error { p.error { (e) } }
                form.resolve method="post" action={ "/console/queue/" (i.delivery_id) "/resolve" }
                    hx-post={ "/console/queue/" (i.delivery_id) "/resolve" }
                    hx-target={ "#item-" (i.queue_item_id) } hx-swap="outerHTML" {
                    input type="hidden" name="csrf" value=(s.csrf);
                    @if !provider.is_empty() { input type="hidden" name="provider" value=(provider); }
                    span { "Outcome" }
                    span {
                        label { input type="radio" name="outcome" value="distinct" checked[i.proposed_action == "distinct"]; " distinct (a new effect)" } " "
                        label { input type="radio" name="outcome" value="duplicate" checked[i.proposed_action == "duplicate"]; " duplicate (the existing effect)" }
                    }
                    label for={ "note-" (i.queue_item_id) } { "Note (required)" }
                    textarea id={ "note-" (i.queue_item_id) } name="note" required {}
                    label for={ "ref-" (i.queue_item_id) } { "Authoritative ref" }
                    input id={ "ref-" (i.queue_item_id) } name="authoritative_ref" placeholder="optional: the provider's own reference";
                    span {}
                    span { button type="submit" { "Resolve" } }
                }
            }
        }
    }
}

pub(crate) async fn resolve(
    State(state): State<AppState>,
    Signed(s): Signed,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
    ConsoleForm(f): ConsoleForm<ResolveForm>,
) -> Result<Response, PageError> {
    check_csrf(&s, &f.csrf)?;
    let htmx = from_htmx(&headers);
    let refusal = if f.note.trim().is_empty() {
        Some(ApiError::bad_request(
            "invalid_request",
            "A resolution needs a note saying what was checked.",
        ))
    } else if !matches!(f.outcome.as_str(), "distinct" | "duplicate") {
        Some(ApiError::bad_request(
            "invalid_request",
            "Choose distinct or duplicate.",
        ))
    } else {
        None
    };
    let result = match refusal {
        Some(e) => Err(e),
        None => {
            let req = ResolveRequest {
                outcome: f.outcome.clone(),
                authoritative_ref: Some(f.authoritative_ref.clone()),
                note: Some(f.note.trim().to_owned()),
                by: None,
            };
            resolve_item(&state, &s.caller, &raw_id, req).await
        }
    };
    match (result, htmx) {
        (Ok(item), true) => {
            // The resolved item in place, and the counts bar beside it (out of band).
            let counts = count_open(&state, &s, provider_of(&f.provider)).await?;
            Ok(html(html! {
                (item_card(&item_body(&item, state.now()), &s, &f.provider, None))
                (counts_markup(&counts, true))
            }))
        }
        (Ok(_), false) => Ok(see_other("/console/queue")),
        // htmx swaps only successful answers: a refusal comes back as the item with the
        // reason, so the operator sees it where they typed.
        (Err(e), true) if e.status().is_client_error() && e.problem != Problem::NotFound => {
            let item = open_item(&state, &s, &raw_id).await?;
            Ok(html(item_card(&item, &s, &f.provider, Some(&e.message))))
        }
        (Err(e), _) => Err(PageError(e)),
    }
}

/// The queue item of a delivery the session may see, for re-rendering after a refusal.
async fn open_item(
    state: &AppState,
    s: &Session,
    raw_id: &str,
) -> Result<QueueItemBody, PageError> {
    let (_, extras) = crate::routes::proof::build(state, &s.caller, raw_id, false).await?;
    let item = extras
        .queue_item
        .ok_or_else(|| ApiError::not_found(format!("Delivery {raw_id} is not in the queue.")))?;
    Ok(item_body(&item, state.now()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncegate_core::ids::QueueItemId;
    use time::OffsetDateTime;

    #[test]
    fn pager_links_keep_the_filters_and_page_size_and_encode_them() {
        let q = QueuePageQuery {
            kind: "reconcile".to_owned(),
            provider: "pay flow&co".to_owned(),
            limit: Some(7),
            ..QueuePageQuery::default()
        };
        let at = QueueCursor {
            created_at: OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(),
            id: QueueItemId::from_u128(42),
        };
        let next = q.link(Some(("after", &at)));
        assert_eq!(
            next,
            format!("kind=reconcile&provider=pay+flow%26co&limit=7&after={at}")
        );
        assert_eq!(
            q.link(None),
            "kind=reconcile&provider=pay+flow%26co&limit=7"
        );
        let back: QueuePageQuery = serde_urlencoded::from_str(&next).unwrap();
        assert_eq!(back.after.parse::<QueueCursor>().unwrap(), at);
        assert_eq!(back.provider, "pay flow&co");
    }
}
