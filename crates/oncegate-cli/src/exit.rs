//! Exit statuses, chosen and documented in one place: a command returns a [`Status`], `main`
//! maps an error to [`Status::Error`] and a closed standard output to [`Status::ClosedPipe`],
//! and [`document`] gives every command of the tree its "Exit status" section in `--help`
//! from [`OWN`] (each command's own lines) and the lines every command shares. A unit test in
//! `main` walks the whole command tree for a command without one.

use std::process::ExitCode;

/// What a command's exit status says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The command did what it was asked.
    Success,
    /// The command ran and found what it reports as a problem (`key`: no effect key; `canon
    /// --lines`: a line that is not JSON; `corpus replay --fail-on-loss`: a loss).
    Found,
    /// An error or a usage error (clap's own are 2 as well); the message is on stderr.
    Error,
    /// Standard output was closed before the output was written (`| head`): 141, what a shell
    /// reports for a program ended by SIGPIPE. A truncated listing is not a complete one, so a
    /// script running with `set -o pipefail` must see it, as it would for any other program in
    /// the pipe; and without `pipefail` (the usual `| head`) nobody sees it at all.
    ClosedPipe,
}

impl Status {
    pub const fn code(self) -> u8 {
        match self {
            Status::Success => 0,
            Status::Found => 1,
            Status::Error => 2,
            Status::ClosedPipe => 141,
        }
    }
}

impl From<Status> for ExitCode {
    fn from(status: Status) -> ExitCode {
        ExitCode::from(status.code())
    }
}

/// Each command's own statuses, by its path below `oncegate` (`""` is `oncegate` itself),
/// each line `"<status>    <meaning>"`. The lines for 2 and 141 are added to every command.
pub const OWN: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "0    the command did what it was asked",
            "1    the command ran and found a problem it names (`key`, `canon --lines`, `corpus replay --fail-on-loss`)",
        ],
    ),
    (
        "serve",
        &["0    the service stopped on SIGTERM or SIGINT after answering the requests in flight (a contract, store or address it cannot use at start: status 2)"],
    ),
    ("demo", &["0    the story ran through and its report was printed"]),
    (
        "canon",
        &[
            "0    the canonical form was printed (with --lines: every line was accepted)",
            "1    with --lines, some lines were not accepted: each has its error line on stdout (without --lines, stdin not accepted is status 2)",
        ],
    ),
    ("check", &["0    the contract is valid (an invalid one is status 2, each error named)"]),
    (
        "init",
        &["0    the contract was written (or, with --list, the catalog listed); an existing file without --force: status 2"],
    ),
    (
        "key",
        &[
            "0    an effect key was made",
            "1    no strategy applies to the event: it has no effect key",
        ],
    ),
    ("explain", &["0    the delivery's proof was printed (a delivery with no recorded decision too)"]),
    ("report", &["0    the report was printed, whatever its unexplained gap (read `unexplained_gap`)"]),
    ("migrate", &["0    the live effects were aliased to the new contract's keys (none needing it too)"]),
    ("replay", &["0    the replay was journaled and decided, whatever the decision it printed"]),
    (
        "purge",
        &["0    the purge ran (or, with --dry-run, was counted; with --archive, after its archive verified)"],
    ),
    (
        "partition",
        &["0    the tables are partitioned by day and the days asked for exist (a SQLite store, or a role that may not create tables: status 2)"],
    ),
    (
        "rollup",
        &["0    every minute that ended more than two minutes ago is counted (another instance counting, or a transaction that outlived the wait: status 2)"],
    ),
    ("archive", &["0    the subcommand succeeded; each one's --help lists its statuses"]),
    (
        "archive export",
        &["0    the archive was written, its manifest last (a directory in use or a cut in the future: status 2)"],
    ),
    (
        "archive verify",
        &[
            "0    every file, count and row matches the manifest",
            "1    the archive does not verify: the first fault is named on stderr",
        ],
    ),
    (
        "reconcile",
        &["0    the pass ran; items left open and sweep errors are in the output, not the status"],
    ),
    ("queue", &["0    the subcommand succeeded; each one's --help lists its statuses"]),
    ("queue list", &["0    the page was printed (an empty page too)"]),
    ("queue show", &["0    the item was printed"]),
    (
        "queue resolve",
        &["0    the item was resolved (no such item, or one already resolved: status 2)"],
    ),
    ("breaker", &["0    the subcommand succeeded; each one's --help lists its statuses"]),
    ("breaker list", &["0    the breakers were printed, open ones too"]),
    (
        "breaker close",
        &["0    the breaker was closed (one that is not open, or never opened: status 2)"],
    ),
    ("forward", &["0    the subcommand succeeded; each one's --help lists its statuses"]),
    ("forward list", &["0    the forwards were printed (none matching too)"]),
    (
        "forward resend",
        &["0    the dead letter is pending again (not dead, or no forward: status 2)"],
    ),
    ("corpus", &["0    the subcommand succeeded; each one's --help lists its statuses"]),
    (
        "corpus analyze",
        &["0    the statistics were printed (lines that are not records are counted, not fatal)"],
    ),
    ("corpus export", &["0    the deliveries were written (none matching too)"]),
    (
        "corpus replay",
        &[
            "0    the replay's tally was printed (with --fail-on-loss: the contract lost nothing)",
            "1    with --fail-on-loss, the contract merged distinct labeled operations (false positives)",
        ],
    ),
];

/// The lines every command shares, after its own.
const SHARED: &[&str] = &[
    "2    an error, or a usage error; the message is on stderr",
    "141  standard output was closed before the output was written (`| head`)",
];

/// What `--json` promises, for the commands that have it.
const JSON: &str =
    "With --json, stdout holds one JSON document on one line; an error prints no JSON:\n\
                    its message is on stderr and the status is non-zero, as without --json.";

/// The commands whose `--json` document is indented over several lines (for reading, not `jq`
/// line by line); the rest of [`JSON`] holds for them too.
const INDENTED_JSON: &[&str] = &["corpus analyze", "corpus replay"];

/// The "Exit status" section of the command at `path` (`None` when [`OWN`] has no entry).
pub fn section(path: &str, has_json: bool) -> Option<String> {
    let (_, own) = OWN.iter().find(|(p, _)| *p == path)?;
    let mut text = String::from("Exit status:\n");
    for line in own.iter().chain(SHARED) {
        text.push_str("  ");
        text.push_str(line);
        text.push('\n');
    }
    if has_json {
        text.push('\n');
        if INDENTED_JSON.contains(&path) {
            text.push_str(&JSON.replace("on one line", "indented over several lines"));
        } else {
            text.push_str(JSON);
        }
    }
    Some(text.trim_end().to_owned())
}

/// `command` with every command of its tree given its "Exit status" section as after-help.
pub fn document(command: clap::Command) -> clap::Command {
    document_at(command, "")
}

fn document_at(mut command: clap::Command, path: &str) -> clap::Command {
    let names: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    for name in names {
        let sub_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path} {name}")
        };
        command = command.mut_subcommand(&name, |sub| document_at(sub, &sub_path));
    }
    let has_json = command
        .get_arguments()
        .any(|a| a.get_long() == Some("json"));
    match section(path, has_json) {
        Some(text) => command.after_help(text),
        None => command,
    }
}
