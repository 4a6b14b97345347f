//! The catalog's contracts (`contracts/<provider>.toml`) on every payload of the providers'
//! published events (`../shared/corpora/providers/` and GitHub's examples), in process, through
//! the gate and a real store: each money-moving event gets a key at the level its contract
//! intends; a re-encoded retry (members reordered, whitespace, numbers re-spelled, volatile
//! fields changed) is ignored when the key is strong (and never ignored when it is not); the
//! same event with another amount is quarantined; a second distinct event of the same type on
//! the same resource with the same amount is never ignored. Events the catalog does not cover
//! are kept for reconciliation, never dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oncegate::{Gate, GateConfig, Outcome, Proof, Reception};
use oncegate_core::contract::{self, Contract};
use oncegate_core::json::{self, Limits, Number, Value};
use oncegate_core::matrix::{Action, Confidence};
use oncegate_core::pointer::Pointer;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn corpus() -> PathBuf {
    root().join("../shared/corpora")
}

/// A provider's catalog contract, as `oncegate init` writes it.
pub fn catalog(provider: &str) -> Contract {
    let path = root().join(format!("contracts/{provider}.toml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    contract::parse(&path.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"))
}

/// One published payload and what its contract must make of it.
struct Case {
    provider: &'static str,
    file: String,
    headers: Vec<(String, String)>,
    /// The level of the strategy that must make the key; `None`: no contract covers the type,
    /// the delivery is kept for reconciliation.
    level: Option<&'static str>,
    /// What a second distinct event of the same type on the same resource changes (body
    /// pointers, or `header:<name>`), the amount kept.
    distinct: Vec<&'static str>,
}

fn case(
    provider: &'static str,
    file: &str,
    level: Option<&'static str>,
    distinct: &[&'static str],
) -> Case {
    Case {
        provider,
        file: file.to_owned(),
        headers: Vec::new(),
        level,
        distinct: distinct.to_vec(),
    }
}

impl Case {
    fn header(mut self, name: &str, value: &str) -> Case {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

fn provider_cases() -> Vec<Case> {
    let stripe_event = ["/id", "/data/object/id"];
    let mut cases = vec![
        // Stripe: the old dashboard samples reuse evt_00000000000000 and ch_00000000000000
        // (placeholders): the contract falls to the fingerprint on purpose.
        case(
            "stripe",
            "charge-refunded-legacy-test-webhook.json",
            Some("fingerprint"),
            &["/data/object/created"],
        ),
        case(
            "stripe",
            "invoice-payment-succeeded-legacy-test-webhook.json",
            Some("fingerprint"),
            &["/data/object/date"],
        ),
        case(
            "stripe",
            "charge-failed-legacy-test-webhook.json",
            None,
            &[],
        ),
        case(
            "stripe",
            "customer-subscription-updated-legacy-test-webhook.json",
            None,
            &[],
        ),
        case("stripe", "account-application-deauthorized.json", None, &[]),
        case("stripe", "account-reject.json", None, &[]),
        case("stripe", "account-updated.json", None, &[]),
        case("stripe", "customer-created.json", None, &[]),
        case("stripe", "invoiceitem-updated.json", None, &[]),
        case("stripe", "plan-created-openapi-fixture.json", None, &[]),
        case(
            "stripe",
            "v2-thin-billing-meter-error-report-triggered.json",
            Some("provider_id"),
            &["/id"],
        ),
        // Paddle.
        case(
            "paddle",
            "transaction-paid.json",
            Some("provider_id"),
            &["/event_id", "/data/id"],
        ),
        case(
            "paddle",
            "adjustment-created.json",
            Some("provider_id"),
            &["/event_id", "/data/id"],
        ),
        case(
            "paddle",
            "adjustment-created-2.json",
            Some("provider_id"),
            &["/event_id", "/data/id"],
        ),
        case(
            "paddle",
            "adjustment-updated.json",
            Some("provider_id"),
            &["/event_id", "/data/id"],
        ),
        case("paddle", "customer-created-signed.json", None, &[]),
        case("paddle", "subscription-activated.json", None, &[]),
        case("paddle", "subscription-canceled.json", None, &[]),
        case("paddle", "subscription-trialing.json", None, &[]),
        case("paddle", "subscription-updated.json", None, &[]),
        case("paddle", "transaction-past-due.json", None, &[]),
        case("paddle", "transaction-revised.json", None, &[]),
        // Adyen: a batch of one item each; no event id, so business references.
        case(
            "adyen",
            "authorisation-true.json",
            Some("business_ref"),
            &["/notificationItems/0/NotificationRequestItem/pspReference"],
        ),
        case(
            "adyen",
            "capture-false.json",
            Some("business_ref"),
            &["/notificationItems/0/NotificationRequestItem/pspReference"],
        ),
        case(
            "adyen",
            "chargeback.json",
            Some("business_ref"),
            &["/notificationItems/0/NotificationRequestItem/pspReference"],
        ),
        case(
            "adyen",
            "refund-true.json",
            Some("business_ref"),
            &["/notificationItems/0/NotificationRequestItem/pspReference"],
        ),
        case(
            "adyen",
            "refund-false.json",
            Some("business_ref"),
            &["/notificationItems/0/NotificationRequestItem/pspReference"],
        ),
        case("adyen", "offer-closed.json", None, &[]),
        case(
            "adyen_balance_platform",
            "balanceplatform-transfer-created.json",
            Some("business_ref"),
            &["/data/sequenceNumber"],
        ),
        case(
            "adyen_balance_platform",
            "balanceplatform-transfer-updated.json",
            Some("business_ref"),
            &["/data/sequenceNumber"],
        ),
        case(
            "adyen_balance_platform",
            "recurring-token-updated.json",
            None,
            &[],
        ),
        // Square, Mollie, Razorpay.
        case(
            "square",
            "webhooks-test-notification-signed.json",
            Some("provider_id"),
            &["/event_id"],
        ),
        case(
            "mollie",
            "payment-link-paid-full.json",
            Some("provider_id"),
            &["/id"],
        ),
        case(
            "razorpay",
            "payment-authorized-signed.json",
            Some("provider_id"),
            &["header:x-razorpay-event-id", "/payload/payment/entity/id"],
        )
        .header("X-Razorpay-Event-Id", "KpGvPPwwuX8Mj7"),
        // Shopify: identity in the X-Shopify-Webhook-Id header, the topic in X-Shopify-Topic.
        case(
            "shopify",
            "order-450789469.json",
            Some("provider_id"),
            &["header:x-shopify-webhook-id", "/id"],
        )
        .header("X-Shopify-Topic", "orders/paid")
        .header(
            "X-Shopify-Webhook-Id",
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        ),
        case(
            "shopify",
            "order-created-new.json",
            Some("provider_id"),
            &["header:x-shopify-webhook-id", "/id"],
        )
        .header("X-Shopify-Topic", "orders/create")
        .header(
            "X-Shopify-Webhook-Id",
            "0f9e8d7c-0000-4b37-8a5f-bf7d70bcd043",
        ),
        case(
            "shopify",
            "order-cancelled.json",
            Some("provider_id"),
            &["header:x-shopify-webhook-id", "/id"],
        )
        .header("X-Shopify-Topic", "orders/cancelled")
        .header(
            "X-Shopify-Webhook-Id",
            "1a2b3c4d-0000-4b37-8a5f-bf7d70bcd043",
        ),
        case(
            "shopify",
            "refund-509562969.json",
            Some("provider_id"),
            &["header:x-shopify-webhook-id", "/id"],
        )
        .header("X-Shopify-Topic", "refunds/create")
        .header(
            "X-Shopify-Webhook-Id",
            "5e6f7a8b-0000-4b37-8a5f-bf7d70bcd043",
        ),
        case(
            "shopify",
            "refund-created-929361472.json",
            Some("provider_id"),
            &["header:x-shopify-webhook-id", "/id"],
        )
        .header("X-Shopify-Topic", "refunds/create")
        .header(
            "X-Shopify-Webhook-Id",
            "9c0d1e2f-0000-4b37-8a5f-bf7d70bcd043",
        ),
        case(
            "shopify",
            "dispute-598735659.json",
            Some("provider_id"),
            &["header:x-shopify-webhook-id", "/id"],
        )
        .header("X-Shopify-Topic", "disputes/create")
        .header(
            "X-Shopify-Webhook-Id",
            "3d4e5f60-0000-4b37-8a5f-bf7d70bcd043",
        ),
        case(
            "shopify",
            "recurring-application-charge-455696195.json",
            None,
            &[],
        )
        .header("X-Shopify-Topic", "app_subscriptions/update")
        .header(
            "X-Shopify-Webhook-Id",
            "7a8b9c0d-0000-4b37-8a5f-bf7d70bcd043",
        ),
        // Slack: nothing moves money; reused Ev111 across types is a visible collision.
        case(
            "slack",
            "url-verification.json",
            Some("semantic"),
            &["/challenge"],
        ),
        case(
            "slack",
            "reaction-added.json",
            Some("provider_id"),
            &["/event_id"],
        ),
        case(
            "slack",
            "message-bot-message-classic.json",
            Some("provider_id"),
            &["/event_id"],
        ),
        case(
            "slack",
            "message-from-bot-user.json",
            Some("provider_id"),
            &["/event_id"],
        ),
    ];
    let _ = stripe_event;
    for slack in [
        "app-home-opened-org.json",
        "app-uninstalled.json",
        "member-joined-channel.json",
        "team-access-granted-org.json",
        "tokens-revoked.json",
    ] {
        cases.push(case("slack", slack, Some("provider_id"), &["/event_id"]));
    }
    // Every file of the corpus is in the table.
    for dir in std::fs::read_dir(corpus().join("providers")).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let name = f.unwrap().file_name().into_string().unwrap();
            assert!(
                cases.iter().any(|c| c.file == name),
                "{} has no case",
                dir.join(&name).display()
            );
        }
    }
    cases
}

fn path_of(c: &Case) -> PathBuf {
    let dir = match c.provider {
        "adyen_balance_platform" => "adyen",
        "github" => {
            return corpus()
                .join("github-webhooks/payload-examples")
                .join(&c.file)
        }
        p => p,
    };
    corpus().join("providers").join(dir).join(&c.file)
}

fn contract_file(provider: &str) -> &str {
    match provider {
        "adyen_balance_platform" => "adyen",
        p => p,
    }
}

fn read(bytes: &[u8]) -> Value {
    json::parse(bytes, &Limits::default()).unwrap()
}

/// The same document written another way: members in reverse order, spaces and newlines,
/// every number re-spelled (`10` as `10.0`, `1.5` as `1.50`).
fn re_encoded(v: &Value, out: &mut String) {
    match v {
        Value::Object(o) => {
            out.push_str("{\n ");
            let members: Vec<_> = o.iter().collect();
            for (i, (k, m)) in members.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(" ,\n ");
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(" : ");
                re_encoded(m, out);
            }
            out.push_str("\n}");
        }
        Value::Array(items) => {
            out.push_str("[ ");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(" , ");
                }
                re_encoded(item, out);
            }
            out.push_str(" ]");
        }
        Value::Number(n) => {
            let lit = n.literal();
            if lit.contains(['e', 'E']) {
                out.push_str(lit);
            } else if lit.contains('.') {
                out.push_str(&format!("{lit}0"));
            } else {
                out.push_str(&format!("{lit}.0"));
            }
        }
        Value::String(s) => out.push_str(&serde_json::to_string(s).unwrap()),
        other => out.push_str(&oncegate_core::canon::to_jcs(other)),
    }
}

/// Another value of the same kind: a string gets a suffix, a number one more, a decimal
/// string one more unit.
fn other_value(v: &Value) -> Value {
    match v {
        Value::Number(n) => {
            let lit = n.literal();
            let changed = match lit.parse::<i128>() {
                Ok(i) => (i + 1).to_string(),
                Err(_) => format!("{}", n.to_f64() + 1.0),
            };
            Value::Number(Number::from_literal(&changed).unwrap())
        }
        Value::String(s) => match s.parse::<f64>() {
            Ok(_) if s.chars().all(|c| c.is_ascii_digit() || c == '.') => {
                let (int, frac) = s.split_once('.').unwrap_or((s, ""));
                let int = int.parse::<u128>().unwrap() + 1;
                Value::String(if frac.is_empty() {
                    int.to_string()
                } else {
                    format!("{int}.{frac}")
                })
            }
            _ => Value::String(format!("{s}-2")),
        },
        Value::Bool(b) => Value::Bool(!b),
        other => Value::String(format!("{}-2", oncegate_core::canon::to_jcs(other))),
    }
}

fn set(doc: &mut Value, pointer: &str, f: impl Fn(&Value) -> Value) -> bool {
    let p = Pointer::parse(pointer).unwrap();
    match p.get_mut(doc) {
        Some(v) => {
            *v = f(v);
            true
        }
        None => false,
    }
}

struct Run {
    gate: Gate,
    contract: Arc<Contract>,
}

async fn run(store: &Arc<oncegate_store::Store>, provider: &str) -> Run {
    let contract = Arc::new(catalog(contract_file(provider)));
    let gate = Gate::new(GateConfig::new(
        contract.clone(),
        store.clone(),
        b"catalog-salt".to_vec(),
    ));
    Run { gate, contract }
}

impl Run {
    /// Delivers `body` (a batch provider's request whole), and returns its one item's outcome.
    async fn deliver(&self, c: &Case, headers: &[(String, String)], body: Vec<u8>) -> Outcome {
        // A tenant per payload: the corpus reuses ids across files (Slack's Ev111), which
        // `ids_reused_across_events_are_collisions_never_ignores` checks on its own.
        let mut r = Reception::new(c.file.replace('/', "_"), c.provider, "live", body);
        for (k, v) in headers {
            r = r.header(k, v.clone());
        }
        let mut done = self.gate.deliver_batch(r).await.unwrap();
        assert_eq!(
            done.items.len(),
            1,
            "{}: one item per request in the corpus",
            c.file
        );
        if let Some(reply) = &done.reply {
            assert_eq!(reply, "[accepted]");
        }
        done.items.pop().unwrap()
    }
}

fn proof(o: &Outcome) -> &Proof {
    match o {
        Outcome::Process(h) => h.proof().expect("a fresh reservation has its proof"),
        Outcome::Forwarded(p)
        | Outcome::Ignore(p)
        | Outcome::Quarantine(p)
        | Outcome::Reconcile(p) => p,
        Outcome::Rejected(r) => panic!("refused: {:?}", r.refusal),
    }
}

fn action(o: &Outcome) -> Action {
    proof(o).decision.action
}

/// Runs one payload through every check; returns what was checked, for the summary.
async fn check(store: &Arc<oncegate_store::Store>, c: &Case) {
    let run = run(store, c.provider).await;
    let bytes = std::fs::read(path_of(c)).unwrap();
    let what = format!("{}/{}", c.provider, c.file);
    let first = run.deliver(c, &c.headers, bytes.clone()).await;
    let Some(level) = c.level else {
        let p = proof(&first);
        assert_eq!(
            p.decision.action,
            Action::Reconcile,
            "{what}: {}",
            p.decision.reason
        );
        assert!(
            p.strategy.is_none(),
            "{what}: an uncovered type has no strategy"
        );
        return;
    };
    let p = proof(&first).clone();
    assert_eq!(
        p.decision.action,
        Action::Process,
        "{what}: {}",
        p.decision.reason
    );
    let strategy = p
        .strategy
        .clone()
        .unwrap_or_else(|| panic!("{what}: no strategy applies: {}", p.decision.reason));
    assert_eq!(
        strategy.level, level,
        "{what}: made by {}@{}",
        strategy.name, strategy.version
    );
    let strong = p.confidence == Some(Confidence::Strong);
    if let Outcome::Process(held) = first {
        held.complete(r#"{"applied":true}"#).await.unwrap();
    }
    let event_type = p.event_type.clone().unwrap();
    let provider = run.contract.provider(c.provider).unwrap();
    let t = provider.types.get(&event_type).unwrap();
    let prefix = if provider.batch.is_some() {
        "/notificationItems/0/NotificationRequestItem"
    } else {
        ""
    };

    // A retry written another way, its volatile fields changed.
    let mut retry = read(&bytes);
    for v in &t.volatile {
        set(&mut retry, &format!("{prefix}{}", v.pointer), other_value);
    }
    let mut text = String::new();
    re_encoded(&retry, &mut text);
    let again = run.deliver(c, &c.headers, text.into_bytes()).await;
    if strong {
        assert_eq!(
            action(&again),
            Action::Ignore,
            "{what}: the retry: {}",
            proof(&again).decision.reason
        );
        assert_eq!(
            proof(&again).reference_delivery.as_ref(),
            Some(&p.delivery),
            "{what}"
        );
    } else {
        assert_ne!(
            action(&again),
            Action::Ignore,
            "{what}: a weak key never ignores"
        );
    }

    // The same event with another amount (the type's first discriminant).
    if let Some(amount) = t.discriminants.first() {
        let mut changed = read(&bytes);
        if set(&mut changed, &format!("{prefix}{amount}"), other_value) {
            let in_key = strategy_fields(t, &strategy.name)
                .iter()
                .any(|f| f == amount.as_str());
            let o = run
                .deliver(
                    c,
                    &c.headers,
                    oncegate_core::canon::to_key_form(&changed).into_bytes(),
                )
                .await;
            if strong && !in_key {
                assert_eq!(
                    action(&o),
                    Action::Quarantine,
                    "{what}: another amount: {}",
                    proof(&o).decision.reason
                );
                assert!(
                    proof(&o)
                        .differences
                        .iter()
                        .any(|d| d.field == amount.as_str()),
                    "{what}"
                );
            } else {
                assert_ne!(action(&o), Action::Ignore, "{what}: another amount");
            }
        }
    }

    // A second distinct event of the same type on the same resource, same amount.
    let mut second = read(&bytes);
    let mut headers = c.headers.clone();
    for d in &c.distinct {
        match d.strip_prefix("header:") {
            Some(h) => {
                for (k, v) in headers.iter_mut() {
                    if k.eq_ignore_ascii_case(h) {
                        *v = format!("{v}-second");
                    }
                }
            }
            None => assert!(set(&mut second, d, other_value), "{what}: {d} is absent"),
        }
    }
    let o = run
        .deliver(
            c,
            &headers,
            oncegate_core::canon::to_key_form(&second).into_bytes(),
        )
        .await;
    assert_ne!(
        action(&o),
        Action::Ignore,
        "{what}: a second distinct event: {}",
        proof(&o).decision.reason
    );
    if strong {
        assert_eq!(
            action(&o),
            Action::Process,
            "{what}: a second distinct event"
        );
    }
}

fn strategy_fields(t: &oncegate_core::contract::EventType, name: &str) -> Vec<String> {
    t.strategies
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.fields.iter().map(|f| f.source.label()).collect())
        .unwrap_or_default()
}

/// Every payload of the providers' corpus.
pub async fn every_provider_payload_is_decided_as_its_contract_says(url: &str) {
    let store = oncegate_store::open(url).await.unwrap();
    for c in provider_cases() {
        check(&store, &c).await;
    }
}

/// Every GitHub example: the money-moving ones (Sponsors, Marketplace) fully checked, the
/// others kept for reconciliation.
pub async fn every_github_payload_is_decided_as_its_contract_says(url: &str) {
    let store = oncegate_store::open(url).await.unwrap();
    let base = corpus().join("github-webhooks/payload-examples");
    let mut events: Vec<PathBuf> = Vec::new();
    // api.github.com, ghes-3x, github.ae: <flavour>/<event>/<action>.payload.json
    for flavour in std::fs::read_dir(&base).unwrap() {
        let flavour = flavour.unwrap().path();
        if !flavour.is_dir() {
            continue;
        }
        for dir in std::fs::read_dir(&flavour).unwrap() {
            let dir = dir.unwrap().path();
            if dir.is_dir() {
                for f in std::fs::read_dir(&dir).unwrap() {
                    let f = f.unwrap().path();
                    if f.extension().is_some_and(|e| e == "json") {
                        events.push(f);
                    }
                }
            }
        }
    }
    events.sort();
    assert!(
        events.len() >= 500,
        "the GitHub examples are there ({})",
        events.len()
    );
    let mut covered = 0;
    for (i, f) in events.iter().enumerate() {
        let event = f.parent().unwrap().file_name().unwrap().to_str().unwrap();
        let file = f.strip_prefix(&base).unwrap().display().to_string();
        let money = matches!(event, "sponsorship" | "marketplace_purchase");
        covered += usize::from(money);
        let c = Case {
            provider: "github",
            file,
            headers: vec![
                ("X-GitHub-Event".to_owned(), event.to_owned()),
                (
                    "X-GitHub-Delivery".to_owned(),
                    format!("72d3162e-cc78-11e3-81ab-{i:012}"),
                ),
            ],
            level: money.then_some("provider_id"),
            distinct: vec!["header:x-github-delivery"],
        };
        check(&store, &c).await;
    }
    assert!(
        covered >= 4,
        "sponsorship and marketplace examples were checked ({covered})"
    );
}

/// Slack's fixtures reuse `Ev111` across different events: under one tenant, the first is
/// processed and every other one is a collision (quarantined, its differences shown), never
/// a silent ignore.
pub async fn ids_reused_across_events_are_collisions_never_ignores(url: &str) {
    let store = oncegate_store::open(url).await.unwrap();
    let run = run(&store, "slack").await;
    let mut actions = Vec::new();
    for file in [
        "reaction-added.json",
        "app-uninstalled.json",
        "member-joined-channel.json",
        "tokens-revoked.json",
        "app-home-opened-org.json",
        "team-access-granted-org.json",
    ] {
        let bytes = std::fs::read(corpus().join("providers/slack").join(file)).unwrap();
        let r = Reception::new("one-team", "slack", "live", bytes);
        let o = run.gate.deliver(r).await.unwrap();
        actions.push(action(&o));
        if let Outcome::Process(held) = o {
            held.complete("{}").await.unwrap();
        }
    }
    assert_eq!(actions[0], Action::Process);
    assert!(
        actions[1..].iter().all(|a| *a == Action::Quarantine),
        "{actions:?}"
    );
}
