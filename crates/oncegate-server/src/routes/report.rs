//! `GET /v1/report?since=RFC3339`: received deliveries side by side with what became of them,
//! per tenant, provider, environment and type, with the unexplained gap (which must be zero)
//! taken from the store's data, never computed here.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use oncegate::store::{ReportCounts, TenantFilter};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::ApiQuery;
use crate::auth::Role;
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::{ErrorBody, ReportBody, ReportQuery, ReportRowBody};

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
        missing_at_source: c.missing_at_source_check,
        shadow_disagreements: c.shadow_disagreements,
    }
}

/// Receptions side by side with what became of them, per tenant, provider, environment and
/// type, with the unexplained gap.
#[utoipa::path(
    get,
    path = "/v1/report",
    operation_id = "get_report",
    tag = "report",
    params(ReportQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The rows and their total.", body = ReportBody),
        (status = 400, description = "`invalid_request`: `since` is not RFC 3339.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the token's role is not `operator` or `admin`.", body = ErrorBody),
        (status = 404, description = "`not_found`: the tenant is not visible to this token.", body = ErrorBody),
    )
)]
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
    // The store groups by tenant itself, so one report covers every tenant the token sees.
    let (filter, total_tenant) = match q.tenant.as_deref().filter(|t| !t.is_empty()) {
        Some(t) if !caller.sees(t) => {
            return Err(ApiError::not_found(format!(
                "No tenant {t} is visible to this token."
            )))
        }
        Some(t) => (TenantFilter::Only(vec![t.to_owned()]), t.to_owned()),
        None => {
            let only = match &caller.tenants {
                TenantFilter::Only(list) if list.len() == 1 => list[0].clone(),
                _ => "*".to_owned(),
            };
            (caller.tenants.clone(), only)
        }
    };
    let report = state.gate.report(&filter, since).await?;
    Ok(Json(body(&report, since, &total_tenant, &|t| {
        caller.sees(t)
    })))
}

/// The report as `GET /v1/report` serves it, to a reader who sees the tenants `sees` accepts;
/// the total's tenant is `total_tenant` (`*` for several), its provider and env `*`.
pub(crate) fn body(
    report: &oncegate::store::Report,
    since: OffsetDateTime,
    total_tenant: &str,
    sees: &dyn Fn(&str) -> bool,
) -> ReportBody {
    let rows = report
        .rows
        .iter()
        // The store filters by tenant in its query; checking again keeps a restricted token's
        // view closed even if a filter were ever dropped on the way.
        .filter(|r| sees(&r.tenant))
        .map(|r| {
            row(
                &r.tenant,
                &r.provider,
                &r.env,
                r.event_type.clone(),
                &r.counts,
            )
        })
        .collect();
    ReportBody {
        since,
        rows,
        total: row(total_tenant, "*", "*", None, &report.total),
    }
}
