//! The deployment guide's systemd unit: verified by `systemd-analyze`, hardened, and starting
//! `serve` with flags that exist.

use std::path::PathBuf;
use std::process::Command;

fn unit() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/oncegate.service");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_systemd_unit_is_hardened_and_starts_serve_with_real_flags() {
    let text = unit();
    for key in [
        "DynamicUser=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=",
        "SystemCallFilter=@system-service",
        "MemoryDenyWriteExecute=yes",
        "KillSignal=SIGTERM",
    ] {
        assert!(
            text.lines().any(|l| l == key),
            "{key} missing from the unit"
        );
    }
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    let args: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(args[0], "/usr/local/bin/oncegate");
    assert_eq!(args[1], "serve");
    let help = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["serve", "--help"])
        .output()
        .expect("the binary runs");
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(flag), "serve has no {flag}:\n{help}");
    }
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    let dir = tempfile::tempdir().unwrap();
    // The unit as installed, but pointing at this build's binary (verify checks it exists) and
    // at an environment file that may be absent.
    let text = unit()
        .replace("/usr/local/bin/oncegate", env!("CARGO_BIN_EXE_oncegate"))
        .replace(
            "EnvironmentFile=/etc/oncegate/env",
            "EnvironmentFile=-/etc/oncegate/env",
        );
    let path = dir.path().join("oncegate.service");
    std::fs::write(&path, text).unwrap();
    let out = crate::programs::program(
        "systemd-analyze",
        "systemd",
        "to verify the deployment guide's unit",
    )
    .arg("verify")
    .arg(&path)
    .current_dir(dir.path())
    .output()
    .expect("systemd-analyze runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // It reports unknown keys and bad values as warnings and still exits 0.
    let about_unit: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("oncegate.service"))
        .collect();
    assert!(about_unit.is_empty(), "{about_unit:#?}");
}
