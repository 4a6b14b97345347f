//! Shadow strategies in the contract: read like strategies, kept apart from the hierarchy,
//! and keyed on their own by `identity::shadow_identities`.

use oncegate_core::contract::parse;
use oncegate_core::identity::{identify, shadow_identities, Origin};
use oncegate_core::json::{parse as parse_json, Limits};

const EXAMPLE: &str = include_str!("../../../../examples/oncegate.toml");

const SHADOW: &str = r#"
[[providers.payflow.types."refund.created".shadow]]
name = "refund-amount"
version = 1
level = "semantic"
fields = ["/data/payment_id", "/data/amount", "/data/currency"]
confidence = "strong"
"#;

#[test]
fn a_shadow_is_parsed_beside_the_hierarchy_and_keys_on_its_own() {
    let c = parse("c.toml", &format!("{EXAMPLE}{SHADOW}")).unwrap_or_else(|e| panic!("{e}"));
    let t = c.event_type("payflow", "refund.created").unwrap();
    assert_eq!(t.shadow.len(), 1);
    assert_eq!(t.shadow[0].label(), "refund-amount@1");
    assert!(t.strategies.iter().all(|s| s.name != "refund-amount"));

    let doc = parse_json(
        br#"{"type":"refund.created","data":{"payment_id":"pay_1","amount":1500,"currency":"EUR"}}"#,
        &Limits::default(),
    )
    .unwrap();
    let origin = Origin {
        tenant: "acme",
        provider: "payflow",
        env: "live",
    };
    // The hierarchy falls back to the fingerprint (no request reference)…
    let active = identify(t, origin, &doc, &[], b"salt");
    assert_eq!(active.effect.unwrap().strategy, "refund-fingerprint");
    // …while the shadow makes its own strong key.
    let shadows = shadow_identities(t, origin, &doc, &[], b"salt");
    assert_eq!(shadows.len(), 1);
    let key = shadows[0]
        .1
        .effect
        .as_ref()
        .expect("the shadow keys the refund");
    assert_eq!((key.strategy.as_str(), key.version), ("refund-amount", 1));
}

#[test]
fn a_shadow_follows_the_strategy_rules() {
    let twice = SHADOW.replace("refund-amount", "refund-request-ref");
    let e = parse("c.toml", &format!("{EXAMPLE}{twice}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("refund-request-ref@1 appears twice"), "{e}");
    assert!(e.contains("shadow[0]"), "{e}");
    let strong_fingerprint = "\n[[providers.payflow.types.\"refund.created\".shadow]]\nname = \"fp\"\nversion = 2\nlevel = \"fingerprint\"\nconfidence = \"strong\"\n";
    let e = parse("c.toml", &format!("{EXAMPLE}{strong_fingerprint}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("a fingerprint cannot be strong"), "{e}");
}
