//! `POST /v1/deliveries/{tenant}/{provider}/{env}` over the gate: read the raw body within the
//! limits, authenticate its sender (a bearer token, or the provider's own signature), hand the
//! reception to the gate, and answer its outcome.
//!
//! Everything after authentication — the journal, identification, the breaker, the shadows,
//! the store's decision, the metrics — is the gate's (`oncegate::Gate::deliver`); a sender
//! that cannot be authenticated is journaled and proved as refused through `Gate::refuse`, so
//! the report's unexplained gap stays zero.

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::BodyExt;
use oncegate::{Cut, Outcome, Proof, Reception, Refusal, RefusalKind};
use oncegate_core::contract::Provider;
use oncegate_core::matrix::{self, Confidence};
use sha2::{Digest, Sha256};

use crate::auth::{Caller, Role};
use crate::deadline;
use crate::error::ApiError;
use crate::secrets::ProviderSecrets;
use crate::signature::SignatureError;
use crate::state::AppState;
use crate::wire::{self, DecisionBody, EffectBody, ReservationBody, StrategyBody};

/// A body over the limit is still read (and hashed, not kept) up to this many times the limit,
/// so its journal entry has its real size and hash; past that the connection is cut short.
const OVERSIZE_FACTOR: usize = 16;

/// Reads a request body within `max` bytes: whole, or cut (over the limit, broken, late) with
/// the size and hash of what arrived.
///
/// A whole body is hashed once, by `oncegate::Body::whole`. Only a body cut short is hashed
/// here: from the moment it is cut (the bytes kept so far first), so its journal entry has the
/// hash of everything that arrived, though the bytes are not kept.
pub(crate) async fn read_body(body: Body, max: usize) -> oncegate::Body {
    let cap = max.saturating_mul(OVERSIZE_FACTOR).max(16 * 1024 * 1024) as u64;
    let mut body = body;
    // Started when the body goes over the limit: what arrives after is hashed, not kept.
    let mut hasher: Option<Sha256> = None;
    let mut bytes = Vec::new();
    let mut size = 0u64;
    let mut cut = None;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                cut = Some(match deadline::timed_out(&e) {
                    Some(late) => Cut::Late(late.to_string()),
                    None => Cut::Broken,
                });
                break;
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        size += data.len() as u64;
        match hasher.as_mut() {
            Some(hasher) => hasher.update(&data),
            None if bytes.len() + data.len() > max => {
                cut = Some(Cut::OverLimit);
                let mut started = Sha256::new();
                started.update(&bytes);
                started.update(&data);
                hasher = Some(started);
                bytes = Vec::new();
            }
            None => bytes.extend_from_slice(&data),
        }
        if size > cap {
            break;
        }
    }
    match cut {
        None => oncegate::Body::whole(bytes),
        Some(cut) => {
            // A body broken or late within the limit: everything that arrived is in `bytes`.
            let hash = match hasher {
                Some(hasher) => hasher.finalize(),
                None => Sha256::digest(&bytes),
            };
            oncegate::Body::cut(size, hex::encode(hash), cut)
        }
    }
}

/// The reception of a request: its path's origin, its headers and its body.
pub(crate) fn reception(
    (tenant, provider, env): (String, String, String),
    headers: &HeaderMap,
    body: oncegate::Body,
    received_at: time::OffsetDateTime,
) -> Reception {
    let mut r = Reception::with_body(tenant, provider, env, body).received_at(received_at);
    for (name, value) in headers {
        if let Ok(value) = value.to_str() {
            r = r.header(name.as_str(), value);
        }
    }
    if let Some(id) = ["x-correlation-id", "x-request-id"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
    {
        r = r.correlation_id(id);
    }
    r
}

#[utoipa::path(
    post,
    path = "/v1/deliveries/{tenant}/{provider}/{env}",
    operation_id = "post_delivery",
    tag = "deliveries",
    description = "Decides one delivery: the raw body exactly as the provider sent it, with its headers. Every reception is journaled first, refused ones too.",
    params(
        ("tenant" = String, Path, min_length = 1, description = "The tenant the delivery is for."),
        ("provider" = String, Path, min_length = 1, description = "The provider, as the contract names it."),
        ("env" = String, Path, min_length = 1, description = "The provider's environment (`live`, `test`…)."),
    ),
    request_body(content = serde_json::Value, content_type = "application/json", description = "The provider's body, byte for byte (the signature covers these bytes)."),
    security(("bearer" = []), ("provider_signature" = [])),
    responses(
        (status = 200, description = "The decision: `process` (with the reservation), `ignore`, `quarantine` or `reconcile`. For a provider whose contract declares a `batch`, the provider's expected reply (e.g. `[accepted]`, text/plain) once every item was decided.", body = DecisionBody),
        (status = 400, description = "`malformed_json`, `bad_path`, `unknown_environment`, `incomplete_body`.", body = crate::wire::ErrorBody),
        (status = 401, description = "`bad_signature`, `unauthorized`.", body = crate::wire::ErrorBody),
        (status = 403, description = "`forbidden`: the token's role cannot post deliveries.", body = crate::wire::ErrorBody),
    )
)]
pub(crate) async fn post_delivery(
    State(state): State<AppState>,
    path: Result<Path<(String, String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let origin = segments(path)?;
    let received_at = state.now();
    let body = read_body(body, state.gate.limits().max_bytes).await;
    let reception = reception(origin, &headers, body, received_at);
    // A body that could not be kept is refused before its sender is looked at (the gate says
    // why); anything else must come from an authenticated sender.
    let outcome = if reception.body().cut_by().is_some() {
        state.gate.deliver(reception).await?
    } else {
        let provider = state.contract.provider(reception.provider());
        match authenticate(&state, &headers, &reception, provider) {
            Ok(caller) => {
                tracing::debug!(caller = %caller.label, "delivery authenticated");
                let done = state.gate.deliver_batch(reception).await?;
                match done.reply {
                    // A batch: every item was journaled and decided on its own; the provider
                    // gets the reply it expects (each item's decision is in its proof).
                    Some(reply) => return batch_answer(&state, done.items, reply),
                    None => match done.items.into_iter().next() {
                        Some(outcome) => outcome,
                        None => unreachable!("a delivery that is not a batch has one outcome"),
                    },
                }
            }
            Err(refusal) => state.gate.refuse(reception, refusal).await?,
        }
    };
    answer(&state, outcome).map(|body| Json(body).into_response())
}

/// The answer to a batch: the provider's expected reply once every item was decided. An item
/// refused (it cannot be, once the body parsed: kept for completeness) answers its refusal.
fn batch_answer(
    state: &AppState,
    items: Vec<Outcome>,
    reply: String,
) -> Result<Response, ApiError> {
    for outcome in items {
        answer(state, outcome)?;
    }
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; charset=utf-8",
        )],
        reply,
    )
        .into_response())
}

/// The answer to an outcome: a decision body, or the refusal's error.
pub(crate) fn answer(state: &AppState, outcome: Outcome) -> Result<DecisionBody, ApiError> {
    let mut body = decision_body(outcome.proof());
    match outcome {
        Outcome::Rejected(r) => Err(ApiError::refused(&r.refusal, &r.proof.delivery)),
        Outcome::Process(held) => {
            let reservation = ReservationBody {
                token: state.token_key.mint(held.effect(), held.fencing()),
                fencing: held.fencing(),
                lease_expires_at: held.lease_until().unwrap_or_else(|| state.now()),
            };
            body.reservation = Some(reservation);
            Ok(body)
        }
        _ => Ok(body),
    }
}

/// The tenant, provider and environment of a delivery's path, refused with a 400 when one is
/// not clean text: such a request names no tenant a journal entry could be filed under (like a
/// path that matches no route), and control characters have no place in the names that scope
/// every key and every listing.
fn segments(
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<(String, String, String), ApiError> {
    let Path((tenant, provider, env)) = path.map_err(|_| {
        ApiError::bad_request(
            "bad_path",
            "The delivery path is not /v1/deliveries/{tenant}/{provider}/{env} in UTF-8 text.",
        )
    })?;
    for (what, value) in [("tenant", &tenant), ("provider", &provider), ("env", &env)] {
        if value.is_empty() || value.chars().any(char::is_control) {
            tracing::info!(
                segment = what,
                "a delivery path segment holds control characters"
            );
            return Err(ApiError::bad_request(
                "bad_path",
                format!(
                    "The {what} segment of the delivery path is empty or holds control characters."
                ),
            ));
        }
    }
    Ok((tenant, provider, env))
}

/// Accepts a bearer token with role `ingest` or `admin`, or the provider's own signature.
pub(crate) fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    r: &Reception,
    provider: Option<&Provider>,
) -> Result<Caller, Refusal> {
    match state.tokens.bearer(headers) {
        Err(e) => {
            return Err(Refusal::new(
                RefusalKind::Unauthorized,
                lowercase_first(&e.message),
            ))
        }
        Ok(Some(caller)) => {
            if !matches!(caller.role, Role::Ingest | Role::Admin) {
                return Err(Refusal::new(
                    RefusalKind::Forbidden,
                    format!(
                        "a token with role {} cannot post deliveries",
                        caller.role.as_str()
                    ),
                ));
            }
            if !caller.sees(r.tenant()) {
                return Err(Refusal::new(
                    RefusalKind::Unauthorized,
                    format!(
                        "the bearer token is not allowed to post for tenant {:?}",
                        r.tenant()
                    ),
                ));
            }
            return Ok(caller);
        }
        Ok(None) => {}
    }
    if provider.and_then(|p| p.signature.as_ref()).is_none() {
        return Err(Refusal::new(
            RefusalKind::Unauthorized,
            "the delivery carries no bearer token and the provider has no signature scheme in the contract".to_owned(),
        ));
    }
    verify_signature(&state.secrets, provider, headers, r, state.now())?;
    Ok(Caller::provider(r.tenant(), r.provider()))
}

/// Checks the provider's own signature over the body with its secrets (any one that
/// verifies), refusing with `bad_signature` and a reason that names headers, never a MAC or a
/// secret; a provider without a scheme in the contract is `unauthorized`.
pub(crate) fn verify_signature(
    secrets: &ProviderSecrets,
    provider: Option<&Provider>,
    headers: &HeaderMap,
    r: &Reception,
    now: time::OffsetDateTime,
) -> Result<(), Refusal> {
    let Some(signature) = provider.and_then(|p| p.signature.as_ref()) else {
        return Err(Refusal::new(
            RefusalKind::Unauthorized,
            "the provider has no signature scheme in the contract",
        ));
    };
    secrets
        .verify(
            r.provider(),
            &signature.scheme,
            headers,
            r.body().bytes(),
            r.received_at_or(now),
        )
        .map_err(|e| match e {
            SignatureError::NotConfigured => Refusal::new(RefusalKind::BadSignature, e.to_string()),
            e => Refusal::new(RefusalKind::BadSignature, format!("bad signature: {e}")),
        })
}

fn lowercase_first(sentence: &str) -> String {
    let s = sentence.trim_end_matches('.');
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The wire form of a decision's proof (without its reservation).
pub(crate) fn decision_body(p: &Proof) -> DecisionBody {
    let process = p.action() == matrix::Action::Process;
    let effect = p.effect.as_ref().map(|id| EffectBody {
        id: id.to_string(),
        state: if process {
            "in_progress"
        } else {
            wire::state_of_prior(p.prior)
        },
        result: p.existing_result.as_deref().map(wire::raw_json),
        stored_state: None,
    });
    DecisionBody {
        delivery_id: p.delivery.to_string(),
        action: p.decision.action.as_str(),
        reason: p.decision.reason.clone(),
        layer: wire::layer_name(p.decision.layer),
        strategy: p
            .strategy
            .as_ref()
            .map(|s| StrategyBody::new(s, p.confidence.map(Confidence::as_str))),
        effect_key: p.effect_key.clone(),
        reference_delivery_id: p.reference_delivery.as_ref().map(ToString::to_string),
        effect,
        reservation: None,
        differences: wire::differences(&p.differences),
        flags: p.decision.flags.iter().map(|f| f.as_str()).collect(),
        rule: p.decision.rule.to_owned(),
        event_type: p.event_type.clone(),
        queue_item_id: p.queue_item.as_ref().map(ToString::to_string),
        shadow: p.details.shadow.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;

    fn sha256(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    /// A body of these frames, followed by a broken connection when `broken`.
    fn body(frames: &[&str], broken: bool) -> Body {
        let mut parts: Vec<Result<Bytes, std::io::Error>> = frames
            .iter()
            .map(|f| Ok(Bytes::copy_from_slice(f.as_bytes())))
            .collect();
        if broken {
            parts.push(Err(std::io::Error::other("connection reset")));
        }
        Body::from_stream(futures_util::stream::iter(parts))
    }

    #[tokio::test]
    async fn a_whole_body_is_kept_with_its_hash() {
        let read = read_body(body(&["{\"a\":", "1}"], false), 16).await;
        assert_eq!(read.cut_by(), None);
        assert_eq!(read.bytes(), b"{\"a\":1}");
        assert_eq!(read.sha256(), sha256(b"{\"a\":1}"));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_keeps_the_hash_of_every_byte_that_arrived() {
        let frames = ["0123456789", "abcdefghij", "KLMNOPQRST"];
        let read = read_body(body(&frames, false), 15).await;
        assert_eq!(read.cut_by(), Some(&Cut::OverLimit));
        assert!(read.bytes().is_empty(), "a body over the limit is not kept");
        assert_eq!(read.size(), 30);
        assert_eq!(read.sha256(), sha256(frames.concat().as_bytes()));
    }

    #[tokio::test]
    async fn a_broken_body_keeps_the_hash_of_what_arrived() {
        let read = read_body(body(&["0123", "4567"], true), 64).await;
        assert_eq!(read.cut_by(), Some(&Cut::Broken));
        assert_eq!(read.size(), 8);
        assert_eq!(read.sha256(), sha256(b"01234567"));

        let over = read_body(body(&["0123", "4567", "89"], true), 6).await;
        assert_eq!(over.cut_by(), Some(&Cut::Broken));
        assert_eq!(over.size(), 10);
        assert_eq!(over.sha256(), sha256(b"0123456789"));
    }
}
