//! The body as identification reads it: after the type's declared normalizations (volatile
//! fields removed, declared strings rewritten, unordered arrays sorted), made whole only when a
//! read needs it.

use crate::canon::to_key_form;
use crate::contract::EventType;
use crate::json::Value;
use crate::pointer::Pointer;

/// The body after the type's declared normalizations: volatile fields removed, declared
/// strings rewritten, declared unordered arrays sorted. Nothing undeclared is touched.
pub fn normalized(t: &EventType, doc: &Value) -> (Value, Vec<String>) {
    let mut doc = doc.clone();
    let mut notes = Vec::new();
    for v in &t.volatile {
        v.pointer.remove(&mut doc);
    }
    for (p, ops) in &t.normalize {
        if let Some(value) = p.get_mut(&mut doc) {
            for op in ops {
                if let Err(e) = op.apply(value) {
                    notes.push(format!("{p}: {e}"));
                    break;
                }
            }
        }
    }
    // Deepest first, so an unordered array inside another is sorted before its parent is.
    let mut unordered: Vec<&Pointer> = t.unordered.iter().map(|u| &u.pointer).collect();
    unordered.sort_by_key(|p| std::cmp::Reverse(p.as_str().matches('/').count()));
    for p in unordered {
        match p.get_mut(&mut doc) {
            Some(Value::Array(items)) => {
                let mut keyed: Vec<(String, Value)> =
                    items.drain(..).map(|v| (to_key_form(&v), v)).collect();
                keyed.sort_by(|a, b| a.0.cmp(&b.0));
                items.extend(keyed.into_iter().map(|(_, v)| v));
            }
            Some(other) => notes.push(format!(
                "{p}: declared unordered but is a {}, left as sent",
                other.kind_name()
            )),
            None => {}
        }
    }
    (doc, notes)
}

/// The body after the type's declared normalizations (`normalized`), made whole only when a
/// read needs it. Identification runs for every delivery, and most keys read a few fields,
/// never the whole body, so a type whose declarations each touch one place of their own reads
/// the body as received:
/// - a volatile field that is an object's member is absent, and any other place holds what it
///   held (removing a member moves nothing else);
/// - a declared normalization's place holds its own value rewritten, made from that value
///   alone (with the same notes, in the same order, as the whole copy's).
///
/// Only a read of a place that encloses one of those, or lies inside a rewritten one, or of the
/// whole body (a fingerprint), makes the normalized copy; so does every read of a type whose
/// declarations overlap (a volatile field inside a rewritten place, a rewritten place inside
/// another), removes an array's element or sorts an unordered array.
pub(super) struct Normalized<'a> {
    received: &'a Value,
    /// The volatile members present in the body, when reading it as received is exact.
    removed: Option<Vec<&'a Pointer>>,
    /// Each declared normalization's place present in the body, with its value rewritten, when
    /// reading the body as received is exact.
    rewritten: Vec<(&'a Pointer, Value)>,
    copy: std::cell::OnceCell<Value>,
    pub(super) notes: Vec<String>,
}

impl<'a> Normalized<'a> {
    pub(super) fn of(t: &'a EventType, doc: &'a Value) -> Normalized<'a> {
        let copy = std::cell::OnceCell::new();
        if let Some((removed, rewritten, notes)) = Self::in_place(t, doc) {
            return Normalized {
                received: doc,
                removed: Some(removed),
                rewritten,
                copy,
                notes,
            };
        }
        let (normalized, notes) = normalized(t, doc);
        let _ = copy.set(normalized);
        Normalized {
            received: doc,
            removed: None,
            rewritten: Vec::new(),
            copy,
            notes,
        }
    }

    /// The removed members, the rewritten places and the notes, when the body read in place
    /// (with those) reads as the normalized copy does; `None` when it would not.
    #[allow(clippy::type_complexity)]
    fn in_place(
        t: &'a EventType,
        doc: &Value,
    ) -> Option<(Vec<&'a Pointer>, Vec<(&'a Pointer, Value)>, Vec<String>)> {
        if !t.unordered.is_empty() {
            return None;
        }
        let mut removed = Vec::new();
        for v in &t.volatile {
            match v.pointer.removal(doc) {
                Some(true) => removed.push(&v.pointer),
                // An array's element: the elements after it move down one place.
                Some(false) => return None,
                None => {}
            }
        }
        let mut rewritten = Vec::new();
        let mut notes = Vec::new();
        for (i, (p, ops)) in t.normalize.iter().enumerate() {
            // The volatile fields go first: a place inside one is gone before it is rewritten.
            if removed.iter().any(|r| p.is_within(r)) {
                continue;
            }
            let overlaps = removed.iter().any(|r| r.is_within(p))
                || t.normalize
                    .iter()
                    .enumerate()
                    .any(|(j, (q, _))| i != j && (q.is_within(p) || p.is_within(q)));
            if overlaps {
                return None;
            }
            let Some(value) = p.get(doc) else {
                continue;
            };
            let mut value = value.clone();
            for op in ops {
                if let Err(e) = op.apply(&mut value) {
                    notes.push(format!("{p}: {e}"));
                    break;
                }
            }
            rewritten.push((p, value));
        }
        Some((removed, rewritten, notes))
    }

    /// The normalized body, whole.
    pub(super) fn whole(&self, t: &EventType) -> &Value {
        self.copy.get_or_init(|| normalized(t, self.received).0)
    }

    /// The value at `p` in the normalized body.
    pub(super) fn get(&self, t: &EventType, p: &Pointer) -> Option<&Value> {
        let Some(removed) = &self.removed else {
            return p.get(self.whole(t));
        };
        if removed.iter().any(|r| p.is_within(r)) {
            return None;
        }
        for (n, value) in &self.rewritten {
            if p.as_str() == n.as_str() {
                return Some(value);
            }
            if p.is_within(n) || n.is_within(p) {
                return p.get(self.whole(t));
            }
        }
        if removed.iter().any(|r| r.is_within(p)) {
            p.get(self.whole(t))
        } else {
            p.get(self.received)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::parse;
    use crate::identity::{identify, Origin};
    use crate::json::{parse as parse_json, Limits};

    const CONTRACT: &str = r#"
[providers.p]
event_type = "/type"

[providers.p.types."members"]
criticality = "critical"
discriminants = ["/data"]
volatile = [
  { field = "/sent_at", why = "differs between sends" },
  { field = "/data/meta/trace", why = "differs between sends" },
]
  [[providers.p.types."members".strategies]]
  name = "by-id"
  version = 1
  level = "business_ref"
  fields = ["/data/id"]

[providers.p.types."element"]
criticality = "critical"
volatile = [{ field = "/items/0", why = "a per-send stamp" }]
  [[providers.p.types."element".strategies]]
  name = "by-item"
  version = 1
  level = "business_ref"
  fields = ["/items/1"]

[providers.p.types."rewritten"]
criticality = "critical"
volatile = [{ field = "/sent_at", why = "differs between sends" }]
unordered = [{ field = "/tags", why = "sent in any order" }]
  [[providers.p.types."rewritten".strategies]]
  name = "by-top-id"
  version = 1
  level = "business_ref"
  fields = ["/id"]

[providers.p.types."dated"]
criticality = "critical"
volatile = [{ field = "/sent_at", why = "differs between sends" }]
normalize = [
  { field = "/data/at", ops = ["utc"] },
  { field = "/data/name", ops = ["trim", "lowercase"] },
  { field = "/items/1", ops = ["trim"] },
]
  [[providers.p.types."dated".strategies]]
  name = "by-at"
  version = 1
  level = "business_ref"
  fields = ["/data/id", "/data/at"]

[providers.p.types."dated-in-volatile"]
criticality = "critical"
volatile = [{ field = "/data/meta", why = "differs between sends" }]
normalize = [{ field = "/data/meta/at", ops = ["utc"] }, { field = "/data/at", ops = ["utc"] }]
  [[providers.p.types."dated-in-volatile".strategies]]
  name = "by-id"
  version = 1
  level = "business_ref"
  fields = ["/data/id"]

[providers.p.types."volatile-in-rewritten"]
criticality = "critical"
volatile = [{ field = "/data/meta/trace", why = "differs between sends" }]
normalize = [{ field = "/data/meta", ops = ["trim"] }]
  [[providers.p.types."volatile-in-rewritten".strategies]]
  name = "by-id"
  version = 1
  level = "business_ref"
  fields = ["/data/id"]

[providers.p.types."nested-rewrites"]
criticality = "critical"
normalize = [{ field = "/data", ops = ["trim"] }, { field = "/data/at", ops = ["utc"] }]
  [[providers.p.types."nested-rewrites".strategies]]
  name = "by-id"
  version = 1
  level = "business_ref"
  fields = ["/data/id"]
"#;

    const DOCS: [&str; 5] = [
        r#"{"type":"x","sent_at":"t1","id":"a","tags":["b","a"],"items":["stamp","id-1","id-2"],
            "data":{"id":"d1","meta":{"trace":"t","kept":1},"amount":5}}"#,
        r#"{"type":"x","id":"a","data":{"id":"d1","meta":"not an object"}}"#,
        r#"{"type":"x","sent_at":{"nested":true},"items":[],"data":null}"#,
        r#"{"type":"x","sent_at":"t2","items":["s"," id-1 "],"data":{"id":"d1","at":"2026-03-05T17:00:00+01:00",
            "name":" Ada ","meta":{"at":"2026-03-05T17:00:00+01:00","trace":"t"}}}"#,
        r#"{"type":"x","data":{"id":"d1","at":"not a date","name":7,"meta":{"at":12}}}"#,
    ];

    const PLACES: [&str; 19] = [
        "",
        "/data/at",
        "/data/name",
        "/data/meta/at",
        "/items/2",
        "/type",
        "/sent_at",
        "/sent_at/nested",
        "/sent_atx",
        "/data",
        "/data/id",
        "/data/meta",
        "/data/meta/trace",
        "/data/meta/kept",
        "/items",
        "/items/0",
        "/items/1",
        "/tags",
        "/tags/0",
    ];

    /// Every place reads in the view what it holds in the normalized copy, for a type whose
    /// volatile fields are members (read as received), one that removes an array element and
    /// one that rewrites (both read from the copy).
    #[test]
    fn the_view_reads_what_the_normalized_body_holds() {
        let contract = parse("c.toml", CONTRACT).unwrap();
        for name in [
            "members",
            "element",
            "rewritten",
            "dated",
            "dated-in-volatile",
            "volatile-in-rewritten",
            "nested-rewrites",
        ] {
            let t = contract.event_type("p", name).unwrap();
            for text in DOCS {
                let doc = parse_json(text.as_bytes(), &Limits::default()).unwrap();
                let (copy, notes) = normalized(t, &doc);
                let view = Normalized::of(t, &doc);
                assert_eq!(view.notes, notes);
                for place in PLACES {
                    let p = Pointer::parse(place).unwrap();
                    assert_eq!(view.get(t, &p), p.get(&copy), "{name}: {place} in {text}");
                }
                assert_eq!(view.whole(t), &copy);
            }
        }
        // The members' type reads as received: no copy is made for its key's fields.
        let t = contract.event_type("p", "members").unwrap();
        let doc = parse_json(DOCS[0].as_bytes(), &Limits::default()).unwrap();
        let view = Normalized::of(t, &doc);
        view.get(t, &Pointer::parse("/data/id").unwrap());
        view.get(t, &Pointer::parse("/sent_at").unwrap());
        assert!(view.copy.get().is_none());
        // A place enclosing a volatile field needs the copy.
        view.get(t, &Pointer::parse("/data").unwrap());
        assert!(view.copy.get().is_some());

        // A rewritten place reads its own rewritten value, with no copy of the body.
        let t = contract.event_type("p", "dated").unwrap();
        let doc = parse_json(DOCS[3].as_bytes(), &Limits::default()).unwrap();
        let view = Normalized::of(t, &doc);
        let at = view.get(t, &Pointer::parse("/data/at").unwrap());
        assert_eq!(at.and_then(Value::as_str), Some("2026-03-05T16:00:00Z"));
        let name = view.get(t, &Pointer::parse("/data/name").unwrap());
        assert_eq!(name.and_then(Value::as_str), Some("ada"));
        view.get(t, &Pointer::parse("/data/id").unwrap());
        assert!(view.copy.get().is_none());
        // A place enclosing a rewritten one needs the copy.
        view.get(t, &Pointer::parse("/data").unwrap());
        assert!(view.copy.get().is_some());
        // Overlapping declarations read from the copy from the start.
        for name in ["volatile-in-rewritten", "nested-rewrites"] {
            let t = contract.event_type("p", name).unwrap();
            let view = Normalized::of(t, &doc);
            assert!(view.removed.is_none(), "{name}");
        }
    }

    /// A date sent with an offset and the same instant sent in UTC make one key, and a failed
    /// rewrite is noted once, as the whole copy notes it.
    #[test]
    fn a_rewritten_field_keys_as_its_normal_form() {
        let contract = parse("c.toml", CONTRACT).unwrap();
        let t = contract.event_type("p", "dated").unwrap();
        let origin = Origin {
            tenant: "t",
            provider: "p",
            env: "live",
        };
        let key = |text: &str| {
            let doc = parse_json(text.as_bytes(), &Limits::default()).unwrap();
            identify(t, origin, &doc, &[], b"salt")
        };
        let offset = key(
            r#"{"type":"x","sent_at":"a","data":{"id":"d1","at":"2026-03-05T17:00:00+01:00"}}"#,
        );
        let utc =
            key(r#"{"type":"x","sent_at":"b","data":{"id":"d1","at":"2026-03-05T16:00:00Z"}}"#);
        let later = key(r#"{"type":"x","data":{"id":"d1","at":"2026-03-05T17:00:00Z"}}"#);
        let offset_key = offset.effect.expect("a key").key;
        assert_eq!(offset_key, utc.effect.expect("a key").key);
        assert_ne!(offset_key, later.effect.expect("a key").key);
        let failed = key(r#"{"type":"x","data":{"id":"d1","at":"not a date","name":" Ada "}}"#);
        assert_eq!(failed.notes.len(), 1, "{:?}", failed.notes);
        assert!(
            failed.notes[0].starts_with("/data/at: "),
            "{:?}",
            failed.notes
        );
    }
}
