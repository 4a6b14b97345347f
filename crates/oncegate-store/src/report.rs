//! The report: received deliveries side by side with what became of them, per tenant,
//! provider, environment and type, and the unexplained gap that must be zero; every figure
//! counted from stored rows.

use std::collections::BTreeMap;

use time::OffsetDateTime;

use crate::codes::{delivery_id_floor, effect_id_floor, ms};
use crate::delivery::TenantFilter;
use crate::error::StoreError;
use crate::sql::{int, text, Dialect, Query, Row, Tx};

type Result<T> = std::result::Result<T, StoreError>;

/// Counts over one group (or the total). Every figure is computed from stored rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportCounts {
    /// Deliveries journaled (rejected ones included).
    pub received: u64,
    /// Deliveries whose proof says `reject` (malformed, bad signature, over limits).
    pub rejected: u64,
    /// Deliveries whose proof says `process` (a reservation was handed out).
    pub processed: u64,
    /// Deliveries ignored as the same packet again (a provider retry).
    pub ignored_transport: u64,
    /// Deliveries ignored as another packet for an effect that already exists.
    pub ignored_effect: u64,
    /// Deliveries whose proof says `quarantine` (collisions kept aside).
    pub quarantined: u64,
    /// Deliveries whose proof says `reconcile`.
    pub reconcile: u64,
    /// Reconcile queue items still open / resolved.
    pub reconcile_pending: u64,
    /// Reconcile queue items already resolved (counted by when they were queued).
    pub reconcile_resolved: u64,
    /// Effects created in the period that are now completed.
    pub effects_completed: u64,
    /// Effects created in the period that are now failed, retryable or not.
    pub effects_failed: u64,
    /// Effects created in the period whose outcome is unknown (a lease passed with no outcome and
    /// `expire_leases` recorded it).
    pub effects_unknown: u64,
    /// Key matches whose discriminants differed (the quarantines).
    pub collisions: u64,
    /// Operations the authority lists for resources seen recently that have no local effect
    /// (the invisible-losses sweep); not part of the gap, which counts deliveries.
    pub missing_at_source_check: u64,
    /// Deliveries for which a shadow strategy would have decided otherwise (not part of the
    /// gap: shadows never act).
    pub shadow_disagreements: u64,
    /// received − (rejected + processed + ignored + quarantined + reconcile): deliveries
    /// journaled without a documented outcome. Must be zero.
    pub unexplained_gap: i64,
}

impl ReportCounts {
    /// Recomputes the gap from the other figures.
    ///
    /// ```
    /// use oncegate_store::ReportCounts;
    ///
    /// let counts = ReportCounts {
    ///     received: 5,
    ///     processed: 2,
    ///     ignored_transport: 1,
    ///     quarantined: 1,
    ///     ..ReportCounts::default()
    /// }
    /// .with_gap();
    /// // One delivery has no documented outcome.
    /// assert_eq!(counts.unexplained_gap, 1);
    /// ```
    pub fn with_gap(mut self) -> Self {
        let explained = self.rejected
            + self.processed
            + self.ignored_transport
            + self.ignored_effect
            + self.quarantined
            + self.reconcile;
        self.unexplained_gap = self.received as i64 - explained as i64;
        self
    }

    /// Adds another group's or period's counts to these (the gap too: a sum of gaps).
    ///
    /// ```
    /// use oncegate_store::ReportCounts;
    /// let mut day = ReportCounts { received: 2, processed: 2, ..Default::default() };
    /// day.add(&ReportCounts { received: 3, rejected: 1, ..Default::default() });
    /// assert_eq!((day.received, day.processed, day.rejected), (5, 2, 1));
    /// ```
    pub fn add(&mut self, other: &ReportCounts) {
        self.received += other.received;
        self.rejected += other.rejected;
        self.processed += other.processed;
        self.ignored_transport += other.ignored_transport;
        self.ignored_effect += other.ignored_effect;
        self.quarantined += other.quarantined;
        self.reconcile += other.reconcile;
        self.reconcile_pending += other.reconcile_pending;
        self.reconcile_resolved += other.reconcile_resolved;
        self.effects_completed += other.effects_completed;
        self.effects_failed += other.effects_failed;
        self.effects_unknown += other.effects_unknown;
        self.collisions += other.collisions;
        self.missing_at_source_check += other.missing_at_source_check;
        self.shadow_disagreements += other.shadow_disagreements;
        self.unexplained_gap += other.unexplained_gap;
    }
}

/// The counts of one group: a tenant, provider, environment and event type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRow {
    /// The tenant of the group.
    pub tenant: String,
    /// The provider of the group.
    pub provider: String,
    /// The environment of the group (`live`, `test`…).
    pub env: String,
    /// `None` for deliveries rejected before their type was known.
    pub event_type: Option<String>,
    /// What the group's deliveries became, with its own unexplained gap.
    pub counts: ReportCounts,
}

/// The report: every group with activity in its period, and their sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The start of the period (inclusive): deliveries received, items queued and effects created
    /// at or after it are counted.
    pub since: OffsetDateTime,
    /// The end of the period (exclusive); `None`: up to now.
    pub until: Option<OffsetDateTime>,
    /// Sorted by tenant, provider, env, type.
    pub rows: Vec<ReportRow>,
    /// The sum of every row (its gap is the sum of theirs).
    pub total: ReportCounts,
}

/// A report's group: tenant, provider, environment and event type.
pub(crate) type Group = (String, String, String, Option<String>);

/// Past every id a store makes (the ULIDs' 48 bits of milliseconds reach the year 10889).
const END_OF_TIME: OffsetDateTime = time::PrimitiveDateTime::MAX.assume_utc();

/// A report's period: from `since` (inclusive) to `until` (exclusive; `None`: now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Period {
    pub since: OffsetDateTime,
    pub until: Option<OffsetDateTime>,
}

impl Period {
    /// Restricts `column` (unix milliseconds) to the period.
    pub fn restrict(&self, q: &mut Query, column: &str) {
        let p = q.bind(int(ms(self.since)));
        q.push(&format!(" AND {column} >= {p}"));
        if let Some(until) = self.until {
            let p = q.bind(int(ms(until)));
            q.push(&format!(" AND {column} < {p}"));
        }
    }

    /// Restricts `column`, holding ULIDs of the row's time, to the period's range of ids (on
    /// the primary key; `floor` is `codes::delivery_id_floor` or `effect_id_floor`). The range
    /// is always closed, up to the end of time when the period is open: SQLite's planner reads
    /// an open-ended range as a quarter of the table and then prefers walking an index in the
    /// grouping's order (`effects_resource`) through every row, 6.7 s for a day's report at 10M
    /// effects in the scale bench, where the closed range reads only the period's rows.
    pub fn restrict_ids(&self, q: &mut Query, column: &str, floor: fn(OffsetDateTime) -> String) {
        let p = q.bind(text(floor(self.since)));
        q.push(&format!(" AND {column} >= {p}"));
        let until = self.until.unwrap_or(END_OF_TIME);
        let p = q.bind(text(floor(until)));
        q.push(&format!(" AND {column} < {p}"));
    }
}

/// Restricts a count over table `alias` to rows whose `time` is in the period and to the
/// tenants, and groups it by tenant, provider, environment and type (after the minute of
/// `time` with `by_minute`).
fn grouped<'a>(
    q: &mut Query<'a>,
    alias: &str,
    time: &str,
    tenants: &'a TenantFilter,
    period: Period,
    by_minute: bool,
) {
    period.restrict(q, &format!("{alias}.{time}"));
    q.tenants(&format!("{alias}.tenant"), tenants);
    q.push(&format!(
        " GROUP BY {}",
        group_columns(alias, time, by_minute)
    ));
}

/// The first columns of a grouped count: the minute of `time` with `by_minute`, then the group.
fn group_columns(alias: &str, time: &str, by_minute: bool) -> String {
    let minute = if by_minute {
        format!("{alias}.{time} / 60000, ")
    } else {
        String::new()
    };
    format!("{minute}{alias}.tenant, {alias}.provider, {alias}.env, {alias}.event_type")
}

/// The deliveries of the period per group (per minute and group with `by_minute`), with what
/// their proofs decided.
pub(crate) fn deliveries_query(
    tenants: &TenantFilter,
    period: Period,
    by_minute: bool,
) -> Query<'_> {
    // A delivery's proof is in its own row (schema v14): its action and layer, empty until
    // it is decided.
    let mut q = Query::new(&format!(
        "SELECT {}, COUNT(*), \
         COUNT(CASE WHEN d.action = 'reject' THEN 1 END), \
         COUNT(CASE WHEN d.action = 'process' THEN 1 END), \
         COUNT(CASE WHEN d.action = 'ignore' AND d.layer = 'transport' THEN 1 END), \
         COUNT(CASE WHEN d.action = 'ignore' AND (d.layer IS NULL OR d.layer <> 'transport') THEN 1 END), \
         COUNT(CASE WHEN d.action = 'quarantine' THEN 1 END), \
         COUNT(CASE WHEN d.action = 'reconcile' THEN 1 END) \
         FROM deliveries d WHERE 1 = 1",
        group_columns("d", "received_at", by_minute)
    ));
    // The period as a range of delivery ids, on the primary key (`codes::delivery_id_floor`).
    period.restrict_ids(&mut q, "d.id", delivery_id_floor);
    grouped(&mut q, "d", "received_at", tenants, period, by_minute);
    q
}

/// The effects created in the period per group (per minute and group with `by_minute`), by
/// state.
pub(crate) fn effects_query(tenants: &TenantFilter, period: Period, by_minute: bool) -> Query<'_> {
    let mut q = Query::new(&format!(
        "SELECT {}, \
         COUNT(CASE WHEN e.state = 'completed' THEN 1 END), \
         COUNT(CASE WHEN e.state IN ('failed', 'failed_retryable') THEN 1 END), \
         COUNT(CASE WHEN e.state = 'unknown' THEN 1 END) \
         FROM effects e WHERE 1 = 1",
        group_columns("e", "created_at", by_minute)
    ));
    // The period as a range of effect ids, on the primary key, as for the deliveries.
    period.restrict_ids(&mut q, "e.id", effect_id_floor);
    grouped(&mut q, "e", "created_at", tenants, period, by_minute);
    q
}

/// The group named by a row's columns from `at`.
pub(crate) fn group_at(r: &Row, at: usize) -> Result<Group> {
    Ok((
        r.text(at)?,
        r.text(at + 1)?,
        r.text(at + 2)?,
        r.opt_text(at + 3)?,
    ))
}

fn count(r: &Row, i: usize) -> Result<u64> {
    Ok(r.int(i)?.max(0) as u64)
}

/// Adds a row of `deliveries_query` (its counts from column `at`) to `c`.
pub(crate) fn add_deliveries(c: &mut ReportCounts, r: &Row, at: usize) -> Result<()> {
    c.received += count(r, at)?;
    c.rejected += count(r, at + 1)?;
    c.processed += count(r, at + 2)?;
    c.ignored_transport += count(r, at + 3)?;
    c.ignored_effect += count(r, at + 4)?;
    c.quarantined += count(r, at + 5)?;
    c.reconcile += count(r, at + 6)?;
    Ok(())
}

/// Adds a row of `effects_query` (its counts from column `at`) to `c`.
pub(crate) fn add_effects(c: &mut ReportCounts, r: &Row, at: usize) -> Result<()> {
    c.effects_completed += count(r, at)?;
    c.effects_failed += count(r, at + 1)?;
    c.effects_unknown += count(r, at + 2)?;
    Ok(())
}

/// Counts the deliveries and effects of `period` from their rows into `groups`.
async fn count_rows<T: Tx + Send>(
    tx: &mut T,
    tenants: &TenantFilter,
    period: Period,
    groups: &mut BTreeMap<Group, ReportCounts>,
) -> Result<()> {
    let q = deliveries_query(tenants, period, false);
    for r in tx.query(&q.sql, &q.params).await? {
        add_deliveries(groups.entry(group_at(&r, 0)?).or_default(), &r, 4)?;
    }
    let q = effects_query(tenants, period, false);
    for r in tx.query(&q.sql, &q.params).await? {
        add_effects(groups.entry(group_at(&r, 0)?).or_default(), &r, 4)?;
    }
    Ok(())
}

/// Aggregates deliveries received in the period, and what became of them, per group: the
/// minutes the store has counted (`rollup`) from their totals, the rest from their rows.
pub(crate) async fn build<T: Tx + Send>(
    tx: &mut T,
    tenants: &TenantFilter,
    period: Period,
) -> Result<Report> {
    if tx.dialect() == Dialect::Postgres {
        // One snapshot for every statement below: the totals and the rows they leave out must
        // not see a count committed between them.
        tx.exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", &[])
            .await?;
    }
    let mut groups: BTreeMap<Group, ReportCounts> = BTreeMap::new();
    for part in crate::rollup::add_totals(tx, tenants, period, &mut groups).await? {
        count_rows(tx, tenants, part, &mut groups).await?;
    }
    for c in groups.values_mut() {
        c.collisions = c.quarantined;
    }

    let mut q = Query::new(
        "SELECT q.tenant, q.provider, q.env, q.event_type, \
         COUNT(CASE WHEN q.status = 'open' THEN 1 END), COUNT(CASE WHEN q.status = 'resolved' THEN 1 END) \
         FROM queue_items q WHERE q.kind = 'reconcile'",
    );
    grouped(&mut q, "q", "created_at", tenants, period, false);
    for r in tx.query(&q.sql, &q.params).await? {
        let c = groups.entry(group_at(&r, 0)?).or_default();
        c.reconcile_pending = count(&r, 4)?;
        c.reconcile_resolved = count(&r, 5)?;
    }

    for (g, n) in crate::reconciliation::missing_counts(tx, tenants, period).await? {
        groups.entry(g).or_default().missing_at_source_check = n;
    }
    for (g, n) in crate::shadow::report_counts(tx, tenants, period).await? {
        groups.entry(g).or_default().shadow_disagreements = n;
    }

    let mut total = ReportCounts::default();
    let rows = groups
        .into_iter()
        .map(|((tenant, provider, env, event_type), counts)| {
            let counts = counts.with_gap();
            total.add(&counts);
            ReportRow {
                tenant,
                provider,
                env,
                event_type,
                counts,
            }
        })
        .collect();
    Ok(Report {
        since: period.since,
        until: period.until,
        rows,
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    /// A SQLite store's schema holding `n` effects, deliveries and proofs, with the statistics
    /// `ANALYZE` gives the planner (as a store that has run for a while has them).
    fn analyzed(n: i64) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        for (_, sql) in crate::schema::sqlite() {
            conn.execute_batch(&sql).unwrap();
        }
        conn.execute_batch("BEGIN").unwrap();
        for i in 0..n {
            conn.execute(
                "INSERT INTO effects (id, tenant, provider, env, event_type, durable, state, fencing_token, \
                 discriminants, first_delivery, created_at, updated_at, resource, critical) \
                 VALUES (?1, 'acme', 'payflow', 'live', 'payment.captured', 1, 'completed', 1, '{}', ?2, ?3, ?3, ?4, 1)",
                rusqlite::params![format!("eff_{i:026}"), format!("dlv_{i:026}"), i, format!("pay_{i}")],
            )
            .unwrap();
            // Each delivery decided: its proof in its own row.
            conn.execute(
                "INSERT INTO deliveries (id, tenant, provider, env, event_type, received_at, size, body_sha256, headers_json, \
                 decided_at, prior, transport, action, reason, flags, rule, matrix_version, effect_id, differences, details) \
                 VALUES (?1, 'acme', 'payflow', 'live', 'payment.captured', ?2, 10, 'h', '{}', \
                 ?2, 'none', 'none', 'process', 'r', '[]', 'R1', 1, ?3, '[]', '{}')",
                rusqlite::params![format!("dlv_{i:026}"), i, format!("eff_{i:026}")],
            )
            .unwrap();
        }
        conn.execute_batch("COMMIT; ANALYZE").unwrap();
        conn
    }

    /// SQLite's plan of a report query, its steps joined.
    fn plan(conn: &Connection, q: &Query) -> String {
        let sql = format!("EXPLAIN QUERY PLAN {}", q.sql.replace('$', "?"));
        let mut stmt = conn.prepare(&sql).unwrap();
        use rusqlite::types::Value as V;
        let params = q.params.iter().map(|v| match v {
            crate::sql::Value::Text(t) => t.clone().map_or(V::Null, |t| V::Text(t.into_owned())),
            crate::sql::Value::Int(i) => i.map_or(V::Null, V::Integer),
            crate::sql::Value::Bool(b) => V::Integer(i64::from(*b)),
            crate::sql::Value::Bytes(b) => b.clone().map_or(V::Null, V::Blob),
        });
        let steps: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(params), |r| {
                r.get::<_, String>(3)
            })
            .unwrap()
            .map(|step| step.unwrap())
            .collect();
        steps.join("; ")
    }

    /// A period open to now reads the same way as a closed one: its range of ids on the
    /// primary key. Open-ended, SQLite walked the whole `effects_resource` index instead (a
    /// day's report took 6.7 s at 10M effects in the scale bench).
    #[test]
    fn a_report_reads_its_period_by_primary_key_even_up_to_now() {
        let conn = analyzed(20_000);
        let since = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        for until in [None, Some(since + time::Duration::days(1))] {
            let period = Period { since, until };
            for (table, q) in [
                ("e", effects_query(&TenantFilter::All, period, false)),
                ("d", deliveries_query(&TenantFilter::All, period, false)),
            ] {
                let plan = plan(&conn, &q);
                assert!(
                    plan.contains(&format!("SEARCH {table} USING"))
                        && plan.contains("(id>? AND id<?)"),
                    "{until:?}: {plan}"
                );
                assert!(
                    !plan.contains(&format!("SCAN {table}")),
                    "{until:?}: {plan}"
                );
            }
        }
    }
}
