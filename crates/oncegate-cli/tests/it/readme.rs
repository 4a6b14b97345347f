//! The README's quick start, run as it is written: the contract `oncegate init` writes, the
//! provider's own published event, the signed delivery and the decision the README states; and
//! the README's provider table, checked against the catalog.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const README: &str = include_str!("../../../../README.md");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text of the README's section `## <title>`, up to the next `## ` heading.
fn section(title: &str) -> &'static str {
    let head = format!("\n## {title}\n");
    let start = README
        .find(&head)
        .unwrap_or_else(|| panic!("the README has a section {title:?}"))
        + head.len();
    let rest = &README[start..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The fenced blocks of `text` in `lang`, in order.
fn blocks<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let fence = format!("```{lang}\n");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(&fence) {
        let body = &rest[i + fence.len()..];
        let end = body.find("\n```").expect("the block ends") + 1;
        out.push(&body[..end]);
        rest = &body[end..];
    }
    out
}

/// What the quick start's shell blocks do, read from them.
struct QuickStart {
    /// `oncegate init <provider>`.
    provider: String,
    /// The file `serve --contract` names.
    contract: String,
    /// `export NAME=value` lines with a literal value (quotes removed).
    env: BTreeMap<String, String>,
    /// The heredoc's file name and its text.
    event_file: String,
    event: String,
    /// The path the signed delivery is posted to, and the signature's header.
    path: String,
    signature_header: String,
    /// The variable naming the signing secret in the `openssl dgst -hmac` line.
    secret_var: String,
}

fn quick_start() -> QuickStart {
    let text = section("Quick start");
    let shell = blocks(text, "sh").concat();
    let lines: Vec<&str> = shell.lines().collect();
    let command = |prefix: &str| -> &str {
        lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("the quick start runs `{prefix}…`"))
    };
    let words = |line: &str| -> Vec<String> {
        let line = line.split(" #").next().unwrap();
        line.split_whitespace().map(str::to_owned).collect()
    };
    let init = words(command("oncegate init "));
    let serve = words(command("oncegate serve "));
    let contract = serve[serve.iter().position(|w| w == "--contract").unwrap() + 1].clone();
    let mut env = BTreeMap::new();
    for line in lines.iter().filter(|l| l.starts_with("export ")) {
        let assignment = &words(line)[1];
        let (name, value) = assignment.split_once('=').unwrap();
        if !value.contains("$(") {
            env.insert(name.to_owned(), value.trim_matches('\'').to_owned());
        }
    }
    let cat = command("cat > ");
    let event_file = cat["cat > ".len()..cat.find(" <<").unwrap()].to_owned();
    let tag = cat[cat.find("<<").unwrap() + 2..]
        .trim_matches('\'')
        .to_owned();
    let from = lines.iter().position(|l| l == &cat).unwrap() + 1;
    let to = from + lines[from..].iter().position(|l| *l == tag).unwrap();
    let event = lines[from..to].iter().map(|l| format!("{l}\n")).collect();
    assert!(
        lines.contains(&format!("body=$(cat {event_file})").as_str()),
        "the body is the heredoc's file"
    );
    let sign = command("v1=$(printf '%s.%s' \"$t\" \"$body\" | openssl dgst -sha256 -hmac ");
    let secret_var = sign.split("-hmac \"$").nth(1).unwrap();
    let secret_var = secret_var[..secret_var.find('"').unwrap()].to_owned();
    let curl = command("curl ");
    let url = words(curl)
        .into_iter()
        .find(|w| w.contains("/v1/deliveries/"))
        .unwrap();
    let path = url[url.find("/v1/").unwrap()..].to_owned();
    let header = curl.split("-H \"").nth(1).expect("the curl names a header");
    let signature_header = header[..header.find(':').unwrap()].to_owned();
    assert!(
        header.contains("t=$t,v1=$v1") && curl.contains("--data-binary \"$body\""),
        "the curl sends the signed body: {curl}"
    );
    QuickStart {
        provider: init[2].clone(),
        contract,
        env,
        event_file,
        event,
        path,
        signature_header,
        secret_var,
    }
}

/// The answer the README shows for the signed delivery (its first JSON block).
fn stated_answer() -> serde_json::Value {
    let text = section("Quick start");
    let block = blocks(text, "json")
        .into_iter()
        .next()
        .expect("the quick start shows the answer");
    serde_json::from_str(block).expect("the shown answer is JSON")
}

fn oncegate(dir: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(args)
        .current_dir(dir)
        .env_remove("ONCEGATE_CONTRACT")
        .env_remove("ONCEGATE_STORE")
        .env("ONCEGATE_KEY_SALT", "readme-test-salt")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every leaf of `stated` is in `actual` with the same value, except ids, tokens and times,
/// which differ per run and are only required to be there.
fn assert_shown(stated: &serde_json::Value, actual: &serde_json::Value, at: &str) {
    match stated {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let next = format!("{at}/{k}");
                let a = actual
                    .get(k)
                    .unwrap_or_else(|| panic!("the answer has no {next}: {actual}"));
                assert_shown(v, a, &next);
            }
        }
        serde_json::Value::String(s)
            if ["dlv_", "eff_", "q_"].iter().any(|p| s.starts_with(p))
                || at.ends_with("/token")
                || at.ends_with("_at")
                || at.ends_with("/lease_until") =>
        {
            assert!(actual.is_string(), "{at} is a string in the answer")
        }
        _ => assert_eq!(stated, actual, "the README's answer at {at}"),
    }
}

/// The quick start's event is the provider's published event, byte for byte, and the catalog's
/// contract keys it at the level the README shows, never "no strategy applies".
#[test]
fn the_quick_starts_event_gets_a_key_from_the_catalogs_contract() {
    let qs = quick_start();
    let fixture =
        root().join("../shared/corpora/providers/stripe/charge-refunded-legacy-test-webhook.json");
    let published =
        std::fs::read_to_string(&fixture).unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
    assert_eq!(
        qs.event, published,
        "the README's {} is the published event as it stands",
        qs.event_file
    );

    let dir = tempfile::tempdir().unwrap();
    let init = oncegate(dir.path(), &["init", &qs.provider], "");
    assert!(init.status.success(), "{}", text(&init.stderr));
    let written = std::fs::read_to_string(dir.path().join(&qs.contract))
        .expect("`oncegate init` writes the file `serve --contract` names");
    let catalog = std::fs::read_to_string(root().join(format!("contracts/{}.toml", qs.provider)));
    assert_eq!(
        written,
        catalog.unwrap(),
        "init writes the catalog's contract"
    );

    let body = qs.event.trim_end_matches('\n');
    let key = oncegate(
        dir.path(),
        &[
            "key",
            "--contract",
            &qs.contract,
            "--provider",
            &qs.provider,
            "--json",
        ],
        body,
    );
    let out = text(&key.stdout);
    assert!(key.status.success(), "{out}{}", text(&key.stderr));
    assert!(!out.contains("no strategy applies"), "{out}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON line");
    let stated = stated_answer();
    assert!(doc["effect_key"].is_string(), "{doc}");
    for field in ["name", "version", "level", "confidence"] {
        assert_eq!(
            doc["strategy"][field], stated["strategy"][field],
            "the key's strategy {field}, as the README shows it"
        );
    }
}

/// A served process, killed if the test ends before it stops it.
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `serve` with the quick start's environment answers the quick start's signed curl as the
/// README says, and `explain` then proves the decision the README shows.
#[tokio::test]
async fn the_quick_starts_signed_delivery_is_answered_as_the_readme_says() {
    let qs = quick_start();
    let secret = qs
        .env
        .get(&qs.secret_var)
        .unwrap_or_else(|| panic!("the quick start exports {}", qs.secret_var))
        .clone();
    let dir = tempfile::tempdir().unwrap();
    assert!(oncegate(dir.path(), &["init", &qs.provider], "")
        .status
        .success());
    let store = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    let mut serve = Command::new(env!("CARGO_BIN_EXE_oncegate"));
    serve
        .args(["serve", "--contract", &qs.contract, "--store", &store])
        .args(["--listen", "127.0.0.1:0", "--log-json"])
        .current_dir(dir.path())
        .env_remove("ONCEGATE_CONTRACT")
        .env_remove("ONCEGATE_STORE")
        .env_remove("ONCEGATE_TOKENS_FILE")
        .env("ONCEGATE_KEY_SALT", "readme-test-salt")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, value) in &qs.env {
        serve.env(name, value);
    }
    let mut child = Served(serve.spawn().expect("the binary starts"));
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let address = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("serve stopped before listening");
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["message"] == "oncegate serving" {
            break v["address"].as_str().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});

    // The body as `body=$(cat file)` holds it, signed as the quick start's openssl line does.
    let body = qs.event.trim_end_matches('\n').to_owned();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    let v1 = hex::encode(mac.finalize().into_bytes());
    let http = reqwest::Client::new();
    let post = |v1: String| {
        http.post(format!("http://{address}{}", qs.path))
            .header(qs.signature_header.as_str(), format!("t={t},v1={v1}"))
            .body(body.clone())
            .send()
    };
    let answer = post(v1).await.unwrap();
    let status = answer.status();
    let answer: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_shown(&stated_answer(), &answer, "");

    // Another `v1` is refused, as the README says.
    let forged = post("0".repeat(64)).await.unwrap();
    assert_eq!(forged.status(), 401);
    let forged: serde_json::Value = forged.json().await.unwrap();
    assert_eq!(forged["error"]["code"], "bad_signature", "{forged}");

    let delivery = answer["delivery_id"].as_str().unwrap();
    let explain = oncegate(dir.path(), &["explain", delivery, "--store", &store], "");
    let report = oncegate(dir.path(), &["report", "--store", &store], "");
    crate::signal::terminate(&child.0);
    let _ = child.0.wait();
    assert!(explain.status.success(), "{}", text(&explain.stderr));
    assert!(report.status.success(), "{}", text(&report.stderr));
    let shown = blocks(section("Quick start"), "text")
        .into_iter()
        .find(|b| b.starts_with("delivery dlv_"))
        .expect("the quick start shows `oncegate explain`'s output");
    let printed = text(&explain.stdout);
    assert_eq!(
        crate::tools::masked(shown),
        crate::tools::masked(&printed),
        "the README's explain output is what explain prints:\n{printed}"
    );
}

/// A provider's row in the README's table: its signature scheme (`None`: none), its secret and
/// each event type's key levels.
struct Row {
    scheme: Option<String>,
    secret: Option<String>,
    levels: BTreeMap<String, Vec<String>>,
}

fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn table() -> BTreeMap<String, Row> {
    let mut rows = BTreeMap::new();
    for line in section("Providers")
        .lines()
        .filter(|l| l.starts_with("| `"))
    {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "{line}");
        // Parenthesized notes are for the reader.
        let mut events = String::new();
        let mut depth = 0;
        for c in cells[3].chars() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ if depth == 0 => events.push(c),
                _ => {}
            }
        }
        let mut levels = BTreeMap::new();
        for group in events.split(';') {
            let Some((types, chain)) = group.split_once("`:") else {
                continue;
            };
            let chain: Vec<String> = chain.split('→').map(|l| l.trim().to_owned()).collect();
            for t in ticked(&format!("{types}`")) {
                levels.insert(t, chain.clone());
            }
        }
        rows.insert(
            ticked(cells[0])[0].clone(),
            Row {
                scheme: (!cells[1].starts_with("none")).then(|| ticked(cells[1])[0].clone()),
                secret: ticked(cells[2]).first().cloned(),
                levels,
            },
        );
    }
    rows
}

/// The README's provider table says what the catalog's files say: every provider, its signature
/// scheme and secret, every event type and its key levels in order.
#[test]
fn the_readmes_provider_table_is_the_catalog() {
    use oncegate_core::contract::SecretSource;
    let table = table();
    let mut seen = BTreeSet::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("contracts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let contract = oncegate_core::contract::parse(&file.display().to_string(), &text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (name, p) in &contract.providers {
            let row = table
                .get(name)
                .unwrap_or_else(|| panic!("the README's provider table has no row for {name}"));
            seen.insert(name.clone());
            let signature = p.signature.as_ref();
            assert_eq!(
                row.scheme.as_deref(),
                signature.map(|s| s.scheme.name()),
                "{name}'s signature scheme"
            );
            let secret = signature.and_then(|s| s.secrets.first()).map(|s| match s {
                SecretSource::Env(v) | SecretSource::File(v) => v.clone(),
            });
            assert_eq!(row.secret, secret, "{name}'s secret");
            let levels: BTreeMap<String, Vec<String>> = p
                .types
                .iter()
                .map(|(t, ty)| {
                    let chain = ty
                        .strategies
                        .iter()
                        .map(|s| s.level.as_str().to_owned())
                        .collect();
                    (t.clone(), chain)
                })
                .collect();
            assert_eq!(row.levels, levels, "{name}'s event types and key levels");
        }
    }
    let extra: Vec<&String> = table.keys().filter(|k| !seen.contains(*k)).collect();
    assert!(
        extra.is_empty(),
        "rows for providers the catalog lacks: {extra:?}"
    );
}
