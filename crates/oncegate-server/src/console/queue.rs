//! The queue page: open (or resolved) items with their differences side by side, the existing
//! result, the proposed action and the reconciler's attempts and evidence; each open item
//! resolves as `distinct` or `duplicate` through the same code as the `/v1` route. With htmx the
//! item is swapped in place; without JavaScript the form posts and redirects back.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{html, Markup};
use oncegate_store::{QueueFilter, QueueItem, QueueKind, QueueStatus};
use serde::Deserialize;

use super::layout::{self, Nav};
use super::session::Session;
use super::{check_csrf, from_htmx, html, see_other, ConsoleForm, ConsoleQuery, PageError, Signed};
use crate::error::{ApiError, Problem};
use crate::routes::queue::{item_body, resolve_item};
use crate::state::AppState;
use crate::wire::{QueueItemBody, ResolveRequest};

/// Items per page.
const PAGE: usize = 25;
/// How far the page reads to count and page: the queue listing has no offset, so the page
/// reads at most this many items (and one more, to know there are more) and says "at least"
/// past it.
const WINDOW: usize = 1000;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct QueuePageQuery {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    offset: usize,
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
}

fn parse_filter(q: &QueuePageQuery, s: &Session) -> Result<QueueFilter, ApiError> {
    let kind = match q.kind.as_str() {
        "" | "all" => None,
        k => Some(QueueKind::parse(k).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                format!("kind {k:?} is not quarantine or reconcile."),
            )
        })?),
    };
    let status = match q.status.as_str() {
        "" => Some(QueueStatus::Open),
        "all" => None,
        st => Some(QueueStatus::parse(st).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                format!("status {st:?} is not open, resolved or all."),
            )
        })?),
    };
    let provider = Some(q.provider.trim().to_owned()).filter(|p| !p.is_empty());
    Ok(QueueFilter {
        tenants: s.caller.tenants.clone(),
        status,
        kind,
        provider,
        limit: WINDOW as u32 + 1,
        ..QueueFilter::default()
    })
}

/// Open items per kind, from one bounded read.
struct Counts {
    quarantine: usize,
    reconcile: usize,
    capped: bool,
}

/// Counts the open items per kind the session sees, from one bounded read.
async fn count_open(state: &AppState, s: &Session) -> Result<Counts, PageError> {
    let open = state
        .store
        .queue_list(&QueueFilter {
            tenants: s.caller.tenants.clone(),
            limit: WINDOW as u32 + 1,
            ..QueueFilter::default()
        })
        .await?;
    let capped = open.len() > WINDOW;
    let open: Vec<&QueueItem> = open
        .iter()
        .take(WINDOW)
        .filter(|i| s.caller.sees(&i.tenant))
        .collect();
    let of = |kind: QueueKind| open.iter().filter(|i| i.kind == kind).count();
    Ok(Counts {
        quarantine: of(QueueKind::Quarantine),
        reconcile: of(QueueKind::Reconcile),
        capped,
    })
}

/// The counts bar; `oob` marks it for htmx to replace the page's own after a resolution.
fn counts_markup(c: &Counts, oob: bool) -> Markup {
    html! {
        div.counts #counts hx-swap-oob=[oob.then_some("true")] {
            span.count { b #count-quarantine { (c.quarantine) } "open quarantine" }
            span.count { b #count-reconcile { (c.reconcile) } "open reconcile" }
            @if c.capped { span.count.muted { "counting stops at " (WINDOW) } }
        }
    }
}

pub(crate) async fn page(
    State(state): State<AppState>,
    Signed(s): Signed,
    ConsoleQuery(q): ConsoleQuery<QueuePageQuery>,
) -> Result<Response, PageError> {
    let filter = parse_filter(&q, &s)?;
    let counts = count_open(&state, &s).await?;
    let listed = state.store.queue_list(&filter).await?;
    let listed_capped = listed.len() > WINDOW;
    let listed: Vec<&QueueItem> = listed
        .iter()
        .take(WINDOW)
        .filter(|i| s.caller.sees(&i.tenant))
        .collect();
    let now = state.now();
    let shown: Vec<QueueItemBody> = listed
        .iter()
        .skip(q.offset)
        .take(PAGE)
        .map(|i| item_body(i, now))
        .collect();
    let next = (q.offset + PAGE < listed.len()).then(|| {
        serde_urlencoded::to_string([
            ("kind", q.kind.as_str()),
            ("status", q.status.as_str()),
            ("provider", q.provider.as_str()),
            ("offset", &(q.offset + PAGE).to_string()),
        ])
        .expect("string pairs encode")
    });
    let at_least = if listed_capped { "at least " } else { "" };
    let body = html! {
        (counts_markup(&counts, false))
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
            button type="submit" { "Filter" }
        }
        p.muted { "Showing " (shown.len()) " of " (at_least) (listed.len()) " matching items, oldest first." }
        div #queue {
            @if shown.is_empty() { p.muted #queue-empty { "Nothing in the queue matches." } }
            @for item in &shown { (item_card(item, &s, None)) }
        }
        @if let Some(next) = next {
            p.pager { a href={ "/console/queue?" (next) } { "Next items →" } }
        }
    };
    Ok(html(layout::page("Queue", &s, Nav::Queue, body)))
}

/// One queue item as a card (its id in the page is `item-{queue item id}`), with the resolve
/// form when it is open and `error` when the last attempt to resolve it was refused.
fn item_card(i: &QueueItemBody, s: &Session, error: Option<&str>) -> Markup {
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
            let counts = count_open(&state, &s).await?;
            Ok(html(html! {
                (item_card(&item_body(&item, state.now()), &s, None))
                (counts_markup(&counts, true))
            }))
        }
        (Ok(_), false) => Ok(see_other("/console/queue")),
        // htmx swaps only successful answers: a refusal comes back as the item with the
        // reason, so the operator sees it where they typed.
        (Err(e), true) if e.status().is_client_error() && e.problem != Problem::NotFound => {
            let item = open_item(&state, &s, &raw_id).await?;
            Ok(html(item_card(&item, &s, Some(&e.message))))
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
