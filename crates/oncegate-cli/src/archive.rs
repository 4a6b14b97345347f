//! `oncegate archive export|verify`: a period of deliveries, with their proofs, links, queue
//! items and effects, copied to an archive directory (gzip-compressed JSON Lines per table and
//! a manifest of counts and SHA-256), and an archive re-checked against its manifest. A proof
//! is read back from an archive with `oncegate explain --archive DIR <delivery-id>`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use oncegate::store::archive::{self, ArchiveManifest};
use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::exit::Status;

/// `oncegate archive` subcommands.
#[derive(clap::Subcommand)]
pub enum ArchiveCommand {
    /// Copy every delivery received before a date, with its proof, links, queue items and
    /// effects, to a new archive directory. Nothing is removed from the store.
    Export {
        /// The cut: an RFC 3339 instant, or a date (YYYY-MM-DD, midnight UTC).
        #[arg(long, value_parser = instant)]
        before: OffsetDateTime,
        /// The archive directory to write (created; refused if it holds anything).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        #[command(flatten)]
        store: crate::store::StoreArg,
        /// Print the manifest's summary as one JSON line.
        #[arg(long)]
        json: bool,
    },
    /// Re-check an archive: each file's SHA-256 and row count, every row's columns, the
    /// deliveries before the cut, every proof, link and queue item with its delivery.
    Verify {
        /// The archive directory.
        dir: PathBuf,
        /// Print the summary as one JSON line.
        #[arg(long)]
        json: bool,
    },
}

/// `--before`: an RFC 3339 instant, or a calendar date taken at midnight UTC.
fn instant(s: &str) -> Result<OffsetDateTime, String> {
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc3339) {
        return Ok(t);
    }
    OffsetDateTime::parse(&format!("{s}T00:00:00Z"), &Rfc3339)
        .map_err(|_| format!("{s:?} is neither an RFC 3339 instant nor a date like 2026-01-31"))
}

/// `--json`: where the archive is, its cut and each table's rows and checksum.
#[derive(Serialize)]
pub struct ArchiveDoc {
    dir: String,
    before: String,
    tables: Vec<TableDoc>,
}

#[derive(Serialize)]
struct TableDoc {
    table: String,
    rows: u64,
    sha256: String,
}

pub fn doc(dir: &Path, manifest: &ArchiveManifest) -> ArchiveDoc {
    ArchiveDoc {
        dir: dir.display().to_string(),
        before: manifest.before.clone(),
        tables: manifest
            .tables
            .iter()
            .map(|t| TableDoc {
                table: t.table.clone(),
                rows: t.rows,
                sha256: t.sha256.clone(),
            })
            .collect(),
    }
}

/// One line: the archive, its cut and each table's row count.
pub fn summary(dir: &Path, manifest: &ArchiveManifest) -> String {
    let counts: Vec<String> = manifest
        .tables
        .iter()
        .map(|t| format!("{} {}", t.rows, t.table.replace('_', " ")))
        .collect();
    format!(
        "archive {} (before {}): {}",
        dir.display(),
        manifest.before,
        counts.join(", ")
    )
}

pub fn main(command: ArchiveCommand) -> Result<Status> {
    match command {
        ArchiveCommand::Export {
            before,
            out,
            store,
            json,
        } => crate::runtime()?.block_on(async {
            let gate = store.gate(None, Vec::new()).await?;
            let manifest = gate
                .archive_export(&out, before)
                .await
                .with_context(|| format!("exporting to {}", out.display()))?;
            if json {
                crate::json::print(&doc(&out, &manifest))?;
            } else {
                outln!("{}", summary(&out, &manifest))?;
            }
            Ok(Status::Success)
        }),
        ArchiveCommand::Verify { dir, json } => match archive::verify(&dir) {
            Ok(verified) => {
                if json {
                    crate::json::print(&doc(&dir, &verified.manifest))?;
                } else {
                    outln!("verified {}", summary(&dir, &verified.manifest))?;
                }
                Ok(Status::Success)
            }
            Err(e) => {
                errln!("oncegate: archive {} does not verify: {e}", dir.display());
                Ok(Status::Found)
            }
        },
    }
}
