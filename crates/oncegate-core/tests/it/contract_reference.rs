//! `docs/contract.md` lists exactly the fields the contract parser accepts, table by table.
//!
//! How the accepted fields are enumerated: every table of the contract is read by a serde
//! struct with `#[serde(deny_unknown_fields)]`, and serde's refusal of an unknown field names
//! every field the struct accepts ("unknown field `x`, expected one of `a`, `b`"). So for each
//! table the reference documents, a contract holding only that table with one field no struct
//! declares is given to the real parser, and the fields its refusal lists are compared with
//! the fields the reference's table lists. This asks the `Deserialize` impls the parser runs
//! (renames, aliases and skipped fields included, as serde derives them) rather than reading
//! the structs' source text, and copes with the custom deserializers and `toml::Spanned`
//! wrappers a tracer such as `serde-reflection` stumbles on.
//!
//! A table the reference forgets is caught too: a documented field whose type is `table`,
//! `array of tables` or `map of tables` must have a section of its own, and a field of a
//! table without a section is caught as undocumented in its parent's section.

use oncegate_core::canon::{to_jcs, to_key_form};
use oncegate_core::contract::parse;
use std::collections::{BTreeMap, BTreeSet};

const REFERENCE: &str = include_str!("../../../../docs/contract.md");

/// The heading of the section for the file's top level (the other sections name their table
/// as TOML writes its header, in backticks).
const TOP_LEVEL: &str = "The file's top level";

/// A field name no contract table declares.
const PROBE: &str = "zz_not_a_contract_field";

/// One section of the reference that documents a table.
struct Section {
    heading: String,
    /// The tables it documents, as dotted paths (`providers.P.types."T".strategies`; empty
    /// for the top level), each with whether it is an array of tables.
    tables: Vec<(String, bool)>,
    /// Field name → its TOML type as the reference writes it.
    fields: BTreeMap<String, String>,
}

/// The sections of the reference that document a table, in order.
fn sections() -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    let mut current: Option<Section> = None;
    for line in REFERENCE.lines() {
        if line.starts_with('#') {
            out.extend(current.take());
            let heading = line.trim_start_matches('#').trim();
            let tables: Vec<(String, bool)> = if heading == TOP_LEVEL {
                vec![(String::new(), false)]
            } else {
                backticked(heading)
                    .filter_map(|t| {
                        if let Some(path) = t.strip_prefix("[[").and_then(|t| t.strip_suffix("]]"))
                        {
                            Some((path.to_owned(), true))
                        } else {
                            t.strip_prefix('[')
                                .and_then(|t| t.strip_suffix(']'))
                                .map(|path| (path.to_owned(), false))
                        }
                    })
                    .collect()
            };
            if !tables.is_empty() {
                current = Some(Section {
                    heading: heading.to_owned(),
                    tables,
                    fields: BTreeMap::new(),
                });
            }
            continue;
        }
        let Some(section) = current.as_mut() else {
            continue;
        };
        // A table row whose first cell is a backticked name documents a field.
        let Some(row) = line.strip_prefix('|') else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Some(name) = cells
            .first()
            .and_then(|c| c.strip_prefix('`'))
            .and_then(|c| c.strip_suffix('`'))
        else {
            continue;
        };
        let ty = cells.get(1).copied().unwrap_or_default().replace('`', "");
        let before = section.fields.insert(name.to_owned(), ty);
        assert!(
            before.is_none(),
            "`{name}` is listed twice under {:?}",
            section.heading
        );
    }
    out.extend(current);
    out
}

/// The backticked spans of a line of markdown.
fn backticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// The keys of a dotted TOML path, quoted keys kept whole (`"charge.refunded"`).
fn segments(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in path.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '.' if !quoted => {
                out.push(&path[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !path.is_empty() {
        out.push(&path[start..]);
    }
    out
}

/// The fields the parser accepts in the table at `path`, read from its refusal of a field it
/// does not know.
fn accepted(path: &str, array: bool) -> BTreeSet<String> {
    // Every enclosing table gets a header of its own: toml's `Spanned` (which wraps providers
    // and types) cannot read a table that only a deeper header defines implicitly.
    let segments = segments(path);
    let mut probe = String::new();
    for depth in 1..segments.len() {
        probe.push_str(&format!("[{}]\n", segments[..depth].join(".")));
    }
    match (path.is_empty(), array) {
        (true, _) => {}
        (false, false) => probe.push_str(&format!("[{path}]\n")),
        (false, true) => probe.push_str(&format!("[[{path}]]\n")),
    }
    probe.push_str(&format!("{PROBE} = 0\n"));
    let errors = match parse("probe.toml", &probe) {
        Ok(_) => panic!("the parser accepted an unknown field in [{path}]"),
        Err(e) => e,
    };
    let message = &errors.0[0].message;
    let unknown = format!("unknown field `{PROBE}`, ");
    let Some(rest) = message
        .find(&unknown)
        .map(|at| &message[at + unknown.len()..])
    else {
        panic!("[{path}] did not refuse {PROBE} as an unknown field: {message}")
    };
    if rest.starts_with("there are no fields") {
        return BTreeSet::new();
    }
    let list = rest
        .strip_prefix("expected one of ")
        .or_else(|| rest.strip_prefix("expected "))
        .unwrap_or_else(|| panic!("[{path}]: an unexpected refusal: {message}"));
    backticked(list).map(str::to_owned).collect()
}

#[test]
fn the_reference_lists_exactly_the_fields_each_table_accepts() {
    let sections = sections();
    assert!(
        sections.len() >= 10,
        "the reference's table sections were not found ({} of them)",
        sections.len()
    );
    let mut problems = Vec::new();
    for section in &sections {
        let documented: BTreeSet<String> = section.fields.keys().cloned().collect();
        for (path, array) in &section.tables {
            let accepted = accepted(path, *array);
            for missing in accepted.difference(&documented) {
                problems.push(format!(
                    "the parser accepts `{missing}` in [{path}], but {:?} does not list it",
                    section.heading
                ));
            }
            for extra in documented.difference(&accepted) {
                problems.push(format!(
                    "{:?} lists `{extra}`, which the parser refuses in [{path}]",
                    section.heading
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_documented_subtable_has_a_section_of_its_own() {
    let sections = sections();
    let documented: Vec<&str> = sections
        .iter()
        .flat_map(|s| s.tables.iter().map(|(path, _)| path.as_str()))
        .collect();
    let mut problems = Vec::new();
    for section in &sections {
        for (path, _) in &section.tables {
            for (name, ty) in &section.fields {
                let child = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                let found = match ty.as_str() {
                    "table" | "array of tables" => documented.contains(&child.as_str()),
                    // A map's values are tables under a key of the file's choosing: the
                    // reference writes that key as one placeholder segment (`P`, `"T"`).
                    "map of tables" => documented.iter().any(|d| {
                        d.strip_prefix(&format!("{child}."))
                            .is_some_and(|key| !key.is_empty() && !key.contains('.'))
                    }),
                    _ => continue,
                };
                if !found {
                    problems.push(format!(
                        "`{name}` of [{path}] is a {ty}, but no section documents [{child}]"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_exact_integers_example_is_what_the_code_does() {
    let read = |text: &str| {
        oncegate_core::json::parse(text.as_bytes(), &oncegate_core::json::Limits::default())
            .unwrap()
    };
    let (a, b) = (read("820982911946154508"), read("820982911946154509"));
    assert_eq!(to_key_form(&a), "820982911946154508");
    assert_eq!(to_key_form(&b), "820982911946154509");
    // RFC 8785 writes the nearest double: the two ids print alike, as the reference says.
    let jcs = to_jcs(&a);
    assert_eq!(jcs, to_jcs(&b));
    let flat = REFERENCE.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(&format!("both ids above print as `{jcs}`")),
        "the reference's \"Exact integers\" should say the ids print as {jcs}"
    );
}
