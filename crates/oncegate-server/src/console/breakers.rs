//! The breakers page: the open collision breakers, each with a close form (a note is required,
//! and only a session for every tenant may close one, as on the `/v1` route whose code it uses).

use axum::extract::State;
use axum::response::Response;
use maud::html;
use oncegate::store::{BreakerState, TenantFilter};
use serde::Deserialize;

use super::layout::{self, Nav};
use super::{check_csrf, html, see_other, ConsoleForm, PageError, Signed};
use crate::routes::breakers::{close_breaker, CloseRequest};
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub(crate) struct CloseForm {
    csrf: String,
    provider: String,
    env: String,
    event_type: String,
    strategy: String,
    version: u32,
    #[serde(default)]
    note: String,
}

pub(crate) async fn page(
    State(state): State<AppState>,
    Signed(s): Signed,
) -> Result<Response, PageError> {
    let list = state.gate.breakers(&state.gate.breaker_rule()).await?;
    let open: Vec<_> = list
        .iter()
        .filter(|b| b.state == BreakerState::Open)
        .collect();
    let may_close = s.caller.tenants == TenantFilter::All;
    let body = html! {
        @if open.is_empty() {
            p.muted #no-breakers { "No collision breaker is open." }
        }
        @if !may_close && !open.is_empty() {
            p.muted { "A breaker applies to every tenant: only a session for all tenants may close it." }
        }
        @for b in &open {
            div.card.breaker {
                p { span.badge.quarantine { "open" } " " strong { (b.scope.to_string()) } }
                table.kv {
                    tr { th { "Opened" } td { (b.opened_at.map(layout::when).unwrap_or_default()) } }
                    tr { th { "Why" } td { (b.reason.as_deref().unwrap_or_default()) } }
                    tr { th { "In the window" } td { (b.matches) " matches, " (b.collisions) " collisions" } }
                }
                @if may_close {
                    form.resolve method="post" action="/console/breakers/close" {
                        input type="hidden" name="csrf" value=(s.csrf);
                        input type="hidden" name="provider" value=(b.scope.provider);
                        input type="hidden" name="env" value=(b.scope.env);
                        input type="hidden" name="event_type" value=(b.scope.event_type);
                        input type="hidden" name="strategy" value=(b.scope.strategy);
                        input type="hidden" name="version" value=(b.scope.version);
                        label { "Note (required)" }
                        textarea name="note" required placeholder="what was checked before closing" {}
                        span {}
                        span { button type="submit" { "Close the breaker" } }
                    }
                }
            }
        }
    };
    Ok(html(layout::page("Breakers", &s, Nav::Breakers, body)))
}

pub(crate) async fn close(
    State(state): State<AppState>,
    Signed(s): Signed,
    ConsoleForm(f): ConsoleForm<CloseForm>,
) -> Result<Response, PageError> {
    check_csrf(&s, &f.csrf)?;
    let req = CloseRequest {
        provider: f.provider,
        env: f.env,
        event_type: f.event_type,
        strategy: f.strategy,
        version: f.version,
        note: f.note,
        by: None,
    };
    close_breaker(&state, &s.caller, req).await?;
    Ok(see_other("/console/breakers"))
}
