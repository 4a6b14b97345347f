//! `oncegate corpus export|analyze|replay`: choosing keys from evidence.
//!
//! The corpus format (JSON Lines, one delivery per line) is described in
//! `oncegate_core::corpus`; this module reads and writes the files, shows progress on large
//! ones, and hands the records to the pure statistics in the core or to the real service.

pub mod analyze;
pub mod export;
pub mod replay;

use anyhow::{anyhow, Context, Result};
use base64::Engine as _;
use indicatif::{ProgressBar, ProgressStyle};
use oncegate_core::contract::Contract;
use oncegate_core::corpus::{Body, Record};
use oncegate_core::identity::event_type_of;
use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::Path;

/// A corpus file read whole: the records, and the lines that could not be read with why.
pub struct Corpus {
    pub records: Vec<Record>,
    pub bad_lines: Vec<(usize, String)>,
}

/// A progress bar on stderr for `len` units, hidden when stderr is not a terminal (pipes, CI)
/// or when there is too little work for it to be worth drawing.
pub fn progress(len: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() || len < 4 * 1024 * 1024 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg} {wide_bar} {bytes}/{total_bytes} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_owned());
    bar
}

/// A progress bar on stderr counting `len` items, under the same conditions as [`progress`]:
/// a terminal, and at least `min` items (small files finish before a bar is worth drawing).
pub fn progress_items(len: u64, min: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() || len < min {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg} {wide_bar} {pos}/{len} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_owned());
    bar
}

/// Reads a corpus file (or stdin for `-`). Blank lines are skipped; a line that is not a
/// record is kept aside with its reason so one bad capture does not hide the rest.
pub fn read(path: &Path) -> Result<Corpus> {
    let (input, len): (Box<dyn Read>, u64) = if path.as_os_str() == "-" {
        (Box::new(std::io::stdin()), 0)
    } else {
        let f = std::fs::File::open(path)
            .with_context(|| format!("opening the corpus {}", path.display()))?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(f), len)
    };
    let bar = progress(len, "reading");
    let mut reader = BufReader::new(bar.wrap_read(input));
    let mut corpus = Corpus {
        records: Vec::new(),
        bad_lines: Vec::new(),
    };
    let mut line = String::new();
    let mut number = 0usize;
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .with_context(|| format!("reading {} (line {})", path.display(), number + 1))?;
        if n == 0 {
            break;
        }
        number += 1;
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        match Record::parse_line(text) {
            Ok(r) => corpus.records.push(r),
            Err(e) => corpus.bad_lines.push((number, e.to_string())),
        }
    }
    bar.finish_and_clear();
    Ok(corpus)
}

/// The bytes a record's delivery carried: the JSON body written compactly (members and number
/// spellings as recorded), or the decoded base64 of a non-JSON body.
pub fn body_bytes(record: &Record) -> Result<Vec<u8>> {
    match &record.body {
        Body::Json(v) => Ok(oncegate_core::corpus::to_compact(v).into_bytes()),
        Body::Base64 { data, .. } => base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| anyhow!("body_base64 is not base64: {e}")),
    }
}

pub fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The record's event type: as recorded, else read as the contract says, else `(unknown)`.
pub fn event_type(record: &Record, contract: Option<&Contract>) -> String {
    if let Some(t) = &record.event_type {
        return t.clone();
    }
    let from_contract = contract
        .and_then(|c| c.provider(&record.provider))
        .zip(record.json())
        .and_then(|(p, doc)| event_type_of(p, &record.headers, doc).ok());
    from_contract.unwrap_or_else(|| "(unknown)".to_owned())
}

/// The `corpus` subcommands.
#[derive(clap::Subcommand)]
pub enum CorpusCommand {
    /// Per provider/type: field presence and distinct rates, stability across retries,
    /// candidate keys ranked against labels, and a contract fragment to review.
    Analyze {
        /// A corpus file (JSON Lines), or `-` for stdin.
        file: std::path::PathBuf,
        /// A contract: event types read as it says, `--group-by strategy` uses its keys.
        #[arg(long)]
        contract: Option<std::path::PathBuf>,
        /// What makes deliveries one event (default: label when the corpus has labels, else transport).
        #[arg(long, value_enum)]
        group_by: Option<analyze::GroupBy>,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// Paths shown per type in the table.
        #[arg(long, default_value_t = 60)]
        max_paths: usize,
    },
    /// Export deliveries from the store as corpus lines (sensitive fields masked), labeled from
    /// queue resolutions.
    Export {
        #[command(flatten)]
        store: crate::store::StoreArg,
        /// The contract naming the sensitive fields to mask
        /// (default: the file ONCEGATE_CONTRACT names, else ./oncegate.toml).
        #[arg(long)]
        contract: Option<std::path::PathBuf>,
        /// Only deliveries settled by a queue resolution and their reference deliveries:
        /// labeled regression cases.
        #[arg(long)]
        resolved: bool,
        /// Only deliveries received at or after this RFC 3339 instant.
        #[arg(long)]
        since: Option<String>,
        /// Write to this file instead of stdout.
        #[arg(long, short = 'o')]
        out: Option<std::path::PathBuf>,
    },
    /// Replay a labeled corpus through the real decision pipeline (in-process service, temporary
    /// SQLite store) and count, per strategy, collisions, queue rate, false positives and
    /// false negatives.
    Replay {
        /// A corpus file (JSON Lines), or `-` for stdin.
        file: std::path::PathBuf,
        /// The contract to evaluate.
        #[arg(long)]
        contract: std::path::PathBuf,
        /// Another contract (say the one in production) replayed beside it.
        #[arg(long)]
        against: Option<std::path::PathBuf>,
        /// Exit 1 when the contract merges distinct labeled operations (a CI gate).
        #[arg(long)]
        fail_on_loss: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: CorpusCommand) -> Result<crate::exit::Status> {
    match command {
        CorpusCommand::Analyze {
            file,
            contract,
            group_by,
            json,
            max_paths,
        } => {
            let contract = contract.as_deref().map(crate::contract::load).transpose()?;
            let corpus = read(&file)?;
            let out = analyze::run(
                &corpus,
                &analyze::Options {
                    contract: contract.as_ref(),
                    group_by,
                    json,
                    max_paths,
                },
            )?;
            out!("{out}")?;
            Ok(crate::exit::Status::Success)
        }
        CorpusCommand::Export {
            store,
            contract,
            resolved,
            since,
            out,
        } => {
            let contract = crate::contract::find(contract.as_deref())?;
            let since = export::since(since.as_deref())?;
            let salt = crate::salt::read()?;
            let exported = crate::runtime()?.block_on(async {
                let gate = store.gate(None, Vec::new()).await?;
                export::run(
                    &gate,
                    &export::Options {
                        contract: &contract,
                        salt,
                        resolved,
                        since,
                    },
                )
                .await
            })?;
            match out {
                Some(path) => std::fs::write(&path, &exported.lines)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => out!("{}", exported.lines)?,
            }
            errln!(
                "exported {} deliveries{}",
                exported.written,
                if exported.without_payload > 0 {
                    format!(
                        "; {} left out because their payload is no longer retained",
                        exported.without_payload
                    )
                } else {
                    String::new()
                }
            );
            Ok(crate::exit::Status::Success)
        }
        CorpusCommand::Replay {
            file,
            contract,
            against,
            fail_on_loss,
            json,
        } => {
            let corpus = read(&file)?;
            for (line, e) in &corpus.bad_lines {
                errln!("line {line} skipped: {e}");
            }
            let mut contracts = vec![(
                contract.display().to_string(),
                crate::contract::load(&contract)?,
            )];
            if let Some(old) = &against {
                contracts.push((old.display().to_string(), crate::contract::load(old)?));
            }
            let replays = crate::runtime()?.block_on(async {
                let mut out = Vec::new();
                for (name, c) in contracts {
                    out.push(replay::replay(&name, c, &corpus).await?);
                }
                Ok::<_, anyhow::Error>(out)
            })?;
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&replay::as_json(&replays))?
                )?;
            } else {
                out!("{}", replay::as_text(&replays))?;
            }
            let lost = replays[0].total.false_positives;
            if fail_on_loss && lost > 0 {
                errln!("oncegate: {lost} false positive(s): this contract would silently drop distinct operations");
                return Ok(crate::exit::Status::Found);
            }
            Ok(crate::exit::Status::Success)
        }
    }
}
