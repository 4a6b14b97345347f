//! Archives of a period: every delivery received before a cut, with its proof, links and queue
//! items and the effects they name, copied out of the store into an archive directory
//! ([`file`]) that `verify` re-checks and `restore` reads one proof back from.
//!
//! Rows are read a page of deliveries at a time (by primary key, each page its own read
//! transaction), and with each page the rows that hang off those deliveries, so an export of a
//! day of deliveries holds a page in memory, never the day. An export copies; it deletes
//! nothing. Retention removes rows only after their archive verified (see `Gate::purge`).

pub mod file;

use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::codes::{delivery_id_floor, from_ms};
use crate::error::StoreError;
use crate::sql::{int, text, Cell, Dialect, Row, Tx, Value};
use file::TableRows;
pub use file::{ArchiveColumn, ArchiveManifest, ArchiveTable, ColumnKind};

/// Why an archive could not be written, read or trusted.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A file of the archive could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The archive is not what its manifest says (a checksum, a count, a row's shape), or the
    /// request cannot be met (a cut in the future, a directory already in use).
    #[error("{0}")]
    Invalid(String),
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

type Result<T> = std::result::Result<T, ArchiveError>;

/// The tables an archive holds, in the order they are written and verified.
pub const TABLES: [&str; 5] = ["deliveries", "proofs", "links", "queue_items", "effects"];

/// Deliveries per page of an export.
#[cfg(not(feature = "testing"))]
pub(crate) const PAGE: i64 = 2_000;
/// Three under the `testing` feature, so the tests' few deliveries cross page bounds.
#[cfg(feature = "testing")]
pub(crate) const PAGE: i64 = 3;

/// A table's columns as the store's catalog lists them, in order.
pub(crate) async fn columns<T: Tx + Send>(
    tx: &mut T,
    table: &str,
) -> std::result::Result<Vec<ArchiveColumn>, StoreError> {
    let rows = match tx.dialect() {
        Dialect::Sqlite => {
            tx.query(
                "SELECT name, type FROM pragma_table_info($1) ORDER BY cid",
                &[text(table)],
            )
            .await?
        }
        Dialect::Postgres => {
            tx.query(
                "SELECT column_name::text, data_type::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
                &[text(table)],
            )
            .await?
        }
    };
    // The journal's rows hold their proofs since schema v14; an archive keeps them apart, as
    // it always has: the journal's own columns in `deliveries`, the proofs (the store's
    // `proofs` view) in `proofs`.
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let name = row.text(0)?;
        if table == "deliveries" && crate::schema::PROOF_COLUMNS.iter().any(|(c, _)| *c == name) {
            continue;
        }
        let kind = match row.text(1)?.to_ascii_lowercase().as_str() {
            "text" => ColumnKind::Text,
            "bigint" | "integer" => ColumnKind::Int,
            "boolean" => ColumnKind::Bool,
            "blob" | "bytea" => ColumnKind::Bytes,
            other => {
                return Err(StoreError::corrupt(format!(
                    "column {table}.{name} has type {other}, which an archive cannot hold"
                )))
            }
        };
        out.push(ArchiveColumn { name, kind });
    }
    if out.is_empty() {
        return Err(StoreError::corrupt(format!(
            "the store has no table {table}"
        )));
    }
    Ok(out)
}

/// The columns of every archived table and the schema version, read once per export.
pub(crate) async fn layout<T: Tx + Send>(
    tx: &mut T,
) -> std::result::Result<(Vec<Vec<ArchiveColumn>>, i64), StoreError> {
    let mut all = Vec::new();
    for table in TABLES {
        all.push(columns(tx, table).await?);
    }
    let version = tx
        .query("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])
        .await?
        .first()
        .map(|r| r.int(0))
        .transpose()?
        .unwrap_or(0);
    Ok((all, version))
}

/// What one page reads: its bounds and the tables' column lists.
#[derive(Clone)]
pub(crate) struct PageArgs {
    /// The last delivery id of the previous page (`""` before the first).
    pub(crate) after: String,
    /// The first delivery id of the export (`""` until the first page is read).
    pub(crate) first: String,
    /// The cut: the first delivery id of its millisecond, and the millisecond.
    pub(crate) floor: String,
    pub(crate) cut: i64,
    pub(crate) lists: Vec<String>,
    /// Where `id` is among the deliveries' columns.
    pub(crate) id_at: usize,
}

/// One page: each table's rows, in `TABLES` order.
pub(crate) type Page = Vec<Vec<Row>>;

/// The deliveries of the page, as a subquery: `$1` the previous page's last id, `$2` this
/// page's last, `$3` the cut.
pub(crate) const PAGE_IDS: &str =
    "SELECT id FROM deliveries WHERE id > $1 AND id <= $2 AND received_at < $3";

pub(crate) async fn page<T: Tx + Send>(
    tx: &mut T,
    a: &PageArgs,
) -> std::result::Result<Page, StoreError> {
    let deliveries = tx
        .query(
            &format!(
                "SELECT {} FROM deliveries WHERE id > $1 AND id < $2 AND received_at < $3 ORDER BY id LIMIT $4",
                a.lists[0]
            ),
            &[text(&a.after), text(&a.floor), int(a.cut), int(PAGE)],
        )
        .await?;
    let Some(last) = deliveries.last() else {
        return Ok(vec![Vec::new(); TABLES.len()]);
    };
    let last = last.text(a.id_at)?;
    let first = if a.first.is_empty() {
        deliveries[0].text(a.id_at)?
    } else {
        a.first.clone()
    };
    let range = [text(&a.after), text(last), int(a.cut)];
    let proofs = tx
        .query(
            &format!(
                "SELECT {} FROM proofs WHERE delivery_id IN ({PAGE_IDS}) ORDER BY delivery_id",
                a.lists[1]
            ),
            &range,
        )
        .await?;
    let links = tx
        .query(
            &format!(
                "SELECT {} FROM links WHERE delivery_id IN ({PAGE_IDS}) ORDER BY delivery_id, effect_id, kind",
                a.lists[2]
            ),
            &range,
        )
        .await?;
    let queue = tx
        .query(
            &format!(
                "SELECT {} FROM queue_items WHERE delivery_id IN ({PAGE_IDS}) ORDER BY delivery_id, id",
                a.lists[3]
            ),
            &range,
        )
        .await?;
    // The effects this page's proofs and links name, each once per export: an effect named
    // by a delivery of an earlier page (`$4` the export's first id to `$1`) went with it.
    let mut with_first = range.to_vec();
    with_first.push(text(first));
    let effects = tx
        .query(
            &format!(
                "SELECT {} FROM effects e WHERE e.id IN (\
                   SELECT effect_id FROM proofs WHERE effect_id IS NOT NULL AND delivery_id IN ({PAGE_IDS}) \
                   UNION SELECT effect_id FROM links WHERE delivery_id IN ({PAGE_IDS})) \
                 AND NOT EXISTS (SELECT 1 FROM links l WHERE l.effect_id = e.id AND l.delivery_id >= $4 AND l.delivery_id <= $1) \
                 AND NOT EXISTS (SELECT 1 FROM proofs p WHERE p.effect_id = e.id AND p.delivery_id >= $4 AND p.delivery_id <= $1) \
                 ORDER BY e.id",
                a.lists[4]
            ),
            &with_first,
        )
        .await?;
    Ok(vec![deliveries, proofs, links, queue, effects])
}

/// One stored row as the archive writes it.
pub(crate) fn row_json(
    row: &Row,
    columns: &[ArchiveColumn],
) -> Result<serde_json::Map<String, serde_json::Value>> {
    use serde_json::Value as J;
    let mut out = serde_json::Map::with_capacity(columns.len());
    for (i, column) in columns.iter().enumerate() {
        let cell = row.0.get(i).ok_or_else(|| {
            ArchiveError::Invalid(format!("a row read for {} has no column {i}", column.name))
        })?;
        let value = match (column.kind, cell) {
            (_, Cell::Null) => J::Null,
            (ColumnKind::Text, Cell::Text(s)) => J::String(s.clone()),
            (ColumnKind::Int, Cell::Int(v)) => J::from(*v),
            (ColumnKind::Bool, Cell::Bool(b)) => J::Bool(*b),
            (ColumnKind::Bool, Cell::Int(v)) => J::Bool(*v != 0),
            (ColumnKind::Bytes, Cell::Bytes(b)) => {
                J::String(base64::engine::general_purpose::STANDARD.encode(b))
            }
            (kind, other) => {
                return Err(ArchiveError::Store(StoreError::corrupt(format!(
                    "column {} ({kind:?}) holds {other:?}",
                    column.name
                ))))
            }
        };
        out.insert(column.name.clone(), value);
    }
    Ok(out)
}

/// An archived value back as a statement parameter, checked against its column's kind.
pub(crate) fn value_of(
    column: &ArchiveColumn,
    v: Option<&serde_json::Value>,
) -> Result<Value<'static>> {
    use serde_json::Value as J;
    let bad = || {
        ArchiveError::Invalid(format!(
            "column {} holds {} where {:?} was expected",
            column.name,
            v.map_or("nothing".to_owned(), |v| v.to_string()),
            column.kind
        ))
    };
    Ok(match (column.kind, v) {
        (ColumnKind::Text, None | Some(J::Null)) => Value::Text(None),
        (ColumnKind::Int, None | Some(J::Null)) => Value::Int(None),
        (ColumnKind::Bytes, None | Some(J::Null)) => Value::Bytes(None),
        (ColumnKind::Text, Some(J::String(s))) => Value::Text(Some(s.clone().into())),
        (ColumnKind::Int, Some(J::Number(n))) => Value::Int(Some(n.as_i64().ok_or_else(bad)?)),
        (ColumnKind::Bool, Some(J::Bool(b))) => Value::Bool(*b),
        (ColumnKind::Bytes, Some(J::String(s))) => Value::Bytes(Some(
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|_| bad())?,
        )),
        _ => return Err(bad()),
    })
}

/// Checks one archived row against its columns: exactly those names, each of its kind.
pub(crate) fn check_row(
    row: &serde_json::Map<String, serde_json::Value>,
    columns: &[ArchiveColumn],
    at: &str,
) -> Result<()> {
    if row.len() != columns.len() {
        return Err(ArchiveError::Invalid(format!(
            "{at}: {} columns where the manifest lists {}",
            row.len(),
            columns.len()
        )));
    }
    for column in columns {
        if !row.contains_key(&column.name) {
            return Err(ArchiveError::Invalid(format!(
                "{at}: no column {}",
                column.name
            )));
        }
        value_of(column, row.get(&column.name))
            .map_err(|e| ArchiveError::Invalid(format!("{at}: {e}")))?;
    }
    Ok(())
}

pub(crate) fn text_field(
    row: &serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Option<String> {
    row.get(name).and_then(|v| v.as_str()).map(str::to_owned)
}

/// The rows of one archived table that `keep` selects.
pub(crate) fn matching(
    dir: &Path,
    entry: &ArchiveTable,
    keep: impl Fn(&serde_json::Map<String, serde_json::Value>) -> bool,
) -> Result<Vec<serde_json::Map<String, serde_json::Value>>> {
    let mut out = Vec::new();
    for row in TableRows::open(dir, entry)? {
        let row = row?;
        if keep(&row) {
            out.push(row);
        }
    }
    Ok(out)
}

/// Every file the manifest names has the SHA-256 it says.
pub(crate) fn check_files(dir: &Path, manifest: &ArchiveManifest) -> Result<()> {
    for entry in &manifest.tables {
        let sha = file::sha256_of(&dir.join(&entry.file))?;
        if sha != entry.sha256 {
            return Err(ArchiveError::Invalid(format!(
                "{} has SHA-256 {sha}; the manifest says {}",
                entry.file, entry.sha256
            )));
        }
    }
    Ok(())
}

/// What `verify` found: the manifest, every file's checksum and rows re-checked.
#[derive(Debug, Clone)]
pub struct ArchiveVerified {
    /// The archive's manifest.
    pub manifest: ArchiveManifest,
}

/// Re-checks an archive: every table present once, each file's SHA-256 and row count as the
/// manifest says, every row with exactly the manifest's columns and kinds, the deliveries in
/// id order and all before the cut, and every proof, link and queue item belonging to an
/// archived delivery. The first fault found is the error.
pub fn verify(dir: &Path) -> Result<ArchiveVerified> {
    let manifest = file::read_manifest(dir)?;
    let names: Vec<&str> = manifest.tables.iter().map(|t| t.table.as_str()).collect();
    if names != TABLES {
        return Err(ArchiveError::Invalid(format!(
            "the manifest lists tables {names:?}; an archive holds {TABLES:?}"
        )));
    }
    check_files(dir, &manifest)?;
    let floor = delivery_id_floor(from_ms(manifest.before_ms)?);
    // The deliveries: well-formed, strictly increasing, all before the cut.
    let deliveries = &manifest.tables[0];
    let mut rows = TableRows::open(dir, deliveries)?;
    let mut count = 0u64;
    let mut last = String::new();
    while let Some(row) = rows.next() {
        let row = row?;
        let at = rows.at();
        check_row(&row, &deliveries.columns, &at)?;
        let id = text_field(&row, "id").unwrap_or_default();
        let received = row
            .get("received_at")
            .and_then(|v| v.as_i64())
            .unwrap_or(i64::MAX);
        if id <= last {
            return Err(ArchiveError::Invalid(format!(
                "{at}: delivery {id} is out of order"
            )));
        }
        if id >= floor || received >= manifest.before_ms {
            return Err(ArchiveError::Invalid(format!(
                "{at}: delivery {id} was received after the archive's cut"
            )));
        }
        last = id;
        count += 1;
    }
    if count != deliveries.rows {
        return Err(ArchiveError::Invalid(format!(
            "{} holds {count} rows; the manifest says {}",
            deliveries.file, deliveries.rows
        )));
    }
    for entry in &manifest.tables[1..] {
        // Rows that hang off a delivery come in delivery order: a merge against the
        // deliveries' file finds each one's delivery without holding either file in memory.
        let by_delivery = entry.table != "effects";
        let mut owners = TableRows::open(dir, deliveries)?;
        let mut owner = String::new();
        let mut rows = TableRows::open(dir, entry)?;
        let mut count = 0u64;
        while let Some(row) = rows.next() {
            let row = row?;
            let at = rows.at();
            check_row(&row, &entry.columns, &at)?;
            count += 1;
            if !by_delivery {
                continue;
            }
            let delivery = text_field(&row, "delivery_id").unwrap_or_default();
            while owner < delivery {
                match owners.next() {
                    Some(d) => owner = text_field(&d?, "id").unwrap_or_default(),
                    None => break,
                }
            }
            if owner != delivery {
                return Err(ArchiveError::Invalid(format!(
                    "{at}: {} row of delivery {delivery}, which the archive does not hold (or out of order)",
                    entry.table
                )));
            }
        }
        if count != entry.rows {
            return Err(ArchiveError::Invalid(format!(
                "{} holds {count} rows; the manifest says {}",
                entry.file, entry.rows
            )));
        }
    }
    Ok(ArchiveVerified { manifest })
}
