//! Fuzzes the contract's parser and checker with TOML text: any text is a contract or a list
//! of errors each naming a line inside the text, never a panic; and an accepted contract
//! identifies a few fixed bodies with every one of its event types without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oncegate_core::contract::parse;
use oncegate_core::identity::{
    event_type_of, identify, normalized, shadow_identities, transport_key, Origin,
};
use oncegate_core::json::{parse as parse_json, Limits};

/// Bodies an accepted contract is tried on: one shaped like the example contract's events, one
/// with nested arrays and numbers, one that is not an object.
const BODIES: [&str; 3] = [
    r#"{"id":"evt_1","type":"refund.created","sent_at":"2026-03-05T16:02:11Z","attempt":1,
        "data":{"id":"re_1","payment_id":"pay_7Hq2","request_ref":"RR-1","amount":1500,
        "currency":"EUR","customer":{"email":"A@Example.com "},"items":[{"sku":"b"},{"sku":"a"}]}}"#,
    r#"{"event":{"type":"orders/paid","id":12,"tags":[3,1,2],"at":"2026-01-01T00:00:00+02:00"},
        "order":{"id":1e2,"total":"10.00","lines":[[1,2],[3]]}}"#,
    r#"["not", "an", "object"]"#,
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.bytes().filter(|b| *b == b'\n').count() + 1;
    let contract = match parse("fuzz.toml", text) {
        Ok(contract) => contract,
        Err(errors) => {
            assert!(!errors.0.is_empty(), "a refusal without an error");
            for e in &errors.0 {
                if let Some(line) = e.line {
                    assert!(
                        (1..=lines).contains(&line),
                        "line {line} of a {lines}-line contract: {e}"
                    );
                }
                assert!(!e.message.is_empty(), "an error without a message: {e:?}");
            }
            let _ = errors.to_string();
            return;
        }
    };
    let salt = b"fuzz salt";
    for body in BODIES {
        let doc = parse_json(body.as_bytes(), &Limits::default()).expect("a fixed body reads");
        for (name, provider) in &contract.providers {
            let origin = Origin {
                tenant: "acme",
                provider: name,
                env: "live",
            };
            let headers = [("x-event-type".to_owned(), "refund.created".to_owned())];
            let _ = event_type_of(provider, &headers, &doc);
            let _ = transport_key(origin, Some("dlv-1"), body.as_bytes());
            for t in provider.types.values() {
                let _ = normalized(t, &doc);
                let _ = identify(t, origin, &doc, &headers, salt);
                let _ = shadow_identities(t, origin, &doc, &headers, salt);
            }
        }
    }
});
