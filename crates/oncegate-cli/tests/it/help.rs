//! Every command's `--help`, as the installed binary prints it, ends with its exit statuses:
//! the tree is walked from `oncegate --help` down through each `Commands:` list, so a command
//! added without a section fails here by name.

use std::process::Command;

fn help(path: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(path)
        .arg("--help")
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "oncegate {} --help: {}",
        path.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The names in a help text's `Commands:` list (clap's own `help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_command_in_the_tree_lists_its_exit_statuses() {
    let mut pending = vec![Vec::<String>::new()];
    let mut seen = Vec::new();
    let mut undocumented = Vec::new();
    while let Some(path) = pending.pop() {
        let text = help(&path);
        let statuses: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "Exit status:")
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .collect();
        let has = |code: &str| {
            statuses
                .iter()
                .any(|l| l.starts_with(&format!("  {code} ")))
        };
        if !(has("0") && has("2") && has("141")) {
            undocumented.push(format!("oncegate {}", path.join(" ")));
        }
        for name in subcommands(&text) {
            let mut sub = path.clone();
            sub.push(name);
            pending.push(sub);
        }
        seen.push(path.join(" "));
    }
    // The nested ones the walk must reach, so a change in clap's layout cannot hide them.
    for nested in [
        "queue resolve",
        "breaker close",
        "corpus analyze",
        "corpus export",
        "corpus replay",
        "canon",
        "replay",
        "migrate",
        "serve",
        "demo",
    ] {
        assert!(
            seen.iter().any(|s| s == nested),
            "the walk missed `{nested}`: {seen:?}"
        );
    }
    assert!(
        undocumented.is_empty(),
        "no Exit status section with 0, 2 and 141 in: {undocumented:?}"
    );
}
