//! What real providers need of the contract language: a key read from a header, decimal
//! strings compared as numbers, integers past 2^53 kept exact, placeholder ids skipped, and
//! a `why` on each choice.

use oncegate_core::canon::{to_jcs, to_key_form};
use oncegate_core::contract::{parse as parse_contract, Contract};
use oncegate_core::identity::{identify, Identity, Origin};
use oncegate_core::json::{parse, Limits};
use oncegate_core::strategy::{Level, Source};

const ORIGIN: Origin<'static> = Origin {
    tenant: "acme",
    provider: "shop",
    env: "live",
};

const CONTRACT: &str = r#"
[providers.shop]
event_type_header = "x-topic"

[providers.shop.types."refunds/create"]
why = "the refund's order is the resource; the refunded amount, a decimal string in major units, is the discriminant"
criticality = "critical"
resource = "/order_id"
discriminants = ["/amount", "/currency"]
normalize = [{ field = "/amount", ops = ["decimal"] }]
volatile = []

  [[providers.shop.types."refunds/create".strategies]]
  name = "webhook-id"
  version = 1
  level = "provider_id"
  fields = ["header:X-Webhook-Id"]
  placeholders = ["00000000-0000-0000-0000-000000000000"]
  why = "the webhook id header is the same on every retry of one event"

  [[providers.shop.types."refunds/create".strategies]]
  name = "refund-id"
  version = 1
  level = "business_ref"
  fields = ["/order_id", "/id"]

  [[providers.shop.types."refunds/create".strategies]]
  name = "refund-fingerprint"
  version = 1
  level = "fingerprint"
"#;

fn contract() -> Contract {
    parse_contract("shop.toml", CONTRACT).unwrap_or_else(|e| panic!("{e}"))
}

fn id_of(c: &Contract, headers: &[(&str, &str)], body: &str) -> Identity {
    let doc = parse(body.as_bytes(), &Limits::default()).unwrap();
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    identify(
        c.event_type("shop", "refunds/create").unwrap(),
        ORIGIN,
        &doc,
        &headers,
        b"salt",
    )
}

const REFUND: &str =
    r#"{"id":820982911946154508,"order_id":450789469,"amount":"10.00","currency":"USD"}"#;

#[test]
fn a_header_makes_the_key_whatever_its_case_and_is_shown_as_header() {
    let c = contract();
    let a = id_of(&c, &[("X-Webhook-Id", " b54557e4 ")], REFUND);
    let b = id_of(
        &c,
        &[("x-webhook-id", "b54557e4")],
        r#"{"currency":"USD","amount":"10.0","order_id":450789469,"id":820982911946154508}"#,
    );
    let (ka, kb) = (a.effect.unwrap(), b.effect.unwrap());
    assert_eq!(
        (ka.strategy.as_str(), ka.level),
        ("webhook-id", Level::ProviderId)
    );
    assert_eq!(ka.key, kb.key);
    assert_eq!(ka.fields[0].pointer, "header:x-webhook-id");
    assert_eq!(ka.fields[0].shown, r#""b54557e4""#);
    let other = id_of(&c, &[("x-webhook-id", "c0ffee")], REFUND)
        .effect
        .unwrap();
    assert_ne!(other.key, ka.key);
}

#[test]
fn an_absent_or_placeholder_header_falls_to_the_next_strategy_and_says_why() {
    let c = contract();
    for (headers, why) in [
        (&[][..], "header x-webhook-id is absent"),
        (&[("x-webhook-id", "  ")][..], "header x-webhook-id is blank"),
        (
            &[("x-webhook-id", "00000000-0000-0000-0000-000000000000")][..],
            "field header:x-webhook-id holds \"00000000-0000-0000-0000-000000000000\", a placeholder the provider's test tools reuse, not an id",
        ),
    ] {
        let id = id_of(&c, headers, REFUND);
        assert_eq!(id.skipped[0].why, why);
        assert_eq!(id.effect.unwrap().strategy, "refund-id");
    }
}

#[test]
fn decimal_strings_are_one_amount_however_spelled() {
    let c = contract();
    let h = [("x-webhook-id", "w1")];
    let amount = |body: &str| id_of(&c, &h, body).discriminants[0].1.clone();
    let base = amount(REFUND);
    assert_eq!(base.as_deref(), Some("10"));
    assert_eq!(amount(&REFUND.replace("10.00", "10.0")), base);
    assert_eq!(amount(&REFUND.replace("\"10.00\"", "10")), base);
    assert_ne!(amount(&REFUND.replace("10.00", "10.01")), base);
    // Not a number: noted, left as sent, never guessed.
    let odd = id_of(&c, &h, &REFUND.replace("10.00", "10,00"));
    assert_eq!(odd.discriminants[0].1.as_deref(), Some("\"10,00\""));
    assert!(odd.notes[0].contains("not a decimal"), "{:?}", odd.notes);
}

#[test]
fn integers_past_2_pow_53_keep_their_digits_in_keys_and_fingerprints() {
    let c = contract();
    let read = |text: &str| parse(text.as_bytes(), &Limits::default()).unwrap();
    let (a, b) = (read("820982911946154508"), read("820982911946154509"));
    // RFC 8785's number form goes through a double and merges them; the key form does not.
    assert_eq!(to_jcs(&a), to_jcs(&b));
    assert_ne!(to_key_form(&a), to_key_form(&b));
    assert_eq!(to_key_form(&b), "820982911946154509");
    // Two refunds differing only in such an id: two business keys, two fingerprints.
    let other = REFUND.replace("820982911946154508", "820982911946154509");
    let none: &[(&str, &str)] = &[];
    assert_ne!(
        id_of(&c, none, REFUND).effect.unwrap().key,
        id_of(&c, none, &other).effect.unwrap().key
    );
    let fingerprint = |body: &str| {
        let no_id = body.replace(r#""id":"#, r#""refund":"#);
        let id = id_of(&c, none, &no_id);
        let k = id.effect.unwrap();
        assert_eq!(k.level, Level::Fingerprint);
        k.key
    };
    assert_ne!(fingerprint(REFUND), fingerprint(&other));
}

#[test]
fn whys_and_placeholders_are_kept_and_header_fields_refused_where_they_mean_nothing() {
    let c = contract();
    let t = c.event_type("shop", "refunds/create").unwrap();
    assert!(t.why.starts_with("the refund's order is the resource"));
    assert_eq!(
        t.strategies[0].why,
        "the webhook id header is the same on every retry of one event"
    );
    assert_eq!(
        t.strategies[0].fields[0].source,
        Source::Header("x-webhook-id".into())
    );
    assert_eq!(t.strategies[0].placeholders.len(), 1);
    for (bad, message) in [
        (r#"fields = ["header:"]"#, "names no valid header"),
        (r#"fields = ["header:X Id"]"#, "names no valid header"),
        (
            r#"fields = ["/id"]
  placeholders = [" "]"#,
            "a blank one already counts as absent",
        ),
    ] {
        let text = format!(
            "[providers.p]\nevent_type = \"/t\"\n[providers.p.types.t]\ncriticality = \"critical\"\n[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"provider_id\"\n{bad}\n"
        );
        let err = parse_contract("bad.toml", &text).unwrap_err().to_string();
        assert!(err.contains(message), "{bad}: {err}");
    }
    let fingerprint_header = "[providers.p]\nevent_type = \"/t\"\n[providers.p.types.t]\ncriticality = \"critical\"\nvolatile = []\n[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"fingerprint\"\nfields = [\"header:x-id\"]\n";
    let err = parse_contract("bad.toml", fingerprint_header)
        .unwrap_err()
        .to_string();
    assert!(err.contains("never a header"), "{err}");
    let unknown_op = CONTRACT.replace(r#"ops = ["decimal"]"#, r#"ops = ["money"]"#);
    let err = parse_contract("bad.toml", &unknown_op)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("use trim, lowercase, uppercase, utc or decimal"),
        "{err}"
    );
}

#[test]
fn a_batch_is_declared_with_its_items_and_reply_or_refused_with_the_field() {
    let ok = "[providers.adyen]\nevent_type = \"/eventCode\"\nbatch = { items = \"/notificationItems\", item = \"/NotificationRequestItem\", reply = \"[accepted]\" }\n";
    let c = parse_contract("adyen.toml", ok).unwrap_or_else(|e| panic!("{e}"));
    let b = c.provider("adyen").unwrap().batch.as_ref().unwrap();
    assert_eq!(
        (b.items.as_str(), b.item.as_str(), b.reply.as_str()),
        (
            "/notificationItems",
            "/NotificationRequestItem",
            "[accepted]"
        )
    );
    let root = ok.replace("\"/notificationItems\"", "\"\"");
    let err = parse_contract("adyen.toml", &root).unwrap_err().to_string();
    assert!(
        err.contains("field \"batch.items\"") && err.contains("not the whole body"),
        "{err}"
    );
    let no_reply = ok.replace(", reply = \"[accepted]\"", "");
    assert!(parse_contract("adyen.toml", &no_reply).is_err());
}
