//! `oncegate report`: received, applied, documented ignores and pending side by side per type,
//! and the unexplained gap, which must be zero. Every figure comes from the store's rows.

use anyhow::Result;
use comfy_table::{presets::UTF8_BORDERS_ONLY, CellAlignment, Table};
use oncegate::store::{ReportCounts, TenantFilter};
use oncegate::Gate;
use time::OffsetDateTime;

/// The report as `GET /v1/report` serves it.
pub async fn doc(gate: &Gate, since: OffsetDateTime) -> Result<impl serde::Serialize> {
    // The CLI reads every tenant, as an all-tenants token does, for which the API names the
    // total's tenant `*`.
    let report = gate.report(&TenantFilter::All, since).await?;
    Ok(oncegate_server::document::report(&report, since))
}

/// Renders the report of deliveries received since `since`.
pub async fn render(gate: &Gate, since: OffsetDateTime) -> Result<String> {
    let report = gate.report(&TenantFilter::All, since).await?;
    let mut table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY);
    table.set_header(vec![
        "provider/env/type",
        "received",
        "rejected",
        "processed",
        "ignored\ntransport",
        "ignored\neffect",
        "quaran-\ntined",
        "reconcile\npending",
        "reconcile\nresolved",
        "effects\ncompleted",
        "colli-\nsions",
        "unexplained\ngap",
    ]);
    let row = |name: String, c: &ReportCounts| {
        vec![
            name,
            c.received.to_string(),
            c.rejected.to_string(),
            c.processed.to_string(),
            c.ignored_transport.to_string(),
            c.ignored_effect.to_string(),
            c.quarantined.to_string(),
            c.reconcile_pending.to_string(),
            c.reconcile_resolved.to_string(),
            c.effects_completed.to_string(),
            c.collisions.to_string(),
            c.unexplained_gap.to_string(),
        ]
    };
    // Rows are per tenant; the tenant is named only when the store holds more than one, so
    // the usual single-tenant table keeps its short names.
    let many_tenants = report
        .rows
        .iter()
        .any(|r| r.tenant != report.rows[0].tenant);
    for r in &report.rows {
        let mut name = format!(
            "{}/{}/{}",
            r.provider,
            r.env,
            r.event_type.as_deref().unwrap_or("(unknown type)")
        );
        if many_tenants {
            name = format!("{}:{name}", r.tenant);
        }
        table.add_row(row(name, &r.counts));
    }
    table.add_row(row("total".to_owned(), &report.total));
    for i in 1..12 {
        if let Some(col) = table.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = table.to_string();
    out.push('\n');
    if report.total.unexplained_gap == 0 {
        out.push_str("unexplained gap: 0 — every delivery received has a documented decision\n");
    } else {
        out.push_str(&format!(
            "unexplained gap: {} — deliveries were received without a documented decision; run `oncegate explain` on them\n",
            report.total.unexplained_gap
        ));
    }
    // Only shown when the invisible-losses sweep found something, so the usual report stays
    // as it was.
    if report.total.missing_at_source_check > 0 {
        out.push_str(&format!(
            "missing at source: {} operation(s) the authority lists have no local effect (invisible losses)\n",
            report.total.missing_at_source_check
        ));
    }
    // Shadows never act, so their disagreements are a note for whoever plans a cut-over.
    for r in report
        .rows
        .iter()
        .filter(|r| r.counts.shadow_disagreements > 0)
    {
        out.push_str(&format!(
            "shadow_disagreements {}/{}/{}: {} delivery(ies) a shadow strategy would have decided otherwise\n",
            r.provider,
            r.env,
            r.event_type.as_deref().unwrap_or("-"),
            r.counts.shadow_disagreements
        ));
    }
    Ok(out)
}
