//! Identity: keys are scoped, stable across re-encodings, distinct across distinct values, and
//! sensitive fields enter them only through a keyed hash.

use oncegate_core::contract::{parse as parse_contract, Contract};
use oncegate_core::identity::{differences, identify, situation, transport_key, Identity, Origin};
use oncegate_core::json::{parse, Limits};
use oncegate_core::matrix::{decide, Action, Prior, TransportMatch};
use oncegate_core::strategy::Level;
use proptest::prelude::*;

const EXAMPLE: &str = include_str!("../../../../examples/oncegate.toml");
const SALT: &[u8] = b"test-salt";

fn contract() -> Contract {
    parse_contract("examples/oncegate.toml", EXAMPLE).unwrap()
}

const LIVE: Origin<'static> = Origin {
    tenant: "acme",
    provider: "payflow",
    env: "live",
};

fn id_of(c: &Contract, provider: &str, t: &str, origin: Origin<'_>, body: &str) -> Identity {
    let doc = parse(body.as_bytes(), &Limits::default()).unwrap();
    identify(c.event_type(provider, t).unwrap(), origin, &doc, &[], SALT)
}

fn key(i: &Identity) -> String {
    i.effect.as_ref().expect("a key").key.clone()
}

const CAPTURE: &str = r#"{"type":"payment.captured","sent_at":"2024-05-01T10:00:00Z","attempt":1,
  "data":{"payment_id":"pay_1","capture_id":"cap_1","amount":1500,"currency":"EUR","captured_at":"2024-05-01T12:00:00+02:00"}}"#;

#[test]
fn a_re_encoded_retry_has_the_same_effect_key() {
    let c = contract();
    let first = id_of(&c, "payflow", "payment.captured", LIVE, CAPTURE);
    // Members reordered, whitespace, number spelling, new volatile values, same instant in UTC.
    let retry = r#"{ "attempt" : 2, "data" : { "currency":"EUR", "amount": 1.5e3, "capture_id":"cap_1",
        "captured_at":"2024-05-01T10:00:00Z", "payment_id":"pay_1" }, "sent_at":"2024-05-01T10:05:00Z", "type":"payment.captured" }"#;
    let second = id_of(&c, "payflow", "payment.captured", LIVE, retry);
    assert_eq!(key(&first), key(&second));
    assert_eq!(first.discriminants, second.discriminants);
    let e = first.effect.as_ref().unwrap();
    assert_eq!(
        (e.strategy.as_str(), e.version, e.level),
        ("capture-id", 1, Level::BusinessRef)
    );
    assert!(first.skipped.is_empty());
    // The transport key of a body without delivery id is the weak raw-body hash: it differs.
    let t1 = transport_key(LIVE, None, CAPTURE.as_bytes());
    let t2 = transport_key(LIVE, None, retry.as_bytes());
    assert!(!t1.strong);
    assert_ne!(t1.key, t2.key);
}

#[test]
fn skipped_strategies_say_why() {
    let c = contract();
    let body = CAPTURE.replace(r#""capture_id":"cap_1","#, "");
    let i = id_of(&c, "payflow", "payment.captured", LIVE, &body);
    assert_eq!(i.skipped.len(), 1);
    assert_eq!(i.skipped[0].label(), "capture-id@1");
    assert_eq!(i.skipped[0].why, "field /data/capture_id is absent");
    assert_eq!(i.effect.as_ref().unwrap().strategy, "capture-per-payment");
    let null_ref = CAPTURE.replace(r#""cap_1""#, "null");
    assert_eq!(
        id_of(&c, "payflow", "payment.captured", LIVE, &null_ref).skipped[0].why,
        "field /data/capture_id is null"
    );
    let no_resource = CAPTURE.replace(r#""payment_id":"pay_1","#, "");
    let i = id_of(&c, "payflow", "payment.captured", LIVE, &no_resource);
    assert!(i.effect.is_none());
    assert!(i
        .skipped
        .iter()
        .all(|s| s.why == "the resource /data/payment_id is absent"));
}

#[test]
fn keys_are_scoped_by_tenant_provider_env_and_strategy() {
    let c = contract();
    let base = key(&id_of(&c, "payflow", "payment.captured", LIVE, CAPTURE));
    for origin in [
        Origin {
            env: "test",
            ..LIVE
        },
        Origin {
            tenant: "other",
            ..LIVE
        },
        Origin {
            provider: "payflow-eu",
            ..LIVE
        },
    ] {
        assert_ne!(
            base,
            key(&id_of(&c, "payflow", "payment.captured", origin, CAPTURE)),
            "{origin:?}"
        );
    }
    // A provider that reuses delivery ids across environments: the transport key differs too.
    let live = transport_key(LIVE, Some("d-1"), b"{}");
    let test = transport_key(
        Origin {
            env: "test",
            ..LIVE
        },
        Some("d-1"),
        b"{}",
    );
    assert!(live.strong);
    assert_ne!(live.key, test.key);
}

fn refund(amount: &str, extra: &str) -> String {
    format!(
        r#"{{"type":"refund.created","sent_at":"2024-05-01T10:00:00Z","data":{{"payment_id":"pay_1","amount":{amount},"currency":"EUR"{extra}}}}}"#
    )
}

#[test]
fn numbers_enter_keys_by_their_exact_value() {
    let c = contract();
    let k = |amount: &str| {
        key(&id_of(
            &c,
            "payflow",
            "refund.created",
            LIVE,
            &refund(amount, ""),
        ))
    };
    assert_eq!(k("100"), k("100.0"));
    assert_eq!(k("100"), k("1e2"));
    assert_ne!(
        k("9007199254740993"),
        k("9007199254740992"),
        "a double would merge these"
    );
    assert_ne!(k("0.1"), k("0.10000000000000001"));
    assert_ne!(k("100"), k("101"));
}

#[test]
fn request_references_are_normalized_as_declared() {
    let c = contract();
    let a = id_of(
        &c,
        "payflow",
        "refund.created",
        LIVE,
        &refund("1500", r#","request_ref":"  RR-7 ""#),
    );
    let b = id_of(
        &c,
        "payflow",
        "refund.created",
        LIVE,
        &refund("1500", r#","request_ref":"rr-7""#),
    );
    assert_eq!(a.effect.as_ref().unwrap().strategy, "refund-request-ref");
    assert_eq!(key(&a), key(&b));
    let blank = id_of(
        &c,
        "payflow",
        "refund.created",
        LIVE,
        &refund("1500", r#","request_ref":"  ""#),
    );
    assert_eq!(blank.skipped[0].why, "field /data/request_ref is blank");
}

#[test]
fn sensitive_fields_are_masked_and_keyed_by_the_salt() {
    let c = contract();
    let body = refund("1500", r#","customer_email":"jane@example.com""#);
    let i = id_of(&c, "payflow", "refund.created", LIVE, &body);
    let shown = format!("{i:?}");
    assert!(
        !shown.contains("jane@example.com"),
        "clear sensitive value in {shown}"
    );
    let doc = parse(body.as_bytes(), &Limits::default()).unwrap();
    let t = c.event_type("payflow", "refund.created").unwrap();
    let other_salt = identify(t, LIVE, &doc, &[], b"another-salt");
    assert_ne!(
        key(&i),
        key(&other_salt),
        "the fingerprint includes the email through the salted hash"
    );
    let other_email = id_of(
        &c,
        "payflow",
        "refund.created",
        LIVE,
        &refund("1500", r#","customer_email":"joe@example.com""#),
    );
    assert_ne!(key(&i), key(&other_email));
}

#[test]
fn unordered_arrays_are_sorted_and_ordered_ones_are_not() {
    let c = contract();
    let origin = Origin {
        tenant: "acme",
        provider: "shopline",
        env: "live",
    };
    let p = |tags: &str| {
        format!(r#"{{"sent_at":"x","product":{{"id":"p1","title":"T","price":5,"tags":{tags}}}}}"#)
    };
    let a = id_of(
        &c,
        "shopline",
        "products/update",
        origin,
        &p(r#"["b","a",{"z":1}]"#),
    );
    let b = id_of(
        &c,
        "shopline",
        "products/update",
        origin,
        &p(r#"[{"z":1.0},"a","b"]"#),
    );
    assert_eq!(a.effect.as_ref().unwrap().level, Level::Fingerprint);
    assert_eq!(key(&a), key(&b));
    let origin = Origin {
        tenant: "acme",
        provider: "ledgerly",
        env: "live",
    };
    let inv = |lines: &str| {
        format!(
            r#"{{"event":"invoice.finalized","delivered_at":"x","invoice":{{"total":3,"currency":"EUR","lines":{lines}}}}}"#
        )
    };
    let one = id_of(
        &c,
        "ledgerly",
        "invoice.finalized",
        origin,
        &inv(r#"[{"sku":"a","q":1},{"sku":"b","q":2}]"#),
    );
    let two = id_of(
        &c,
        "ledgerly",
        "invoice.finalized",
        origin,
        &inv(r#"[{"sku":"b","q":2},{"sku":"a","q":1}]"#),
    );
    assert_ne!(
        one.discriminants, two.discriminants,
        "line order is meaning"
    );
}

#[test]
fn the_seeds_two_refunds_share_a_fingerprint_and_are_reconciled() {
    let c = contract();
    let t = c.event_type("payflow", "refund.created").unwrap();
    let first = id_of(&c, "payflow", "refund.created", LIVE, &refund("1500", ""));
    let second = id_of(
        &c,
        "payflow",
        "refund.created",
        LIVE,
        &refund("1500", "").replace("10:00:00", "10:04:00"),
    );
    assert_eq!(
        key(&first),
        key(&second),
        "volatile sent_at removed: the two refunds are byte-identical"
    );
    let s = situation(
        t,
        &second,
        Prior::Completed,
        &first.discriminants,
        TransportMatch::None,
        false,
    );
    let d = decide(&s);
    assert_eq!(d.action, Action::Reconcile, "{}", d.reason);
    assert!(d.reason.contains("authority will be asked"), "{}", d.reason);
}

proptest! {
    /// Two refunds that share a key but differ in a discriminant never get `ignore`.
    #[test]
    fn a_discriminant_difference_never_yields_ignore(a in 1u64..1_000_000, b in 1u64..1_000_000, reference in "[a-z0-9]{1,12}", prior_kind in 0usize..4) {
        prop_assume!(a != b);
        let c = contract();
        let t = c.event_type("payflow", "refund.created").unwrap();
        let extra = format!(r#","request_ref":"{reference}""#);
        let first = id_of(&c, "payflow", "refund.created", LIVE, &refund(&a.to_string(), &extra));
        let second = id_of(&c, "payflow", "refund.created", LIVE, &refund(&b.to_string(), &extra));
        prop_assert_eq!(key(&first), key(&second));
        prop_assert!(!differences(&first.discriminants, &second.discriminants).is_empty());
        let prior = [Prior::Completed, Prior::InProgress, Prior::Failed { retryable: false }, Prior::Unknown][prior_kind];
        for transport in [TransportMatch::None, TransportMatch::SameIdSameBody] {
            let d = decide(&situation(t, &second, prior, &first.discriminants, transport, false));
            prop_assert_ne!(d.action, Action::Ignore);
            prop_assert_eq!(d.action, Action::Quarantine);
        }
    }
}
