//! The workspace's `rust-version` is true: every crate of the workspace declares it, and no
//! locked dependency needs a newer compiler than it says (`cargo metadata --locked`), so the
//! toolchain it names builds the workspace with `--locked`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `1.89`, `1.89.0` → `[1, 89, 0]`, so versions compare by number, not by text.
fn version(text: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = text
        .split('.')
        .map(|p| {
            p.parse()
                .unwrap_or_else(|_| panic!("{text:?} is not a Rust version like 1.89"))
        })
        .collect();
    parts.resize(3, 0);
    parts
}

/// The `rust-version` of the root `Cargo.toml`'s `[workspace.package]`.
fn workspace_rust_version() -> String {
    let path = root().join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[workspace.package]";
        } else if in_package {
            if let Some(value) = line.strip_prefix("rust-version") {
                let value = value.trim_start().trim_start_matches('=').trim();
                return value.trim_matches('"').to_owned();
            }
        }
    }
    panic!(
        "{} has no rust-version in [workspace.package]",
        path.display()
    );
}

#[test]
fn no_locked_dependency_needs_a_newer_rust_than_the_workspace_declares() {
    let declared = workspace_rust_version();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(&cargo)
        .args(["metadata", "--locked", "--format-version", "1"])
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("running {cargo:?} metadata: {e}"));
    assert!(
        out.status.success(),
        "cargo metadata --locked failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .map(|m| m.as_str().expect("a package id"))
        .collect();
    let packages = metadata["packages"].as_array().expect("packages");

    let mut undeclared = Vec::new();
    let mut too_new = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap_or("?");
        let at = package["version"].as_str().unwrap_or("?");
        let rust_version = package["rust_version"].as_str();
        if members.contains(&package["id"].as_str().unwrap_or("")) {
            // A member without it would build with any toolchain and say nothing.
            if rust_version != Some(declared.as_str()) {
                undeclared.push(format!("{name} ({rust_version:?})"));
            }
        } else if let Some(needed) = rust_version {
            if version(needed) > version(&declared) {
                too_new.push(format!("{name} {at} needs {needed}"));
            }
        }
    }
    assert!(
        undeclared.is_empty(),
        "these workspace crates do not inherit rust-version = {declared:?} \
         (add `rust-version.workspace = true`): {undeclared:?}"
    );
    too_new.sort();
    assert!(
        too_new.is_empty(),
        "Cargo.toml says rust-version = {declared:?}, but locked dependencies need more: \
         {too_new:#?}\nraise rust-version to the highest of them"
    );
}

#[test]
fn rust_versions_compare_by_number() {
    assert!(version("1.89") > version("1.9.0"));
    assert_eq!(version("1.89"), version("1.89.0"));
    assert!(version("1.100") > version("1.89.1"));
}
