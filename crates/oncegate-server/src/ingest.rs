//! The delivery pipeline behind `POST /v1/deliveries/{tenant}/{provider}/{env}`: read the raw
//! body within the limits, authenticate it, journal it, identify it with the contract and
//! decide it in one store transaction.
//!
//! Every reception is journaled, refused ones too (with their reason, size and hash), and
//! every journaled reception gets a proof — a refusal is recorded as a `reject` decision — so
//! the report's unexplained gap stays zero. Identification is pure (the core); the store's
//! decision transaction runs the matrix on what it finds under the key.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use http_body_util::BodyExt;
use oncegate_core::contract::{EventType, Provider, Scheme};
use oncegate_core::identity::{self, Identity, Origin};
use oncegate_core::json::{self, JsonErrorKind};
use oncegate_core::matrix::{
    self, Confidence, Criticality, Difference, Keyed, Rejection, Situation,
};
use oncegate_store::{
    DecideOutcome, DecideRequest, EffectKey, Horizon, KeyScope, NewReception, PriorView,
    StoreError, StrategyRef, TransportKey, TransportStrength,
};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::auth::{Caller, Role};
use crate::breaker;
use crate::deadline::{self, BodyTimedOut};
use crate::error::ApiError;
use crate::metrics::DeliveryLabels;
use crate::shadow;
use crate::signature::SignatureError;
use crate::state::{to_time, AppState, Undecided};
use crate::wire::{
    self, DecisionBody, EffectBody, ProofDetails, ReservationBody, SkippedBody, StrategyBody,
    UsedFieldBody,
};

/// A body over the limit is still read (and hashed, not kept) up to this many times the limit,
/// so its journal entry has its real size and hash; past that the connection is cut short.
const OVERSIZE_FACTOR: usize = 16;

/// Request headers worth keeping with a delivery: enough to investigate, never a signature or
/// a credential.
const KEPT_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "user-agent",
    "webhook-id",
    "webhook-timestamp",
    "x-request-id",
    "x-correlation-id",
];

/// The raw body as read.
struct RawBody {
    /// The bytes, when within the limit.
    bytes: Vec<u8>,
    /// Bytes seen (all of them, unless the hard cap cut the reading short).
    size: u64,
    sha256: String,
    over_limit: bool,
    /// The body could not be read to its end (the client hung up, a broken chunk).
    broken: bool,
    /// The body was still arriving at its deadline.
    late: Option<BodyTimedOut>,
}

async fn read_body(body: Body, max: usize) -> RawBody {
    let cap = max.saturating_mul(OVERSIZE_FACTOR).max(16 * 1024 * 1024) as u64;
    let mut body = body;
    let mut hasher = Sha256::new();
    let mut bytes = Vec::new();
    let mut size = 0u64;
    let mut over_limit = false;
    let mut broken = false;
    let mut late = None;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                late = deadline::timed_out(&e);
                broken = true;
                break;
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        size += data.len() as u64;
        hasher.update(&data);
        if !over_limit {
            if bytes.len() + data.len() > max {
                over_limit = true;
                bytes = Vec::new();
            } else {
                bytes.extend_from_slice(&data);
            }
        }
        if size > cap {
            break;
        }
    }
    RawBody {
        bytes,
        size,
        sha256: hex::encode(hasher.finalize()),
        over_limit,
        broken,
        late,
    }
}

/// One reception on its way through the pipeline.
struct Reception {
    tenant: String,
    provider: String,
    env: String,
    headers: HeaderMap,
    body: RawBody,
    received_at: OffsetDateTime,
    correlation_id: Option<String>,
    started: Instant,
}

impl Reception {
    fn origin(&self) -> Origin<'_> {
        Origin {
            tenant: &self.tenant,
            provider: &self.provider,
            env: &self.env,
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    }
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
        (status = 200, description = "The decision: `process` (with the reservation), `ignore`, `quarantine` or `reconcile`.", body = DecisionBody),
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
) -> Result<Json<DecisionBody>, ApiError> {
    let (tenant, provider, env) = segments(path)?;
    let started = Instant::now();
    let received_at = state.now();
    let body = read_body(body, state.limits.max_bytes).await;
    let correlation_id = ["x-correlation-id", "x-request-id"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .map(|v| v.chars().take(128).collect::<String>());
    let reception = Reception {
        tenant,
        provider,
        env,
        headers,
        body,
        received_at,
        correlation_id,
        started,
    };
    // The pipeline runs as its own task: a client that hangs up, or the request timeout,
    // drops this handler's future, and must never cut a decision between its journal entry and
    // its proof.
    let task = tokio::spawn(async move { ingest(&state, reception).await });
    match task.await {
        Ok(result) => result.map(Json),
        Err(e) => {
            tracing::error!(error = %e, "the delivery pipeline panicked");
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "The service failed to decide this delivery; the cause is in its log.",
            ))
        }
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

/// Why a reception is refused before identification.
struct Refusal {
    status: StatusCode,
    code: &'static str,
    /// A sentence fragment (the matrix writes "Rejected: {fragment}.").
    fragment: String,
}

impl Refusal {
    fn new(status: StatusCode, code: &'static str, fragment: impl Into<String>) -> Self {
        Refusal {
            status,
            code,
            fragment: fragment.into(),
        }
    }
}

fn capitalized(fragment: &str) -> String {
    let mut chars = fragment.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

async fn ingest(state: &AppState, r: Reception) -> Result<DecisionBody, ApiError> {
    let provider = state.contract.provider(&r.provider);
    // A body cut at its deadline is refused like one cut by its sender (journaled with the
    // size and hash of what arrived), under its own code and a 408.
    if let Some(late) = r.body.late {
        return refuse(
            state,
            &r,
            None,
            Refusal::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                late.to_string(),
            ),
        )
        .await;
    }
    if r.body.broken {
        return refuse(
            state,
            &r,
            None,
            Refusal::new(
                StatusCode::BAD_REQUEST,
                "incomplete_body",
                "the body could not be read to its end",
            ),
        )
        .await;
    }
    if r.body.over_limit {
        let f = format!(
            "the body of {} bytes is over the limit of {} bytes",
            r.body.size, state.limits.max_bytes
        );
        return refuse(
            state,
            &r,
            None,
            Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", f),
        )
        .await;
    }
    let caller = match authenticate(state, &r, provider) {
        Ok(c) => c,
        Err(refusal) => return refuse(state, &r, None, refusal).await,
    };
    let environments = &state.contract.environments;
    if !environments.is_empty() && !environments.iter().any(|e| e == &r.env) {
        let f = format!(
            "environment {:?} is not one the contract declares ({})",
            r.env,
            environments.join(", ")
        );
        return refuse(
            state,
            &r,
            None,
            Refusal::new(StatusCode::BAD_REQUEST, "unknown_environment", f),
        )
        .await;
    }
    let doc = match json::parse(&r.body.bytes, &state.limits) {
        Ok(doc) => doc,
        Err(e) => {
            let refusal = match e.kind {
                JsonErrorKind::TooLarge { .. } => Refusal::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!("the {e}"),
                ),
                _ => Refusal::new(
                    StatusCode::BAD_REQUEST,
                    "malformed_json",
                    format!("the body is not acceptable JSON: {e}"),
                ),
            };
            return refuse(state, &r, None, refusal).await;
        }
    };

    // Identification: pure, from the contract.
    let header_pairs: Vec<(String, String)> = r
        .headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let (event_type, event_type_note) = match provider {
        None => (None, None),
        Some(p) => match identity::event_type_of(p, &header_pairs, &doc) {
            Ok(t) => (Some(t), None),
            Err(why) => (None, Some(why)),
        },
    };
    let type_def = match (provider, &event_type) {
        (Some(p), Some(t)) => p.types.get(t),
        _ => None,
    };
    let transport = transport_key(&r, provider);
    let plan = match type_def {
        Some(t) => Plan::identified(provider, t, &r, &doc, &state.salt),
        None => Plan::no_contract(
            &r.provider,
            provider.is_some(),
            event_type.as_deref(),
            event_type_note,
        ),
    };

    let delivery = state
        .store
        .journal(reception(&r, event_type.clone(), Some(transport), provider))
        .await?;
    // Shadow strategies see the delivery before the decision so their verdicts are part of
    // the proof; they never change it.
    let shadows = match (type_def, &event_type) {
        (Some(t), Some(et)) if !t.shadow.is_empty() => {
            shadow::verdicts(state, t, r.origin(), &doc, et, &delivery, r.received_at).await
        }
        _ => Vec::new(),
    };
    let mut details = plan.details.clone();
    details.shadow = shadows.clone();
    let request = DecideRequest {
        delivery: delivery.clone(),
        event_type: event_type.clone(),
        key: plan.key.clone(),
        lease: state.lease_time(),
        details_json: serde_json::to_string(&details).expect("details serialize"),
        now: r.received_at,
        resource: plan.resource.clone(),
        critical: plan.critical,
    };
    // The outcome does not repeat the differences the matrix saw, so the closure keeps the
    // last view's list (the store may run it more than once; the last run is the one applied).
    // The store may run the closure on another thread (SQLite's writer), so it owns its state.
    let seen: Arc<Mutex<Vec<Difference>>> = Arc::default();
    let shape = plan.shape.clone();
    // The strategy's collision breaker, read just before the decision (see `breaker`).
    let breaker_scope = match (&plan.strategy, &event_type) {
        (Some(s), Some(t)) => Some(breaker::scope(&r.provider, &r.env, t, s)),
        _ => None,
    };
    let breaker_open = match &breaker_scope {
        Some(scope) => breaker::is_open(state, scope).await,
        None => false,
    };
    let decide = {
        let seen = seen.clone();
        move |view: &PriorView| {
            *seen.lock().expect("differences lock") = view.differences.clone();
            shape.decide(view, breaker_open)
        }
    };
    let outcome = match state.store.decide(request, &decide).await {
        Ok(o) => o,
        Err(e) => return Err(undecided(state, delivery, event_type, e)),
    };
    if outcome.queue_item.is_some() {
        // Committed: the reconciler can attempt it now rather than at its next poll.
        state.reconcile_wake.notify_one();
    }
    if let Some(scope) = &breaker_scope {
        breaker::count(state, scope, &outcome).await;
    }
    let differences = std::mem::take(&mut *seen.lock().expect("differences lock"));
    let labels = DeliveryLabels {
        provider: label_or(provider.is_some(), &r.provider, "(unknown)"),
        env: r.env.clone(),
        event_type: match (type_def, &event_type) {
            (Some(_), Some(t)) => t.clone(),
            _ => "(no contract)".to_owned(),
        },
        strategy: plan
            .strategy
            .as_ref()
            .map(|s| format!("{}@{}", s.name, s.version))
            .unwrap_or_default(),
        level: plan
            .strategy
            .as_ref()
            .map(|s| s.level.clone())
            .unwrap_or_default(),
        action: outcome.decision.action.as_str().to_owned(),
    };
    state.metrics.decision(
        labels,
        plan.confidence.map(Confidence::as_str),
        &outcome.decision,
        r.started.elapsed(),
    );
    tracing::info!(
        delivery_id = %delivery,
        tenant = %r.tenant,
        provider = %r.provider,
        env = %r.env,
        event_type = event_type.as_deref().unwrap_or(""),
        strategy = plan.strategy.as_ref().map(|s| s.name.as_str()).unwrap_or(""),
        strategy_version = plan.strategy.as_ref().map(|s| s.version).unwrap_or(0),
        level = plan.strategy.as_ref().map(|s| s.level.as_str()).unwrap_or(""),
        action = outcome.decision.action.as_str(),
        rule = outcome.decision.rule,
        effect_id = outcome.effect.as_ref().map(|e| e.to_string()).unwrap_or_default(),
        reference_delivery_id = outcome.reference_delivery.as_ref().map(|d| d.to_string()).unwrap_or_default(),
        correlation_id = r.correlation_id.as_deref().unwrap_or(""),
        caller = %caller.label,
        "decision"
    );
    // A decision recorded means the store is back: settle what it missed meanwhile.
    let waiting = state.settle_undecided().await;
    if waiting > 0 {
        tracing::debug!(waiting, "missed decisions still wait for the store");
    }
    let disagreeing = match &event_type {
        Some(et) if !shadows.is_empty() => {
            shadow::settle(
                state,
                r.origin(),
                et,
                &delivery,
                outcome.decision.action,
                &shadows,
                r.received_at,
            )
            .await
        }
        _ => Vec::new(),
    };
    let mut body = decision_body(state, &delivery, event_type, &plan, &differences, outcome);
    body.shadow = disagreeing;
    Ok(body)
}

fn label_or(known: bool, value: &str, unknown: &str) -> String {
    if known {
        value.to_owned()
    } else {
        unknown.to_owned()
    }
}

/// A journaled reception whose decision could not be recorded: answered 503 (the provider
/// retries) and remembered, so its proof is written once the store is back.
fn undecided(
    state: &AppState,
    delivery: oncegate_core::ids::DeliveryId,
    event_type: Option<String>,
    e: StoreError,
) -> ApiError {
    if e.is_unavailable() {
        tracing::warn!(delivery_id = %delivery, "journaled but not decided: the store went away");
        state.remember_undecided(Undecided {
            delivery,
            event_type,
        });
    }
    ApiError::from(e)
}

/// Accepts a bearer token with role `ingest` or `admin`, or the provider's own signature.
fn authenticate(
    state: &AppState,
    r: &Reception,
    provider: Option<&Provider>,
) -> Result<Caller, Refusal> {
    let unauthorized =
        |code: &'static str, f: String| Refusal::new(StatusCode::UNAUTHORIZED, code, f);
    match state.tokens.bearer(&r.headers) {
        Err(e) => return Err(unauthorized("unauthorized", lowercase_first(&e.message))),
        Ok(Some(caller)) => {
            if !matches!(caller.role, Role::Ingest | Role::Admin) {
                return Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    format!(
                        "a token with role {} cannot post deliveries",
                        caller.role.as_str()
                    ),
                ));
            }
            if !caller.sees(&r.tenant) {
                return Err(unauthorized(
                    "unauthorized",
                    format!(
                        "the bearer token is not allowed to post for tenant {:?}",
                        r.tenant
                    ),
                ));
            }
            return Ok(caller);
        }
        Ok(None) => {}
    }
    let Some(signature) = provider.and_then(|p| p.signature.as_ref()) else {
        return Err(unauthorized(
            "unauthorized",
            "the delivery carries no bearer token and the provider has no signature scheme in the contract".to_owned(),
        ));
    };
    state
        .secrets
        .verify(
            &r.provider,
            &signature.scheme,
            &r.headers,
            &r.body.bytes,
            r.received_at,
        )
        .map_err(|e| match e {
            SignatureError::NotConfigured => unauthorized("bad_signature", e.to_string()),
            e => unauthorized("bad_signature", format!("bad signature: {e}")),
        })?;
    Ok(Caller::provider(&r.tenant, &r.provider))
}

fn lowercase_first(sentence: &str) -> String {
    let s = sentence.trim_end_matches('.');
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The transport key: the provider's delivery-id header (for Standard Webhooks providers,
/// `webhook-id` when the contract names no header), else the raw body hash.
fn transport_key(r: &Reception, provider: Option<&Provider>) -> TransportKey {
    let id_header = provider.and_then(|p| {
        p.delivery_id_header
            .clone()
            .or_else(|| match p.signature.as_ref().map(|s| &s.scheme) {
                Some(Scheme::StandardWebhooks { .. }) => Some("webhook-id".to_owned()),
                _ => None,
            })
    });
    let id = id_header.as_deref().and_then(|h| r.header(h));
    let key = identity::transport_key(r.origin(), id, &r.body.bytes);
    TransportKey {
        value: key.key,
        strength: if key.strong {
            TransportStrength::Strong
        } else {
            TransportStrength::Weak
        },
    }
}

fn reception(
    r: &Reception,
    event_type: Option<String>,
    transport_key: Option<TransportKey>,
    provider: Option<&Provider>,
) -> NewReception {
    let mut kept: BTreeMap<String, String> = BTreeMap::new();
    let mut names: Vec<String> = KEPT_HEADERS.iter().map(|h| (*h).to_owned()).collect();
    if let Some(p) = provider {
        names.extend(p.delivery_id_header.clone());
        if let oncegate_core::contract::EventTypeSource::Header(h) = &p.event_type {
            names.push(h.to_ascii_lowercase());
        }
        // A scheme's timestamp header carries no MAC, and it explains a stale refusal.
        if let Some(h) = p
            .signature
            .as_ref()
            .and_then(|s| s.scheme.timestamp_header())
        {
            names.push(h.to_owned());
        }
    }
    for name in names {
        if let Some(v) = r.header(&name) {
            kept.insert(name, v.chars().take(256).collect());
        }
    }
    NewReception {
        tenant: r.tenant.clone(),
        provider: r.provider.clone(),
        env: r.env.clone(),
        event_type,
        received_at: r.received_at,
        size: r.body.size,
        body_sha256: r.body.sha256.clone(),
        headers_json: serde_json::to_string(&kept).expect("headers serialize"),
        payload: (!r.body.over_limit && !r.body.broken).then(|| r.body.bytes.clone()),
        transport_key,
        correlation_id: r.correlation_id.clone(),
    }
}

/// Journals a refused reception, records its `reject` decision and answers the refusal.
async fn refuse(
    state: &AppState,
    r: &Reception,
    event_type: Option<String>,
    refusal: Refusal,
) -> Result<DecisionBody, ApiError> {
    state.metrics.rejected(refusal.code);
    let delivery = state
        .store
        .journal(reception(
            r,
            event_type.clone(),
            None,
            state.contract.provider(&r.provider),
        ))
        .await?;
    let rejection = Rejection {
        code: refusal.code.to_owned(),
        message: refusal.fragment.clone(),
    };
    let decision = matrix::decide(&Situation::Rejected(rejection));
    let details = ProofDetails {
        rejection: Some(refusal.code.to_owned()),
        ..ProofDetails::default()
    };
    let request = DecideRequest {
        delivery: delivery.clone(),
        event_type: event_type.clone(),
        key: None,
        lease: state.lease_time(),
        details_json: serde_json::to_string(&details).expect("details serialize"),
        now: r.received_at,
        resource: None,
        critical: true,
    };
    let recorded = decision.clone();
    let matrix = move |_: &PriorView| recorded.clone();
    if let Err(e) = state.store.decide(request, &matrix).await {
        return Err(undecided(state, delivery, event_type, e));
    }
    state.metrics.decision(
        DeliveryLabels {
            provider: label_or(
                state.contract.provider(&r.provider).is_some(),
                &r.provider,
                "(unknown)",
            ),
            env: r.env.clone(),
            event_type: "(rejected)".to_owned(),
            strategy: String::new(),
            level: String::new(),
            action: decision.action.as_str().to_owned(),
        },
        None,
        &decision,
        r.started.elapsed(),
    );
    tracing::info!(
        delivery_id = %delivery,
        tenant = %r.tenant,
        provider = %r.provider,
        env = %r.env,
        action = "reject",
        code = refusal.code,
        size = r.body.size,
        correlation_id = r.correlation_id.as_deref().unwrap_or(""),
        "reception refused"
    );
    Err(ApiError::new(
        refusal.status,
        refusal.code,
        format!(
            "{} (journaled as {delivery}).",
            capitalized(&refusal.fragment)
        ),
    ))
}

/// What the matrix will be asked, decided before the store transaction: either an identified
/// key whose prior the store supplies, or a situation that does not depend on the store.
#[derive(Clone)]
enum Shape {
    Keyed {
        criticality: Criticality,
        authority: bool,
        confidence: Confidence,
    },
    Fixed(Situation),
}

impl Shape {
    fn decide(&self, view: &PriorView, breaker_open: bool) -> matrix::Decision {
        match self {
            Shape::Keyed {
                criticality,
                authority,
                confidence,
            } => matrix::decide(&Situation::Identified {
                criticality: *criticality,
                authority: *authority,
                breaker_open,
                transport: view.transport,
                key: Keyed {
                    confidence: *confidence,
                    prior: view.prior,
                    // The store's list, so the proof and the queue item record exactly what
                    // the matrix saw.
                    differences: view.differences.clone(),
                },
            }),
            Shape::Fixed(s) => matrix::decide(s),
        }
    }
}

/// Everything identification produced for one delivery.
struct Plan {
    shape: Shape,
    key: Option<EffectKey>,
    strategy: Option<StrategyRef>,
    confidence: Option<Confidence>,
    details: ProofDetails,
    /// Kept on the effect for the reconciler (the resource the authority is asked about) and
    /// the lease sweeper (critical → verify before retry; reversible → takeover).
    resource: Option<String>,
    critical: bool,
}

impl Plan {
    fn identified(
        provider: Option<&Provider>,
        t: &EventType,
        r: &Reception,
        doc: &json::Value,
        salt: &[u8],
    ) -> Plan {
        let id: Identity = identity::identify(t, r.origin(), doc, salt);
        // `identify` walks the hierarchy in order and stops at the first key, so the skipped
        // strategies are the first ones of the type's list.
        let skipped: Vec<SkippedBody> = id
            .skipped
            .iter()
            .zip(&t.strategies)
            .map(|(s, def)| SkippedBody {
                name: def.name.clone(),
                version: def.version,
                why: s.why.clone(),
            })
            .collect();
        let mut details = ProofDetails {
            skipped,
            notes: id.notes.clone(),
            criticality: Some(t.criticality.as_str().to_owned()),
            ..ProofDetails::default()
        };
        let Some(k) = &id.effect else {
            let missing = id
                .skipped
                .iter()
                .map(|s| format!("{}: {}", s.strategy, s.why))
                .collect::<Vec<_>>()
                .join("; ");
            return Plan {
                shape: Shape::Fixed(Situation::NoKey {
                    criticality: t.criticality,
                    missing,
                }),
                key: None,
                strategy: None,
                confidence: None,
                details,
                resource: id.resource.clone(),
                critical: t.criticality == Criticality::Critical,
            };
        };
        details.scope = Some(k.scope.clone());
        // An operation-scoped key is one effect for every type declaring the operation: the
        // proof names them, so support can see why a `charge.captured` was ignored after a
        // `payment.succeeded`.
        if let (Some(op), Some(p)) = (&k.operation, provider) {
            details.shared_by = p
                .types
                .values()
                .filter(|o| &o.operation == op)
                .map(|o| o.name.clone())
                .collect();
        }
        details.confidence = Some(k.confidence.as_str().to_owned());
        details.fields = k
            .fields
            .iter()
            .map(|f| UsedFieldBody {
                pointer: f.pointer.clone(),
                shown: f.shown.clone(),
            })
            .collect();
        let strategy = StrategyRef {
            name: k.strategy.clone(),
            version: k.version,
            level: k.level.as_str().to_owned(),
        };
        let key = EffectKey {
            strategy: strategy.clone(),
            value: k.key.clone(),
            scope: KeyScope::of(k),
            confidence: k.confidence,
            horizon: if t.durable {
                Horizon::Durable
            } else {
                Horizon::For(to_time(k.horizon))
            },
            discriminants: id
                .discriminants
                .iter()
                .filter_map(|(f, v)| v.clone().map(|v| (f.clone(), v)))
                .collect(),
        };
        Plan {
            shape: Shape::Keyed {
                criticality: t.criticality,
                authority: t.authority.is_some(),
                confidence: k.confidence,
            },
            key: Some(key),
            strategy: Some(strategy),
            confidence: Some(k.confidence),
            details,
            resource: id.resource.clone(),
            critical: t.criticality == Criticality::Critical,
        }
    }

    fn no_contract(
        provider: &str,
        provider_known: bool,
        event_type: Option<&str>,
        note: Option<String>,
    ) -> Plan {
        Plan {
            shape: Shape::Fixed(Situation::NoContract {
                provider: provider.to_owned(),
                event_type: event_type.unwrap_or("(unnamed)").to_owned(),
                provider_known,
            }),
            key: None,
            strategy: None,
            confidence: None,
            details: ProofDetails {
                notes: note.into_iter().collect(),
                ..ProofDetails::default()
            },
            resource: None,
            // Without a contract nothing says the effect is harmless: verify, never re-run.
            critical: true,
        }
    }
}

fn decision_body(
    state: &AppState,
    delivery: &oncegate_core::ids::DeliveryId,
    event_type: Option<String>,
    plan: &Plan,
    differences: &[Difference],
    o: DecideOutcome,
) -> DecisionBody {
    let process = o.decision.action == matrix::Action::Process;
    let effect = o.effect.as_ref().map(|id| EffectBody {
        id: id.to_string(),
        state: if process {
            "in_progress"
        } else {
            wire::state_of_prior(o.prior)
        },
        result: o.existing_result.as_deref().map(wire::raw_json),
        stored_state: None,
    });
    let reservation = o.reservation.as_ref().map(|res| ReservationBody {
        token: state.token_key.mint(&res.effect, res.fencing_token),
        fencing: res.fencing_token,
        lease_expires_at: res.lease_until,
    });
    DecisionBody {
        delivery_id: delivery.to_string(),
        action: o.decision.action.as_str(),
        reason: o.decision.reason.clone(),
        layer: wire::layer_name(o.decision.layer),
        strategy: plan
            .strategy
            .as_ref()
            .map(|s| StrategyBody::new(s, plan.confidence.map(Confidence::as_str))),
        effect_key: plan.key.as_ref().map(|k| k.value.clone()),
        reference_delivery_id: o.reference_delivery.as_ref().map(ToString::to_string),
        effect,
        reservation,
        differences: wire::differences(differences),
        flags: o.decision.flags.iter().map(|f| f.as_str()).collect(),
        rule: o.decision.rule.to_owned(),
        event_type,
        queue_item_id: o.queue_item.as_ref().map(ToString::to_string),
        shadow: Vec::new(),
    }
}
