//! An archive directory on disk: one gzip-compressed JSON Lines file per table and a
//! `manifest.json` naming each file's columns, row count and SHA-256. Written file by file,
//! each synced, the manifest last (through a temporary name renamed into place), so a directory
//! with a manifest is a finished archive and one without is not.
//!
//! Hand-written over `flate2` and `serde_json` because the format is ours: no crate writes
//! "rows with a typed column list and a checksummed manifest" the way `verify` re-reads them.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ArchiveError;

/// The format named in every manifest; a reader refuses any other.
pub const FORMAT: &str = "oncegate-archive/1";

/// The manifest's file name inside an archive directory.
pub const MANIFEST: &str = "manifest.json";

/// What one archive holds and how to check it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveManifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// The cut: rows of deliveries received before this instant (unix milliseconds).
    pub before_ms: i64,
    /// The same instant in RFC 3339, for a reader of the file.
    pub before: String,
    /// When the export ran (unix milliseconds).
    pub exported_at_ms: i64,
    /// The backend the rows were read from (`sqlite` or `postgres`).
    pub backend: String,
    /// The store's schema version when the rows were read.
    pub schema_version: i64,
    /// One entry per table, in the order they are written.
    pub tables: Vec<ArchiveTable>,
}

/// One table's file in an archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveTable {
    /// The store table the rows come from.
    pub table: String,
    /// The file's name inside the archive directory.
    pub file: String,
    /// How many rows (lines) the file holds.
    pub rows: u64,
    /// SHA-256 of the file's bytes as written (compressed), lowercase hex.
    pub sha256: String,
    /// The columns each row holds, in the table's order.
    pub columns: Vec<ArchiveColumn>,
}

/// One column: its name and how its values are written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveColumn {
    /// The column's name.
    pub name: String,
    /// How its values are written in JSON.
    pub kind: ColumnKind,
}

/// How a column's values are written: text as strings, integers as numbers, booleans as
/// booleans and bytes (raw bodies) as standard base64 strings; NULL as `null`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnKind {
    /// TEXT.
    Text,
    /// BIGINT.
    Int,
    /// BOOLEAN.
    Bool,
    /// BLOB / BYTEA, base64 in the file.
    Bytes,
}

fn io(path: &Path, source: std::io::Error) -> ArchiveError {
    ArchiveError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes one table's rows, one JSON object per line.
pub(crate) struct TableWriter {
    path: PathBuf,
    rows: u64,
    out: GzEncoder<BufWriter<File>>,
}

impl TableWriter {
    /// Creates `dir/<table>.jsonl.gz`; refuses to overwrite a file already there.
    pub fn create(dir: &Path, table: &str) -> Result<Self, ArchiveError> {
        let path = dir.join(format!("{table}.jsonl.gz"));
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        Ok(TableWriter {
            path,
            rows: 0,
            out: GzEncoder::new(BufWriter::new(file), flate2::Compression::default()),
        })
    }

    /// Appends one row.
    pub fn row(
        &mut self,
        row: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), ArchiveError> {
        serde_json::to_writer(&mut self.out, row)
            .map_err(|e| io(&self.path, std::io::Error::other(e)))?;
        self.out.write_all(b"\n").map_err(|e| io(&self.path, e))?;
        self.rows += 1;
        Ok(())
    }

    /// Finishes the file, syncs it to disk and returns its manifest entry.
    pub fn finish(
        self,
        table: &str,
        columns: Vec<ArchiveColumn>,
    ) -> Result<ArchiveTable, ArchiveError> {
        let buffered = self.out.finish().map_err(|e| io(&self.path, e))?;
        let file = buffered
            .into_inner()
            .map_err(|e| io(&self.path, e.into_error()))?;
        file.sync_all().map_err(|e| io(&self.path, e))?;
        Ok(ArchiveTable {
            table: table.to_owned(),
            file: file_name(&self.path),
            rows: self.rows,
            sha256: sha256_of(&self.path)?,
            columns,
        })
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// SHA-256 of a file's bytes, lowercase hex.
pub(crate) fn sha256_of(path: &Path) -> Result<String, ArchiveError> {
    let mut file = File::open(path).map_err(|e| io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(|e| io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Writes the manifest last, through a temporary name, and syncs the directory, so a manifest
/// is only ever seen whole and after every file it names.
pub(crate) fn write_manifest(dir: &Path, manifest: &ArchiveManifest) -> Result<(), ArchiveError> {
    let path = dir.join(MANIFEST);
    let partial = dir.join(format!("{MANIFEST}.partial"));
    let mut text =
        serde_json::to_vec_pretty(manifest).map_err(|e| io(&partial, std::io::Error::other(e)))?;
    text.push(b'\n');
    let mut file = File::create(&partial).map_err(|e| io(&partial, e))?;
    file.write_all(&text).map_err(|e| io(&partial, e))?;
    file.sync_all().map_err(|e| io(&partial, e))?;
    std::fs::rename(&partial, &path).map_err(|e| io(&path, e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, e))
}

/// Reads an archive's manifest, refusing another format.
pub fn read_manifest(dir: &Path) -> Result<ArchiveManifest, ArchiveError> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read(&path).map_err(|e| io(&path, e))?;
    let manifest: ArchiveManifest = serde_json::from_slice(&text).map_err(|e| {
        ArchiveError::Invalid(format!(
            "{} is not an archive manifest: {e}",
            path.display()
        ))
    })?;
    if manifest.format != FORMAT {
        return Err(ArchiveError::Invalid(format!(
            "{} is format {:?}; this oncegate reads {FORMAT:?}",
            path.display(),
            manifest.format
        )));
    }
    Ok(manifest)
}

/// The rows of one table's file, one parsed object at a time, with its line number.
pub(crate) struct TableRows {
    path: PathBuf,
    lines: std::io::Lines<BufReader<MultiGzDecoder<BufReader<File>>>>,
    line: u64,
}

impl TableRows {
    /// Opens `dir/<entry.file>`; the file name must be a plain name inside the directory.
    pub fn open(dir: &Path, entry: &ArchiveTable) -> Result<Self, ArchiveError> {
        if entry.file.contains(['/', '\\']) || entry.file.starts_with('.') {
            return Err(ArchiveError::Invalid(format!(
                "the manifest names file {:?} outside the archive directory",
                entry.file
            )));
        }
        let path = dir.join(&entry.file);
        let file = File::open(&path).map_err(|e| io(&path, e))?;
        Ok(TableRows {
            lines: BufReader::new(MultiGzDecoder::new(BufReader::new(file))).lines(),
            path,
            line: 0,
        })
    }

    /// Where a row came from, for an error message.
    pub fn at(&self) -> String {
        format!("{} line {}", self.path.display(), self.line)
    }
}

impl Iterator for TableRows {
    type Item = Result<serde_json::Map<String, serde_json::Value>, ArchiveError>;

    fn next(&mut self) -> Option<Self::Item> {
        let line = match self.lines.next()? {
            Ok(line) => line,
            Err(e) => return Some(Err(io(&self.path, e))),
        };
        self.line += 1;
        Some(match serde_json::from_str(&line) {
            Ok(serde_json::Value::Object(row)) => Ok(row),
            Ok(_) => Err(ArchiveError::Invalid(format!(
                "{}: not a JSON object",
                self.at()
            ))),
            Err(e) => Err(ArchiveError::Invalid(format!("{}: {e}", self.at()))),
        })
    }
}
