//! `oncegate init` and the catalog: every provider's contract is written from the binary,
//! passes `oncegate check`, is the file in `contracts/` byte for byte, and is never written
//! over without `--force`; `oncegate key` keys a published event with its headers.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn oncegate(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(args)
        .current_dir(dir)
        .env_remove("ONCEGATE_CONTRACT")
        .env_remove("ONCEGATE_KEY_SALT")
        .env_remove("ONCEGATE_KEY_SALT_FILE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn init_writes_each_catalog_contract_which_check_accepts_and_never_overwrites_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let listed = oncegate(dir.path(), &["init", "--list"], b"");
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let providers: Vec<String> = text(&listed.stdout).lines().map(str::to_owned).collect();
    let mut in_repo: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("contracts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|n| n.strip_suffix(".toml").map(str::to_owned))
        .collect();
    in_repo.sort();
    assert_eq!(providers, in_repo, "--list names every file of contracts/");
    for p in &providers {
        let out = oncegate(dir.path(), &["init", p], b"");
        assert!(out.status.success(), "{p}: {}", text(&out.stderr));
        let written = std::fs::read(dir.path().join(format!("{p}.toml"))).unwrap();
        let catalog = std::fs::read(Path::new(ROOT).join(format!("contracts/{p}.toml"))).unwrap();
        assert_eq!(
            written, catalog,
            "{p}: the embedded contract is the catalog's"
        );
        let checked = oncegate(dir.path(), &["check", &format!("{p}.toml")], b"");
        assert!(checked.status.success(), "{p}: {}", text(&checked.stderr));
        assert!(
            text(&checked.stdout).contains(&format!("provider {p}")),
            "{p}: {}",
            text(&checked.stdout)
        );
        // Each type and strategy says why.
        let json = oncegate(dir.path(), &["check", "--json", &format!("{p}.toml")], b"");
        let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        for provider in doc["providers"].as_array().unwrap() {
            for t in provider["types"].as_array().unwrap() {
                assert!(
                    !t["why"].as_str().unwrap().is_empty(),
                    "{p}: {} has no why",
                    t["name"]
                );
                for s in t["strategies"].as_array().unwrap() {
                    assert!(
                        !s["why"].as_str().unwrap().is_empty(),
                        "{p}: {} {} has no why",
                        t["name"],
                        s["label"]
                    );
                }
            }
        }
        let again = oncegate(dir.path(), &["init", p], b"");
        assert_eq!(again.status.code(), Some(2), "{p}");
        assert!(
            text(&again.stderr).contains("pass --force"),
            "{}",
            text(&again.stderr)
        );
        let forced = oncegate(dir.path(), &["init", p, "--force"], b"");
        assert!(forced.status.success(), "{p}: {}", text(&forced.stderr));
    }
    let unknown = oncegate(dir.path(), &["init", "paypal"], b"");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown.stderr).contains("not in the catalog"),
        "{}",
        text(&unknown.stderr)
    );
}

#[test]
fn key_reads_an_identity_header_and_prints_each_batch_item() {
    let dir = Path::new(ROOT);
    let corpus = dir.join("../shared/corpora/providers");
    let order = std::fs::read(corpus.join("shopify/order-450789469.json")).unwrap();
    let out = oncegate(
        dir,
        &[
            "key",
            "--contract",
            "contracts/shopify.toml",
            "--provider",
            "shopify",
            "-H",
            "X-Shopify-Topic: orders/paid",
            "-H",
            "X-Shopify-Webhook-Id: b54557e4",
        ],
        &order,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert!(
        printed.contains("strategy:   webhook-id@1 level provider_id"),
        "{printed}"
    );
    assert!(
        printed.contains("field:      header:x-shopify-webhook-id = \"b54557e4\""),
        "{printed}"
    );
    let refund = std::fs::read(corpus.join("adyen/refund-true.json")).unwrap();
    let out = oncegate(
        dir,
        &[
            "key",
            "--contract",
            "contracts/adyen.toml",
            "--provider",
            "adyen",
            "--json",
        ],
        &refund,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["reply"], "[accepted]");
    assert_eq!(doc["items"][0]["strategy"]["level"], "business_ref");
    assert_eq!(doc["items"][0]["event_type"], "REFUND");
}
