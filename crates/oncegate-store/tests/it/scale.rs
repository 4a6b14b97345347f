//! `docs/scale.md` holds: the table of what each table is keyed by is the schema's (every
//! table listed, with exactly its unique indexes), and the hot path reads every table only
//! through the indexes the table names, never by scanning one. Both are what a distributed
//! engine's move depends on; the document says what each engine would need.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::batches::{receive, request};
use crate::harness::{strong_critical, Backend};
use oncegate_store::{DecideRequest, Store};

/// One table as `docs/scale.md` describes it.
#[derive(Debug)]
struct Described {
    /// Each unique index, as its columns joined by `, `.
    unique: BTreeSet<String>,
    /// The indexes the hot path may read it by (names).
    hot_reads: BTreeSet<String>,
}

/// The table of `docs/scale.md`: rows `| `name` | grows with | `(a, b)`; `(c)` | keyed by |
/// `index`, `index` |`.
fn described() -> BTreeMap<String, Described> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/scale.md");
    let text = std::fs::read_to_string(path).expect("docs/scale.md");
    let ticked = |cell: &str| -> BTreeSet<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(|s| s.trim_matches(|c| c == '(' || c == ')').to_owned())
            .collect()
    };
    let mut tables = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert!(
            cells.len() >= 7,
            "a row of the keys table has five cells: {line}"
        );
        let name = cells[1].trim_matches('`').to_owned();
        tables.insert(
            name,
            Described {
                unique: ticked(cells[3]),
                hot_reads: ticked(cells[5]),
            },
        );
    }
    assert!(!tables.is_empty(), "docs/scale.md has its keys table");
    tables
}

/// Every table of the migrated schema with its unique indexes' columns.
async fn unique_indexes(admin: &tokio_postgres::Client) -> BTreeMap<String, BTreeSet<String>> {
    let rows = admin
        .query(
            "SELECT t.relname, string_agg(a.attname, ', ' ORDER BY k.ord) \
             FROM pg_index x \
             JOIN pg_class i ON i.oid = x.indexrelid \
             JOIN pg_class t ON t.oid = x.indrelid \
             JOIN pg_namespace n ON n.oid = t.relnamespace AND n.nspname = current_schema() \
             CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
             WHERE x.indisunique AND t.relkind IN ('r', 'p') \
             GROUP BY t.relname, i.relname",
            &[],
        )
        .await
        .expect("read the unique indexes");
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let all = admin
        .query(
            "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')",
            &[],
        )
        .await
        .expect("read the tables");
    for row in all {
        tables.entry(row.get(0)).or_default();
    }
    for row in rows {
        tables.entry(row.get(0)).or_default().insert(row.get(1));
    }
    tables
}

/// Each table's sequential scans and each index's scans, as the statistics hold them once every
/// other connection to the database has closed (a backend's counts reach the shared statistics
/// when it exits) and `admin`'s own reads are counted: a backend that stays connected reports
/// its counts when it goes idle, but at most once a second (PostgreSQL 15), so its reads made
/// just before one call could otherwise land between that call and the next.
pub(crate) async fn scans(admin: &tokio_postgres::Client) -> BTreeMap<String, i64> {
    // Reported when this statement ends and the connection goes idle (PostgreSQL 15 and later;
    // older servers report sooner and have no such function).
    admin
        .batch_execute(
            "DO $$ BEGIN PERFORM pg_stat_force_next_flush(); \
             EXCEPTION WHEN undefined_function THEN NULL; END $$",
        )
        .await
        .expect("report this connection's counts");
    for _ in 0..100 {
        let others: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .expect("read the connections")
            .get(0);
        if others == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut seen = BTreeMap::new();
    for row in admin
        .query(
            "SELECT 'table ' || relname, seq_scan FROM pg_stat_user_tables \
             UNION ALL SELECT 'index ' || relname || ' ' || indexrelname, idx_scan \
             FROM pg_stat_user_indexes",
            &[],
        )
        .await
        .expect("read the statistics")
    {
        seen.insert(row.get::<_, String>(0), row.get::<_, i64>(1));
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_table_is_the_schemas() {
    let b = Backend::postgres().await;
    drop(b.open().await); // the schema
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    let schema = unique_indexes(&admin).await;
    let doc = described();
    let listed: BTreeSet<&String> = doc.keys().collect();
    let present: BTreeSet<&String> = schema.keys().collect();
    assert_eq!(
        listed, present,
        "docs/scale.md lists exactly the schema's tables"
    );
    for (table, unique) in &schema {
        assert_eq!(
            &doc[table].unique, unique,
            "docs/scale.md names the unique indexes of `{table}`"
        );
    }
    drop(admin);
    b.cleanup().await;
}

/// The hot path (journal and decide in one call, decide a delivery journaled by another
/// instance, duplicates of both layers, completes) reads no table by scanning it, and every
/// index it reads is one `docs/scale.md` names for its table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_path_reads_only_by_the_keys_the_document_names() {
    let b = Backend::postgres().await;
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    drop(b.open().await); // the schema, and its migration's own reads, before the count
    let before = scans(&admin).await;

    let (one, other): (Arc<Store>, Arc<Store>) = (b.open().await, b.open().await);
    let mut work = tokio::task::JoinSet::new();
    for n in 0..48 {
        let (one, other) = (one.clone(), other.clone());
        work.spawn(async move {
            // Even: journal and decide in one call; odd: journaled here, decided by another
            // instance. Every third key repeats the one before (a duplicate of the key), and
            // every fourth transport key repeats (a redelivery).
            let key = format!("re_{}", n - n % 3);
            let (id, decided) = if n % 4 == 3 {
                let id = one
                    .journal(crate::batches::reception(n - 1))
                    .await
                    .expect("journaled");
                let req = DecideRequest {
                    delivery: id.clone(),
                    ..request(n, &key, "{}")
                };
                (id, other.decide(req, &strong_critical).await)
            } else {
                receive(&one, n, &key, "{}").await
            };
            let decided = decided.unwrap_or_else(|e| panic!("delivery {id} decided: {e}"));
            if let Some(r) = decided.reservation {
                one.complete(
                    &r.effect,
                    r.fencing_token,
                    "{}",
                    r.lease_until - time::Duration::seconds(1),
                )
                .await
                .expect("completed");
            }
        });
    }
    while let Some(done) = work.join_next().await {
        done.expect("a delivery's task");
    }
    drop((one, other));
    let after = scans(&admin).await;

    let doc = described();
    let (mut used, mut unnamed, mut scanned) = (Vec::new(), Vec::new(), Vec::new());
    for (name, count) in &after {
        let delta = count - before.get(name).copied().unwrap_or(0);
        if delta == 0 {
            continue;
        }
        let parts: Vec<&str> = name.split(' ').collect();
        match parts.as_slice() {
            ["table", table] => scanned.push(format!("{table} ({delta} scans)")),
            ["index", table, index] => {
                used.push(format!("{table}.{index}"));
                if !doc[*table].hot_reads.contains(*index) {
                    unnamed.push(format!("{table}.{index}"));
                }
            }
            _ => unreachable!("{name}"),
        }
    }
    assert!(
        scanned.is_empty(),
        "the hot path scanned tables: {scanned:?}"
    );
    assert!(
        unnamed.is_empty(),
        "the hot path read by indexes docs/scale.md does not name for their tables: {unnamed:?}"
    );
    assert!(
        used.iter().any(|u| u == "effects.effects_scope_seq"),
        "the decisions read the keys' effects by their scope: {used:?}"
    );
    eprintln!("hot path reads: {used:?}");
    drop(admin);
    b.cleanup().await;
}
