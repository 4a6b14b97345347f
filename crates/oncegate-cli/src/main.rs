//! The `oncegate` command: thin glue between the command line and the library crates.

// First, so its `out!`/`outln!`/`errln!` macros are in scope in every module after it.
/// mimalloc instead of the system allocator: a decision allocates and frees many small,
/// short-lived buffers across the runtime's threads (HTTP, JSON, keys, the store's rows), and
/// glibc's malloc and free took a quarter of `oncegate serve`'s CPU under load (`perf`). The
/// `system-allocator` feature keeps the system's, for heap profilers.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[macro_use]
mod output;

mod exit;

mod archive;
mod breaker;
mod canon;
mod check;
mod contract;
mod corpus;
mod demo;
mod explain;
mod forward;
mod init;
mod json;
mod key;
mod migrate;
mod partition;
mod purge;
mod queue;
mod reconcile;
mod replay;
mod report;
mod rollup;
mod salt;
mod serve;
mod store;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use exit::Status;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "oncegate",
    version,
    about = "Make every business effect of incoming webhooks happen exactly once, and prove why."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 30s or 5m ({e})"))
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (`/v1`, `/metrics`, `/healthz`, `/readyz`).
    Serve {
        /// The contract (default: the file ONCEGATE_CONTRACT names, else ./oncegate.toml).
        #[arg(long)]
        contract: Option<PathBuf>,
        #[command(flatten)]
        store: crate::store::StoreArg,
        /// A PostgreSQL streaming standby of the store to read the console, the report, proofs
        /// and the queue and delivery listings from (answers say its lag in
        /// `oncegate-read-lag-ms`); decisions and operator actions stay on --store.
        #[arg(long, env = "ONCEGATE_READ_STORE", value_name = "STORE")]
        read_store: Option<String>,
        #[arg(long, env = "ONCEGATE_LISTEN", default_value = "127.0.0.1:8080")]
        listen: String,
        /// Reservation lease (overrides the contract's `settings.lease`).
        #[arg(long, value_parser = duration)]
        lease: Option<Duration>,
        /// Longest a request may take before it is answered 503 (retry later).
        #[arg(long, value_parser = duration, default_value = "10s")]
        request_timeout: Duration,
        /// Longest a client may take to send a request head; past it the connection is closed.
        #[arg(long, value_parser = duration, default_value = "30s")]
        header_timeout: Duration,
        /// Longest a request body may take to arrive (answered 408, a delivery journaled as
        /// refused); must be shorter than --request-timeout.
        #[arg(long, value_parser = duration, default_value = "5s")]
        body_timeout: Duration,
        /// How long a kept-alive connection may wait for its next request before it is closed.
        #[arg(long, value_parser = duration, default_value = "75s")]
        idle_timeout: Duration,
        /// An extra CA certificate file (PEM) every authority's HTTPS connection trusts.
        #[arg(long, env = "ONCEGATE_CA_FILE")]
        ca_file: Option<PathBuf>,
        /// Serve `/metrics` without a bearer token.
        #[arg(long)]
        metrics_public: bool,
        /// Log JSON lines instead of text (also `ONCEGATE_LOG=json`).
        #[arg(long)]
        log_json: bool,
        /// How often the retention purge runs in the background.
        #[arg(long, value_parser = duration, default_value = "1h")]
        purge_every: Duration,
        /// Run no background purge (another instance or a cron `oncegate purge` does it).
        #[arg(long)]
        no_purge: bool,
        /// Archive what each background purge removes into a new directory below this one
        /// (`before-<cut>`), verified before anything is removed (as `purge --archive`).
        #[arg(
            long,
            value_name = "DIR",
            env = "ONCEGATE_PURGE_ARCHIVE",
            conflicts_with = "no_purge"
        )]
        purge_archive: Option<PathBuf>,
        /// How far back a strategy's key matches count for its collision breaker.
        #[arg(long, value_parser = duration, default_value = "24h")]
        breaker_window: Duration,
        /// The reconciler's fallback poll: an item queued by this instance is attempted at
        /// once; this picks up items queued by other instances and retries that became due.
        #[arg(long, value_parser = duration, default_value = "30s")]
        reconcile_every: Duration,
        /// Largest body accepted, in bytes (overrides the contract's `settings.max_body_bytes`).
        #[arg(long)]
        max_body_bytes: Option<usize>,
        /// Deepest JSON nesting accepted (overrides the contract's `settings.max_depth`).
        #[arg(long)]
        max_depth: Option<usize>,
        /// Threads answering requests (default: one per core). On a machine shared with
        /// PostgreSQL, fewer threads wait and wake less per decision: see docs/deploy.md.
        #[arg(long, env = "ONCEGATE_WORKERS", value_parser = clap::value_parser!(u16).range(1..=1024))]
        workers: Option<u16>,
    },
    /// Work the ambiguity queue: `queue list|show|resolve`.
    Queue {
        #[command(subcommand)]
        command: queue::QueueCommand,
    },
    /// Collision breakers: `breaker list|close`.
    Breaker {
        #[command(subcommand)]
        command: breaker::BreakerCommand,
    },
    /// Gateway mode's forwards and dead letters: `forward list|resend`.
    Forward {
        #[command(subcommand)]
        command: forward::ForwardCommand,
    },
    /// PostgreSQL: partition the journal (with its proofs) by day (once), and create the days ahead.
    Partition(partition::PartitionArgs),
    /// Count the report's minute totals now (`serve` does in the background).
    Rollup(rollup::RollupArgs),
    /// Archives of deliveries and their proofs: `archive export|verify`.
    Archive {
        #[command(subcommand)]
        command: archive::ArchiveCommand,
    },
    /// Apply the contract's retention now (index past horizon, payloads, proofs; durable identities kept).
    Purge(purge::PurgeArgs),
    /// Settle open reconcile items against the types' authorities once (cron-style), and run the invisible-losses sweep.
    Reconcile(reconcile::ReconcileArgs),
    /// Late replay of one delivery: the same strategy version, the business result found through its proof.
    Replay(replay::ReplayArgs),
    /// Replay the source story (a re-encoded retry, two legitimate refunds) against the real service.
    Demo,
    /// Print the RFC 8785 (JCS) canonical form of the JSON read on stdin.
    Canon {
        /// Read JSON Lines: one canonical line (or one error line) per input line.
        #[arg(long)]
        lines: bool,
    },
    /// Write a starting contract for a provider from the catalog (stripe, shopify, paddle, adyen, square, mollie, razorpay, slack, github).
    Init {
        /// The provider (`--list` lists the catalog).
        #[arg(required_unless_present = "list")]
        provider: Option<String>,
        /// Where to write it (default: `<provider>.toml` in the current directory).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
        /// List the providers of the catalog.
        #[arg(long, conflicts_with_all = ["out", "force"])]
        list: bool,
    },
    /// Validate a contract and print each event type's key hierarchy.
    Check {
        /// The contract file (default: the file ONCEGATE_CONTRACT names, else ./oncegate.toml).
        file: Option<PathBuf>,
        /// Print the providers, types and hierarchies as one JSON line.
        #[arg(long)]
        json: bool,
    },
    /// Compute the keys of one event read on stdin, as the service would.
    Key {
        #[arg(long)]
        provider: String,
        /// The event type; read from the body or headers as the contract says when omitted.
        #[arg(long = "type")]
        event_type: Option<String>,
        #[arg(long, default_value = "live")]
        env: String,
        #[arg(long, default_value = "default")]
        tenant: String,
        /// A provider header, `name: value` (repeatable): delivery id, event type header.
        #[arg(long = "header", short = 'H')]
        headers: Vec<String>,
        /// The contract (default: the file ONCEGATE_CONTRACT names, else ./oncegate.toml).
        #[arg(long)]
        contract: Option<PathBuf>,
        /// Print the keys as one JSON line.
        #[arg(long)]
        json: bool,
    },
    /// Explain one delivery: decision, reason, strategy and the ones skipped, key, links, effect, resolution.
    Explain {
        delivery_id: String,
        #[command(flatten)]
        store: crate::store::StoreArg,
        /// Print the proof as one JSON line, with the field names of `GET /v1/deliveries/{id}`.
        #[arg(long)]
        json: bool,
        /// Read the proof from this archive (`oncegate archive export`) instead of the store,
        /// after checking its files against the manifest.
        #[arg(long, value_name = "DIR", conflicts_with = "store")]
        archive: Option<PathBuf>,
    },
    /// After a cut-over to new strategy versions: alias live effects to the keys the new
    /// contract makes for them, so retries of old events are still recognized.
    Migrate {
        /// The new contract (the one being cut over to).
        #[arg(long)]
        contract: PathBuf,
        #[command(flatten)]
        store: crate::store::StoreArg,
    },
    /// Choose keys from evidence: export, analyze and replay a corpus of deliveries (JSON Lines).
    Corpus {
        #[command(subcommand)]
        command: corpus::CorpusCommand,
    },
    /// Received, applied, ignored, pending and the unexplained gap, per provider/env/type.
    Report {
        /// Only deliveries received at or after this RFC 3339 instant (default: 24 hours ago).
        #[arg(long)]
        since: Option<String>,
        #[command(flatten)]
        store: crate::store::StoreArg,
        /// Print the report as one JSON line, with the field names of `GET /v1/report`.
        #[arg(long)]
        json: bool,
    },
}

/// The command line's definition, every command's `--help` with its exit statuses.
fn command() -> clap::Command {
    exit::document(Cli::command())
}

fn main() -> ExitCode {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    let outcome: Result<Status> = match cli.command {
        Command::Canon { lines } => canon::run(lines),
        Command::Check { file, json } => check::run(file.as_deref(), json),
        Command::Init {
            provider,
            out,
            force,
            list,
        } => match provider {
            Some(p) if !list => init::run(&p, out.as_deref(), force),
            _ => init::list(),
        },
        Command::Key {
            provider,
            event_type,
            env,
            tenant,
            headers,
            contract,
            json,
        } => key::run(
            contract.as_deref(),
            key::Event {
                tenant: &tenant,
                provider: &provider,
                env: &env,
                event_type: event_type.as_deref(),
                headers: &headers,
            },
            json,
        ),
        Command::Serve {
            contract,
            store,
            read_store,
            listen,
            lease,
            request_timeout,
            header_timeout,
            body_timeout,
            idle_timeout,
            ca_file,
            metrics_public,
            log_json,
            purge_every,
            no_purge,
            purge_archive,
            breaker_window,
            reconcile_every,
            max_body_bytes,
            max_depth,
            workers,
        } => {
            let json = log_json || std::env::var("ONCEGATE_LOG").is_ok_and(|v| v == "json");
            oncegate_server::init_logging(json);
            runtime_with(workers.map(usize::from))
                .and_then(|rt| {
                    rt.block_on(serve::run(serve::Options {
                        contract: contract.as_deref(),
                        store: &store,
                        read_store: read_store.as_deref(),
                        listen: &listen,
                        lease,
                        request_timeout,
                        header_timeout,
                        body_timeout,
                        idle_timeout,
                        ca_file: ca_file.as_deref(),
                        metrics_public,
                        purge_every: (!no_purge).then_some(purge_every),
                        purge_archive: purge_archive.as_deref(),
                        breaker_window,
                        reconcile_every,
                        max_body_bytes,
                        max_depth,
                    }))
                })
                .map(|()| Status::Success)
        }
        Command::Corpus { command } => corpus::run(command),
        Command::Migrate { contract, store } => contract::load(&contract).and_then(|contract| {
            let salt = migrate::salt(&contract, salt::read()?)?;
            runtime()?.block_on(async {
                let gate = store.gate(Some(&contract), salt).await?;
                out!("{}", migrate::run(&gate).await?)?;
                Ok(Status::Success)
            })
        }),
        Command::Queue { command } => queue::main(command).map(|()| Status::Success),
        Command::Breaker { command } => breaker::main(command).map(|()| Status::Success),
        Command::Forward { command } => forward::main(command).map(|()| Status::Success),
        Command::Purge(args) => purge::main(args).map(|()| Status::Success),
        Command::Archive { command } => archive::main(command),
        Command::Partition(args) => partition::main(args).map(|()| Status::Success),
        Command::Rollup(args) => rollup::main(args).map(|()| Status::Success),
        Command::Replay(args) => replay::main(args).map(|()| Status::Success),
        Command::Reconcile(args) => reconcile::main(args).map(|()| Status::Success),
        Command::Demo => runtime()
            .and_then(|rt| rt.block_on(demo::run()))
            .map(|()| Status::Success),
        Command::Explain {
            delivery_id,
            store,
            json,
            archive,
        } => runtime()
            .and_then(|rt| {
                rt.block_on(async {
                    let archived = match &archive {
                        Some(dir) => Some(explain::archived(dir, &delivery_id).await?),
                        None => None,
                    };
                    let gate = match &archived {
                        Some(a) => a.gate().clone(),
                        None => store.gate(None, Vec::new()).await?,
                    };
                    if json {
                        crate::json::print(&explain::doc(&gate, &delivery_id).await?)?;
                    } else {
                        out!("{}", explain::render(&gate, &delivery_id).await?)?;
                    }
                    Ok(())
                })
            })
            .map(|()| Status::Success),
        Command::Report { since, store, json } => runtime()
            .and_then(|rt| {
                rt.block_on(async {
                    let since = match since {
                        Some(s) => time::OffsetDateTime::parse(
                            &s,
                            &time::format_description::well_known::Rfc3339,
                        )
                        .with_context(|| format!("--since {s:?} is not an RFC 3339 instant"))?,
                        None => time::OffsetDateTime::now_utc() - time::Duration::days(1),
                    };
                    let gate = store.gate(None, Vec::new()).await?;
                    if json {
                        crate::json::print(&report::doc(&gate, since).await?)?;
                    } else {
                        out!("{}", report::render(&gate, since).await?)?;
                    }
                    Ok(())
                })
            })
            .map(|()| Status::Success),
    };
    match outcome {
        Ok(status) => status.into(),
        // Its reader went away (`| head`): nothing is wrong to report, and nowhere to say it.
        Err(e) if output::is_stdout_closed(&e) => Status::ClosedPipe.into(),
        Err(e) => {
            errln!("oncegate: {e:#}");
            Status::Error.into()
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    runtime_with(None)
}

/// The async runtime, with `workers` threads (default: one per core).
fn runtime_with(workers: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    builder
        .enable_all()
        .build()
        .context("starting the async runtime")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command of the tree, by its path below `oncegate` (`""` for the root).
    fn walk(command: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        out.push((path.to_owned(), command.clone()));
        for sub in command.get_subcommands() {
            let sub_path = if path.is_empty() {
                sub.get_name().to_owned()
            } else {
                format!("{path} {}", sub.get_name())
            };
            walk(sub, &sub_path, out);
        }
    }

    fn commands() -> Vec<(String, clap::Command)> {
        let mut all = Vec::new();
        walk(&command(), "", &mut all);
        all
    }

    #[test]
    fn every_command_documents_its_exit_statuses_in_its_help() {
        let all = commands();
        assert!(all.len() > 20, "the walk found only {} commands", all.len());
        let mut undocumented = Vec::new();
        for (path, mut command) in all {
            let help = command.render_long_help().to_string();
            let documented = help.contains("Exit status:")
                && help.contains("  0 ")
                && help.contains("  2 ")
                && help.contains("  141 ");
            if !documented {
                undocumented.push(format!("`oncegate {path}`"));
            }
        }
        assert!(
            undocumented.is_empty(),
            "these commands' --help has no Exit status section (add them to exit::OWN): {undocumented:?}"
        );
    }

    #[test]
    fn every_documented_command_exists() {
        let paths: Vec<String> = commands().into_iter().map(|(p, _)| p).collect();
        for (path, _) in exit::OWN {
            assert!(
                paths.iter().any(|p| p == path),
                "exit::OWN documents `oncegate {path}`, which is not a command"
            );
        }
    }

    #[test]
    fn the_json_promise_is_made_where_there_is_a_json_flag() {
        for (path, mut command) in commands() {
            let has_json = command
                .get_arguments()
                .any(|a| a.get_long() == Some("json"));
            let help = command.render_long_help().to_string();
            assert_eq!(
                help.contains("With --json, stdout holds one JSON document"),
                has_json,
                "`oncegate {path}`"
            );
        }
    }

    #[test]
    fn the_statuses_are_the_documented_numbers() {
        let codes: Vec<u8> = [
            Status::Success,
            Status::Found,
            Status::Error,
            Status::ClosedPipe,
        ]
        .iter()
        .map(|s| s.code())
        .collect();
        assert_eq!(codes, [0, 1, 2, 141]);
    }
}
