//! Signing in to the console with an operator or admin token, and signing out.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use serde::Deserialize;

use super::session::{self, SessionKey, SignInError};
use super::{check_csrf, html, layout, see_other, ConsoleForm, PageError, Signed};
use crate::error::{ApiError, Problem};
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub(crate) struct SignInForm {
    token: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct SignOutForm {
    csrf: String,
}

fn form_markup(error: Option<&str>) -> Markup {
    layout::bare(
        "Sign in",
        html! {
            div.signin.card {
                h1 { "Sign in to the operator console" }
                @if let Some(e) = error { p.error { (e) } }
                form method="post" action="/console/signin" {
                    label for="token" { "Operator or admin token" }
                    input #token type="password" name="token" autocomplete="current-password" required autofocus;
                    button type="submit" id="signin" { "Sign in" }
                }
                p.muted { "The token is exchanged for a session cookie and is not kept in it." }
            }
        },
    )
}

pub(crate) async fn form() -> Response {
    html(form_markup(None))
}

/// Whether the post comes from a page of this very service. The cookie is `SameSite=Strict`
/// and later forms carry a CSRF token, but a sign-in has no session yet: this stops another
/// site from signing a browser in under the other site's own token (login CSRF).
fn same_origin(headers: &HeaderMap) -> bool {
    // Current browsers say where a request comes from in `Sec-Fetch-Site` (`none` when the
    // person typed the address); it is the most direct answer, so it decides when present.
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return matches!(site, "same-origin" | "none");
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        // Browsers send `Origin` on every cross-site form post; a client without it (a
        // script, curl) is not a browser being steered by another site.
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let origin_host = origin
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or(origin);
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}

pub(crate) async fn submit(
    State(state): State<AppState>,
    headers: HeaderMap,
    ConsoleForm(f): ConsoleForm<SignInForm>,
) -> Response {
    if !same_origin(&headers) {
        return PageError(ApiError::forbidden(
            "This sign-in did not come from a page of this service.",
        ))
        .into_response();
    }
    let key = SessionKey::derive(&state.salt);
    match session::sign_in(&key, &state.tokens, &f.token, state.now()) {
        Ok((cookie, s)) => {
            tracing::info!(token = %s.caller.label, role = s.caller.role.as_str(), "console sign-in");
            let mut r = see_other("/console/deliveries");
            let value = session::set_cookie(&cookie, session::over_https(&headers));
            r.headers_mut().insert(
                header::SET_COOKIE,
                HeaderValue::from_str(&value).expect("a cookie of base64, hex and ASCII"),
            );
            r
        }
        Err(e) => {
            let status = match e {
                SignInError::UnknownToken => Problem::Unauthorized,
                SignInError::IngestRole => Problem::Forbidden,
            }
            .status();
            let mut r = html(form_markup(Some(&e.to_string())));
            *r.status_mut() = status;
            r
        }
    }
}

pub(crate) async fn sign_out(
    Signed(s): Signed,
    headers: HeaderMap,
    ConsoleForm(f): ConsoleForm<SignOutForm>,
) -> Result<Response, PageError> {
    check_csrf(&s, &f.csrf)?;
    let mut r = see_other("/console/signin");
    let value = session::clear_cookie(session::over_https(&headers));
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&value).expect("an ASCII cookie"),
    );
    Ok(r)
}
