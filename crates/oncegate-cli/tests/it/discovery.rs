//! How a command finds its contract: `--contract`, then `ONCEGATE_CONTRACT`, then
//! `./oncegate.toml`; never the repository's example, so an installed binary run anywhere
//! says what it looked for.

use std::path::Path;
use std::process::{Command, Output};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/oncegate.toml");

/// `oncegate args…` in `dir`, with `ONCEGATE_CONTRACT` set to `env` or unset.
fn oncegate(dir: &Path, env: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_oncegate"));
    command
        .args(args)
        .current_dir(dir)
        .env("ONCEGATE_KEY_SALT", "c2FsdA==")
        .env("ONCEGATE_STORE", format!("sqlite://{}/db", dir.display()));
    match env {
        Some(path) => command.env("ONCEGATE_CONTRACT", path),
        None => command.env_remove("ONCEGATE_CONTRACT"),
    };
    command.output().expect("the binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn serve_in_a_directory_without_a_contract_names_what_it_tried() {
    let dir = tempfile::tempdir().unwrap();
    // A copy of the repository's layout must not be found either: only ./oncegate.toml is.
    std::fs::create_dir(dir.path().join("examples")).unwrap();
    std::fs::copy(EXAMPLE, dir.path().join("examples/oncegate.toml")).unwrap();
    let out = oncegate(dir.path(), None, &["serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let e = stderr(&out);
    for part in [
        "no contract found",
        "no --contract was given",
        "ONCEGATE_CONTRACT is not set",
        "no oncegate.toml in",
        "oncegate init <provider>",
    ] {
        assert!(e.contains(part), "{part:?} missing from: {e}");
    }
}

#[test]
fn the_flag_then_the_environment_then_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(EXAMPLE, dir.path().join("oncegate.toml")).unwrap();
    std::fs::copy(EXAMPLE, dir.path().join("from-env.toml")).unwrap();
    std::fs::copy(EXAMPLE, dir.path().join("from-flag.toml")).unwrap();
    let first_line = |out: Output| {
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        first_line(oncegate(dir.path(), None, &["check"])),
        "oncegate.toml: valid"
    );
    assert_eq!(
        first_line(oncegate(dir.path(), Some("from-env.toml"), &["check"])),
        "from-env.toml: valid"
    );
    assert_eq!(
        first_line(oncegate(
            dir.path(),
            Some("from-env.toml"),
            &["check", "from-flag.toml"]
        )),
        "from-flag.toml: valid"
    );
}

#[test]
fn a_contract_named_by_the_environment_that_is_missing_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = oncegate(dir.path(), Some("gone.toml"), &["check"]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.contains("reading the contract gone.toml (named by ONCEGATE_CONTRACT)"),
        "{e}"
    );
}
