//! The modules of the engine and of the HTTP service import each other without a cycle: a
//! module the gate is made of (the backlog, the breakers' tallies, the metrics) takes what it
//! needs rather than importing the gate back, and the service's route table sits above the
//! handlers, the console and the OpenAPI document, so a reader can follow each module on its
//! own. Read from the sources: every `crate::module` a top-level module (with its submodules)
//! names outside its tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of the crate rooted at `src`, with the top-level modules it names.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack: Vec<PathBuf> = vec![src.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the sources") {
            let path = entry.expect("a source entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src");
            let first = relative
                .components()
                .next()
                .expect("a path")
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned();
            if first == "lib" || first == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read a source file");
            // A module's tests may reach anywhere in the crate; the cycle that matters is in
            // the code the crate runs.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let named = graph.entry(first.clone()).or_default();
            for target in names_after_crate(code) {
                if target != first {
                    named.insert(target);
                }
            }
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for named in graph.values_mut() {
        named.retain(|m| modules.contains(m));
    }
    graph
}

/// The first path segment after each `crate::` in `code`, including each name of a
/// `crate::{a, b::c}` group.
fn names_after_crate(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The group's items at its own depth: each one's first segment.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        item_start = false;
                        let name = ident(&group[i..]);
                        if !name.is_empty() && name != "self" {
                            out.push(name);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(m) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|p| p == m).expect("on the path");
                let mut found = path[from..].to_vec();
                found.push(m.to_owned());
                return Some(found);
            }
            None => {}
        }
        marks.insert(m.to_owned(), Mark::Open);
        path.push(m.to_owned());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(found) = visit(next, graph, marks, path) {
                return Some(found);
            }
        }
        path.pop();
        marks.insert(m.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for m in graph.keys() {
        if let Some(found) = visit(m, graph, &mut marks, &mut Vec::new()) {
            return Some(found);
        }
    }
    None
}

fn assert_acyclic(krate: &str, known: (&str, &str)) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src");
    let graph = imports(&src);
    assert!(
        graph
            .get(known.0)
            .is_some_and(|named| named.contains(known.1)),
        "{krate}: the reading finds {} importing {}",
        known.0,
        known.1
    );
    if let Some(found) = cycle(&graph) {
        panic!(
            "{krate}: the modules import each other in a cycle: {}",
            found.join(" → ")
        );
    }
}

#[test]
fn the_engine_has_no_module_cycle() {
    assert_acyclic("oncegate", ("delivery", "gate"));
}

#[test]
fn the_http_service_has_no_module_cycle() {
    assert_acyclic("oncegate-server", ("app", "routes"));
}

#[test]
fn a_cycle_is_found_where_there_is_one() {
    let code_a = "use crate::b::Thing;\nfn f() { crate::c::g(); }";
    let code_b = "use crate::{a::{self, X}, d};";
    assert_eq!(names_after_crate(code_a), ["b", "c"]);
    assert_eq!(names_after_crate(code_b), ["a", "d"]);
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b", "c"]),
        ("b", vec!["a", "d"]),
        ("c", vec![]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        cycle(&graph),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
    let mut acyclic = graph.clone();
    acyclic.get_mut("b").unwrap().remove("a");
    assert_eq!(cycle(&acyclic), None);
}
