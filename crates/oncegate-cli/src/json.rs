//! The JSON documents `--json` prints: one compact line on standard output per command, so a
//! script can pipe it to `jq`.
//!
//! Where the HTTP API serves the same data (`GET /v1/deliveries/{id}`, `GET /v1/report`, `GET
//! /v1/queue`, `GET /v1/breakers`), the document is the API's own, built by the server's
//! functions from the same store records (`oncegate_server::document`); only what the API has
//! no answer for is shaped here: a delivery journaled without a decision (the API answers it
//! `not_decided`) and `queue show`'s payloads beside the item.

use anyhow::Result;
use oncegate::store::DeliveryRecord;
use serde::Serialize;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Prints `doc` as one compact JSON line through [`outln!`], so a closed stdout stays quiet.
pub fn print<T: Serialize>(doc: &T) -> Result<()> {
    outln!("{}", serde_json::to_string(doc)?)?;
    Ok(())
}

/// An instant as the API writes it (RFC 3339).
pub fn instant(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// `queue show`: the item as the listing has it, plus the payloads it shows side by side (the
/// delivery's and its reference's, as received; `null` once purged).
#[derive(Serialize)]
pub struct QueueShowDoc<T: Serialize> {
    #[serde(flatten)]
    pub item: T,
    pub payload: Option<Value>,
    pub reference_payload: Option<Value>,
}

/// A kept payload as JSON, or as a string when it is not JSON (rare: it was accepted).
pub fn payload(d: Option<&DeliveryRecord>) -> Option<Value> {
    let bytes = d?.payload.as_ref()?;
    Some(
        serde_json::from_slice(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned())),
    )
}

// ---- GET /v1/deliveries/{id} ----

/// The proof document of a delivery journaled without a recorded decision: the API's names,
/// the journal's values, every decision field `null` or empty (`tests/it/json.rs` checks the
/// names against the API's proof).
pub fn undecided(d: &DeliveryRecord) -> Value {
    json!({
        "delivery_id": d.id.to_string(),
        "action": null,
        "reason": null,
        "layer": null,
        "strategy": null,
        "effect_key": null,
        "reference_delivery_id": null,
        "effect": null,
        "differences": [],
        "flags": [],
        "rule": null,
        "event_type": d.event_type,
        "queue_item_id": null,
        "received_at": instant(d.received_at),
        "decided_at": null,
        "tenant": d.tenant,
        "provider": d.provider,
        "env": d.env,
        "transport_key": d.transport_key.as_ref().map(|t| t.value.clone()),
        "transport_strength": d.transport_key.as_ref().map(|t| t.strength.as_str()),
        "raw_sha256": d.body_sha256,
        "size": d.size,
        "skipped_strategies": [],
        "linked_deliveries": [],
        "resolution": null,
        "rule_version": null,
        "details": null,
    })
}
