//! `GET /v1/queue` and `POST /v1/queue/{delivery_id}/resolve`: the ambiguity queue, listed
//! oldest first and settled by a person (or the reconciler) as `distinct` or `duplicate`.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use oncegate_core::ids::DeliveryId;
use oncegate_store::{
    QueueFilter, QueueItem, QueueKind, QueueStatus, Resolution, ResolutionOutcome,
};
use time::OffsetDateTime;

use super::proof::resolution_body;
use super::{ApiJson, ApiQuery};
use crate::auth::{Caller, Role};
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::{self, QueueItemBody, QueueListBody, QueueQuery, ResolveRequest};

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

pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<QueueQuery>,
) -> Result<Json<QueueListBody>, ApiError> {
    let caller = state
        .tokens
        .require(&headers, &[Role::Operator, Role::Admin])?;
    let kind = match q.kind.as_deref() {
        None | Some("") | Some("all") => None,
        Some(k) => Some(QueueKind::parse(k).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                format!("kind {k:?} is not quarantine or reconcile."),
            )
        })?),
    };
    let status = match q.status.as_deref() {
        None | Some("") => Some(QueueStatus::Open),
        Some("all") => None,
        Some(s) => Some(QueueStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                format!("status {s:?} is not open, resolved or all."),
            )
        })?),
    };
    let filter = QueueFilter {
        tenants: caller.tenants.clone(),
        status,
        kind,
        provider: q.provider.clone(),
        limit: q.limit.unwrap_or(100).clamp(1, MAX_LIST),
    };
    let items = state.store.queue_list(&filter).await?;
    let now = state.now();
    Ok(Json(QueueListBody {
        // The store filters by tenant in its query; checking again costs nothing and keeps a
        // restricted token's view closed even if a filter were ever dropped on the way.
        items: items
            .iter()
            .filter(|i| caller.sees(&i.tenant))
            .map(|i| item_body(i, now))
            .collect(),
    }))
}

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

/// Resolves the open queue item of delivery `raw_id` as `caller` (another tenant's delivery is
/// `not_found`), shared by the `/v1` route and the console so both apply the same rules.
pub(crate) async fn resolve_item(
    state: &AppState,
    caller: &Caller,
    raw_id: &str,
    req: ResolveRequest,
) -> Result<QueueItem, ApiError> {
    let missing = || ApiError::not_found(format!("No delivery {raw_id} exists."));
    let id: DeliveryId = raw_id.parse().map_err(|_| missing())?;
    let outcome = ResolutionOutcome::parse(&req.outcome).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_request",
            format!("outcome {:?} is not distinct or duplicate.", req.outcome),
        )
    })?;
    let proof = match state.store.proof(&id).await? {
        Some(p) if caller.sees(&p.tenant) => p,
        Some(_) => return Err(missing()),
        None => match state.store.delivery(&id).await? {
            Some(d) if caller.sees(&d.tenant) => {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_queued",
                    format!("Delivery {id} has no recorded decision, so nothing to resolve."),
                ))
            }
            _ => return Err(missing()),
        },
    };
    let item_id = proof.queue_item.ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_queued",
            format!(
                "Delivery {id} was decided `{}`; it is not in the queue.",
                proof.action.as_str()
            ),
        )
    })?;
    let item = state
        .store
        .queue_item(&item_id)
        .await?
        .ok_or_else(missing)?;
    if item.resolution.is_some() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "already_resolved",
            format!("The queue item of delivery {id} is already resolved."),
        ));
    }
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
    let resolved = state.store.resolve(&item.id, resolution).await?;
    state.metrics.resolution(outcome.as_str());
    tracing::info!(
        delivery_id = %id,
        queue_item_id = %resolved.id,
        tenant = %resolved.tenant,
        outcome = outcome.as_str(),
        effect_id = resolved.resolution.as_ref().and_then(|r| r.effect.as_ref()).map(|e| e.to_string()).unwrap_or_default(),
        "queue item resolved"
    );
    Ok(resolved)
}
