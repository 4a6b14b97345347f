//! Signature presets over real HTTP: Stripe, Paddle, Slack, GitHub and Shopify deliveries
//! signed as each provider signs them (computed here with `hmac` directly, not with the
//! service's own signers), secrets rotated, and refusals journaled with their reason without
//! ever revealing the expected MAC or a secret — in the answer, the proof or the logs.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine;
use hmac::{Hmac, Mac};
use oncegate_core::contract;
use oncegate_server::ProviderSecrets;
use sha2::Sha256;

use crate::harness::*;

/// Every provider's two secrets: the old one and the new one of a rotation in progress.
const OLD: &str = "whsec_old-signing-secret-0001";
const NEW: &str = "whsec_new-signing-secret-0002";
const WRONG: &str = "whsec_forged-secret-9999";

/// (provider, signature table) of the test contract.
const PROVIDERS: &[(&str, &str)] = &[
    ("stripe", r#"scheme = "stripe""#),
    (
        "lookalike",
        r#"scheme = "stripe", header = "x-lookalike-signature""#,
    ),
    ("paddle", r#"scheme = "paddle""#),
    ("slack", r#"scheme = "slack""#),
    ("github", r#"scheme = "github""#),
    ("shopify", r#"scheme = "shopify""#),
];

fn test_contract() -> Arc<contract::Contract> {
    let mut text = String::from("environments = [\"live\"]\n");
    for (name, table) in PROVIDERS {
        let env = name.to_ascii_uppercase();
        text.push_str(&format!(
            r#"
[providers.{name}]
event_type = "/type"
signature = {{ {table}, secret_env = ["{env}_SECRET_OLD", "{env}_SECRET_NEW"] }}

[providers.{name}.types."thing.happened"]
criticality = "critical"
operation = "thing"
resource = "/data/thing"
discriminants = ["/data/amount"]
volatile = []

  [[providers.{name}.types."thing.happened".strategies]]
  name = "event-id"
  version = 1
  level = "provider_id"
  fields = ["/id"]
"#
        ));
    }
    Arc::new(contract::parse("signatures.toml", &text).unwrap_or_else(|e| panic!("{e}")))
}

async fn start(kind: Kind) -> Service {
    logs();
    let contract = test_contract();
    let mut secrets = ProviderSecrets::default();
    for (name, _) in PROVIDERS {
        for secret in [OLD, NEW] {
            secrets.insert_for(&contract, name, secret).unwrap();
        }
    }
    Service::start_with(kind, move |config| {
        config.contract = contract;
        config.secrets = secrets;
    })
    .await
}

fn mac(secret: &str, content: &str) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(content.as_bytes());
    m.finalize().into_bytes().to_vec()
}

/// The headers `provider` sends for `body` signed with `secret` at `ts`, and the MAC as it is
/// written in them.
fn signed(
    provider: &str,
    secret: &str,
    ts: i64,
    body: &str,
) -> (Vec<(&'static str, String)>, String) {
    match provider {
        "stripe" | "lookalike" => {
            let m = hex::encode(mac(secret, &format!("{ts}.{body}")));
            let header = if provider == "stripe" {
                "stripe-signature"
            } else {
                "x-lookalike-signature"
            };
            (vec![(header, format!("t={ts},v1={m}"))], m)
        }
        "paddle" => {
            let m = hex::encode(mac(secret, &format!("{ts}:{body}")));
            (vec![("paddle-signature", format!("ts={ts};h1={m}"))], m)
        }
        "slack" => {
            let m = hex::encode(mac(secret, &format!("v0:{ts}:{body}")));
            (
                vec![
                    ("x-slack-signature", format!("v0={m}")),
                    ("x-slack-request-timestamp", ts.to_string()),
                ],
                m,
            )
        }
        "github" => {
            let m = hex::encode(mac(secret, body));
            (vec![("x-hub-signature-256", format!("sha256={m}"))], m)
        }
        "shopify" => {
            let m = base64::engine::general_purpose::STANDARD.encode(mac(secret, body));
            (vec![("x-shopify-hmac-sha256", m.clone())], m)
        }
        other => panic!("no signer for {other}"),
    }
}

fn event(id: &str, amount: u32) -> String {
    format!(
        r#"{{"type":"thing.happened","id":"{id}","data":{{"thing":"th_1","amount":{amount}}}}}"#
    )
}

async fn post(
    s: &Service,
    provider: &str,
    headers: Vec<(&'static str, String)>,
    body: &str,
) -> Answer {
    let mut headers = headers;
    headers.push(("content-type", "application/json".to_owned()));
    s.request(
        reqwest::Method::POST,
        &format!("/v1/deliveries/acme/{provider}/live"),
        None,
        &headers,
        Some(body.as_bytes().to_vec()),
    )
    .await
}

/// Everything the service logged while the tests of this binary ran, at every level.
fn logs() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other test installs a global subscriber");
        buffer
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logged() -> String {
    String::from_utf8_lossy(&logs().lock().unwrap()).into_owned()
}

/// Asserts a refusal is the 401 error shape, journaled with a reason containing `why`, and
/// that neither the answer, the proof nor the logs hold any of `secret_texts`.
async fn assert_refused(s: &Service, a: &Answer, why: &str, secret_texts: &[String], what: &str) {
    assert_eq!(a.status, 401, "{what}: {}", a.text);
    assert_eq!(a.error_code(), "bad_signature", "{what}");
    let message = a.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(why), "{what}: {message:?} lacks {why:?}");
    let id = journaled_id(a);
    let proof = s.proof(&id).await;
    assert_eq!(proof.status, 200, "{what}: {}", proof.text);
    assert_eq!(proof.body["action"], "reject", "{what}");
    assert_eq!(
        proof.body["details"]["rejection"], "bad_signature",
        "{what}"
    );
    let reason = proof.str("reason");
    assert!(
        reason.contains(why),
        "{what}: the journaled reason {reason:?} lacks {why:?}"
    );
    let logs = logged();
    assert!(
        logs.contains(&id),
        "{what}: the refusal of {id} is logged (else the next check proves nothing)"
    );
    for text in secret_texts {
        assert!(
            !a.text.contains(text.as_str()),
            "{what}: the answer holds {text}"
        );
        assert!(
            !proof.text.contains(text.as_str()),
            "{what}: the proof holds {text}"
        );
        assert!(
            !logs.contains(text.as_str()),
            "{what}: the logs hold {text}"
        );
    }
}

/// What must never be shown for a refused `body` signed at `ts`: the MAC the service expects
/// under each of the provider's secrets, and the secrets themselves.
fn never_shown(provider: &str, ts: i64, body: &str) -> Vec<String> {
    let mut out = vec![OLD.to_owned(), NEW.to_owned(), WRONG.to_owned()];
    for secret in [OLD, NEW] {
        out.push(signed(provider, secret, ts, body).1);
    }
    out
}

pub async fn a_stripe_signed_delivery_is_decided_and_a_refusal_reveals_nothing(kind: Kind) {
    let s = start(kind).await;
    let now = s.now().unix_timestamp();

    let body = event("evt_stripe_1", 1000);
    let (headers, _) = signed("stripe", OLD, now, &body);
    let first = post(&s, "stripe", headers, &body).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.str("action"), "process");
    assert_eq!(first.body["strategy"]["level"], "provider_id");
    // The provider's retry, signed again with the new secret of the rotation, is the same
    // event: ignored with the first delivery's effect.
    let (headers, _) = signed("stripe", NEW, now + 30, &body);
    let retry = post(&s, "stripe", headers, &body).await;
    assert_eq!(retry.status, 200, "{}", retry.text);
    assert_eq!(retry.str("action"), "ignore");
    assert_eq!(retry.body["effect"]["id"], first.body["effect"]["id"]);

    // Two v1 signatures, only the second genuine: accepted.
    let body = event("evt_stripe_2", 2000);
    let forged = hex::encode(mac(WRONG, &format!("{now}.{body}")));
    let genuine = signed("stripe", NEW, now, &body).1;
    let both = post(
        &s,
        "stripe",
        vec![(
            "stripe-signature",
            format!("t={now},v1={forged},v1={genuine}"),
        )],
        &body,
    )
    .await;
    assert_eq!(both.status, 200, "{}", both.text);
    assert_eq!(both.str("action"), "process");

    // A forged signature, a tampered body, a stale and a future timestamp are refused.
    let body = event("evt_stripe_3", 3000);
    let (headers, _) = signed("stripe", WRONG, now, &body);
    let wrong = post(&s, "stripe", headers, &body).await;
    assert_refused(
        &s,
        &wrong,
        "does not match the body",
        &never_shown("stripe", now, &body),
        "forged",
    )
    .await;

    let (headers, _) = signed("stripe", OLD, now, &body);
    let tampered_body = body.replace("3000", "3");
    let tampered = post(&s, "stripe", headers, &tampered_body).await;
    assert_refused(
        &s,
        &tampered,
        "does not match the body",
        &never_shown("stripe", now, &tampered_body),
        "tampered",
    )
    .await;

    let (headers, _) = signed("stripe", OLD, now - 3600, &body);
    let stale = post(&s, "stripe", headers, &body).await;
    assert_refused(
        &s,
        &stale,
        "s in the past, over the tolerance of 300 s",
        &[OLD.to_owned(), NEW.to_owned()],
        "stale",
    )
    .await;
    let (headers, _) = signed("stripe", OLD, now + 600, &body);
    let future = post(&s, "stripe", headers, &body).await;
    assert_refused(
        &s,
        &future,
        "in the future",
        &[OLD.to_owned(), NEW.to_owned()],
        "future",
    )
    .await;

    let garbled = post(
        &s,
        "stripe",
        vec![("stripe-signature", "v1=abc".to_owned())],
        &body,
    )
    .await;
    assert_refused(&s, &garbled, "has no t= timestamp", &[], "garbled").await;

    let report = s.report(OPERATOR).await;
    assert_no_gap(&report);
    assert_eq!(report.body["total"]["rejected"], 5, "{}", report.text);
    assert_eq!(report.body["total"]["processed"], 2, "{}", report.text);
    s.stop().await;
}

pub async fn every_preset_verifies_rotated_secrets_and_refuses_forgeries_over_http(kind: Kind) {
    let s = start(kind).await;
    let now = s.now().unix_timestamp();
    let mut rejected = 0;
    // (provider, does it sign a timestamp, the header whose absence is refused)
    let table = [
        ("stripe", true, "stripe-signature"),
        ("lookalike", true, "x-lookalike-signature"),
        ("paddle", true, "paddle-signature"),
        ("slack", true, "x-slack-signature"),
        ("github", false, "x-hub-signature-256"),
        ("shopify", false, "x-shopify-hmac-sha256"),
    ];
    for (provider, timestamped, header) in table {
        // Signed with the first secret, and with the second one of the rotation.
        for (n, secret) in [OLD, NEW].into_iter().enumerate() {
            let body = event(&format!("evt_{provider}_{n}"), 100);
            let (headers, _) = signed(provider, secret, now, &body);
            let ok = post(&s, provider, headers, &body).await;
            assert_eq!(ok.status, 200, "{provider} #{n}: {}", ok.text);
            assert_eq!(ok.str("action"), "process", "{provider} #{n}");
        }
        let body = event(&format!("evt_{provider}_forged"), 100);
        let (headers, _) = signed(provider, WRONG, now, &body);
        let forged = post(&s, provider, headers, &body).await;
        assert_refused(
            &s,
            &forged,
            "does not match the body",
            &never_shown(provider, now, &body),
            provider,
        )
        .await;
        rejected += 1;

        let (headers, _) = signed(provider, NEW, now, &body);
        let tampered_body = body.replace("100", "900");
        let tampered = post(&s, provider, headers, &tampered_body).await;
        assert_refused(
            &s,
            &tampered,
            "does not match the body",
            &never_shown(provider, now, &tampered_body),
            provider,
        )
        .await;
        rejected += 1;

        let (headers, _) = signed(provider, NEW, now - 3600, &body);
        let old = post(&s, provider, headers, &body).await;
        if timestamped {
            assert_refused(&s, &old, "tolerance", &[NEW.to_owned()], provider).await;
            rejected += 1;
        } else {
            // No timestamp is signed, so none is checked: a body signed an hour ago verifies.
            assert_eq!(old.status, 200, "{provider}: {}", old.text);
        }

        let unsigned = post(&s, provider, Vec::new(), &body).await;
        assert_refused(
            &s,
            &unsigned,
            &format!("the {header} header is missing"),
            &[],
            provider,
        )
        .await;
        rejected += 1;
    }
    let report = s.report(OPERATOR).await;
    assert_no_gap(&report);
    assert_eq!(
        report.body["total"]["rejected"], rejected,
        "{}",
        report.text
    );
    s.stop().await;
}
