//! The console's static files, compiled into the binary: htmx (vendored, see
//! `assets/htmx-LICENSE`) and the style sheet. Their URLs carry a version, so they are cached
//! for a year and a new build is fetched anew.

use std::sync::LazyLock;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

const HTMX: &str = include_str!("assets/htmx.min.js");
const CSS: &str = include_str!("assets/console.css");

/// The vendored htmx release, part of its URL.
const HTMX_VERSION: &str = "2.0.11";

static CSS_VERSION: LazyLock<String> =
    LazyLock::new(|| hex::encode(&Sha256::digest(CSS.as_bytes())[..6]));

/// The URL of htmx, versioned.
pub(crate) fn htmx_url() -> String {
    format!("/console/assets/htmx.min.js?v={HTMX_VERSION}")
}

/// The URL of the style sheet, versioned by its content.
pub(crate) fn css_url() -> String {
    format!("/console/assets/console.css?v={}", *CSS_VERSION)
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=31536000, immutable"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response()
}

pub(crate) async fn htmx() -> Response {
    asset(HTMX, "text/javascript; charset=utf-8")
}

pub(crate) async fn css() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}
