//! The `oncegate` binary as the command-line tests run it: no contract, store or salt file from
//! the environment, and the key salt the test names (if any).

use std::process::{Command, Output};

/// Runs `oncegate args…` to its end.
pub fn run(salt: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_oncegate"));
    command
        .args(args)
        .env_remove("ONCEGATE_CONTRACT")
        .env_remove("ONCEGATE_STORE")
        .env_remove("ONCEGATE_KEY_SALT_FILE");
    match salt {
        Some(salt) => command.env("ONCEGATE_KEY_SALT", salt),
        None => command.env_remove("ONCEGATE_KEY_SALT"),
    };
    command.output().expect("the binary runs")
}

/// The standard output of a run that must succeed.
pub fn ok(salt: Option<&str>, args: &[&str]) -> String {
    let out = run(salt, args);
    assert!(
        out.status.success(),
        "oncegate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The standard error of a run that must end with `status`.
pub fn fails_with(salt: Option<&str>, args: &[&str], status: i32) -> String {
    let out = run(salt, args);
    assert_eq!(out.status.code(), Some(status), "oncegate {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
