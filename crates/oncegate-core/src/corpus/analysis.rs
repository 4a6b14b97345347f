//! Field-path statistics over a corpus: each path's stability across the retries of one
//! labeled operation, and the candidate keys ranked against the labels.

use crate::canon::to_key_form;
use crate::json::Value;
use crate::strategy::Normalization;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

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
