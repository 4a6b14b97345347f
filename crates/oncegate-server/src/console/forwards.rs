//! Gateway mode's dead letters on the queue page: each forward whose attempts ran out, with
//! its last error and attempts, and a form that re-sends it through the same code as
//! `POST /v1/forwards/{effect_id}/resend` (a fresh attempt series under the next token).

use axum::extract::{Path, State};
use axum::response::Response;
use maud::{html, Markup};
use oncegate::store::ForwardState;
use serde::Deserialize;

use super::layout;
use super::session::Session;
use super::{check_csrf, see_other, ConsoleForm, PageError, Signed};
use crate::routes::forwards::{list_body, resend_as};
use crate::state::AppState;

/// The dead letters listed at most on the page.
const SHOWN: u32 = 50;

#[derive(Debug, Deserialize)]
pub(crate) struct ResendForm {
    csrf: String,
}

/// The dead letters the session sees, each with its re-send form; nothing when there is none.
pub(crate) async fn dead_letters(state: &AppState, s: &Session) -> Result<Markup, PageError> {
    let dead = list_body(&state.gate, &s.caller, Some(ForwardState::Dead), SHOWN)
        .await
        .map_err(crate::error::ApiError::from)?;
    if dead.forwards.is_empty() {
        return Ok(html! {});
    }
    Ok(html! {
        section #dead-letters {
            h2 { "Dead letters (" (dead.forwards.len()) ")" }
            p.muted { "Forwards to the consumer's endpoint whose attempts ran out. A re-send starts a fresh attempt series under the effect's next fencing token." }
            @for f in &dead.forwards {
                article.card id={ "forward-" (f.effect_id) } {
                    p {
                        (layout::delivery_link(&f.delivery_id)) " · "
                        (f.tenant) " / " (f.provider) " / " (f.env) " · "
                        (f.event_type.as_deref().unwrap_or("(unknown)")) " · "
                        code { (f.effect_id) }
                    }
                    p { "Series " (f.series) ", " (f.attempts) " attempt(s); last: "
                        (f.last_error.as_deref().unwrap_or("-")) }
                    form.resend method="post" action={ "/console/forwards/" (f.effect_id) "/resend" } {
                        input type="hidden" name="csrf" value=(s.csrf);
                        button type="submit" { "Re-send" }
                    }
                }
            }
        }
    })
}

pub(crate) async fn resend(
    State(state): State<AppState>,
    Signed(s): Signed,
    Path(raw_id): Path<String>,
    ConsoleForm(f): ConsoleForm<ResendForm>,
) -> Result<Response, PageError> {
    check_csrf(&s, &f.csrf)?;
    resend_as(&state, &s.caller, &raw_id).await?;
    Ok(see_other("/console/queue"))
}
