//! Gateway mode against a real local destination: an axum server on 127.0.0.1 plays the
//! consumer's existing webhook endpoint, scripted to be down, slow, failing or hanging, and
//! records every request it gets. The gate decides, its upkeep's forwarder delivers; a crash
//! is the upkeep (and gate) dropped mid-attempt and a new one opened on the same store.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use oncegate::store::{EffectState, ForwardState, QueueFilter, QueueStatus};
use oncegate::{Gate, GateConfig, Outcome, Reception, Upkeep, UpkeepSettings};
use oncegate_core::ids::EffectId;
use sha2::Sha256;

const SECRET_ENV: &str = "ONCEGATE_TEST_FORWARD_SECRET";
/// `whsec_` + base64 of the key below.
const SECRET: &str = "whsec_Z2F0ZXdheS10ZXN0LWtleQ==";
const KEY: &[u8] = b"gateway-test-key";

/// One scripted answer of the destination.
#[derive(Clone)]
struct Reply {
    status: u16,
    delay: Duration,
    body: &'static str,
}

fn reply(status: u16, body: &'static str) -> Reply {
    Reply {
        status,
        delay: Duration::ZERO,
        body,
    }
}

/// One request the destination got.
#[derive(Clone, Debug)]
struct Hit {
    body: String,
    webhook_id: String,
    effect_id: String,
    delivery_id: String,
    fencing: String,
    signed: bool,
}

#[derive(Default)]
struct Script {
    hits: Vec<Hit>,
    next: VecDeque<Reply>,
    otherwise: Option<Reply>,
}

#[derive(Clone)]
struct Destination {
    script: Arc<Mutex<Script>>,
    url: String,
}

impl Destination {
    fn hits(&self) -> Vec<Hit> {
        self.script.lock().unwrap().hits.clone()
    }
    fn then(&self, r: Reply) {
        self.script.lock().unwrap().next.push_back(r);
    }
    fn otherwise(&self, r: Reply) {
        self.script.lock().unwrap().otherwise = Some(r);
    }
}

fn header(h: &HeaderMap, name: &str) -> String {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn hook(
    State(script): State<Arc<Mutex<Script>>>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let id = header(&headers, "webhook-id");
    let ts = header(&headers, "webhook-timestamp");
    let mut mac = Hmac::<Sha256>::new_from_slice(KEY).unwrap();
    mac.update(format!("{id}.{ts}.{body}").as_bytes());
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    let r = {
        let mut s = script.lock().unwrap();
        s.hits.push(Hit {
            body: body.clone(),
            webhook_id: id,
            effect_id: header(&headers, "oncegate-effect-id"),
            delivery_id: header(&headers, "oncegate-delivery-id"),
            fencing: header(&headers, "oncegate-fencing"),
            signed: header(&headers, "webhook-signature") == expected,
        });
        s.next
            .pop_front()
            .or_else(|| s.otherwise.clone())
            .unwrap_or(reply(200, r#"{"ok":true}"#))
    };
    tokio::time::sleep(r.delay).await;
    (StatusCode::from_u16(r.status).unwrap(), r.body.to_owned())
}

/// The consumer's verification API: the effect was applied when its forward arrived.
async fn verify(
    State(script): State<Arc<Mutex<Script>>>,
    Path(effect): Path<String>,
) -> (StatusCode, String) {
    let applied = script
        .lock()
        .unwrap()
        .hits
        .iter()
        .any(|h| h.effect_id == effect);
    let body = if applied {
        r#"{"applied":true,"result":{"payout":"po_verified"}}"#
    } else {
        r#"{"applied":false}"#
    };
    (StatusCode::OK, body.to_owned())
}

/// Serves the destination on `listener`.
fn serve(listener: tokio::net::TcpListener, script: Arc<Mutex<Script>>) {
    let app = Router::new()
        .route("/hooks", post(hook))
        .route("/effects/{effect_id}", get(verify))
        .with_state(script);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
}

async fn destination() -> Destination {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    let script = Arc::new(Mutex::new(Script::default()));
    serve(listener, script.clone());
    Destination { script, url }
}

/// A contract whose provider `hooks` forwards to `url`: a critical refund and a reversible
/// note, each keyed by its reference.
fn contract(url: &str, timeout: &str, max_attempts: u32) -> oncegate_core::contract::Contract {
    std::env::set_var(SECRET_ENV, SECRET);
    let verify_url = url.trim_end_matches("/hooks");
    let text = format!(
        r#"
[providers.hooks]
event_type = "/type"

[providers.hooks.forward]
url = "{url}"
timeout = "{timeout}"
max_attempts = {max_attempts}
backoff = "50ms..200ms"
signing_secret_env = "{SECRET_ENV}"

[providers.hooks.types."refund.created"]
criticality = "critical"
resource = "/data/payment_id"
discriminants = ["/data/amount"]
volatile = [{{ field = "/attempt", why = "the provider's retry counter" }}]

  [[providers.hooks.types."refund.created".strategies]]
  name = "refund-ref"
  version = 1
  level = "business_ref"
  fields = ["/data/payment_id", "/data/ref"]

[providers.hooks.types."payout.sent"]
criticality = "critical"
resource = "/data/payment_id"
volatile = [{{ field = "/attempt", why = "the provider's retry counter" }}]
verify = {{ url = "{verify_url}/effects/{{effect_id}}" }}

  [[providers.hooks.types."payout.sent".strategies]]
  name = "payout-ref"
  version = 1
  level = "business_ref"
  fields = ["/data/payment_id", "/data/ref"]

[providers.hooks.types."note.added"]
criticality = "reversible"
resource = "/data/payment_id"
volatile = [{{ field = "/attempt", why = "the provider's retry counter" }}]

  [[providers.hooks.types."note.added".strategies]]
  name = "note-ref"
  version = 1
  level = "business_ref"
  fields = ["/data/payment_id", "/data/ref"]
"#
    );
    oncegate_core::contract::parse("gateway.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

async fn gate(url: &str, contract: &oncegate_core::contract::Contract) -> Gate {
    let store = oncegate_store::open(url).await.expect("the store opens");
    let mut config = GateConfig::new(Arc::new(contract.clone()), store, b"salt".to_vec());
    config.lease = Some(Duration::from_secs(1));
    Gate::new(config)
}

fn upkeep(gate: &Gate) -> Upkeep {
    let mut settings = UpkeepSettings {
        purge_every: None,
        ..UpkeepSettings::default()
    };
    settings.reconciler.every = Some(Duration::from_millis(200));
    settings.forwarder.poll = Some(Duration::from_millis(100));
    gate.upkeep(settings).expect("the upkeep starts")
}

fn event(kind: &str, reference: &str, attempt: u32) -> Vec<u8> {
    format!(
        r#"{{"type":"{kind}","attempt":{attempt},"data":{{"payment_id":"pay_1","ref":"{reference}","amount":1500}}}}"#
    )
    .into_bytes()
}

/// Delivers one event: decided `process` and forwarded, its effect returned.
async fn forwarded(gate: &Gate, body: Vec<u8>) -> EffectId {
    let outcome = gate
        .deliver(Reception::new("acme", "hooks", "live", body))
        .await
        .expect("decided");
    match outcome {
        Outcome::Forwarded(proof) => {
            assert_eq!(proof.action().as_str(), "process");
            proof.effect.expect("an effect")
        }
        other => panic!("a forward type's process is forwarded: {other:?}"),
    }
}

/// Waits (up to 20 s) until `check` holds.
async fn until<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn state(gate: &Gate, effect: &EffectId) -> EffectState {
    gate.effect(effect).await.unwrap().unwrap().state
}

async fn completed(gate: &Gate, effect: &EffectId) {
    until("the effect completes", || async {
        state(gate, effect).await == EffectState::Completed
    })
    .await;
}

pub async fn a_destination_down_then_up_gets_it_once(url: &str) {
    // A port that was free a moment ago: nothing listens there yet.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let endpoint = format!("http://{addr}/hooks");
    let gate = gate(url, &contract(&endpoint, "300ms", 20)).await;
    let _upkeep = upkeep(&gate);
    let effect = forwarded(&gate, event("refund.created", "rr-1", 1)).await;
    until("two attempts failed", || async {
        gate.forward_attempts(&effect).await.unwrap().len() >= 2
    })
    .await;
    let log = gate.forward_attempts(&effect).await.unwrap();
    assert!(
        log[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("could not be reached"),
        "{log:?}"
    );
    assert_eq!(
        state(&gate, &effect).await,
        EffectState::Reserved,
        "held while retried"
    );

    let script = Arc::new(Mutex::new(Script::default()));
    serve(
        tokio::net::TcpListener::bind(addr).await.unwrap(),
        script.clone(),
    );
    completed(&gate, &effect).await;
    let d = Destination {
        script,
        url: endpoint,
    };
    let hits = d.hits();
    assert_eq!(hits.len(), 1, "delivered once: {hits:?}");
    assert_eq!(hits[0].effect_id, effect.to_string());
    assert!(hits[0].signed, "signed with Standard Webhooks");
    let f = gate.forward(&effect).await.unwrap().unwrap();
    assert_eq!(f.state, ForwardState::Delivered);
    // The provider retries after the 200: the effect ran, nothing is forwarded again.
    let again = gate
        .deliver(Reception::new(
            "acme",
            "hooks",
            "live",
            event("refund.created", "rr-1", 2),
        ))
        .await
        .unwrap();
    assert_eq!(again.action().as_str(), "ignore");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(d.hits().len(), 1);
}

pub async fn a_destination_slow_past_the_timeout_is_retried_and_completed_once(url: &str) {
    let d = destination().await;
    d.then(Reply {
        status: 200,
        delay: Duration::from_millis(900),
        body: r#"{"late":true}"#,
    });
    d.then(reply(200, r#"{"applied":"second"}"#));
    let gate = gate(url, &contract(&d.url, "300ms", 8)).await;
    let _upkeep = upkeep(&gate);
    let effect = forwarded(&gate, event("refund.created", "rr-2", 1)).await;
    completed(&gate, &effect).await;
    let e = gate.effect(&effect).await.unwrap().unwrap();
    assert_eq!(e.result.as_deref(), Some(r#"{"applied":"second"}"#));
    let log = gate.forward_attempts(&effect).await.unwrap();
    let outcomes: Vec<_> = log.iter().map(|a| a.outcome.as_deref()).collect();
    assert_eq!(outcomes, vec![Some("retry"), Some("delivered")], "{log:?}");
    assert!(log[0]
        .error
        .as_deref()
        .unwrap()
        .contains("no answer within"));
    // Both requests carry the same message id, so the consumer can tell the retry.
    let hits = d.hits();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].webhook_id, hits[1].webhook_id);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(d.hits().len(), 2, "nothing more after the completion");
    assert_eq!(state(&gate, &effect).await, EffectState::Completed);
}

pub async fn a_500_then_a_200_completes_with_the_200s_body(url: &str) {
    let d = destination().await;
    d.then(reply(500, "boom"));
    d.then(reply(200, r#"{"refund":"re_9"}"#));
    let gate = gate(url, &contract(&d.url, "2s", 8)).await;
    let _upkeep = upkeep(&gate);
    let body = event("refund.created", "rr-3", 1);
    let effect = forwarded(&gate, body.clone()).await;
    completed(&gate, &effect).await;
    let e = gate.effect(&effect).await.unwrap().unwrap();
    assert_eq!(e.result.as_deref(), Some(r#"{"refund":"re_9"}"#));
    let hits = d.hits();
    assert_eq!(hits.len(), 2);
    for h in &hits {
        assert_eq!(h.body.as_bytes(), body.as_slice(), "the body as received");
        assert_eq!(h.effect_id, effect.to_string());
        assert_eq!(h.webhook_id, effect.to_string());
        assert_eq!(h.fencing, e.fencing_token.to_string());
        assert_eq!(h.delivery_id, e.first_delivery.to_string());
        assert!(h.signed);
    }
    let log = gate.forward_attempts(&effect).await.unwrap();
    let statuses: Vec<_> = log
        .iter()
        .map(|a| (a.status, a.outcome.as_deref()))
        .collect();
    assert_eq!(
        statuses,
        vec![(Some(500), Some("retry")), (Some(200), Some("delivered"))]
    );
    let metrics = gate.metrics().encode();
    assert!(metrics.contains("oncegate_forward_attempts_total{provider=\"hooks\",event_type=\"refund.created\",outcome=\"retry\"} 1"), "{metrics}");
    assert!(
        metrics.contains("oncegate_forward_latency_seconds_count 2"),
        "{metrics}"
    );
}

pub async fn a_crash_mid_attempt_verifies_a_critical_effect_and_resends_a_reversible_one(
    url: &str,
) {
    let d = destination().await;
    let hang = Reply {
        status: 200,
        delay: Duration::from_secs(30),
        body: "{}",
    };
    d.then(hang.clone());
    d.then(hang.clone());
    d.then(hang);
    let contract = contract(&d.url, "2s", 8);
    let first = gate(url, &contract).await;
    let upkeep_a = upkeep(&first);
    let critical = forwarded(&first, event("refund.created", "rr-4", 1)).await;
    let reversible = forwarded(&first, event("note.added", "n-4", 1)).await;
    let verified = forwarded(&first, event("payout.sent", "po-4", 1)).await;
    until("the three attempts are in flight", || async {
        d.hits().len() == 3
    })
    .await;
    // The instance stops between the send and the answer.
    drop(upkeep_a);
    drop(first);

    let second = gate(url, &contract).await;
    let _upkeep_b = upkeep(&second);
    // The reversible effect is released and sent again under its next token.
    completed(&second, &reversible).await;
    let hits = d.hits();
    let resent: Vec<_> = hits
        .iter()
        .filter(|h| h.effect_id == reversible.to_string())
        .collect();
    assert_eq!(resent.len(), 2, "re-sent once: {hits:?}");
    assert!(resent[1].fencing.parse::<u64>().unwrap() > resent[0].fencing.parse::<u64>().unwrap());
    // The critical one is never re-sent blindly: it waits for verification.
    until("the critical effect's outcome is unknown", || async {
        state(&second, &critical).await == EffectState::Unknown
    })
    .await;
    let items = second
        .queue_list(&QueueFilter {
            status: Some(QueueStatus::Open),
            limit: 100,
            ..QueueFilter::default()
        })
        .await
        .unwrap();
    assert!(
        items
            .iter()
            .any(|i| i.existing_effect.as_ref() == Some(&critical)),
        "a verify-before-retry item: {items:?}"
    );
    let log = second.forward_attempts(&critical).await.unwrap();
    assert_eq!(log[0].outcome.as_deref(), Some("unknown"));
    assert_eq!(
        second.forward(&critical).await.unwrap().unwrap().state,
        ForwardState::Interrupted
    );
    // A critical type with the consumer's verification API: asked, it says the forward was
    // applied, and the effect completes with its result, never sent twice.
    completed(&second, &verified).await;
    let e = second.effect(&verified).await.unwrap().unwrap();
    assert_eq!(e.result.as_deref(), Some(r#"{"payout":"po_verified"}"#));
    tokio::time::sleep(Duration::from_millis(500)).await;
    for effect in [&critical, &verified] {
        let sent = d
            .hits()
            .iter()
            .filter(|h| h.effect_id == effect.to_string())
            .count();
        assert_eq!(sent, 1, "a critical effect is sent once");
    }
}

pub async fn fifty_concurrent_retries_are_forwarded_once(url: &str) {
    let d = destination().await;
    let gate = gate(url, &contract(&d.url, "2s", 8)).await;
    let _upkeep = upkeep(&gate);
    let mut tasks = Vec::new();
    for attempt in 0..50 {
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            gate.deliver(Reception::new(
                "acme",
                "hooks",
                "live",
                event("refund.created", "rr-5", attempt),
            ))
            .await
            .expect("decided")
        }));
    }
    let mut forwarded = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Outcome::Forwarded(p) => forwarded.push(p.effect.unwrap()),
            other => assert_eq!(other.action().as_str(), "ignore", "{other:?}"),
        }
    }
    assert_eq!(forwarded.len(), 1, "one process among 50 retries");
    completed(&gate, &forwarded[0]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(d.hits().len(), 1, "forwarded once");
}

pub async fn a_dead_letter_is_resent_and_delivered(url: &str) {
    let d = destination().await;
    d.otherwise(reply(503, "down for maintenance"));
    let gate = gate(url, &contract(&d.url, "2s", 2)).await;
    let _upkeep = upkeep(&gate);
    let effect = forwarded(&gate, event("refund.created", "rr-6", 1)).await;
    until("the forward is dead", || async {
        gate.forward(&effect).await.unwrap().unwrap().state == ForwardState::Dead
    })
    .await;
    assert_eq!(d.hits().len(), 2, "max_attempts = 2");
    let e = gate.effect(&effect).await.unwrap().unwrap();
    assert_eq!(e.state, EffectState::Failed { retryable: false });
    assert!(
        e.error
            .as_deref()
            .unwrap()
            .contains("forward dead after 2 attempts"),
        "{e:?}"
    );
    assert_eq!(
        gate.forward_counts(&oncegate::store::TenantFilter::All)
            .await
            .unwrap()
            .dead,
        1
    );

    d.otherwise(reply(200, r#"{"at_last":true}"#));
    let f = gate.resend_forward(&effect).await.unwrap();
    assert_eq!(f.series, 2);
    completed(&gate, &effect).await;
    assert_eq!(d.hits().len(), 3);
    let e = gate.effect(&effect).await.unwrap().unwrap();
    assert_eq!(e.result.as_deref(), Some(r#"{"at_last":true}"#));
}

pub async fn two_instances_on_one_store_forward_each_effect_once(url: &str) {
    let d = destination().await;
    d.then(reply(500, "cold start"));
    let contract = contract(&d.url, "2s", 8);
    let (a, b) = (gate(url, &contract).await, gate(url, &contract).await);
    let (_upkeep_a, _upkeep_b) = (upkeep(&a), upkeep(&b));
    let mut effects = Vec::new();
    for n in 0..20 {
        let via = if n % 2 == 0 { &a } else { &b };
        effects.push(forwarded(via, event("refund.created", &format!("rr-two-{n}"), 1)).await);
    }
    for effect in &effects {
        completed(&a, effect).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let hits = d.hits();
    for effect in &effects {
        let delivered = hits
            .iter()
            .filter(|h| h.effect_id == effect.to_string())
            .count();
        let log = a.forward_attempts(effect).await.unwrap();
        // One effect got the 500 first and one retry; every other was sent once.
        assert_eq!(delivered, log.len(), "{effect}: {log:?}");
        assert_eq!(
            log.iter()
                .filter(|l| l.outcome.as_deref() == Some("delivered"))
                .count(),
            1,
            "{effect}: {log:?}"
        );
    }
    assert_eq!(hits.len(), 21, "20 effects and one retry");
}
