//! Where each side's CPU goes, from `perf record` of its server and of its PostgreSQL backends
//! during a slice of its own (`ONCEGATE_LOAD_PERF` names a directory for the recordings): the
//! backends' by phase of a statement's life, which shows what bounds the side (what executing
//! its statements costs PostgreSQL per decision, apart from the protocol, the commit and the
//! sockets), and the server's by the part of the program it is in.
//!
//! A sample's phase is the first of these its call stack passes through, in this order: the
//! commit, the executor's start-up, its run (and finish: the `AFTER` triggers), its end,
//! planning and parsing, the bind message's parameters, the socket reads and writes (waiting
//! for the next message included), and the rest (portals, utility statements such as `SET`).
//! The stacks are unwound from DWARF (`--call-graph dwarf`), as Debian's PostgreSQL is built
//! without frame pointers.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The phases, in the order a stack is matched, each with the functions that mark it.
const PHASES: [(&str, &[&str]); 8] = [
    ("commit", &["CommitTransaction", "CommitTransactionCommand"]),
    ("executor start-up", &["standard_ExecutorStart"]),
    (
        "executing",
        &["standard_ExecutorRun", "standard_ExecutorFinish"],
    ),
    ("executor end", &["standard_ExecutorEnd"]),
    (
        "parse and plan",
        &[
            "exec_parse_message",
            "GetCachedPlan",
            "pg_plan_queries",
            "pg_analyze_and_rewrite_fixedparams",
            "raw_parser",
        ],
    ),
    // The bind message's own frame is inlined into its caller; its parameters' receive
    // functions (the arrays' elements) are not, and are called from nowhere else here.
    (
        "bind (parameters)",
        &[
            "exec_bind_message",
            "ReceiveFunctionCall",
            "OidReceiveFunctionCall",
        ],
    ),
    (
        "sockets",
        &[
            "secure_read",
            "secure_write",
            "pq_recvbuf",
            "internal_flush",
            "pq_getbyte",
        ],
    ),
    ("other", &[]),
];

/// The server's parts: a sample in a system call is the kernel's (sockets, polling, waking
/// tasks); one whose innermost frame allocates or frees is allocation; any other goes to the
/// first crate on its stack, from the innermost frame out, that one of these names (the
/// standard library's frames are their caller's).
const PARTS: [(&str, &[&str]); 9] = [
    ("kernel", &[]),
    ("allocation", &[]),
    (
        "HTTP",
        &["hyper::", "axum::", "http::", "httparse::", "tower::"],
    ),
    (
        "PostgreSQL protocol",
        &[
            "tokio_postgres::",
            "postgres_protocol::",
            "postgres_types::",
            "deadpool",
        ],
    ),
    ("store", &["oncegate_store::"]),
    (
        "JSON, keys, proofs",
        &[
            "oncegate_core::",
            "oncegate::",
            "serde_json::",
            "sha2::",
            "hmac::",
            "serde::",
        ],
    ),
    (
        "handlers, metrics",
        &[
            "oncegate_server::",
            "oncegate_cli::",
            "load::",
            "prometheus_client::",
            "tracing",
        ],
    ),
    ("runtime", &["tokio::", "futures"]),
    ("other", &[]),
];

/// Allocators' entry points, as an innermost frame.
const ALLOCATION: [&str; 6] = ["mi_", "_mi_", "malloc", "free", "realloc", "cfree"];

/// The part of `PARTS` a server's stack (innermost frame first) is in.
fn part_of(frames: &[&str]) -> usize {
    if frames
        .iter()
        .any(|f| *f == "entry_SYSCALL_64_after_hwframe" || *f == "do_syscall_64")
    {
        return 0;
    }
    if frames
        .first()
        .is_some_and(|f| ALLOCATION.iter().any(|a| f.starts_with(a)))
    {
        return 1;
    }
    for frame in frames {
        // `<Type as Trait>::method`: the type's crate, or the trait's for a generic type.
        let name = frame
            .trim_start_matches(['<', '&'])
            .trim_start_matches("dyn ");
        let name = match name.split_once(" as ") {
            Some((ty, tr)) if !ty.contains("::") => tr,
            _ => name,
        };
        if let Some(i) = PARTS
            .iter()
            .position(|(_, crates)| crates.iter().any(|c| name.starts_with(c)))
        {
            return i;
        }
    }
    PARTS.len() - 1
}

/// The phase of `PHASES` a backend's stack is in.
fn phase_of(frames: &[&str]) -> usize {
    PHASES
        .iter()
        .position(|(_, marks)| marks.iter().any(|m| frames.contains(m)))
        .unwrap_or(PHASES.len() - 1)
}

/// A `perf record` of some processes, until `stop`.
pub struct Recording {
    child: Child,
    data: PathBuf,
}

impl Recording {
    /// Starts recording `pids` into `dir/<name>.data`; `None` (with the reason on stderr) when
    /// perf cannot run.
    pub fn start(dir: &Path, name: &str, pids: &[u32]) -> Option<Recording> {
        if pids.is_empty() {
            return None;
        }
        let _ = std::fs::create_dir_all(dir);
        let data = dir.join(format!("{name}.data"));
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        let child = Command::new("perf")
            .args(["record", "--call-graph", "dwarf,32768", "-F", "299", "-o"])
            .arg(&data)
            .args(["-p", &list.join(",")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(child) => {
                // perf attaches within a moment; samples before it are simply not taken.
                std::thread::sleep(std::time::Duration::from_millis(300));
                Some(Recording { child, data })
            }
            Err(e) => {
                eprintln!("perf record could not start ({e}); no phases");
                None
            }
        }
    }

    /// Stops the recording of PostgreSQL's backends and reads the share of samples in each
    /// phase of a statement's life.
    pub fn phases(self) -> Option<Shares> {
        self.stop(&PHASES, phase_of)
    }

    /// Stops the recording of a server and reads the share of samples in each of its parts.
    pub fn parts(self) -> Option<Shares> {
        self.stop(&PARTS, part_of)
    }

    /// Stops the recording (SIGINT, so perf writes its file out) and counts its samples with
    /// `classify`.
    fn stop(
        mut self,
        names: &[(&'static str, &[&str])],
        classify: fn(&[&str]) -> usize,
    ) -> Option<Shares> {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32)?;
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        let _ = self.child.wait();
        // `--no-inline`: resolving inlined frames through addr2line takes minutes, and the
        // phases' functions are never inlined.
        let out = Command::new("perf")
            .args(["script", "--no-inline", "-F", "ip,sym", "-i"])
            .arg(&self.data)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let shares = Shares::of(&String::from_utf8_lossy(&out.stdout), names, classify);
        if shares.samples == 0 {
            eprintln!(
                "perf recorded no samples in {} (perf_event_paranoid, or no perf?)",
                self.data.display()
            );
            return None;
        }
        Some(shares)
    }
}

/// Samples by phase or part.
pub struct Shares {
    names: Vec<&'static str>,
    counts: Vec<u64>,
    samples: u64,
}

impl Shares {
    /// Counts the samples of `perf script` output: each sample a block of frame lines (address,
    /// symbol), innermost first, blocks apart by a blank line.
    fn of(
        script: &str,
        names: &[(&'static str, &[&str])],
        classify: fn(&[&str]) -> usize,
    ) -> Shares {
        let mut shares = Shares {
            names: names.iter().map(|(n, _)| *n).collect(),
            counts: vec![0; names.len()],
            samples: 0,
        };
        for block in script.split("\n\n") {
            let frames: Vec<&str> = block
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .map(|sym| sym.split('+').next().unwrap_or(sym))
                .collect();
            if frames.is_empty() {
                continue;
            }
            shares.counts[classify(&frames)] += 1;
            shares.samples += 1;
        }
        shares
    }

    /// "executing 120, commit 20, …": each phase's share of `per_decision` µs, the phases
    /// with a µs or more only.
    pub fn line(&self, per_decision: f64) -> String {
        self.names
            .iter()
            .zip(&self.counts)
            .map(|(name, n)| (name, per_decision * *n as f64 / self.samples as f64))
            .filter(|(_, us)| *us >= 0.5)
            .map(|(name, us)| format!("{name} {us:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The µs of `per_decision` spent executing statements (start-up, run, end), for the
    /// shares of `phases`.
    pub fn executor(&self, per_decision: f64) -> f64 {
        let n: u64 = self.counts[1..4].iter().sum();
        per_decision * n as f64 / self.samples.max(1) as f64
    }
}
