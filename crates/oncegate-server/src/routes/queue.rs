//! `GET /v1/queue` and `POST /v1/queue/{id}/resolve`: the ambiguity queue, listed oldest
//! first a page at a time (with counts per kind and status), and settled by a person (or the
//! reconciler) as `distinct` or `duplicate`. An item is resolved by the id the listing shows:
//! its `queue_item_id` (`q_…`) or its `delivery_id` (`dlv_…`).

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use oncegate::store::{
    QueueCursor, QueueFilter, QueueItem, QueueKind, QueueRef, QueueStatus, Resolution,
    ResolutionOutcome, StatusCounts, TenantFilter,
};
use oncegate::{QueueLookupError, ResolveError};
use time::OffsetDateTime;

use super::proof::resolution_body;
use super::{ApiJson, ApiQuery};
use crate::auth::{Caller, Role};
use crate::error::{ApiError, Problem};
use crate::instant::parse_instant;
use crate::state::AppState;
use crate::wire::{
    self, ErrorBody, QueueCountsBody, QueueItemBody, QueueListBody, QueueQuery, ResolveRequest,
    StatusCountsBody,
};

/// A page holds `limit` items: 100 unless asked, never more than 1000.
const DEFAULT_LIST: u32 = 100;
const MAX_LIST: u32 = 1000;

pub(crate) fn item_body(item: &QueueItem, now: OffsetDateTime) -> QueueItemBody {
    QueueItemBody {
        delivery_id: item.delivery.to_string(),
        kind: item.kind.as_str(),
        effect_key: item.key.clone(),
        reference_delivery_id: item.first_delivery.as_ref().map(ToString::to_string),
        differences: wire::differences(&item.differences),
        existing_result: item.existing_result.as_deref().map(wire::raw_json),
        proposed_action: item.proposed.as_str(),
        age_seconds: (now - item.created_at).whole_seconds().max(0),
        queue_item_id: item.id.to_string(),
        status: item.status.as_str(),
        tenant: item.tenant.clone(),
        provider: item.provider.clone(),
        env: item.env.clone(),
        event_type: item.event_type.clone(),
        reason: item.reason.clone(),
        existing_effect_id: item.existing_effect.as_ref().map(ToString::to_string),
        resolution: item.resolution.as_ref().map(resolution_body),
        last_attempt_at: item.last_attempt_at,
        last_error: item.last_error.clone(),
        reconcile_attempts: item.reconcile_attempts,
        last_evidence: item.last_evidence.as_deref().map(wire::raw_json),
        resolution_evidence: item.resolution_evidence.as_deref().map(wire::raw_json),
    }
}

fn invalid(message: String) -> ApiError {
    ApiError::bad_request("invalid_request", message)
}

fn counts_body(c: StatusCounts) -> StatusCountsBody {
    StatusCountsBody {
        open: c.open,
        resolved: c.resolved,
    }
}

/// The listing's filter from its query string, for a caller restricted to `tenants`.
fn filter_of(
    q: &QueueQuery,
    tenants: TenantFilter,
    now: OffsetDateTime,
) -> Result<QueueFilter, ApiError> {
    let kind = match q.kind.as_deref() {
        None | Some("") | Some("all") => None,
        Some(k) => Some(
            QueueKind::parse(k)
                .ok_or_else(|| invalid(format!("kind {k:?} is not quarantine or reconcile.")))?,
        ),
    };
    let status = match q.status.as_deref() {
        None | Some("") => Some(QueueStatus::Open),
        Some("all") => None,
        Some(s) => Some(
            QueueStatus::parse(s)
                .ok_or_else(|| invalid(format!("status {s:?} is not open, resolved or all.")))?,
        ),
    };
    let instant = |name: &str, v: &Option<String>| {
        v.as_deref()
            .filter(|t| !t.trim().is_empty())
            .map(|t| parse_instant(t, now).map_err(|e| invalid(format!("{name}: {e}."))))
            .transpose()
    };
    let after = q
        .after
        .as_deref()
        .filter(|a| !a.is_empty())
        .map(|a| {
            a.parse::<QueueCursor>()
                .map_err(|e| invalid(format!("after: {e}.")))
        })
        .transpose()?;
    let text = |v: &Option<String>| v.clone().filter(|t| !t.is_empty());
    Ok(QueueFilter {
        tenants,
        status,
        kind,
        provider: text(&q.provider),
        limit: q.limit.unwrap_or(DEFAULT_LIST).clamp(1, MAX_LIST),
        event_type: text(&q.event_type),
        delivery: None,
        created_before: instant("older_than", &q.older_than)?,
        created_since: instant("newer_than", &q.newer_than)?,
        after,
        before: None,
    })
}

/// One page of the ambiguity queue, oldest first, with the counts per kind and status.
#[utoipa::path(
    get,
    path = "/v1/queue",
    operation_id = "list_queue",
    tag = "queue",
    params(QueueQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of items, the cursor of the next page and the counts.", body = QueueListBody),
        (status = 400, description = "`invalid_request`, naming the parameter.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the token's role is not `operator` or `admin`.", body = ErrorBody),
    )
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<QueueQuery>,
) -> Result<Json<QueueListBody>, ApiError> {
    let caller = state
        .tokens
        .require(&headers, &[Role::Operator, Role::Admin])?;
    let now = state.now();
    let filter = filter_of(&q, caller.tenants.clone(), now)?;
    let page = state.gate.queue_page(&filter).await?;
    let dead = state.gate.forward_counts(&caller.tenants).await?.dead;
    Ok(Json(list_body(&page, now, &|t| caller.sees(t), dead)))
}

/// A page of the queue as `GET /v1/queue` serves it, to a reader who sees the tenants `sees`
/// accepts, beside the `dead_letters` that reader's tenants hold.
pub(crate) fn list_body(
    page: &oncegate::store::QueuePage,
    now: OffsetDateTime,
    sees: &dyn Fn(&str) -> bool,
    dead_letters: u64,
) -> QueueListBody {
    QueueListBody {
        // The store filters by tenant in its query; checking again costs nothing and keeps a
        // restricted token's view closed even if a filter were ever dropped on the way.
        items: page
            .items
            .iter()
            .filter(|i| sees(&i.tenant))
            .map(|i| item_body(i, now))
            .collect(),
        next: page.next.as_ref().map(ToString::to_string),
        counts: QueueCountsBody {
            quarantine: counts_body(page.counts.quarantine),
            reconcile: counts_body(page.counts.reconcile),
            dead_letters,
        },
    }
}

fn already_resolved(item: &QueueItem) -> ApiError {
    ApiError::new(
        Problem::Conflict,
        "already_resolved",
        format!(
            "Queue item {} (delivery {}) is already resolved{}.",
            item.id,
            item.delivery,
            item.resolution
                .as_ref()
                .map(|r| format!(
                    " ({}: {})",
                    r.resolution.outcome.as_str(),
                    r.resolution.note
                ))
                .unwrap_or_default()
        ),
    )
}

/// Why no queue item answers to the id a resolution named, as the API says it.
fn not_found(e: QueueLookupError) -> ApiError {
    match e {
        QueueLookupError::NoItem(id) => ApiError::not_found(format!("No queue item {id} exists.")),
        QueueLookupError::Ambiguous { delivery, open } => {
            // Several open items: settling the wrong one would decide an effect's outcome,
            // which cannot be undone, so the caller names one.
            let ids: Vec<String> = open.iter().map(ToString::to_string).collect();
            ApiError::new(
                Problem::Conflict,
                "ambiguous",
                format!(
                    "Delivery {delivery} has {} open queue items ({}); resolve one by its queue_item_id.",
                    ids.len(),
                    ids.join(", ")
                ),
            )
        }
        QueueLookupError::Decided { delivery, action } => ApiError::new(
            Problem::NotFound,
            "not_queued",
            format!(
                "Delivery {delivery} was decided `{}`; it is not in the queue.",
                action.as_str()
            ),
        ),
        QueueLookupError::Undecided(delivery) => ApiError::new(
            Problem::NotFound,
            "not_queued",
            format!("Delivery {delivery} has no recorded decision, so nothing to resolve."),
        ),
        QueueLookupError::NoDelivery(delivery) => {
            ApiError::not_found(format!("No delivery {delivery} exists."))
        }
        QueueLookupError::Store(e) => e.into(),
    }
}

/// Settles an open item as `distinct` or `duplicate`, named by its queue item id or by a
/// delivery id with one open item.
#[utoipa::path(
    post,
    path = "/v1/queue/{delivery_id}/resolve",
    operation_id = "resolve_queue_item",
    tag = "queue",
    params(("delivery_id" = String, Path, min_length = 1, description = "A queue item id (`q_…`), or a delivery id (`dlv_…`) with one open item.")),
    request_body = ResolveRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The resolved item.", body = QueueItemBody),
        (status = 400, description = "`invalid_request`: the body or the outcome.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the token's role is not `operator` or `admin`.", body = ErrorBody),
        (status = 404, description = "`not_found` (no such item or delivery for this token's tenants), `not_queued`.", body = ErrorBody),
        (status = 409, description = "`already_resolved`, `ambiguous` (several open items: name one), `conflict`.", body = ErrorBody),
    )
)]
pub(crate) async fn resolve(
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ResolveRequest>,
) -> Result<Json<QueueItemBody>, ApiError> {
    let caller = state
        .tokens
        .require(&headers, &[Role::Operator, Role::Admin])?;
    let resolved = resolve_item(&state, &caller, &raw_id, req).await?;
    Ok(Json(item_body(&resolved, state.now())))
}

/// Resolves the open queue item `raw_id` names (a queue item id, or a delivery id with one open item) as `caller` (another tenant's delivery is
/// `not_found`), shared by the `/v1` route and the console so both apply the same rules.
pub(crate) async fn resolve_item(
    state: &AppState,
    caller: &Caller,
    raw_id: &str,
    req: ResolveRequest,
) -> Result<QueueItem, ApiError> {
    let target: QueueRef = raw_id.parse().map_err(|_| {
        ApiError::not_found(format!(
            "No queue item or delivery {raw_id} exists (a queue item id starts with q_, a delivery id with dlv_)."
        ))
    })?;
    let outcome = ResolutionOutcome::parse(&req.outcome).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_request",
            format!("outcome {:?} is not distinct or duplicate.", req.outcome),
        )
    })?;
    let item = match state.gate.queue_item_named(&target, &caller.tenants).await {
        Ok(item) => item,
        Err(e) => return Err(not_found(e)),
    };
    let authoritative_ref = req
        .authoritative_ref
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    let resolution = Resolution {
        outcome,
        authoritative_ref,
        note: req.note.unwrap_or_default(),
        by: req
            .by
            .map(|b| b.trim().to_owned())
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| caller.label.clone()),
        at: state.now(),
    };
    let resolved = match state.gate.resolve_queue_item(&item, resolution).await {
        Ok(resolved) => resolved,
        Err(ResolveError::AlreadyResolved(now)) => return Err(already_resolved(&now)),
        Err(ResolveError::Conflict { item, .. }) => {
            return Err(ApiError::new(
                Problem::Conflict,
                "conflict",
                format!(
                    "Queue item {item} could not be resolved as {}: its effect changed meanwhile, or the reconciler cannot release an effect whose outcome is unknown.",
                    outcome.as_str()
                ),
            ))
        }
        Err(ResolveError::Store(e)) => return Err(e.into()),
    };
    Ok(resolved)
}
