//! The crates above the engine reach the store only through it: neither the HTTP service nor
//! the command line lists `oncegate-store` among its dependencies, of any kind (normal, dev or
//! build, renamed or not), so every decision and every operator action goes through the gate.
//! Read from the workspace's own metadata, as cargo resolves the manifests.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The packages that must not depend on the store.
const ABOVE_THE_ENGINE: [&str; 2] = ["oncegate-server", "oncegate-cli"];

/// The workspace's packages, as `cargo metadata --no-deps` describes them.
fn packages() -> Vec<Value> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata is JSON");
    metadata["packages"]
        .as_array()
        .expect("cargo metadata lists packages")
        .clone()
}

/// Every dependency of `package` on `target`, as `kind name` (`normal`, `dev`, `build`).
fn dependencies_on(package: &Value, target: &str) -> Vec<String> {
    package["dependencies"]
        .as_array()
        .expect("a package lists its dependencies")
        .iter()
        .filter(|d| d["name"] == target)
        .map(|d| {
            format!(
                "{} {}",
                d["kind"].as_str().unwrap_or("normal"),
                d["rename"].as_str().unwrap_or(target)
            )
        })
        .collect()
}

#[test]
fn neither_the_service_nor_the_command_line_depends_on_the_store() {
    let packages = packages();
    for name in ABOVE_THE_ENGINE {
        let package = packages
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("the workspace has no package {name}"));
        assert!(
            !dependencies_on(package, "oncegate").is_empty(),
            "{name} reaches the store through the engine, so it depends on `oncegate`"
        );
        let direct = dependencies_on(package, "oncegate-store");
        assert!(
            direct.is_empty(),
            "{name} depends on oncegate-store ({}): it must reach the store through `oncegate` (its `store` re-exports and the gate's methods)",
            direct.join(", ")
        );
    }
}

#[test]
fn the_check_sees_a_dependency_on_the_store() {
    // The engine itself depends on the store: the same reading must find it, or the check
    // above would pass on a reading that finds nothing.
    let packages = packages();
    let engine = packages
        .iter()
        .find(|p| p["name"] == "oncegate")
        .expect("the workspace has the engine");
    let found = dependencies_on(engine, "oncegate-store");
    assert!(
        found.contains(&"normal oncegate-store".to_owned())
            && found.contains(&"dev oncegate-store".to_owned()),
        "{found:?}"
    );
}
