//! Corpus: the JSON Lines record of one delivery, field-path statistics, stability across
//! retries, candidate keys ranked against labels, and the tally of a contract replay.
//!
//! Keys are chosen from evidence: a corpus of real deliveries, some labeled with the business
//! operation they carry. This module is the pure half of `oncegate corpus export|analyze|replay`:
//! it reads and writes records and computes statistics, but never touches a file, the clock or
//! the network (the CLI does, and feeds the records in).
//!
//! # The corpus format (JSON Lines)
//!
//! One delivery per line, one JSON object each:
//!
//! ```text
//! {"tenant":"acme","provider":"payflow","env":"live","event_type":"refund.created",
//!  "headers":{"x-shopline-delivery":"whd_1"},"body":{…},"received_at":"2026-03-01T08:14:46Z",
//!  "label":{"operation":"op-refund-0007"}}
//! ```
//!
//! - `provider` is required; `tenant` defaults to `default`, `env` to `live`.
//! - `event_type` is optional: when absent it is read as the contract says (a body pointer or a
//!   header).
//! - `headers`: the provider headers worth keeping (delivery id, event type), names lowercase.
//! - `body`: the delivery's JSON body as a JSON value, members and number spellings as sent.
//!   A body that is not JSON is `"body_base64":"…"` with `"body_reason":"why it is not JSON"`.
//! - `received_at` (RFC 3339), `delivery_id` and `decision` are informative.
//! - `label.operation` names the real business operation: deliveries with the same label are
//!   retries of one operation, different labels are distinct operations. An exported queue
//!   resolution also says `label.resolution` (`distinct`/`duplicate`) and `label.reference`
//!   (the reference delivery).
//!
//! Captures from outside oncegate use the same format, so traffic can be analyzed before a
//! contract exists.

mod analysis;
mod record;
mod tally;

pub use analysis::{analyze, Analysis, Candidate, Observation, PathStats, Stability};
pub use record::{to_compact, write_compact, Body, Label, Record, RecordError};
pub use tally::{tally, ReplayOutcome, ReplayTally};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{self, Limits, Value};
    use crate::matrix::Action;
    use crate::strategy::Normalization;

    fn doc(text: &str) -> Value {
        json::parse(text.as_bytes(), &Limits::default()).unwrap()
    }

    fn stats<'a>(a: &'a Analysis, path: &str) -> &'a PathStats {
        a.paths.iter().find(|p| p.path == path).unwrap()
    }

    #[test]
    fn record_round_trips_with_spellings_kept() {
        let line = r#"{"tenant":"acme","provider":"payflow","env":"live","headers":{"X-Id":"1"},"body":{"b":4.99e3,"a":[1,2]},"label":{"operation":"op-1"}}"#;
        let r = Record::parse_line(line).unwrap();
        assert_eq!(r.header("x-id"), Some("1"));
        assert_eq!(to_compact(r.json().unwrap()), r#"{"b":4.99e3,"a":[1,2]}"#);
        let again = Record::parse_line(&r.to_line()).unwrap();
        assert_eq!(again, r);
    }

    #[test]
    fn record_errors_name_the_field() {
        let e = Record::parse_line(r#"{"body":{}}"#).unwrap_err();
        assert_eq!(e.to_string(), "`provider` is required");
        let e = Record::parse_line(r#"{"provider":"p"}"#).unwrap_err();
        assert_eq!(e.to_string(), "`body` is required");
        let e = Record::parse_line(r#"{"provider":"p","body":1,"body":2}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate object key"), "{e}");
        let e = Record::parse_line("[]").unwrap_err();
        assert_eq!(e.to_string(), "the line is a JSON array, not an object");
    }

    #[test]
    fn stability_classes_from_retries() {
        let docs = [
            doc(
                r#"{"id":"a","sent":"1","ref":"RR_1","tags":["x","y"],"at":"2026-01-01T01:00:00+01:00","opt":1}"#,
            ),
            doc(
                r#"{"id":"a","sent":"2","ref":" rr_1","tags":["y","x"],"at":"2026-01-01T00:00:00Z"}"#,
            ),
            doc(
                r#"{"id":"b","sent":"3","ref":"RR_2","tags":["x"],"at":"2026-01-02T00:00:00Z","opt":1}"#,
            ),
            doc(
                r#"{"id":"b","sent":"4","ref":"RR_2","tags":["x"],"at":"2026-01-02T00:00:00Z","opt":1}"#,
            ),
        ];
        let groups = ["a", "a", "b", "b"];
        let obs: Vec<Observation> = docs
            .iter()
            .zip(groups)
            .map(|(d, g)| Observation {
                doc: d,
                group: Some(g),
                label: Some(g),
            })
            .collect();
        let a = analyze(&obs);
        assert_eq!(a.repeated_events, 2);
        assert_eq!(stats(&a, "/id").stability, Stability::Stable);
        assert_eq!(stats(&a, "/sent").stability, Stability::Volatile);
        assert_eq!(
            stats(&a, "/ref").stability,
            Stability::StableAfter(vec![Normalization::Trim, Normalization::Lowercase])
        );
        assert_eq!(stats(&a, "/tags").stability, Stability::Reordered);
        assert_eq!(
            stats(&a, "/at").stability,
            Stability::StableAfter(vec![Normalization::Utc])
        );
        assert_eq!(stats(&a, "/opt").stability, Stability::Conditional);
        assert_eq!(stats(&a, "/opt").presence, 0.75);
        // Absent from a retry of event a: it changed within an event, so it is no key material.
        assert_eq!(stats(&a, "/opt").key_ops, None);
        assert_eq!(stats(&a, "/sent").key_ops, None);
        assert_eq!(stats(&a, "/at").key_ops, Some(vec![Normalization::Utc]));
        assert_eq!(stats(&a, "/tags/*").path, "/tags/*");
        assert_eq!(stats(&a, "/sent").distinct_rate, 1.0);
        // The best candidate merges nothing and splits nothing.
        let best = &a.candidates[0];
        assert_eq!((best.merges, best.splits), (0, 0), "{best:?}");
        assert_eq!(best.fields, vec!["/id".to_owned()]);
    }

    #[test]
    fn candidates_rank_merges_first() {
        // Two distinct operations share amount and payment; only ref tells them apart.
        let docs = [
            doc(r#"{"pay":"p1","amount":15,"ref":"r1"}"#),
            doc(r#"{"pay":"p1","amount":15,"ref":"r2"}"#),
            doc(r#"{"pay":"p2","amount":20,"ref":"r3"}"#),
            doc(r#"{"pay":"p2","amount":20,"ref":"r3"}"#),
        ];
        let labels = ["o1", "o2", "o3", "o3"];
        let obs: Vec<Observation> = docs
            .iter()
            .zip(labels)
            .map(|(d, l)| Observation {
                doc: d,
                group: Some(l),
                label: Some(l),
            })
            .collect();
        let a = analyze(&obs);
        let find = |f: &[&str]| {
            a.candidates
                .iter()
                .find(|c| c.fields == f.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(
            a.candidates[0].fields,
            vec!["/ref".to_owned()],
            "{:?}",
            a.candidates
        );
        let merged = find(&["/pay"]).expect("pay is scored");
        assert_eq!(merged.merges, 1);
        // pay+amount is no better than pay alone, so it is dropped as redundant.
        assert!(find(&["/amount", "/pay"]).is_none());
        assert_eq!(a.operations, 3);
    }

    #[test]
    fn tally_counts_silent_loss_and_double_application() {
        let o = |action, effect: &str, label: &str| ReplayOutcome {
            strategy: "s@1".to_owned(),
            strong: true,
            action,
            effect: Some(effect.to_owned()),
            label: Some(label.to_owned()),
        };
        let t = tally(&[
            o(Action::Process, "e1", "op1"),
            o(Action::Ignore, "e1", "op1"),
            o(Action::Ignore, "e1", "op2"),
            o(Action::Process, "e2", "op3"),
            o(Action::Process, "e3", "op3"),
            o(Action::Quarantine, "e3", "op4"),
        ]);
        let s = &t["s@1"];
        assert_eq!(s.deliveries, 6);
        assert_eq!(s.false_positives, 1);
        assert_eq!(s.false_negatives, 1);
        assert_eq!(s.collisions, 1);
        assert!((s.queue_rate() - 1.0 / 6.0).abs() < 1e-9);
    }
}
