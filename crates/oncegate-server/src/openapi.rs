//! The OpenAPI 3.1 document of the `/v1` API, served at `GET /v1/openapi.json`: derived by
//! `utoipa` from the handlers' own request and response types and their `#[utoipa::path]`
//! attributes, so the document cannot describe a shape the handlers do not use.
//!
//! What every route shares is added here rather than repeated on each handler: `503`
//! (`store_unavailable`, `timeout`) on every operation, `500 internal` on every operation that
//! reads the store, `401 unauthorized` on every operation a bearer token opens, and
//! `408 body_timeout` / `413 too_large` on every operation with a body. A handler's own
//! description of one of these statuses is kept.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::wire::ErrorBody;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "oncegate",
        description = "Every business effect of incoming webhooks exactly once, with the proof of why each delivery was processed, ignored, quarantined or sent to reconciliation. Every error answers `{\"error\":{\"code\",\"message\"}}` with a stable snake_case code; a 503 always means a retry can succeed.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        crate::ingest::post_delivery,
        crate::routes::proof::get_proof,
        crate::routes::replay::replay,
        crate::routes::effects::complete,
        crate::routes::effects::fail,
        crate::routes::effects::heartbeat,
        crate::routes::queue::list,
        crate::routes::queue::resolve,
        crate::routes::work::claim,
        crate::routes::forwards::list,
        crate::routes::forwards::resend,
        crate::routes::report::report,
        crate::routes::breakers::list,
        crate::routes::breakers::close,
        openapi_json,
    ),
    components(schemas(ErrorBody)),
    modifiers(&Shared),
    tags(
        (name = "deliveries", description = "Deliveries in, their decisions and proofs."),
        (name = "effects", description = "Reserved and claimed effects: outcomes and leases."),
        (name = "queue", description = "The ambiguity queue: quarantine and reconcile items."),
        (name = "report", description = "Received versus what became of it."),
        (name = "breakers", description = "Collision breakers per strategy."),
        (name = "forwards", description = "Gateway mode: effects forwarded to the consumer's endpoint, their attempts, dead letters and re-sends."),
        (name = "meta", description = "This document."),
    )
)]
struct ApiDoc;

/// The operation id of the document's own route, which reads no store.
const DOCUMENT_OPERATION: &str = "openapi_json";

/// The security schemes and the answers every route shares (see the module's header).
struct Shared;

impl Modify for Shared {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token of `ONCEGATE_TOKENS` (`role:tenants:secret`): `ingest`, `operator` or `admin`, for every tenant or some.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "provider_signature",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "webhook-signature",
                "The provider's own signature over the raw body, in the headers its contract's `signature` scheme names (`stripe-signature`, `x-hub-signature-256`, `webhook-signature`…).",
            ))),
        );
        for item in doc.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                add_shared_answers(op);
            }
        }
    }
}

fn add_shared_answers(op: &mut Operation) {
    let reads_store = op.operation_id.as_deref() != Some(DOCUMENT_OPERATION);
    let has_body = op.request_body.is_some();
    let bearer = op
        .security
        .iter()
        .flatten()
        .any(|s| serde_json::to_value(s).is_ok_and(|v| v.get("bearer").is_some()));
    let mut shared = vec![(
        "503",
        "`store_unavailable` (the store does not answer) or `timeout` (the request took longer than the service allows): retry later.",
    )];
    if bearer {
        shared.push((
            "401",
            "`unauthorized`: no bearer token, or one that is not valid.",
        ));
    }
    if reads_store {
        shared.push((
            "500",
            "`internal`: the store refused a statement for good; the answer's `correlation_id` names the log line.",
        ));
    }
    if has_body {
        shared.push((
            "408",
            "`body_timeout`: the body did not arrive within the body deadline.",
        ));
        shared.push(("413", "`too_large`: the body is over the limit."));
    }
    for (status, description) in shared {
        op.responses
            .responses
            .entry(status.to_owned())
            .or_insert_with(|| RefOr::T(error_answer(description)));
    }
}

fn error_answer(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

/// The document as served, built and serialized once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    document()
        .to_json()
        .expect("the OpenAPI document serializes")
});

/// The OpenAPI document of the `/v1` routes.
pub(crate) fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// This document: every `/v1` route, its parameters, bodies, answers and security.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    operation_id = "openapi_json",
    tag = "meta",
    security(()),
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of `/v1`.", body = Object, content_type = "application/json"),
    )
)]
pub(crate) async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::document;
    use crate::app;

    /// (method, path) of every operation the document describes.
    fn documented() -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for (path, item) in &document().paths.paths {
            for (method, op) in [
                ("GET", &item.get),
                ("PUT", &item.put),
                ("POST", &item.post),
                ("DELETE", &item.delete),
                ("OPTIONS", &item.options),
                ("HEAD", &item.head),
                ("PATCH", &item.patch),
                ("TRACE", &item.trace),
            ] {
                if op.is_some() {
                    out.insert((method.to_owned(), path.clone()));
                }
            }
        }
        out
    }

    #[test]
    fn the_document_describes_exactly_the_routes_the_router_serves() {
        let served: BTreeSet<(String, String)> = app::v1()
            .iter()
            .map(|r| (r.method.to_string(), r.path.to_owned()))
            .collect();
        assert_eq!(served.len(), app::v1().len(), "a route is listed twice");
        let documented = documented();
        let undocumented: Vec<_> = served.difference(&documented).collect();
        let unserved: Vec<_> = documented.difference(&served).collect();
        assert!(
            undocumented.is_empty() && unserved.is_empty(),
            "served but not in the document: {undocumented:?}; in the document but not served: {unserved:?}"
        );
        assert!(served.iter().all(|(_, p)| p.starts_with("/v1/")));
    }

    #[test]
    fn every_operation_names_its_security_and_answers_errors_in_the_error_shape() {
        let doc = document();
        assert_eq!(
            serde_json::to_value(&doc).unwrap()["openapi"],
            "3.1.0",
            "the document is OpenAPI 3.1"
        );
        let mut ids = BTreeSet::new();
        for item in doc.paths.paths.values() {
            for op in [&item.get, &item.post].into_iter().flatten() {
                let id = op.operation_id.clone().expect("every operation has an id");
                assert!(ids.insert(id.clone()), "operation id {id} is used twice");
            }
        }
        let schemes = &doc.components.as_ref().unwrap().security_schemes;
        assert!(schemes.contains_key("bearer") && schemes.contains_key("provider_signature"));
        for (path, item) in &doc.paths.paths {
            for op in [&item.get, &item.post].into_iter().flatten() {
                let id = op.operation_id.clone().unwrap_or_default();
                assert!(op.security.is_some(), "{path} ({id}) names no security");
                let json = serde_json::to_value(&op.responses).unwrap();
                let answers = json.as_object().unwrap();
                assert!(answers.contains_key("200"), "{path} ({id})");
                assert!(answers.contains_key("503"), "{path} ({id})");
                if id != "openapi_json" {
                    assert!(answers.contains_key("401"), "{path} ({id}) answers no 401");
                }
                for (status, answer) in answers {
                    if status != "200" {
                        assert_eq!(
                            answer["content"]["application/json"]["schema"]["$ref"],
                            "#/components/schemas/ErrorBody",
                            "{path} ({id}) answers {status} outside the error shape"
                        );
                    }
                }
            }
        }
    }
}
