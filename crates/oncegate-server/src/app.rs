//! The service's application: the route table of the HTTP contract (v1) — one list that builds
//! the router and that the OpenAPI document is checked against — with the operations
//! endpoints and the console mounted beside it, and the request timeout and body deadline
//! every request runs under.

use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, on, MethodFilter, MethodRouter};
use axum::Router;

use crate::deadline::DeadlineBody;
use crate::error::{ApiError, Problem};
use crate::ingest;
use crate::openapi;
use crate::routes::{breakers, effects, forwards, health, proof, queue, replay, report, work};
use crate::state::AppState;

/// One `/v1` route: its method, its path and its handler.
pub(crate) struct Route {
    /// Read by the OpenAPI document's coverage test; the handler already carries it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub method: Method,
    pub path: &'static str,
    handler: MethodRouter<AppState>,
}

fn route<H, T>(method: Method, path: &'static str, handler: H) -> Route
where
    H: Handler<T, AppState>,
    T: 'static,
{
    let filter = MethodFilter::try_from(method.clone()).expect("a method axum can route");
    Route {
        method,
        path,
        handler: on(filter, handler),
    }
}

/// Every `/v1` route the service serves. [`router`] is built from this list and the OpenAPI
/// document's coverage test compares the document with it, so a route cannot be served without
/// being described, nor described without being served.
pub(crate) fn v1() -> Vec<Route> {
    use Method as M;
    vec![
        route(
            M::POST,
            "/v1/deliveries/{tenant}/{provider}/{env}",
            ingest::post_delivery,
        ),
        route(M::GET, "/v1/deliveries/{delivery_id}", proof::get_proof),
        route(
            M::POST,
            "/v1/deliveries/{delivery_id}/replay",
            replay::replay,
        ),
        route(
            M::POST,
            "/v1/effects/{effect_id}/complete",
            effects::complete,
        ),
        route(M::POST, "/v1/effects/{effect_id}/fail", effects::fail),
        route(
            M::POST,
            "/v1/effects/{effect_id}/heartbeat",
            effects::heartbeat,
        ),
        route(M::GET, "/v1/queue", queue::list),
        route(M::POST, "/v1/queue/{delivery_id}/resolve", queue::resolve),
        route(M::POST, "/v1/work/claim", work::claim),
        route(M::GET, "/v1/forwards", forwards::list),
        route(M::POST, "/v1/forwards/{effect_id}/resend", forwards::resend),
        route(M::GET, "/v1/report", report::report),
        route(M::GET, "/v1/breakers", breakers::list),
        route(M::POST, "/v1/breakers/close", breakers::close),
        route(M::GET, "/v1/openapi.json", openapi::openapi_json),
    ]
}

/// The route table, with the request timeout, the read lag and the trace around it.
///
/// The layers wrap the whole table once, as the fallback of an otherwise empty router, rather
/// than each route (`Router::layer` wraps every route's service in each layer, and each wrapped
/// service is boxed and cloned for every request). Every request still passes through them,
/// the fallback's included, in the same order.
pub(crate) fn router(state: AppState) -> Router {
    let mut routes = Router::new();
    for r in v1() {
        routes = routes.route(r.path, r.handler);
    }
    let routes = routes
        .route("/metrics", get(health::metrics))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .merge(crate::console::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state.clone());
    // Without a read store no answer carries a read lag: the layer is left out rather than
    // run for nothing on every request.
    let lag = state
        .gate
        .reads_a_replica()
        .then(|| middleware::from_fn_with_state(state.clone(), read_lag));
    let layered = tower::ServiceBuilder::new()
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(middleware::from_fn_with_state(state, timeout))
        .option_layer(lag)
        .service(routes);
    Router::new().fallback_service(layered)
}

async fn not_found() -> ApiError {
    ApiError::not_found("No route matches this path; see the HTTP contract (v1).")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        Problem::MethodNotAllowed,
        "method_not_allowed",
        "This route does not accept this method.",
    )
}

/// Bounds every request by the configured timeout and answers in the error shape (tower-http's
/// `TimeoutLayer` would answer an empty 408, outside the contract). A delivery's decision runs
/// to its end even when its answer is no longer awaited (`oncegate::Gate::deliver`), so timing
/// out the answer never cuts a decision in half. The body gets its
/// own, shorter deadline here too: a body still arriving past it fails its reader, which
/// answers `408 body_timeout` (a slow sender is not a reason to retry, so never a 503).
async fn timeout(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let request =
        request.map(|body| axum::body::Body::new(DeadlineBody::new(body, state.body_timeout)));
    match tokio::time::timeout(state.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::timeout().into_response(),
    }
}

/// The answers read from the gate's read store (a streaming standby) say how stale they may
/// be: `oncegate-read-lag-ms`, the standby's replay lag when the answer left (0 when it had
/// replayed everything it received). Those are the console's pages, the report, the queue
/// listing and a delivery's proof; without a read store no answer carries it.
async fn read_lag(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let replica_read = request.method() == Method::GET
        && (path.starts_with("/console")
            || path == "/v1/report"
            || path == "/v1/queue"
            || path.starts_with("/v1/deliveries/"));
    let mut response = next.run(request).await;
    if replica_read {
        if let Ok(Some(lag)) = state.gate.read_lag().await {
            response.headers_mut().insert(
                READ_LAG_HEADER,
                axum::http::HeaderValue::from(lag.as_millis() as u64),
            );
        }
    }
    response
}

/// The header of an answer read from a replica: its replay lag in milliseconds.
pub(crate) const READ_LAG_HEADER: &str = "oncegate-read-lag-ms";
