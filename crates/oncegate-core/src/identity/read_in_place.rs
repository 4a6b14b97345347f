//! Identification reading the body in place gives what the whole normalized copy gives.

use super::*;
use crate::contract::{parse, Contract, Declared};
use crate::json::{parse as parse_json, Limits};

const CONTRACT: &str = r#"
[providers.p]
event_type = "/type"

# The shipped example's shape: a volatile member and one rewritten date; strategies that read
# the date, the object enclosing it and the whole body.
[providers.p.types."captured"]
criticality = "critical"
resource = "/data/payment_id"
discriminants = ["/data/amount", "/data"]
volatile = [{ field = "/sent_at", why = "set at each send" }]
normalize = [{ field = "/data/at", ops = ["utc"] }]
  [[providers.p.types."captured".strategies]]
  name = "captured/by-at"
  version = 1
  level = "business_ref"
  fields = ["/data/id", "/data/at"]
  [[providers.p.types."captured".strategies]]
  name = "captured/by-data"
  version = 1
  level = "semantic"
  fields = ["/data"]
  [[providers.p.types."captured".strategies]]
  name = "captured/part"
  version = 1
  level = "fingerprint"
  fields = ["/data"]
  [[providers.p.types."captured".strategies]]
  name = "captured/whole"
  version = 1
  level = "fingerprint"

# A rewritten place inside a volatile member (gone before it is rewritten) beside one that is not.
[providers.p.types."in-volatile"]
criticality = "critical"
discriminants = ["/data/at"]
volatile = [
  { field = "/sent_at", why = "set at each send" },
  { field = "/data/meta", why = "differs between sends" },
]
normalize = [{ field = "/data/meta/at", ops = ["utc"] }, { field = "/data/at", ops = ["utc"] }]
  [[providers.p.types."in-volatile".strategies]]
  name = "in-volatile/by-meta-at"
  version = 1
  level = "business_ref"
  fields = ["/data/meta/at"]
  [[providers.p.types."in-volatile".strategies]]
  name = "in-volatile/by-at"
  version = 1
  level = "business_ref"
  fields = ["/data/at"]
  [[providers.p.types."in-volatile".strategies]]
  name = "in-volatile/by-data"
  version = 1
  level = "semantic"
  fields = ["/data"]
  [[providers.p.types."in-volatile".strategies]]
  name = "in-volatile/whole"
  version = 1
  level = "fingerprint"

# A rewritten array element, and several ops on one place.
[providers.p.types."indexed"]
criticality = "critical"
discriminants = ["/items", "/items/1"]
volatile = [{ field = "/sent_at", why = "set at each send" }]
normalize = [
  { field = "/items/1", ops = ["trim", "lowercase"] },
  { field = "/data/name", ops = ["trim", "uppercase"] },
  { field = "/data/at", ops = ["utc"] },
]
  [[providers.p.types."indexed".strategies]]
  name = "indexed/by-item"
  version = 1
  level = "business_ref"
  fields = ["/items/1", "/data/name"]
  [[providers.p.types."indexed".strategies]]
  name = "indexed/by-items"
  version = 1
  level = "semantic"
  fields = ["/items", "/data/id"]
  [[providers.p.types."indexed".strategies]]
  name = "indexed/whole"
  version = 1
  level = "fingerprint"

# A rewritten sensitive field, read by a strategy that rewrites it again, with a header.
[providers.p.types."sensitive"]
criticality = "critical"
discriminants = ["/data/email"]
sensitive = ["/data/email"]
volatile = []
normalize = [{ field = "/data/email", ops = ["trim", "lowercase"] }, { field = "/data/at", ops = ["utc"] }]
  [[providers.p.types."sensitive".strategies]]
  name = "sensitive/by-email"
  version = 1
  level = "business_ref"
  fields = ["/data/email", "header:X-Ref", "/data/at"]
  normalize = { "/data/email" = ["uppercase"] }
  [[providers.p.types."sensitive".strategies]]
  name = "sensitive/whole"
  version = 1
  level = "fingerprint"

# Declarations the view cannot read in place: an array element removed, a rewritten place
# inside another, a volatile member inside a rewritten place, an unordered array.
[providers.p.types."element"]
criticality = "critical"
volatile = [{ field = "/items/0", why = "a per-send stamp" }]
normalize = [{ field = "/items/1", ops = ["trim"] }]
  [[providers.p.types."element".strategies]]
  name = "element/by-item"
  version = 1
  level = "business_ref"
  fields = ["/items/1"]
  [[providers.p.types."element".strategies]]
  name = "element/whole"
  version = 1
  level = "fingerprint"

[providers.p.types."nested-rewrites"]
criticality = "critical"
discriminants = ["/data"]
volatile = []
normalize = [{ field = "/data", ops = ["trim"] }, { field = "/data/at", ops = ["utc"] }]
  [[providers.p.types."nested-rewrites".strategies]]
  name = "nested-rewrites/by-at"
  version = 1
  level = "business_ref"
  fields = ["/data/at"]
  [[providers.p.types."nested-rewrites".strategies]]
  name = "nested-rewrites/by-data"
  version = 1
  level = "semantic"
  fields = ["/data"]

[providers.p.types."volatile-in-rewritten"]
criticality = "critical"
discriminants = ["/data/meta"]
volatile = [{ field = "/data/meta/trace", why = "differs between sends" }]
normalize = [{ field = "/data/meta", ops = ["trim"] }]
  [[providers.p.types."volatile-in-rewritten".strategies]]
  name = "volatile-in-rewritten/by-meta"
  version = 1
  level = "business_ref"
  fields = ["/data/meta"]

[providers.p.types."unordered"]
criticality = "critical"
volatile = []
unordered = [{ field = "/items", why = "sent in any order" }]
normalize = [{ field = "/data/at", ops = ["utc"] }]
  [[providers.p.types."unordered".strategies]]
  name = "unordered/by-items"
  version = 1
  level = "business_ref"
  fields = ["/items", "/data/at"]
"#;

const TYPES: [&str; 8] = [
    "captured",
    "in-volatile",
    "indexed",
    "sensitive",
    "element",
    "nested-rewrites",
    "volatile-in-rewritten",
    "unordered",
];

fn origin() -> Origin<'static> {
    Origin {
        tenant: "acme",
        provider: "p",
        env: "live",
    }
}

/// The same type with an unordered array declared at a place no body has: `normalized`
/// does nothing more, but the view must make the whole copy (the reference).
fn copied(t: &EventType) -> EventType {
    let mut t = t.clone();
    t.unordered.push(Declared {
        pointer: Pointer::parse("/no such place").unwrap(),
        why: "forces the whole normalized copy".to_owned(),
    });
    t
}

/// Every body made of these parts (each member absent or one of its values).
fn bodies() -> Vec<String> {
    let sent_at: &[Option<&str>] = &[None, Some(r#""t1""#), Some(r#"{"nested":true}"#)];
    let at: &[Option<&str>] = &[
        None,
        Some(r#""2026-03-05T17:00:00+01:00""#),
        Some(r#""2026-03-05T16:00:00Z""#),
        Some(r#""not a date""#),
        Some("12"),
        Some("null"),
    ];
    let meta: &[Option<&str>] = &[
        None,
        Some(r#"{"at":"2026-03-05T17:00:00+01:00","trace":"t"}"#),
        Some(r#"{"at":12,"trace":"u"}"#),
        Some(r#""not an object""#),
    ];
    let name: &[Option<&str>] = &[None, Some(r#"" Ada ""#), Some("7")];
    let email: &[Option<&str>] = &[None, Some(r#"" A@Example.COM ""#)];
    let items: &[Option<&str>] = &[
        None,
        Some(r#"["stamp"," ID-1 ","x"]"#),
        Some(r#"["s"]"#),
        Some(r#"[1,{"k":2}]"#),
    ];
    let member = |name: &str, v: Option<&str>| v.map(|v| format!("\"{name}\":{v}"));
    let mut out = vec![
        r#"{"type":"x"}"#.to_owned(),
        r#"{"type":"x","data":null}"#.to_owned(),
        r#"{"type":"x","sent_at":"t","data":"not an object","items":"no"}"#.to_owned(),
    ];
    for s in sent_at {
        for a in at {
            for m in meta {
                for n in name {
                    for e in email {
                        for i in items {
                            let data: Vec<String> = [
                                Some(r#""id":"d1","payment_id":"pay_1","amount":1500"#.into()),
                                member("at", *a),
                                member("meta", *m),
                                member("name", *n),
                                member("email", *e),
                            ]
                            .into_iter()
                            .flatten()
                            .collect();
                            let top: Vec<String> = [
                                Some(r#""type":"x""#.to_owned()),
                                member("sent_at", *s),
                                Some(format!("\"data\":{{{}}}", data.join(","))),
                                member("items", *i),
                            ]
                            .into_iter()
                            .flatten()
                            .collect();
                            out.push(format!("{{{}}}", top.join(",")));
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn reading_in_place_identifies_as_the_whole_copy() {
    let contract: Contract = parse("c.toml", CONTRACT).unwrap_or_else(|e| panic!("{e}"));
    let headers = [("X-Ref".to_owned(), " r-1 ".to_owned())];
    let bodies = bodies();
    let mut keyed = 0;
    let mut noted = 0;
    for name in TYPES {
        let t = contract.event_type("p", name).unwrap();
        let reference = copied(t);
        for text in &bodies {
            let doc = parse_json(text.as_bytes(), &Limits::default()).unwrap();
            let got = identify(t, origin(), &doc, &headers, b"salt");
            let want = identify(&reference, origin(), &doc, &headers, b"salt");
            assert_eq!(got, want, "{name}: {text}");
            keyed += usize::from(got.effect.is_some());
            noted += usize::from(!got.notes.is_empty());
            // Each strategy alone, so every one reads every body (not only the first that
            // makes a key).
            for (s, r) in t.strategies.iter().zip(&reference.strategies) {
                let got = identify_with(
                    t,
                    std::slice::from_ref(s),
                    origin(),
                    &doc,
                    &headers,
                    b"salt",
                );
                let want = identify_with(
                    &reference,
                    std::slice::from_ref(r),
                    origin(),
                    &doc,
                    &headers,
                    b"salt",
                );
                assert_eq!(got, want, "{name}, strategy {}: {text}", s.name);
            }
        }
    }
    // The bodies exercise what they are meant to: keys made, and failed rewrites noted.
    assert!(keyed > bodies.len() * 4, "{keyed} keys");
    assert!(noted > bodies.len(), "{noted} noted");
}

/// A date sent with an offset keys as the same instant sent in UTC, and shows its UTC form.
#[test]
fn a_rewritten_date_keys_as_its_utc_form() {
    let contract = parse("c.toml", CONTRACT).unwrap();
    let t = contract.event_type("p", "captured").unwrap();
    let key = |text: &str| {
        let doc = parse_json(text.as_bytes(), &Limits::default()).unwrap();
        identify(t, origin(), &doc, &[], b"salt")
            .effect
            .expect("a key")
    };
    let offset = key(
        r#"{"type":"x","sent_at":"a","data":{"id":"d1","payment_id":"pay_1","at":"2026-03-05T17:00:00+01:00"}}"#,
    );
    let utc = key(
        r#"{"type":"x","sent_at":"b","data":{"id":"d1","payment_id":"pay_1","at":"2026-03-05T16:00:00Z"}}"#,
    );
    let other =
        key(r#"{"type":"x","data":{"id":"d1","payment_id":"pay_1","at":"2026-03-05T17:00:00Z"}}"#);
    assert_eq!(offset.strategy, "captured/by-at");
    assert_eq!(offset.fields[1].shown, "\"2026-03-05T16:00:00Z\"");
    assert_eq!(offset, utc);
    assert_ne!(offset.key, other.key);
}
