//! The signature test vectors of `tests/fixtures/signatures.json`, computed by
//! `scripts/gen-signature-vectors.py` with Python's own HMAC: the fixture is what the script
//! writes, and every vector gets its expected verdict from the verifier, through a contract
//! parsed like any other.

use std::path::{Path, PathBuf};
use std::process::Command;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use oncegate_core::contract;
use oncegate_server::ProviderSecrets;
use serde_json::Value;
use time::OffsetDateTime;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const FIXTURE: &str = "crates/oncegate-server/tests/fixtures/signatures.json";

#[test]
fn the_signature_vectors_are_what_the_script_generates() {
    let python = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file())
        .expect(
            "python3 is not on PATH; it runs scripts/gen-signature-vectors.py. Install Debian's \
             python3 (as root: apt-get install -y python3; scripts/test does it)",
        );
    let out = Command::new(python)
        .arg(root().join("scripts/gen-signature-vectors.py"))
        .args(["--out", "-"])
        .output()
        .expect("python3 runs the generator");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == std::fs::read(root().join(FIXTURE)).unwrap(),
        "{FIXTURE} differs from scripts/gen-signature-vectors.py's output: regenerate it"
    );
}

/// The provider `p` of a one-provider contract with the vector's signature table, its secrets
/// named `S0`, `S1`, … in the vector's order.
fn contract_for(v: &Value) -> contract::Contract {
    let secrets = v["secrets"].as_array().unwrap();
    let names: Vec<String> = (0..secrets.len()).map(|i| format!("\"S{i}\"")).collect();
    let mut table = format!(
        "scheme = {}, secret_env = [{}]",
        v["scheme"],
        names.join(", ")
    );
    for (field, value) in v["fields"].as_object().unwrap() {
        // A JSON string of printable ASCII is also a TOML basic string.
        table.push_str(&format!(", {field} = {value}"));
    }
    let text = format!("[providers.p]\nevent_type = \"/type\"\nsignature = {{ {table} }}\n");
    contract::parse("vector.toml", &text).unwrap_or_else(|e| panic!("{}: {e}", v["name"]))
}

#[test]
fn every_signature_vector_gets_its_expected_verdict() {
    let fixture: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join(FIXTURE)).unwrap()).unwrap();
    let vectors = fixture["vectors"].as_array().unwrap();
    let mut wrong = Vec::new();
    let mut seen = std::collections::BTreeMap::<(String, String), usize>::new();
    for v in vectors {
        let name = v["name"].as_str().unwrap();
        let contract = contract_for(v);
        let scheme = &contract
            .provider("p")
            .unwrap()
            .signature
            .as_ref()
            .unwrap()
            .scheme;
        let mut secrets = ProviderSecrets::default();
        for s in v["secrets"].as_array().unwrap() {
            secrets
                .insert_for(&contract, "p", s.as_str().unwrap())
                .unwrap();
        }
        let mut headers = HeaderMap::new();
        for (k, value) in v["headers"].as_object().unwrap() {
            headers.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(value.as_str().unwrap()).unwrap(),
            );
        }
        let now = OffsetDateTime::from_unix_timestamp(v["now"].as_i64().unwrap()).unwrap();
        let body = v["body"].as_str().unwrap().as_bytes();
        let got = match secrets.verify("p", scheme, &headers, body, now) {
            Ok(()) => "ok".to_owned(),
            Err(e) => {
                // A refusal's reason is journaled and logged: it never quotes a header.
                for value in v["headers"].as_object().unwrap().values() {
                    let value = value.as_str().unwrap();
                    assert!(
                        value.len() < 12 || !e.to_string().contains(value),
                        "{name}: {e}"
                    );
                }
                e.kind().to_owned()
            }
        };
        let expect = v["expect"].as_str().unwrap();
        *seen
            .entry((v["scheme"].as_str().unwrap().to_owned(), expect.to_owned()))
            .or_default() += 1;
        if got != expect {
            wrong.push(format!("{name}: expected {expect}, got {got}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} vectors disagree:\n{}",
        wrong.len(),
        vectors.len(),
        wrong.join("\n")
    );
    // Every scheme is covered with an authentic delivery and with each kind of refusal it can
    // have, so a fixture that lost its cases cannot pass quietly.
    for scheme in contract::Scheme::NAMES {
        let timestamped = !matches!(scheme, "github" | "shopify" | "square" | "adyen");
        let mut kinds = vec!["ok", "mismatch", "missing", "malformed"];
        if timestamped {
            kinds.extend(["stale", "future"]);
        }
        for kind in kinds {
            assert!(
                seen.contains_key(&(scheme.to_owned(), kind.to_owned())),
                "no {kind} vector for {scheme}"
            );
        }
    }
}
