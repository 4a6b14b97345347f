//! The `oncegate` command: thin glue between the command line and the library crates.

mod canon;
mod check;
mod contract;
mod key;
mod salt;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

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

#[derive(Subcommand)]
enum Command {
    /// Print the RFC 8785 (JCS) canonical form of the JSON read on stdin.
    Canon {
        /// Read JSON Lines: one canonical line (or one error line) per input line.
        #[arg(long)]
        lines: bool,
    },
    /// Validate a contract and print each event type's key hierarchy.
    Check {
        /// The contract file.
        #[arg(env = "ONCEGATE_CONTRACT", default_value = "examples/oncegate.toml")]
        file: PathBuf,
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
        #[arg(
            long,
            env = "ONCEGATE_CONTRACT",
            default_value = "examples/oncegate.toml"
        )]
        contract: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome: Result<ExitCode> = match cli.command {
        Command::Canon { lines } => canon::run(lines),
        Command::Check { file } => check::run(&file),
        Command::Key {
            provider,
            event_type,
            env,
            tenant,
            headers,
            contract,
        } => key::run(
            &contract,
            &tenant,
            &provider,
            &env,
            event_type.as_deref(),
            &headers,
        ),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("oncegate: {e:#}");
            ExitCode::from(2)
        }
    }
}
