//! The report's minute totals: each minute's figures per group, counted once from the rows
//! and read back by every report whose period covers the minute, so a day's report sums 1,440
//! totals instead of counting every delivery, proof and effect of the day again.
//!
//! A total stays exact because the minutes that change after they were counted say so:
//! - a write to a row older than [`LATE_MS`] (a late journal entry, an effect created late, an
//!   effect whose state changes late) marks its minute stale from a trigger (`schema`), in the
//!   writer's own transaction, so no write path can forget to;
//! - a minute is counted only once every delivery in it has its proof (a delivery has one
//!   proof at most, so a counted minute takes no new one);
//! - retention marks the minutes it removes rows from (`retention`).
//!
//! A minute is counted only when it ended more than [`LATE_MS`] ago by the database's clock,
//! and only after every write in progress then has finished (SQLite: the count runs in the
//! writer's transaction; PostgreSQL: it waits for the transactions its snapshot saw running).
//! A write it cannot see is therefore a late one, which marked the minute. A report reads the
//! totals of the counted minutes that are not marked, and counts everything else from the
//! rows, in one snapshot.

use std::collections::BTreeMap;
use std::time::Duration;

use time::OffsetDateTime;

use crate::codes::{from_ms, ms};
use crate::delivery::TenantFilter;
use crate::error::StoreError;
use crate::report::{self, Group, Period, ReportCounts};
use crate::sql::{int, Dialect, Query, Row, Statement, Tx, Value};

type Result<T> = std::result::Result<T, StoreError>;

/// A minute, in milliseconds.
const MINUTE_MS: i64 = 60_000;

/// A write to a row whose time is older than this (milliseconds, by the database's clock)
/// marks the row's minute stale. Also how long after its end a minute waits to be counted.
pub(crate) const LATE_MS: i64 = 120_000;

/// Added to `LATE_MS` before a minute is counted: room for the database clock's reading in a
/// trigger and the count's bound to be taken a few instants apart.
const SLACK_MS: i64 = 5_000;

/// The advisory lock (PostgreSQL) one count holds, so two instances never write the same
/// minute from two snapshots.
const LOCK_KEY: i64 = 0x6f6e_6365_7267_7570;

/// The most transaction ids a count checks for the writes in progress (PostgreSQL): a wider
/// span means a transaction has been open across that many others, and the count waits for
/// a later run rather than check them all.
const MAX_RUNNING_SPAN: i64 = 1_000_000;

/// How long a count waits for the writes in progress when it starts (PostgreSQL).
const WAIT: Duration = Duration::from_secs(5);

/// What one [`crate::Store::roll_up`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RollUp {
    /// Minutes counted for the first time.
    pub minutes: u64,
    /// Stale minutes counted again.
    pub recounted: u64,
    /// Deliveries read to count them (how much work the call was).
    pub deliveries: u64,
    /// Every minute old enough is counted (the stale ones included): nothing left to do now.
    pub caught_up: bool,
    /// Nothing was counted: another instance is counting, or a write in progress did not end
    /// within the wait. Try again later.
    pub busy: bool,
}

/// The group's columns, then the figures, as `report_minutes` stores them.
const TOTAL_COLUMNS: &str = "tenant, provider, env, event_type, received, rejected, processed, \
     ignored_transport, ignored_effect, quarantined, reconcile, effects_completed, effects_failed, \
     effects_unknown";

/// Counts the minutes that ended long enough ago and are not counted yet (at most
/// `max_minutes` of them, oldest first), and counts the stale ones again.
pub(crate) async fn roll_up<T: Tx + Send>(tx: &mut T, max_minutes: i64) -> Result<RollUp> {
    let now = match tx.dialect() {
        Dialect::Sqlite => {
            // The count runs in the writer's transaction: no write is in progress.
            let rows = tx
                .query(
                    "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
                    &[],
                )
                .await?;
            first_int(&rows)?
        }
        Dialect::Postgres => match settle(tx).await? {
            Some(now) => now,
            None => {
                return Ok(RollUp {
                    busy: true,
                    ..RollUp::default()
                })
            }
        },
    };
    let end = (now - LATE_MS - SLACK_MS).div_euclid(MINUTE_MS);
    let mut done = RollUp::default();

    // Onwards from the last minute counted, then the stale minutes behind it: a minute past
    // it is counted for the first time when the count reaches it, marked or not.
    let from = next_minute(tx).await?.unwrap_or(end);
    let to = end.min(from + max_minutes).max(from);
    if to > from {
        let (minutes, deliveries) = count_and_clear(tx, from, to).await?;
        done.minutes = minutes;
        done.deliveries = deliveries;
    }
    let budget = max_minutes - (to - from);
    let stale = tx
        .query(
            "SELECT minute FROM report_stale WHERE minute < $1 ORDER BY minute LIMIT $2",
            &[int(to), int(budget.max(0) + 1)],
        )
        .await?;
    let stale: Vec<i64> = stale.iter().map(|r| r.int(0)).collect::<Result<_>>()?;
    let more = stale.len() as i64 > budget;
    for &minute in stale.iter().take(budget.max(0) as usize) {
        done.deliveries += count_and_clear(tx, minute, minute + 1).await?.1;
        done.recounted += 1;
    }
    done.caught_up = to >= end && !more;
    Ok(done)
}

/// Counts the minutes `from..to` (see `count`) and clears their stale marks, each only if no
/// write added to it since it was read (a write the count did not see).
async fn count_and_clear<T: Tx + Send>(tx: &mut T, from: i64, to: i64) -> Result<(u64, u64)> {
    let marks = tx
        .query(
            "SELECT minute, changes FROM report_stale WHERE minute >= $1 AND minute < $2",
            &[int(from), int(to)],
        )
        .await?;
    let clear: Vec<Statement> = marks
        .iter()
        .map(|r| {
            Ok((
                "DELETE FROM report_stale WHERE minute = $1 AND changes = $2",
                vec![int(r.int(0)?), int(r.int(1)?)],
            ))
        })
        .collect::<Result<_>>()?;
    let counted = count(tx, from, to).await?;
    if !clear.is_empty() {
        tx.exec_all(&clear).await?;
    }
    Ok(counted)
}

/// PostgreSQL: takes the count's lock, reads the database's clock, and waits until every
/// transaction in progress at that instant has ended. `None` when another count holds the
/// lock or a transaction outlives the wait.
async fn settle<T: Tx + Send>(tx: &mut T) -> Result<Option<i64>> {
    // Each statement below reads the rows committed when it starts: the counts must see
    // every transaction that ended during the wait.
    tx.exec("SET TRANSACTION ISOLATION LEVEL READ COMMITTED", &[])
        .await?;
    let locked = tx
        .query("SELECT pg_try_advisory_xact_lock($1)", &[int(LOCK_KEY)])
        .await?;
    if !locked
        .first()
        .map(|r| r.boolean(0))
        .transpose()?
        .unwrap_or(false)
    {
        return Ok(None);
    }
    // The clock first, then this transaction's own id: every transaction that had an id when
    // the clock was read has a smaller one, and those still running are at or above the
    // oldest running then (the snapshot's xmin).
    let clock = tx
        .query(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .await?;
    let now = first_int(&clock)?;
    let ids = tx
        .query(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, pg_current_xact_id()::text::bigint",
            &[],
        )
        .await?;
    let row = ids
        .first()
        .ok_or_else(|| StoreError::corrupt("the transaction ids' query returned no row"))?;
    let (oldest, own) = (row.int(0)?, row.int(1)?);
    if own - oldest > MAX_RUNNING_SPAN {
        return Ok(None);
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let rows = tx
            .query(
                "SELECT COUNT(*) FROM generate_series($1::bigint, $2::bigint - 1) x \
                 WHERE pg_xact_status(x::text::xid8) = 'in progress'",
                &[int(oldest), int(own)],
            )
            .await?;
        if first_int(&rows)? == 0 {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Some(now))
}

/// The first minute never counted: after the last one counted, or the first minute holding
/// a delivery or an effect. `None` when the store holds neither.
async fn next_minute<T: Tx + Send>(tx: &mut T) -> Result<Option<i64>> {
    let rows = tx
        .query("SELECT MAX(minute) FROM report_rolled", &[])
        .await?;
    if let Some(last) = rows.first().map(|r| r.opt_int(0)).transpose()?.flatten() {
        return Ok(Some(last + 1));
    }
    let mut first: Option<i64> = None;
    for sql in [
        "SELECT received_at FROM deliveries ORDER BY id LIMIT 1",
        "SELECT created_at FROM effects ORDER BY id LIMIT 1",
    ] {
        if let Some(r) = tx.query(sql, &[]).await?.first() {
            let minute = r.int(0)?.div_euclid(MINUTE_MS);
            first = Some(first.map_or(minute, |f: i64| f.min(minute)));
        }
    }
    Ok(first)
}

/// Counts the minutes `from..to` from their rows, replacing their totals: returns how many
/// were counted (a minute holding a delivery without its proof is not) and how many
/// deliveries were read.
async fn count<T: Tx + Send>(tx: &mut T, from: i64, to: i64) -> Result<(u64, u64)> {
    let period = Period {
        since: from_ms(from * MINUTE_MS)?,
        until: Some(from_ms(to * MINUTE_MS)?),
    };
    let mut minutes: BTreeMap<i64, BTreeMap<Group, ReportCounts>> = BTreeMap::new();
    let mut deliveries = 0;
    // A row's figures: the minute and group of its first five columns.
    fn cell<'m>(
        minutes: &'m mut BTreeMap<i64, BTreeMap<Group, ReportCounts>>,
        r: &Row,
    ) -> Result<&'m mut ReportCounts> {
        Ok(minutes
            .entry(r.int(0)?)
            .or_default()
            .entry(report::group_at(r, 1)?)
            .or_default())
    }
    let q = report::deliveries_query(&TenantFilter::All, period, true);
    for r in tx.query(&q.sql, &q.params).await? {
        let c = cell(&mut minutes, &r)?;
        report::add_deliveries(c, &r, 5)?;
        deliveries += c.received;
    }
    let q = report::effects_query(&TenantFilter::All, period, true);
    for r in tx.query(&q.sql, &q.params).await? {
        report::add_effects(cell(&mut minutes, &r)?, &r, 5)?;
    }

    let range = [int(from), int(to)];
    tx.exec(
        "DELETE FROM report_minutes WHERE minute >= $1 AND minute < $2",
        &range,
    )
    .await?;
    tx.exec(
        "DELETE FROM report_rolled WHERE minute >= $1 AND minute < $2",
        &range,
    )
    .await?;
    // A minute whose every delivery has its proof; an empty one too, so the counted minutes
    // stay one run that a report reads as one range.
    let decided = |m: i64| {
        minutes
            .get(&m)
            .is_none_or(|groups| groups.values().all(|c| c.with_gap().unexplained_gap == 0))
    };
    let counted: Vec<i64> = (from..to).filter(|&m| decided(m)).collect();
    let mut totals: Vec<Vec<Value>> = Vec::new();
    for &m in &counted {
        for ((tenant, provider, env, event_type), c) in minutes.get(&m).into_iter().flatten() {
            let figures = [
                c.received,
                c.rejected,
                c.processed,
                c.ignored_transport,
                c.ignored_effect,
                c.quarantined,
                c.reconcile,
                c.effects_completed,
                c.effects_failed,
                c.effects_unknown,
            ];
            let mut row = vec![
                int(m),
                crate::sql::text(tenant.as_str()),
                crate::sql::text(provider.as_str()),
                crate::sql::text(env.as_str()),
                crate::sql::opt_text(event_type.as_deref()),
            ];
            row.extend(figures.iter().map(|&n| int(n as i64)));
            totals.push(row);
        }
    }
    for chunk in totals.chunks(100) {
        let mut q = Query::new(&format!(
            "INSERT INTO report_minutes (minute, {TOTAL_COLUMNS}) VALUES "
        ));
        let rows: Vec<String> = chunk
            .iter()
            .map(|row| {
                let ps: Vec<String> = row.iter().map(|v| q.bind(v.clone())).collect();
                format!("({})", ps.join(", "))
            })
            .collect();
        q.push(&rows.join(", "));
        tx.exec(&q.sql, &q.params).await?;
    }
    for chunk in counted.chunks(500) {
        let mut q = Query::new("INSERT INTO report_rolled (minute) VALUES ");
        let rows: Vec<String> = chunk
            .iter()
            .map(|&m| format!("({})", q.bind(int(m))))
            .collect();
        q.push(&rows.join(", "));
        tx.exec(&q.sql, &q.params).await?;
    }
    Ok((counted.len() as u64, deliveries))
}

/// Marks `minutes` stale (retention, for the minutes it removed rows from).
pub(crate) async fn mark_stale<T: Tx + Send>(
    tx: &mut T,
    minutes: impl IntoIterator<Item = i64>,
) -> Result<()> {
    let minutes: Vec<i64> = minutes.into_iter().collect();
    for chunk in minutes.chunks(500) {
        let mut q = Query::new("INSERT INTO report_stale (minute, changes) VALUES ");
        let rows: Vec<String> = chunk
            .iter()
            .map(|&m| format!("({}, 1)", q.bind(int(m))))
            .collect();
        q.push(&rows.join(", "));
        q.push(" ON CONFLICT (minute) DO UPDATE SET changes = report_stale.changes + 1");
        tx.exec(&q.sql, &q.params).await?;
    }
    Ok(())
}

/// Adds the totals of the counted minutes that lie wholly in `period` and are not stale to
/// `groups`, and returns the parts of the period left to count from the rows, in order.
pub(crate) async fn add_totals<T: Tx + Send>(
    tx: &mut T,
    tenants: &TenantFilter,
    period: Period,
    groups: &mut BTreeMap<Group, ReportCounts>,
) -> Result<Vec<Period>> {
    let since = ms(period.since);
    let end = period
        .until
        .map_or_else(|| ms(OffsetDateTime::now_utc()), ms);
    let (first, last) = (
        since.div_euclid(MINUTE_MS) + i64::from(since.rem_euclid(MINUTE_MS) != 0),
        end.div_euclid(MINUTE_MS),
    );
    if first >= last {
        return Ok(vec![period]);
    }
    // The counted minutes that are not stale, as runs: the first and last minute of each (a
    // month is 43,200 minutes, and the runs are a handful).
    let rows = tx
        .query(
            "SELECT minute, CASE WHEN prev IS NULL OR prev <> minute - 1 THEN 1 ELSE 0 END, \
             CASE WHEN next IS NULL OR next <> minute + 1 THEN 1 ELSE 0 END FROM (\
             SELECT r.minute, LAG(r.minute) OVER (ORDER BY r.minute) AS prev, \
             LEAD(r.minute) OVER (ORDER BY r.minute) AS next FROM report_rolled r \
             WHERE r.minute >= $1 AND r.minute < $2 \
             AND NOT EXISTS (SELECT 1 FROM report_stale s WHERE s.minute = r.minute)) runs \
             WHERE prev IS NULL OR prev <> minute - 1 OR next IS NULL OR next <> minute + 1 \
             ORDER BY minute",
            &[int(first), int(last)],
        )
        .await?;
    let mut runs: Vec<(i64, i64)> = Vec::new();
    for r in &rows {
        let (minute, starts, ends) = (r.int(0)?, r.int(1)? == 1, r.int(2)? == 1);
        if starts {
            runs.push((minute, minute));
        }
        if ends {
            if let Some(run) = runs.last_mut() {
                run.1 = minute;
            }
        }
    }
    if runs.is_empty() {
        return Ok(vec![period]);
    }
    // A minute has totals only while it is counted (`count` writes both, and replaces both).
    let mut q = Query::new(&format!(
        "SELECT m.tenant, m.provider, m.env, m.event_type, {} \
         FROM report_minutes m WHERE m.minute >= $1 AND m.minute < $2 \
         AND NOT EXISTS (SELECT 1 FROM report_stale s WHERE s.minute = m.minute)",
        sums()
    ));
    q.bind(int(first));
    q.bind(int(last));
    q.tenants("m.tenant", tenants);
    q.push(" GROUP BY m.tenant, m.provider, m.env, m.event_type");
    for r in tx.query(&q.sql, &q.params).await? {
        let c = groups.entry(report::group_at(&r, 0)?).or_default();
        report::add_deliveries(c, &r, 4)?;
        report::add_effects(c, &r, 11)?;
    }

    // What the counted runs leave: the milliseconds between them, and the edges.
    let mut parts = Vec::new();
    let mut cursor = since;
    for (start, end) in runs {
        let start = start * MINUTE_MS;
        if start > cursor {
            parts.push(Period {
                since: from_ms(cursor)?,
                until: Some(from_ms(start)?),
            });
        }
        cursor = (end + 1) * MINUTE_MS;
    }
    parts.push(Period {
        since: from_ms(cursor)?,
        until: period.until,
    });
    Ok(parts)
}

/// Each figure's sum over the minutes, as a BIGINT (PostgreSQL sums BIGINTs as NUMERIC).
fn sums() -> String {
    TOTAL_COLUMNS
        .split(", ")
        .skip(4)
        .map(|c| format!("CAST(SUM(m.{}) AS BIGINT)", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn first_int(rows: &[Row]) -> Result<i64> {
    rows.first()
        .ok_or_else(|| StoreError::corrupt("a count returned no row"))?
        .int(0)
}
