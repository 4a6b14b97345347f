//! The API's documents built from store records, for readers outside the HTTP service: the
//! proof (`GET /v1/deliveries/{id}`), the report (`GET /v1/report`), a queue page and item
//! (`GET /v1/queue`) and the breakers (`GET /v1/breakers`). `oncegate … --json` prints these
//! very documents, so the CLI and the API cannot drift apart: both are built by the routes'
//! own functions from the same records.
//!
//! The shapes are described in the OpenAPI document (`GET /v1/openapi.json`); here they are
//! opaque values to serialize.

use oncegate::store::{Breaker, QueueItem, QueuePage, Report, TenantFilter};
use oncegate::Gate;
use serde::Serialize;
use time::OffsetDateTime;

use crate::error::ApiError;
use crate::routes;

/// The proof of `delivery_id` as an admin reads it through the API (with the payload when
/// `with_payload`); `not_found` or `not_decided` as the API answers them.
pub async fn proof(
    gate: &Gate,
    delivery_id: &str,
    with_payload: bool,
) -> Result<impl Serialize, ApiError> {
    let (body, _) =
        routes::proof::build_from(gate, &TenantFilter::All, true, delivery_id, with_payload)
            .await?;
    Ok(body)
}

/// The report of every tenant since `since`.
pub fn report(report: &Report, since: OffsetDateTime) -> impl Serialize {
    routes::report::body(report, since, "*", &|_| true)
}

/// A page of the queue (every tenant), its items' ages counted at `now`, beside the
/// `dead_letters` of every tenant.
pub fn queue_page(page: &QueuePage, now: OffsetDateTime, dead_letters: u64) -> impl Serialize {
    routes::queue::list_body(page, now, &|_| true, dead_letters)
}

/// One queue item as a listing shows it, its age counted at `now`.
pub fn queue_item(item: &QueueItem, now: OffsetDateTime) -> impl Serialize {
    routes::queue::item_body(item, now)
}

/// The breakers as `GET /v1/breakers` lists them.
pub fn breakers(list: &[Breaker]) -> impl Serialize {
    routes::breakers::list_body(list)
}
