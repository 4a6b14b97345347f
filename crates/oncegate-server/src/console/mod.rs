//! The operator console under `/console`: server-rendered pages (maud) over the same store
//! methods, tenant filter and shared route code as the `/v1` API, with htmx (served from the
//! binary) only to update the queue in place. Every page reads without JavaScript.
//!
//! A signed-in operator holds a stateless session cookie (see `session`); every form posts its
//! session's CSRF token, checked before anything is done.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;

mod assets;
mod breakers;
mod chart;
mod deliveries;
mod forwards;
mod layout;
mod proof;
mod queue;
mod report;
mod session;
mod signin;

use session::{Session, SessionKey};

/// The console's routes, merged into the service's router.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::to("/console/deliveries") }),
        )
        .route(
            "/console/",
            get(|| async { Redirect::to("/console/deliveries") }),
        )
        .route("/console/signin", get(signin::form).post(signin::submit))
        .route("/console/signout", post(signin::sign_out))
        .route("/console/deliveries", get(deliveries::search))
        .route("/console/deliveries/{delivery_id}", get(proof::page))
        .route("/console/queue", get(queue::page))
        .route("/console/queue/{delivery_id}/resolve", post(queue::resolve))
        .route(
            "/console/forwards/{effect_id}/resend",
            post(forwards::resend),
        )
        .route("/console/report", get(report::page))
        .route("/console/decisions", get(report::decisions))
        .route("/console/breakers", get(breakers::page))
        .route("/console/breakers/close", post(breakers::close))
        .route("/console/assets/htmx.min.js", get(assets::htmx))
        .route("/console/assets/console.css", get(assets::css))
}

/// The session of a signed-in operator. Without a valid one, a page asks to sign in (a
/// redirect for a read, a 401 page for a form post).
pub(crate) struct Signed(pub Session);

impl FromRequestParts<AppState> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let key = SessionKey::derive(&state.salt);
        let found = session::cookie_value(&parts.headers)
            .and_then(|v| session::verify(&key, &state.tokens, v, state.now()));
        match found {
            Some(mut s) => {
                // A page read from a replica says how stale it may be.
                s.read_lag = state.gate.read_lag().await.ok().flatten();
                Ok(Signed(s))
            }
            None if parts.method == Method::GET => {
                Err(Redirect::to("/console/signin").into_response())
            }
            None => Err(PageError(ApiError::unauthorized(
                "Your console session has expired or was revoked; sign in again.",
            ))
            .into_response()),
        }
    }
}

/// A form body whose rejection is an HTML error page.
pub(crate) struct ConsoleForm<T>(pub T);

impl<T, S> FromRequest<S> for ConsoleForm<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        axum::Form::<T>::from_request(req, state)
            .await
            .map(|f| ConsoleForm(f.0))
            .map_err(|e| {
                PageError(ApiError::bad_request(
                    "invalid_request",
                    format!("The form could not be read: {}.", e.body_text()),
                ))
                .into_response()
            })
    }
}

/// A query string whose rejection is an HTML error page.
pub(crate) struct ConsoleQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ConsoleQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ConsoleQuery(q.0))
            .map_err(|e| {
                PageError(ApiError::bad_request(
                    "invalid_request",
                    format!("The query string is not acceptable: {}.", e.body_text()),
                ))
                .into_response()
            })
    }
}

/// Refuses a form whose CSRF token is not the session's.
pub(crate) fn check_csrf(session: &Session, presented: &str) -> Result<(), PageError> {
    if session.csrf_ok(presented) {
        Ok(())
    } else {
        Err(PageError(ApiError::forbidden(
            "This form did not come from your console session (its CSRF token does not match); reload the page and submit it again.",
        )))
    }
}

/// An error shown as an HTML page with the API error's status and sentence.
#[derive(Debug)]
pub(crate) struct PageError(pub ApiError);

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        PageError(e)
    }
}

impl From<oncegate::store::StoreError> for PageError {
    fn from(e: oncegate::store::StoreError) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let e = self.0;
        let mut r = html(layout::error_page(e.status(), &e.message));
        *r.status_mut() = e.status();
        r
    }
}

/// The security headers of every console page: no caching of operator data, no framing, no
/// script or style from anywhere but the service itself.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A rendered page as a response with the console's headers.
pub(crate) fn html(markup: maud::Markup) -> Response {
    let mut r = (StatusCode::OK, markup.into_string()).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        // `same-origin`, not `no-referrer`: with the latter a browser sends `Origin: null`
        // on the console's own form posts, which the sign-in check needs to read.
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

/// Whether htmx sent the request (it then wants a fragment to swap, not a whole page).
pub(crate) fn from_htmx(headers: &HeaderMap) -> bool {
    headers
        .get("hx-request")
        .is_some_and(|v| v.as_bytes() == b"true")
}

/// A redirect after a successful form post (303: the browser follows with a GET).
pub(crate) fn see_other(to: &str) -> Response {
    Redirect::to(to).into_response()
}
