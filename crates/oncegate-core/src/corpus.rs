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

use crate::canon::{to_jcs, to_key_form};
use crate::json::{self, Limits, Object, Value};
use crate::matrix::Action;
use crate::strategy::Normalization;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

/// Why one corpus line could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The line breaks a rule of the strict reader (duplicate names included).
    #[error("the line is not strict JSON: {0}")]
    Json(#[from] json::JsonError),
    /// The line is JSON but not an object; holds the JSON kind it is.
    #[error("the line is a JSON {0}, not an object")]
    NotAnObject(&'static str),
    /// A required member (`provider`, `body`) is absent or null; holds its name.
    #[error("`{0}` is required")]
    Missing(&'static str),
    /// A member holds the wrong kind of value.
    #[error("`{field}` must be {expected}")]
    Kind {
        /// The member's name.
        field: &'static str,
        /// What it must be, as a phrase (`a string`, `an object of strings`…).
        expected: &'static str,
    },
}

/// The body of a recorded delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// A JSON body, members in document order and numbers as spelled.
    Json(Value),
    /// A body that is not JSON, base64 as recorded, with the reason it did not parse.
    Base64 {
        /// The body's bytes in standard base64, as recorded (`body_base64`).
        data: String,
        /// Why it is not JSON, as recorded (`body_reason`; empty when none was).
        reason: String,
    },
}

/// The label of a delivery: which real business operation it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The real business operation (`label.operation`, any stable name): deliveries with the
    /// same one are retries of one operation, different ones are distinct operations.
    pub operation: String,
    /// `distinct` or `duplicate` when the label comes from a queue resolution.
    pub resolution: Option<String>,
    /// The reference delivery of that resolution.
    pub reference: Option<String>,
}

/// One delivery of a corpus.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The tenant it was received for (default `default`).
    pub tenant: String,
    /// The provider's name, as the contract spells it (required).
    pub provider: String,
    /// The environment (default `live`).
    pub env: String,
    /// The event type, when recorded; otherwise it is read from the body or headers as the
    /// contract says.
    pub event_type: Option<String>,
    /// Header names lowercase, in the order recorded.
    pub headers: Vec<(String, String)>,
    /// The body as sent: JSON with members and number spellings kept, or base64.
    pub body: Body,
    /// When oncegate received it (RFC 3339), informative only.
    pub received_at: Option<String>,
    /// The oncegate delivery id it was journaled as (`dlv_…`), informative only.
    pub delivery_id: Option<String>,
    /// The action it was given when captured, informative only: a replay decides afresh.
    pub decision: Option<String>,
    /// Which real operation it carries, when someone labeled it.
    pub label: Option<Label>,
}

fn string_member(
    o: &Object,
    field: &'static str,
    required: bool,
) -> Result<Option<String>, RecordError> {
    match o.get(field) {
        None | Some(Value::Null) if required => Err(RecordError::Missing(field)),
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RecordError::Kind {
            field,
            expected: "a string",
        }),
    }
}

impl Record {
    /// Reads one corpus line with oncegate's strict JSON reader (duplicate names are refused
    /// here as they are in bodies, so a line cannot be read two ways).
    pub fn parse_line(line: &str) -> Result<Record, RecordError> {
        let limits = Limits {
            max_depth: 256,
            max_bytes: line.len().max(1),
        };
        let doc = json::parse(line.as_bytes(), &limits)?;
        let Value::Object(o) = doc else {
            return Err(RecordError::NotAnObject(doc.kind_name()));
        };
        let provider = string_member(&o, "provider", true)?.unwrap_or_default();
        let mut headers = Vec::new();
        match o.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(h)) => {
                for (name, value) in h.iter() {
                    let Value::String(v) = value else {
                        return Err(RecordError::Kind {
                            field: "headers",
                            expected: "an object of strings",
                        });
                    };
                    headers.push((name.to_ascii_lowercase(), v.clone()));
                }
            }
            Some(_) => {
                return Err(RecordError::Kind {
                    field: "headers",
                    expected: "an object of strings",
                })
            }
        }
        let body = match (o.get("body"), string_member(&o, "body_base64", false)?) {
            (Some(b), None) => Body::Json(b.clone()),
            (None, Some(data)) => Body::Base64 {
                data,
                reason: string_member(&o, "body_reason", false)?.unwrap_or_default(),
            },
            (None, None) => return Err(RecordError::Missing("body")),
            (Some(_), Some(_)) => {
                return Err(RecordError::Kind {
                    field: "body",
                    expected: "given once: either `body` or `body_base64`",
                })
            }
        };
        let label = match o.get("label") {
            None | Some(Value::Null) => None,
            Some(Value::Object(l)) => Some(Label {
                operation: string_member(l, "operation", true)
                    .map_err(|_| RecordError::Kind {
                        field: "label",
                        expected: "an object with an `operation` string",
                    })?
                    .unwrap_or_default(),
                resolution: string_member(l, "resolution", false).unwrap_or(None),
                reference: string_member(l, "reference", false).unwrap_or(None),
            }),
            Some(_) => {
                return Err(RecordError::Kind {
                    field: "label",
                    expected: "an object with an `operation` string",
                })
            }
        };
        Ok(Record {
            tenant: string_member(&o, "tenant", false)?.unwrap_or_else(|| "default".to_owned()),
            provider,
            env: string_member(&o, "env", false)?.unwrap_or_else(|| "live".to_owned()),
            event_type: string_member(&o, "event_type", false)?,
            headers,
            body,
            received_at: string_member(&o, "received_at", false)?,
            delivery_id: string_member(&o, "delivery_id", false)?,
            decision: string_member(&o, "decision", false)?,
            label,
        })
    }

    /// The value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON body, if the delivery had one.
    pub fn json(&self) -> Option<&Value> {
        match &self.body {
            Body::Json(v) => Some(v),
            Body::Base64 { .. } => None,
        }
    }

    /// Writes the record as one corpus line (no trailing newline). The body keeps its member
    /// order and number spellings, so a replay re-encodes it as the provider sent it, except
    /// for insignificant whitespace.
    pub fn to_line(&self) -> String {
        let mut out = String::from("{");
        let member = |name: &str, out: &mut String| {
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(&to_jcs(&Value::String(name.to_owned())));
            out.push(':');
        };
        let text = |s: &str| to_jcs(&Value::String(s.to_owned()));
        member("tenant", &mut out);
        out.push_str(&text(&self.tenant));
        member("provider", &mut out);
        out.push_str(&text(&self.provider));
        member("env", &mut out);
        out.push_str(&text(&self.env));
        if let Some(t) = &self.event_type {
            member("event_type", &mut out);
            out.push_str(&text(t));
        }
        for (name, value) in [
            ("delivery_id", &self.delivery_id),
            ("received_at", &self.received_at),
            ("decision", &self.decision),
        ] {
            if let Some(v) = value {
                member(name, &mut out);
                out.push_str(&text(v));
            }
        }
        member("headers", &mut out);
        out.push('{');
        for (i, (k, v)) in self.headers.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&text(k));
            out.push(':');
            out.push_str(&text(v));
        }
        out.push('}');
        match &self.body {
            Body::Json(v) => {
                member("body", &mut out);
                write_compact(v, &mut out);
            }
            Body::Base64 { data, reason } => {
                member("body_base64", &mut out);
                out.push_str(&text(data));
                member("body_reason", &mut out);
                out.push_str(&text(reason));
            }
        }
        if let Some(l) = &self.label {
            member("label", &mut out);
            out.push_str("{\"operation\":");
            out.push_str(&text(&l.operation));
            if let Some(r) = &l.resolution {
                out.push_str(",\"resolution\":");
                out.push_str(&text(r));
            }
            if let Some(r) = &l.reference {
                out.push_str(",\"reference\":");
                out.push_str(&text(r));
            }
            out.push('}');
        }
        out.push('}');
        out
    }
}

/// Writes a value without insignificant whitespace, members in document order and numbers as
/// spelled: the bytes a provider would have sent, minus whitespace. (The canonical form would
/// hide exactly the re-encodings a replay must exercise.)
pub fn write_compact(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(n.literal()),
        Value::String(_) => out.push_str(&to_jcs(value)),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_compact(v, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, (k, v)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&to_jcs(&Value::String(k.to_owned())));
                out.push(':');
                write_compact(v, out);
            }
            out.push('}');
        }
    }
}

/// [`write_compact`] into a new string.
pub fn to_compact(value: &Value) -> String {
    let mut out = String::new();
    write_compact(value, &mut out);
    out
}

/// Escapes one reference token of a JSON Pointer (RFC 6901: `~` → `~0`, `/` → `~1`).
fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// One place of a document: its concrete pointer, its statistics path (array indexes written
/// `*`), and its value.
struct Place<'v> {
    pointer: String,
    wildcard: String,
    value: &'v Value,
}

/// Every place of a document except the root, parents before children.
fn places(doc: &Value) -> Vec<Place<'_>> {
    fn walk<'v>(v: &'v Value, pointer: &str, wildcard: &str, out: &mut Vec<Place<'v>>) {
        match v {
            Value::Object(o) => {
                for (k, child) in o.iter() {
                    let t = escape_token(k);
                    let p = format!("{pointer}/{t}");
                    let w = format!("{wildcard}/{t}");
                    out.push(Place {
                        pointer: p.clone(),
                        wildcard: w.clone(),
                        value: child,
                    });
                    walk(child, &p, &w, out);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    let p = format!("{pointer}/{i}");
                    let w = format!("{wildcard}/*");
                    out.push(Place {
                        pointer: p.clone(),
                        wildcard: w.clone(),
                        value: child,
                    });
                    walk(child, &p, &w, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(doc, "", "", &mut out);
    out
}

/// How a field behaves across deliveries of the same event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stability {
    /// Same value in every delivery of every event seen more than once.
    Stable,
    /// Same value once normalized with these operations (case, whitespace, UTC dates).
    StableAfter(Vec<Normalization>),
    /// An array whose elements are the same but arrive in another order.
    Reordered,
    /// Changes between deliveries of one event (send times, attempt counters, signatures).
    Volatile,
    /// Present in some deliveries of one event and absent in others, or absent from some
    /// deliveries overall.
    Conditional,
    /// No event was seen more than once, so nothing can be said.
    Unobserved,
}

impl Stability {
    /// The class's stable name in reports (`stable`, `stable-normalized`, `reordered`,
    /// `volatile`, `conditional`, `unobserved`); [`fmt::Display`] also names the operations of
    /// `stable-normalized`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Stability::Stable => "stable",
            Stability::StableAfter(_) => "stable-normalized",
            Stability::Reordered => "reordered",
            Stability::Volatile => "volatile",
            Stability::Conditional => "conditional",
            Stability::Unobserved => "unobserved",
        }
    }
}

impl fmt::Display for Stability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stability::StableAfter(ops) => {
                let ops: Vec<&str> = ops.iter().map(|o| o.as_str()).collect();
                write!(f, "stable after {}", ops.join("+"))
            }
            other => f.write_str(other.as_str()),
        }
    }
}

/// One delivery handed to [`analyze`]: its body, the event it belongs to (by transport id, by
/// label or by a strategy's key, as the caller chose) and its label.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// The delivery's parsed JSON body.
    pub doc: &'a Value,
    /// The event it is a delivery of: deliveries sharing a group are retries of one event,
    /// which is what stability is measured across. `None`: grouped with nothing.
    pub group: Option<&'a str>,
    /// The labeled business operation, when known: what candidates are scored against.
    pub label: Option<&'a str>,
}

/// The statistics of one field path.
#[derive(Debug, Clone, PartialEq)]
pub struct PathStats {
    /// A JSON Pointer; array indexes are written `*` (all elements pooled).
    pub path: String,
    /// The JSON kinds seen, e.g. `string` or `number|null`.
    pub kinds: String,
    /// Deliveries in which the path is present, over all deliveries.
    pub presence: f64,
    /// Distinct values over occurrences (1.0: every occurrence differs).
    pub distinct_rate: f64,
    /// How the field behaves across the deliveries of one event.
    pub stability: Stability,
    /// Events seen more than once that had this field in at least one delivery.
    pub events_seen: usize,
    /// Of those, events in which it changed (value, presence or order).
    pub events_changed: usize,
    /// The normalizations under which it never changed within one event, so that it may enter
    /// a key; `None` when it did change (volatile, reordered, or absent from some retries).
    pub key_ops: Option<Vec<Normalization>>,
}

/// A candidate effect key: fields that were stable across retries, scored against the labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The fields combined (one to three JSON Pointers, sorted), as a strategy would list them.
    pub fields: Vec<String>,
    /// Normalizations to declare per field (empty when none is needed).
    pub normalize: Vec<(String, Vec<Normalization>)>,
    /// Deliveries in which every field is present, over all deliveries.
    pub coverage: f64,
    /// Distinct operations that would share a key with another one (silent loss if ignored).
    pub merges: usize,
    /// Retries that would not be grouped with their operation (applied twice).
    pub splits: usize,
}

/// The analysis of one provider/type's deliveries.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    /// How many deliveries were analyzed.
    pub deliveries: usize,
    /// Events seen more than once (the evidence for stability).
    pub repeated_events: usize,
    /// Distinct labels among the deliveries.
    pub operations: usize,
    /// What candidates are scored against: `label`, or `group` when no delivery is labeled
    /// (a delivery in no group counts as an event of its own).
    pub scored_against: &'static str,
    /// Every field path seen, sorted by path.
    pub paths: Vec<PathStats>,
    /// Candidate keys, best first: fewest merges, then fewest splits, then widest coverage,
    /// then fewest fields. A combination no better than a smaller one it contains is left out.
    pub candidates: Vec<Candidate>,
}

/// How many fields a candidate combines at most: more than three rarely means anything but
/// "the whole body", which a fingerprint already is.
const MAX_COMBINATION: usize = 3;
/// How many of the most distinctive keyable fields enter combinations (bounds the work).
const COMBINATION_POOL: usize = 14;

/// The normalization ops under which every value in `values` agrees, if any makes them agree.
fn agreeing_ops(values: &[&Value]) -> Option<Vec<Normalization>> {
    let candidates: [&[Normalization]; 4] = [
        &[Normalization::Trim],
        &[Normalization::Lowercase],
        &[Normalization::Trim, Normalization::Lowercase],
        &[Normalization::Utc],
    ];
    candidates.into_iter().find_map(|ops| {
        let forms: Option<HashSet<String>> = values
            .iter()
            .map(|v| normalize_with(v, ops).map(|n| to_key_form(&n)))
            .collect();
        forms.filter(|f| f.len() == 1).map(|_| ops.to_vec())
    })
}

fn normalize_with(v: &Value, ops: &[Normalization]) -> Option<Value> {
    let mut v = v.clone();
    for op in ops {
        op.apply(&mut v).ok()?;
    }
    Some(v)
}

/// The key form of an array's elements, sorted: equal for two orders of the same elements.
fn sorted_form(v: &Value) -> Option<String> {
    let Value::Array(items) = v else { return None };
    let mut forms: Vec<String> = items.iter().map(to_key_form).collect();
    forms.sort();
    Some(forms.join("\u{1f}"))
}

#[derive(Default)]
struct PathAcc {
    kinds: BTreeSet<&'static str>,
    present: usize,
    occurrences: usize,
    distinct: HashSet<String>,
}

/// Analyzes one provider/type: field statistics, stability across the deliveries of one
/// event, and candidate keys ranked by merges (distinct operations sharing a key) then splits
/// (retries not grouped).
pub fn analyze(observations: &[Observation<'_>]) -> Analysis {
    let n = observations.len();
    let mut acc: BTreeMap<String, PathAcc> = BTreeMap::new();
    // Concrete pointers of each delivery, for stability and keys (arrays by index).
    let mut concrete: Vec<HashMap<String, &Value>> = Vec::with_capacity(n);
    for o in observations {
        let mut seen_here: HashSet<String> = HashSet::new();
        let mut mine = HashMap::new();
        for p in places(o.doc) {
            let a = acc.entry(p.wildcard.clone()).or_default();
            a.kinds.insert(p.value.kind_name());
            a.occurrences += 1;
            a.distinct.insert(to_key_form(p.value));
            if seen_here.insert(p.wildcard.clone()) {
                a.present += 1;
            }
            mine.insert(p.pointer, p.value);
        }
        concrete.push(mine);
    }

    // Events seen more than once.
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, o) in observations.iter().enumerate() {
        if let Some(g) = o.group {
            groups.entry(g).or_default().push(i);
        }
    }
    groups.retain(|_, members| members.len() > 1);

    // Per concrete pointer: events seen, events changed, how it changed.
    #[derive(Default)]
    struct Behaviour {
        seen: usize,
        changed: usize,
        absent_sometimes: usize,
        reordered: usize,
        values_differ: usize,
        ops: Option<Vec<Normalization>>,
        ops_fail: bool,
    }
    let mut behaviour: BTreeMap<String, Behaviour> = BTreeMap::new();
    for members in groups.values() {
        let pointers: BTreeSet<&String> =
            members.iter().flat_map(|&i| concrete[i].keys()).collect();
        for p in pointers {
            let b = behaviour.entry(p.clone()).or_default();
            b.seen += 1;
            let values: Vec<&Value> = members
                .iter()
                .filter_map(|&i| concrete[i].get(p).copied())
                .collect();
            if values.len() < members.len() {
                b.changed += 1;
                b.absent_sometimes += 1;
                continue;
            }
            // An object changes whenever one of its members does; its members' own rows say
            // which, so the object itself is judged on presence only.
            if values.iter().all(|v| matches!(v, Value::Object(_))) {
                continue;
            }
            let forms: HashSet<String> = values.iter().map(|v| to_key_form(v)).collect();
            if forms.len() == 1 {
                continue;
            }
            b.changed += 1;
            let sorted: Option<HashSet<String>> = values.iter().map(|v| sorted_form(v)).collect();
            if sorted.is_some_and(|s| s.len() == 1) {
                b.reordered += 1;
                continue;
            }
            b.values_differ += 1;
            match agreeing_ops(&values) {
                Some(ops) if !b.ops_fail => {
                    // Keep the broadest ops seen so far (trim+lowercase covers either alone).
                    let keep = match &b.ops {
                        Some(prev) if prev.len() >= ops.len() => prev.clone(),
                        _ => ops,
                    };
                    b.ops = Some(keep);
                }
                _ => b.ops_fail = true,
            }
        }
    }

    // Stability per wildcard path: the worst behaviour of its concrete pointers.
    let classify = |b: &Behaviour| -> Stability {
        if b.seen == 0 {
            Stability::Unobserved
        } else if b.values_differ > 0 && (b.ops_fail || b.ops.is_none()) {
            Stability::Volatile
        } else if b.absent_sometimes > 0 {
            Stability::Conditional
        } else if b.reordered > 0 {
            Stability::Reordered
        } else if let Some(ops) = &b.ops {
            Stability::StableAfter(ops.clone())
        } else {
            Stability::Stable
        }
    };
    let rank = |s: &Stability| match s {
        Stability::Volatile => 5,
        Stability::Conditional => 4,
        Stability::Reordered => 3,
        Stability::StableAfter(_) => 2,
        Stability::Stable => 1,
        Stability::Unobserved => 0,
    };
    let mut per_wildcard: BTreeMap<String, (Stability, usize, usize)> = BTreeMap::new();
    for (pointer, b) in &behaviour {
        let wildcard = wildcard_of(pointer);
        let s = classify(b);
        let e = per_wildcard
            .entry(wildcard)
            .or_insert((Stability::Unobserved, 0, 0));
        if rank(&s) > rank(&e.0) {
            e.0 = s;
        }
        e.1 = e.1.max(b.seen);
        e.2 = e.2.max(b.changed);
    }

    let mut paths: Vec<PathStats> = acc
        .into_iter()
        .map(|(path, a)| {
            let presence = a.present as f64 / n.max(1) as f64;
            let (mut stability, seen, changed) =
                per_wildcard
                    .remove(&path)
                    .unwrap_or((Stability::Unobserved, 0, 0));
            // What the field is worth in a key depends only on its behaviour within one event;
            // absence from other deliveries is the hierarchy's business (a strategy whose fields
            // are absent is skipped), and shows as the candidate's coverage.
            let key_ops = match &stability {
                Stability::Stable | Stability::Unobserved => Some(Vec::new()),
                Stability::StableAfter(ops) => Some(ops.clone()),
                _ => None,
            };
            // A field absent from some deliveries is conditional, even if it never changed
            // within an event: say so.
            if a.present < n && matches!(stability, Stability::Stable | Stability::StableAfter(_)) {
                stability = Stability::Conditional;
            }
            PathStats {
                kinds: a.kinds.into_iter().collect::<Vec<_>>().join("|"),
                presence,
                distinct_rate: a.distinct.len() as f64 / a.occurrences.max(1) as f64,
                stability,
                events_seen: seen,
                events_changed: changed,
                key_ops,
                path,
            }
        })
        .collect();
    paths.sort_by(|a, b| a.path.cmp(&b.path));

    let labeled = observations.iter().any(|o| o.label.is_some());
    // What a candidate is scored against: the labels when there are any (unlabeled deliveries
    // then say nothing); otherwise the groups, where a delivery outside any group is an event
    // of its own — captures with no labels and no retries are distinct deliveries, so a key
    // that gives two of them the same value merges them.
    let own: Vec<String> = (0..n).map(|i| format!("\u{1f}delivery {i}")).collect();
    let truth: Vec<Option<&str>> = observations
        .iter()
        .zip(&own)
        .map(|(o, own)| {
            if labeled {
                o.label
            } else {
                Some(o.group.unwrap_or(own.as_str()))
            }
        })
        .collect();
    let operations = observations
        .iter()
        .filter_map(|o| o.label)
        .collect::<HashSet<_>>()
        .len();
    let candidates = rank_candidates(&paths, &concrete, &truth);
    Analysis {
        deliveries: n,
        repeated_events: groups.len(),
        operations,
        scored_against: if labeled { "label" } else { "group" },
        paths,
        candidates,
    }
}

/// The statistics path of a concrete pointer: numeric tokens become `*`.
///
/// A member literally named with digits inside an object would also become `*`; statistics are
/// pooled per shape, so that only merges two columns of a table and never changes a key.
fn wildcard_of(pointer: &str) -> String {
    pointer
        .split('/')
        .map(|t| {
            if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
                "*"
            } else {
                t
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Scores one combination of fields against the truth (labels, or groups).
fn score(
    fields: &[&PathStats],
    concrete: &[HashMap<String, &Value>],
    truth: &[Option<&str>],
) -> Candidate {
    let ops_of = |p: &PathStats| p.key_ops.clone().unwrap_or_default();
    let mut by_key: HashMap<String, HashSet<&str>> = HashMap::new();
    let mut by_truth: HashMap<&str, HashSet<String>> = HashMap::new();
    let mut covered = 0usize;
    for (doc, t) in concrete.iter().zip(truth) {
        let mut key = String::new();
        let mut complete = true;
        for p in fields {
            match doc.get(&p.path) {
                Some(v) if !v.is_null() => {
                    let v = normalize_with(v, &ops_of(p)).unwrap_or_else(|| (*v).clone());
                    key.push_str(&to_key_form(&v));
                    key.push('\u{1f}');
                }
                _ => {
                    complete = false;
                    break;
                }
            }
        }
        if !complete {
            continue;
        }
        covered += 1;
        if let Some(t) = t {
            by_key.entry(key.clone()).or_default().insert(t);
            by_truth.entry(t).or_default().insert(key);
        }
    }
    Candidate {
        fields: fields.iter().map(|p| p.path.clone()).collect(),
        normalize: fields
            .iter()
            .filter(|p| !ops_of(p).is_empty())
            .map(|p| (p.path.clone(), ops_of(p)))
            .collect(),
        coverage: covered as f64 / concrete.len().max(1) as f64,
        merges: by_key.values().map(|s| s.len() - 1).sum(),
        splits: by_truth.values().map(|s| s.len() - 1).sum(),
    }
}

fn rank_candidates(
    paths: &[PathStats],
    concrete: &[HashMap<String, &Value>],
    truth: &[Option<&str>],
) -> Vec<Candidate> {
    // Scalars at a fixed place (no `*`), stable across retries, and not constant: a constant
    // (the event type, a currency everyone uses) distinguishes nothing on its own.
    let mut pool: Vec<&PathStats> = paths
        .iter()
        .filter(|p| !p.path.contains("/*") && !p.path.ends_with('*'))
        .filter(|p| p.key_ops.is_some())
        .filter(|p| !p.kinds.contains("object") && !p.kinds.contains("array"))
        .filter(|p| p.distinct_rate * (concrete.len() as f64) > 1.0)
        .collect();
    pool.sort_by(|a, b| {
        b.distinct_rate
            .total_cmp(&a.distinct_rate)
            .then(a.path.cmp(&b.path))
    });
    pool.truncate(COMBINATION_POOL);
    pool.sort_by(|a, b| a.path.cmp(&b.path));

    let mut out = Vec::new();
    let k = pool.len();
    for i in 0..k {
        out.push(score(&[pool[i]], concrete, truth));
        for j in i + 1..k {
            out.push(score(&[pool[i], pool[j]], concrete, truth));
            if MAX_COMBINATION >= 3 {
                for l in j + 1..k {
                    out.push(score(&[pool[i], pool[j], pool[l]], concrete, truth));
                }
            }
        }
    }
    out.retain(|c| c.coverage > 0.0);
    out.sort_by(|a, b| {
        a.merges
            .cmp(&b.merges)
            .then(a.splits.cmp(&b.splits))
            .then(b.coverage.total_cmp(&a.coverage))
            .then(a.fields.len().cmp(&b.fields.len()))
            .then(a.normalize.len().cmp(&b.normalize.len()))
            .then(a.fields.cmp(&b.fields))
    });
    // A combination that contains a better-or-equal smaller candidate adds nothing.
    let mut kept: Vec<Candidate> = Vec::new();
    for c in out {
        let redundant = kept.iter().any(|k| {
            k.fields.iter().all(|f| c.fields.contains(f))
                && k.merges <= c.merges
                && k.splits <= c.splits
                && k.coverage >= c.coverage
        });
        if !redundant {
            kept.push(c);
        }
    }
    kept
}

/// One delivery's outcome in a replay, as the service answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// `name@version` of the strategy that made the key, or a placeholder of the caller's
    /// choosing when none did (`(no key)`, `(rejected)`): the figures are tallied under it.
    pub strategy: String,
    /// True when the key's confidence was strong.
    pub strong: bool,
    /// The action the service answered.
    pub action: Action,
    /// The effect the delivery was attached to, if any.
    pub effect: Option<String>,
    /// The delivery's labeled operation, if it has one; unlabeled deliveries count in every
    /// figure but the false positives and negatives.
    pub label: Option<String>,
}

/// The replay figures of one strategy name+version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayTally {
    /// Deliveries replayed under the strategy.
    pub deliveries: usize,
    /// Of those, with a strong key.
    pub strong: usize,
    /// Of those, with a key that was not strong (medium or weak), or no key.
    pub weak: usize,
    /// Answered `process`.
    pub processed: usize,
    /// Answered `ignore`.
    pub ignored: usize,
    /// Quarantines: a key matched but a discriminant differed.
    pub collisions: usize,
    /// Sent to reconciliation (a weak key on a critical type, no key, …).
    pub reconciled: usize,
    /// Refused (`reject`).
    pub rejected: usize,
    /// Distinct labeled operations merged into another's effect by an `ignore`: silent loss.
    pub false_positives: usize,
    /// Extra applications of one labeled operation (it got `process` more than once).
    pub false_negatives: usize,
}

impl ReplayTally {
    /// Quarantined and reconciled deliveries over all deliveries.
    pub fn queue_rate(&self) -> f64 {
        (self.collisions + self.reconciled) as f64 / self.deliveries.max(1) as f64
    }
}

/// Tallies a replay per strategy, in the order outcomes happened.
///
/// A false positive is an `ignore` attached to an effect first processed for another label; a
/// false negative is a second (third…) `process` for one label. Both are charged to the
/// strategy of the delivery that suffered them.
///
/// ```
/// use oncegate_core::corpus::{tally, ReplayOutcome};
/// use oncegate_core::matrix::Action;
///
/// let outcome = |action, effect: &str, label: &str| ReplayOutcome {
///     strategy: "refund-fingerprint@1".into(),
///     strong: false,
///     action,
///     effect: Some(effect.into()),
///     label: Some(label.into()),
/// };
/// let figures = tally(&[
///     outcome(Action::Process, "eff_1", "refund-1"),
///     outcome(Action::Ignore, "eff_1", "refund-1"), // a retry: rightly ignored
///     outcome(Action::Ignore, "eff_1", "refund-2"), // the second refund, merged: silent loss
/// ]);
/// let t = &figures["refund-fingerprint@1"];
/// assert_eq!((t.deliveries, t.processed, t.ignored), (3, 1, 2));
/// assert_eq!((t.false_positives, t.false_negatives), (1, 0));
/// ```
pub fn tally(outcomes: &[ReplayOutcome]) -> BTreeMap<String, ReplayTally> {
    let mut out: BTreeMap<String, ReplayTally> = BTreeMap::new();
    let mut effect_label: HashMap<&str, Option<&str>> = HashMap::new();
    let mut processed_labels: HashSet<&str> = HashSet::new();
    for o in outcomes {
        let t = out.entry(o.strategy.clone()).or_default();
        t.deliveries += 1;
        if o.strong {
            t.strong += 1;
        } else {
            t.weak += 1;
        }
        match o.action {
            Action::Process => {
                t.processed += 1;
                if let Some(e) = &o.effect {
                    effect_label.entry(e.as_str()).or_insert(o.label.as_deref());
                }
                if let Some(l) = &o.label {
                    if !processed_labels.insert(l.as_str()) {
                        t.false_negatives += 1;
                    }
                }
            }
            Action::Ignore => {
                t.ignored += 1;
                let first = o
                    .effect
                    .as_deref()
                    .and_then(|e| effect_label.get(e).copied().flatten());
                if let (Some(first), Some(mine)) = (first, o.label.as_deref()) {
                    if first != mine {
                        t.false_positives += 1;
                    }
                }
            }
            Action::Quarantine => t.collisions += 1,
            Action::Reconcile => t.reconciled += 1,
            Action::Reject => t.rejected += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
