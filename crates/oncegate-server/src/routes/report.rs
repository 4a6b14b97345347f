//! `GET /v1/report?since=RFC3339`: received deliveries side by side with what became of them,
//! per tenant, provider, environment and type, with the unexplained gap (which must be zero)
//! taken from the store's data, never computed here.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use oncegate_store::{ReportCounts, TenantFilter};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::ApiQuery;
use crate::auth::Role;
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::{ReportBody, ReportQuery, ReportRowBody};

fn row(
    tenant: &str,
    provider: &str,
    env: &str,
    event_type: Option<String>,
    c: &ReportCounts,
) -> ReportRowBody {
    ReportRowBody {
        tenant: tenant.to_owned(),
        provider: provider.to_owned(),
        env: env.to_owned(),
        event_type,
        received: c.received,
        rejected: c.rejected,
        processed: c.processed,
        ignored_transport: c.ignored_transport,
        ignored_effect: c.ignored_effect,
        quarantined: c.quarantined,
        reconcile_pending: c.reconcile_pending,
        effects_completed: c.effects_completed,
        collisions: c.collisions,
        unexplained_gap: c.unexplained_gap,
        reconcile: c.reconcile,
        reconcile_resolved: c.reconcile_resolved,
        effects_failed: c.effects_failed,
        effects_unknown: c.effects_unknown,
    }
}

pub(crate) async fn report(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<ReportQuery>,
) -> Result<Json<ReportBody>, ApiError> {
    let caller = state
        .tokens
        .require(&headers, &[Role::Operator, Role::Admin])?;
    let since = match q.since.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => OffsetDateTime::UNIX_EPOCH,
        Some(s) => OffsetDateTime::parse(s, &Rfc3339).map_err(|_| {
            ApiError::bad_request(
                "invalid_request",
                format!("since {s:?} is not an RFC 3339 date-time such as 2024-05-01T00:00:00Z."),
            )
        })?,
    };
    // The store's report groups by provider, environment and type within a tenant filter, so
    // per-tenant rows come from one report per tenant. An unrestricted token without `tenant=`
    // gets one report over every tenant, its rows marked `*`.
    let scopes: Vec<(String, TenantFilter)> = match (
        q.tenant.as_deref().filter(|t| !t.is_empty()),
        &caller.tenants,
    ) {
        (Some(t), _) if !caller.sees(t) => {
            return Err(ApiError::not_found(format!(
                "No tenant {t} is visible to this token."
            )))
        }
        (Some(t), _) => vec![(t.to_owned(), TenantFilter::Only(vec![t.to_owned()]))],
        (None, TenantFilter::Only(list)) => list
            .iter()
            .map(|t| (t.clone(), TenantFilter::Only(vec![t.clone()])))
            .collect(),
        (None, TenantFilter::All) => vec![("*".to_owned(), TenantFilter::All)],
    };
    let mut rows = Vec::new();
    let mut total = ReportCounts::default();
    for (tenant, filter) in &scopes {
        let report = state.store.report(filter, since).await?;
        for r in &report.rows {
            rows.push(row(
                tenant,
                &r.provider,
                &r.env,
                r.event_type.clone(),
                &r.counts,
            ));
        }
        total = sum(total, &report.total);
    }
    let total_tenant = match scopes.as_slice() {
        [(only, _)] => only.clone(),
        _ => "*".to_owned(),
    };
    Ok(Json(ReportBody {
        since,
        rows,
        total: row(&total_tenant, "*", "*", None, &total),
    }))
}

fn sum(a: ReportCounts, b: &ReportCounts) -> ReportCounts {
    ReportCounts {
        received: a.received + b.received,
        rejected: a.rejected + b.rejected,
        processed: a.processed + b.processed,
        ignored_transport: a.ignored_transport + b.ignored_transport,
        ignored_effect: a.ignored_effect + b.ignored_effect,
        quarantined: a.quarantined + b.quarantined,
        reconcile: a.reconcile + b.reconcile,
        reconcile_pending: a.reconcile_pending + b.reconcile_pending,
        reconcile_resolved: a.reconcile_resolved + b.reconcile_resolved,
        effects_completed: a.effects_completed + b.effects_completed,
        effects_failed: a.effects_failed + b.effects_failed,
        effects_unknown: a.effects_unknown + b.effects_unknown,
        collisions: a.collisions + b.collisions,
        unexplained_gap: a.unexplained_gap + b.unexplained_gap,
    }
}
