//! The store's calls on archives: a period's rows copied out to an archive directory, and
//! one archived delivery copied back in (see [`crate::archive`]).

use std::collections::BTreeSet;
use std::path::Path;

use oncegate_core::ids::DeliveryId;
use time::OffsetDateTime;

use super::Store;
use crate::archive::file::{self, TableWriter};
use crate::archive::{
    check_files, layout, matching, page, row_json, text_field, value_of, ArchiveError,
    ArchiveManifest, PageArgs, TABLES,
};
use crate::codes::{delivery_id_floor, ms};
use crate::error::StoreError;
use crate::sql::Tx as _;

type Result<T> = std::result::Result<T, ArchiveError>;

impl Store {
    /// Copies every delivery received before `before`, with its proof, links, queue items and
    /// the effects they name, into a new archive at `dir` (created if missing; refused if it
    /// holds anything), and returns its manifest. Nothing is removed from the store.
    pub async fn archive_export(
        &self,
        dir: &Path,
        before: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Result<ArchiveManifest> {
        if before > now {
            return Err(ArchiveError::Invalid(format!(
                "the cut {before} is in the future: an archive holds only deliveries already received"
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| ArchiveError::Io {
            path: dir.to_owned(),
            source: e,
        })?;
        let in_use = std::fs::read_dir(dir)
            .map_err(|e| ArchiveError::Io {
                path: dir.to_owned(),
                source: e,
            })?
            .next()
            .is_some();
        if in_use {
            return Err(ArchiveError::Invalid(format!(
                "{} is not empty: an archive is written into a new directory",
                dir.display()
            )));
        }
        let (columns, schema_version) = self.read((), |tx, ()| Box::pin(layout(tx))).await?;
        let mut writers = TABLES
            .iter()
            .map(|t| TableWriter::create(dir, t))
            .collect::<Result<Vec<_>>>()?;
        let id_at = columns[0]
            .iter()
            .position(|c| c.name == "id")
            .ok_or_else(|| StoreError::corrupt("the deliveries table has no id column"))?;
        let mut args = PageArgs {
            id_at,
            after: String::new(),
            first: String::new(),
            floor: delivery_id_floor(before),
            cut: ms(before),
            lists: columns
                .iter()
                .map(|c| {
                    c.iter()
                        .map(|c| format!("\"{}\"", c.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .collect(),
        };
        loop {
            let rows = self
                .read(args.clone(), |tx, a| Box::pin(page(tx, a)))
                .await?;
            let (Some(head), Some(last)) = (rows[0].first(), rows[0].last()) else {
                break;
            };
            if args.first.is_empty() {
                args.first = head.text(args.id_at)?;
            }
            let last = last.text(args.id_at)?;
            for ((writer, table_rows), columns) in writers.iter_mut().zip(&rows).zip(&columns) {
                for row in table_rows {
                    writer.row(&row_json(row, columns)?)?;
                }
            }
            args.after = last;
        }
        let mut tables = Vec::with_capacity(TABLES.len());
        for ((writer, table), columns) in writers.into_iter().zip(TABLES).zip(columns) {
            tables.push(writer.finish(table, columns)?);
        }
        let manifest = ArchiveManifest {
            format: file::FORMAT.to_owned(),
            before_ms: ms(before),
            before: before
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_else(|_| before.to_string()),
            exported_at_ms: ms(now),
            backend: self.backend().to_owned(),
            schema_version,
            tables,
        };
        file::write_manifest(dir, &manifest)?;
        Ok(manifest)
    }

    /// Copies one archived delivery back into this store, with its proof, links, queue items
    /// and the effects they name, so its proof reads as it did before retention removed it
    /// (a scratch store, for `explain --archive`). The files read are checked against the
    /// manifest's checksums first. `false` when the archive does not hold the delivery.
    pub async fn archive_restore(&self, dir: &Path, id: &DeliveryId) -> Result<bool> {
        let manifest = file::read_manifest(dir)?;
        check_files(dir, &manifest)?;
        let table = |name: &str| {
            manifest
                .tables
                .iter()
                .find(|t| t.table == name)
                .ok_or_else(|| ArchiveError::Invalid(format!("the manifest has no table {name}")))
        };
        let (deliveries, proofs, links, queue, effects) = (
            table("deliveries")?,
            table("proofs")?,
            table("links")?,
            table("queue_items")?,
            table("effects")?,
        );
        let only = BTreeSet::from([id.as_str().to_owned()]);
        if matching(dir, deliveries, owned_by("id", &only))?.is_empty() {
            return Ok(false);
        }
        // The effects the delivery names, then every archived proof and link of those effects
        // (an effect reads with all its deliveries), and the deliveries they belong to.
        let items = matching(dir, queue, owned_by("delivery_id", &only))?;
        let mut named: BTreeSet<String> = items
            .iter()
            .filter_map(|r| text_field(r, "existing_effect"))
            .collect();
        for entry in [proofs, links] {
            let own = matching(dir, entry, owned_by("delivery_id", &only))?;
            named.extend(own.iter().filter_map(|r| text_field(r, "effect_id")));
        }
        let of_delivery_or_effect = |row: &serde_json::Map<String, serde_json::Value>| {
            owned_by("delivery_id", &only)(row) || owned_by("effect_id", &named)(row)
        };
        let proof_rows = matching(dir, proofs, of_delivery_or_effect)?;
        let link_rows = matching(dir, links, of_delivery_or_effect)?;
        let mut held = only.clone();
        held.extend(
            proof_rows
                .iter()
                .chain(&link_rows)
                .filter_map(|r| text_field(r, "delivery_id")),
        );
        let found = [
            (
                deliveries,
                matching(dir, deliveries, owned_by("id", &held))?,
            ),
            (proofs, proof_rows),
            (links, link_rows),
            (queue, items),
            (effects, matching(dir, effects, owned_by("id", &named))?),
        ];
        let mut statements = Vec::new();
        for (entry, rows) in found {
            // A proof is its delivery's row since schema v14 (`proofs` is a view of the decided
            // ones): written into the entry restored just before, all but the scope it has.
            let proof = entry.table == "proofs";
            let columns: Vec<_> = entry
                .columns
                .iter()
                .filter(|c| !(proof && ["tenant", "provider", "env"].contains(&c.name.as_str())))
                .collect();
            let names: Vec<String> = columns.iter().map(|c| format!("\"{}\"", c.name)).collect();
            let slots: Vec<String> = (1..=names.len()).map(|i| format!("${i}")).collect();
            let sql = if proof {
                let mut id = None;
                let mut sets = Vec::new();
                for (name, slot) in names.iter().zip(&slots) {
                    if name == "\"delivery_id\"" {
                        id = Some(slot);
                    } else {
                        sets.push(format!("{name} = {slot}"));
                    }
                }
                let id = id.ok_or_else(|| {
                    ArchiveError::Invalid("the archive's proofs have no delivery_id".to_owned())
                })?;
                format!("UPDATE deliveries SET {} WHERE id = {id}", sets.join(", "))
            } else {
                format!(
                    "INSERT INTO {} ({}) VALUES ({})",
                    entry.table,
                    names.join(", "),
                    slots.join(", ")
                )
            };
            for row in rows {
                let params = columns
                    .iter()
                    .map(|c| value_of(c, row.get(&c.name)))
                    .collect::<Result<Vec<_>>>()?;
                statements.push((sql.clone(), params));
            }
        }
        self.write(true, statements, |tx, statements| {
            Box::pin(async move {
                for (sql, params) in statements {
                    if tx.exec(sql, params).await? == 0 {
                        return Err(StoreError::corrupt(
                            "the archive holds a proof whose delivery it does not hold",
                        ));
                    }
                }
                Ok(())
            })
        })
        .await?;
        Ok(true)
    }
}
/// Selects the rows whose column `name` holds one of `wanted`.
fn owned_by<'a>(
    name: &'static str,
    wanted: &'a BTreeSet<String>,
) -> impl Fn(&serde_json::Map<String, serde_json::Value>) -> bool + 'a {
    move |row| text_field(row, name).is_some_and(|v| wanted.contains(&v))
}
