//! Time partitions on PostgreSQL: the journal (`deliveries`, its decisions' proofs included)
//! range-partitioned by id, one partition a day, so a day of retention is a partition dropped instead of every row
//! deleted (measured by `scripts/pg-partitions`: 5 ms against 2 s for a million deliveries).
//!
//! A delivery's id is a ULID of its reception time, so a day is a range of ids and the primary
//! keys stay as they are. `partition` converts a store once (its rows so far become the
//! partition `<table>_history`) and creates the days ahead; run again, or by the background
//! purge, it only adds the days still missing. Ids past the last day created land in the
//! default partition, never refused. The hot path reads the journal only by its id or, for
//! a strong transport key, within `decision::view`'s window of ids, so a decision reads the few
//! partitions of that window, whatever the number of days kept.

use time::{Date, OffsetDateTime};

use crate::codes::{delivery_id_floor, from_ms};
use crate::error::StoreError;
use crate::schema::{self, PARTITIONED};
use crate::sql::{text, Dialect, Tx};

type Result<T> = std::result::Result<T, StoreError>;

/// What [`Store::partition`](crate::Store::partition) did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Partitions {
    /// Whether this call turned the tables into partitioned ones (`false`: they already were).
    pub converted: bool,
    /// The day partitions this call created, by name (`deliveries_20261204`, …).
    pub created: Vec<String>,
    /// Days not created because rows of theirs already sit in the default partition (ids
    /// from further ahead than the days created): they stay there, kept and purged row by row.
    pub skipped: Vec<String>,
}

/// One partition of a partitioned table: its name and id range (`None`: unbounded; both
/// `None` and `default` for the default partition).
#[derive(Debug, Clone)]
struct Range {
    name: String,
    from: Option<String>,
    to: Option<String>,
    default: bool,
    /// Whether the current role may drop it (it owns it, or is a member of its owner).
    owned: bool,
}

/// Whether the journal is partitioned.
pub(crate) async fn is_partitioned<T: Tx + Send>(tx: &mut T) -> Result<bool> {
    if tx.dialect() != Dialect::Postgres {
        return Ok(false);
    }
    let rows = tx
        .query(
            "SELECT c.relkind::text FROM pg_class c WHERE c.oid = to_regclass('deliveries')",
            &[],
        )
        .await?;
    Ok(match rows.first() {
        Some(r) => r.text(0)? == "p",
        None => false,
    })
}

/// Whether the current role may create tables in the store's schema.
async fn may_create<T: Tx + Send>(tx: &mut T) -> Result<bool> {
    let rows = tx
        .query(
            "SELECT has_schema_privilege(current_schema(), 'CREATE')",
            &[],
        )
        .await?;
    Ok(match rows.first() {
        Some(r) => r.boolean(0)?,
        None => false,
    })
}

/// The partitions of `table`, with their bounds as PostgreSQL prints them.
async fn ranges<T: Tx + Send>(tx: &mut T, table: &str) -> Result<Vec<Range>> {
    let rows = tx
        .query(
            "SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid), pg_has_role(c.relowner, 'USAGE') \
             FROM pg_inherits i \
             JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass($1)",
            &[text(table)],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let bound = r.text(1)?;
        // `FOR VALUES FROM ('a') TO ('b')`, `FROM (MINVALUE)`, or `DEFAULT`.
        let quoted = |after: &str| -> Option<String> {
            let rest = &bound[bound.find(after)? + after.len()..];
            let rest = rest.strip_prefix("('")?;
            Some(rest[..rest.find('\'')?].to_owned())
        };
        out.push(Range {
            name: r.text(0)?,
            from: quoted("FROM "),
            to: quoted("TO "),
            default: bound == "DEFAULT",
            owned: r.boolean(2)?,
        });
    }
    Ok(out)
}

fn day_floor(day: Date) -> String {
    delivery_id_floor(day.midnight().assume_utc())
}

fn day_name(table: &str, day: Date) -> String {
    format!(
        "{table}_{:04}{:02}{:02}",
        day.year(),
        u8::from(day.month()),
        day.day()
    )
}

/// The day after the latest row's, by the time in its id (`None` for an empty table or an id
/// that is not a ULID).
async fn day_after_latest<T: Tx + Send>(
    tx: &mut T,
    table: &str,
    column: &str,
) -> Result<Option<Date>> {
    let rows = tx
        .query(&format!("SELECT MAX({column}) FROM {table}"), &[])
        .await?;
    let Some(id) = rows.first().map(|r| r.opt_text(0)).transpose()?.flatten() else {
        return Ok(None);
    };
    let Some(ulid) = id
        .split_once('_')
        .and_then(|(_, u)| ulid::Ulid::from_string(u).ok())
    else {
        return Ok(None);
    };
    let at = from_ms(ulid.timestamp_ms() as i64)?;
    Ok(at.date().next_day())
}

/// Converts the store if it is not partitioned yet, then creates the partitions of every day
/// from today to `days_ahead` days ahead that no partition covers yet.
pub(crate) async fn partition<T: Tx + Send>(
    tx: &mut T,
    days_ahead: u32,
    now: OffsetDateTime,
) -> Result<Partitions> {
    if tx.dialect() != Dialect::Postgres {
        return Err(StoreError::Config(
            "time partitions are PostgreSQL's; a SQLite store purges row by row".to_owned(),
        ));
    }
    let mut out = Partitions::default();
    let today = now.to_offset(time::UtcOffset::UTC).date();
    if !is_partitioned(tx).await? {
        tx.exec("LOCK TABLE deliveries IN ACCESS EXCLUSIVE MODE", &[])
            .await?;
        // The history holds every row so far: up to tomorrow, or past the latest row.
        let mut first = today.next_day().unwrap_or(today);
        for (table, column) in PARTITIONED {
            if let Some(after) = day_after_latest(tx, table, column).await? {
                first = first.max(after);
            }
        }
        for (table, column) in PARTITIONED {
            let indexes = tx
                .query(
                    "SELECT indexname::text, indexdef FROM pg_indexes \
                     WHERE schemaname = current_schema() AND tablename = $1 AND indexname <> $2 \
                     ORDER BY indexname",
                    &[text(table), text(format!("{table}_pkey"))],
                )
                .await?
                .iter()
                .map(|r| Ok((r.text(0)?, r.text(1)?)))
                .collect::<Result<Vec<_>>>()?;
            for sql in schema::partition_table(table, column, &indexes, &day_floor(first)) {
                tx.exec(&sql, &[]).await?;
            }
        }
        out.converted = true;
    }
    out_extend(tx, &mut out, today, days_ahead).await?;
    Ok(out)
}

/// Creates the missing days ahead of a partitioned store; nothing on one that is not, nor
/// for a role that may not create tables (the traffic role of `docs/deploy.md`: the owner's
/// `oncegate partition` keeps the days ahead, and until it runs the default partition holds
/// their rows).
pub(crate) async fn extend<T: Tx + Send>(
    tx: &mut T,
    days_ahead: u32,
    now: OffsetDateTime,
) -> Result<Partitions> {
    let mut out = Partitions::default();
    if is_partitioned(tx).await? && may_create(tx).await? {
        let today = now.to_offset(time::UtcOffset::UTC).date();
        out_extend(tx, &mut out, today, days_ahead).await?;
    }
    Ok(out)
}

async fn out_extend<T: Tx + Send>(
    tx: &mut T,
    out: &mut Partitions,
    today: Date,
    days_ahead: u32,
) -> Result<()> {
    for (table, column) in PARTITIONED {
        let existing = ranges(tx, table).await?;
        let mut day = today;
        for _ in 0..=days_ahead {
            let Some(next) = day.next_day() else { break };
            let (from, to) = (day_floor(day), day_floor(next));
            let covered = existing.iter().any(|r| {
                !r.default
                    && r.from.as_deref().is_none_or(|f| f < to.as_str())
                    && r.to.as_deref().is_none_or(|t| from.as_str() < t)
            });
            if !covered {
                let name = day_name(table, day);
                let stray = tx
                    .query(
                        &format!(
                            "SELECT 1 FROM {table}_default WHERE {column} >= $1 AND {column} < $2 LIMIT 1"
                        ),
                        &[text(&from), text(&to)],
                    )
                    .await?;
                if stray.is_empty() {
                    tx.exec(&schema::day_partition(table, &name, &from, &to), &[])
                        .await?;
                    out.created.push(name);
                } else {
                    out.skipped.push(name);
                }
            }
            day = next;
        }
    }
    Ok(())
}

/// A day whose partition retention may drop whole: its journal's partition (the day's
/// deliveries and their proofs) and its range of delivery ids.
#[derive(Debug, Clone)]
pub(crate) struct Day {
    pub deliveries: String,
    pub from: String,
    pub to: String,
}

/// The days whose every id is below `floor` (the first id of retention's cut-off), whose
/// partition the current role may drop (a traffic role without ownership purges them row by
/// row instead).
pub(crate) async fn days_before<T: Tx + Send>(tx: &mut T, floor: &str) -> Result<Vec<Day>> {
    if !is_partitioned(tx).await? {
        return Ok(Vec::new());
    }
    let mut days = Vec::new();
    for r in ranges(tx, "deliveries").await? {
        let (Some(from), Some(to)) = (r.from, r.to) else {
            continue;
        };
        if to.as_str() > floor || !r.owned {
            continue;
        }
        days.push(Day {
            deliveries: r.name,
            from,
            to,
        });
    }
    days.sort_by(|a, b| a.from.cmp(&b.from));
    Ok(days)
}
