//! The binary in pipes: a standard output closed by its reader (`| head -1`) ends a command
//! quietly (status 141, no panic, no "Broken pipe"), and `serve`'s logs written to a pipe
//! carry no ANSI colour escapes.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONTRACT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/oncegate.toml");

fn oncegate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_oncegate"))
}

/// Waits for `child` for at most 20 s.
fn wait(child: &mut Child) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the command did not finish within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` with its stdout a pipe that is closed after its first line, and returns the
/// line, the exit status and stderr. The output is made larger than a pipe's buffer, so the
/// command is still writing when the pipe closes: it always meets the closed pipe.
fn first_line_then_close(
    mut cmd: Command,
    stdin: Option<Vec<u8>>,
) -> (String, Option<i32>, String) {
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        });
    }
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut first = String::new();
    {
        let mut out = BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut first).unwrap();
        // The reader goes away here, as `head -1` does.
    }
    let status = wait(&mut child);
    (first, status.code(), errors.join().unwrap())
}

fn assert_quiet(what: &str, first: &str, code: Option<i32>, stderr: &str) {
    assert!(!first.is_empty(), "{what}: no first line");
    assert!(
        !stderr.contains("panicked")
            && !stderr.contains("Broken pipe")
            && !stderr.contains("RUST_BACKTRACE"),
        "{what}: stderr is not quiet:\n{stderr}"
    );
    assert_eq!(
        code,
        Some(141),
        "{what}: the exit status of a closed pipe; stderr:\n{stderr}"
    );
}

#[test]
fn check_exits_quietly_when_its_stdout_is_closed() {
    // A contract with enough types that `check` prints far more than a pipe holds.
    let mut text = String::from("[providers.p]\nevent_type = \"/type\"\n");
    for i in 0..400 {
        text.push_str(&format!(
            "[providers.p.types.t{i}]\ncriticality = \"reversible\"\n[[providers.p.types.t{i}.strategies]]\nname = \"s{i}\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\", \"/amount\"]\n"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.toml");
    std::fs::write(&path, text).unwrap();
    let mut cmd = oncegate();
    cmd.arg("check").arg(&path);
    let (first, code, stderr) = first_line_then_close(cmd, None);
    assert!(first.contains("valid"), "{first}");
    assert_quiet("check", &first, code, &stderr);
}

#[test]
fn canon_lines_exits_quietly_when_its_stdout_is_closed() {
    let input: Vec<u8> = (0..20_000)
        .flat_map(|i| format!("{{\"b\":{i},\"a\":[1, 2, 3]}}\n").into_bytes())
        .collect();
    let mut cmd = oncegate();
    cmd.args(["canon", "--lines"]);
    let (first, code, stderr) = first_line_then_close(cmd, Some(input));
    assert_eq!(first, "{\"a\":[1,2,3],\"b\":0}\n");
    assert_quiet("canon --lines", &first, code, &stderr);
}

/// Only a closed stdout is quiet: any other failure (here, a store that cannot be opened) is
/// still reported with its message and status 2.
#[test]
fn other_errors_are_still_reported() {
    let out = oncegate()
        .args(["report", "--store", "sqlite:///nonexistent/dir/oncegate.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("oncegate: "));
}

#[test]
fn serve_logs_to_a_pipe_carry_no_colour_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("logs.db");
    let mut child = oncegate()
        .args(["serve", "--contract", CONTRACT, "--listen", "127.0.0.1:0"])
        .arg("--store")
        .arg(format!("sqlite://{}", db.display()))
        .env("ONCEGATE_KEY_SALT", "pipes-test-salt")
        .env("ONCEGATE_TOKENS", "ingest:*:ingest-token-1")
        .env_remove("ONCEGATE_LOG")
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut logged = String::new();
    let address = loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("serve stopped before listening:\n{logged}");
        }
        logged.push_str(&line);
        if line.contains("oncegate serving") {
            let at = line.find("address=").expect("the address is logged") + "address=".len();
            break line[at..].split_whitespace().next().unwrap().to_owned();
        }
    };
    // One refused delivery logs a line with fields (where colour would be).
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "POST /v1/deliveries/acme/payflow/live HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    crate::signal::terminate(&child);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    logged.push_str(&rest);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(wait(&mut child).success(), "{logged}\n{stderr}");
    assert!(logged.contains("reception refused"), "{logged}");
    assert!(
        !logged.contains('\u{1b}') && !stderr.contains('\u{1b}'),
        "ANSI escapes in piped logs:\n{logged:?}\n{stderr:?}"
    );
}
