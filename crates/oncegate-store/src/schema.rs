//! The embedded migrations of both backends, and the only place the store's DDL is written:
//! every table and index is created here, as a numbered migration. Each is applied once, in
//! order, at open, and recorded in `schema_version`; a database whose version is newer than
//! `known_version()` is refused rather than written to by an older binary.
//!
//! Conventions shared by both dialects, so a row reads the same everywhere: ids and enums are
//! TEXT, times are BIGINT unix milliseconds, JSON is TEXT (the store never queries inside it),
//! raw bodies are BLOB/BYTEA. The sweeper's and the claimers' indexes are partial (only the
//! reserved, or released, effects), so the many settled effects never weigh on them. No foreign keys: purge removes rows in a fixed order instead, and
//! distributed engines handle them with extra round trips we do not need.

use crate::sql::Dialect;

/// The highest schema version this binary knows: the last migration's, so adding a migration
/// is the only edit a new version needs.
pub(crate) fn known_version() -> i64 {
    sqlite().iter().map(|(v, _)| *v).max().unwrap_or(0)
}

/// The tables, identical in shape for both backends apart from the binary type name.
fn tables(blob: &str) -> String {
    format!(
        r#"
CREATE TABLE IF NOT EXISTS deliveries (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    provider TEXT NOT NULL,
    env TEXT NOT NULL,
    event_type TEXT,
    received_at BIGINT NOT NULL,
    size BIGINT NOT NULL,
    body_sha256 TEXT NOT NULL,
    headers_json TEXT NOT NULL,
    payload {blob},
    transport_key TEXT,
    transport_strength TEXT,
    correlation_id TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_transport ON deliveries (tenant, provider, env, transport_key);
CREATE INDEX IF NOT EXISTS deliveries_received ON deliveries (received_at);
CREATE INDEX IF NOT EXISTS deliveries_tenant_received ON deliveries (tenant, received_at);
CREATE INDEX IF NOT EXISTS deliveries_correlation ON deliveries (correlation_id);

CREATE TABLE IF NOT EXISTS proofs (
    delivery_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    provider TEXT NOT NULL,
    env TEXT NOT NULL,
    event_type TEXT,
    decided_at BIGINT NOT NULL,
    strategy_name TEXT,
    strategy_version BIGINT,
    strategy_level TEXT,
    key_value TEXT,
    confidence TEXT,
    prior TEXT NOT NULL,
    transport TEXT NOT NULL,
    action TEXT NOT NULL,
    layer TEXT,
    reason TEXT NOT NULL,
    flags TEXT NOT NULL,
    rule TEXT NOT NULL,
    matrix_version BIGINT NOT NULL,
    reference_delivery TEXT,
    effect_id TEXT,
    queue_item_id TEXT,
    differences TEXT NOT NULL,
    details TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS proofs_effect ON proofs (effect_id);
CREATE INDEX IF NOT EXISTS proofs_key ON proofs (key_value);

CREATE TABLE IF NOT EXISTS effects (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    provider TEXT NOT NULL,
    env TEXT NOT NULL,
    event_type TEXT,
    strategy_name TEXT,
    strategy_version BIGINT,
    strategy_level TEXT,
    key_value TEXT,
    scope_hash TEXT,
    durable BOOLEAN NOT NULL,
    state TEXT NOT NULL,
    fencing_token BIGINT NOT NULL,
    lease_until BIGINT,
    holder TEXT,
    discriminants TEXT NOT NULL,
    result TEXT,
    error TEXT,
    authoritative_ref TEXT,
    first_delivery TEXT NOT NULL,
    queue_item_id TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS effects_scope ON effects (scope_hash, created_at);
CREATE INDEX IF NOT EXISTS effects_leases ON effects (lease_until) WHERE state = 'reserved';
CREATE INDEX IF NOT EXISTS effects_released ON effects (created_at) WHERE state = 'released';

CREATE TABLE IF NOT EXISTS effect_index (
    scope_hash TEXT PRIMARY KEY,
    effect_id TEXT NOT NULL,
    expires_at BIGINT
);
CREATE INDEX IF NOT EXISTS effect_index_expiry ON effect_index (expires_at);

CREATE TABLE IF NOT EXISTS links (
    effect_id TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (effect_id, delivery_id, kind)
);
CREATE INDEX IF NOT EXISTS links_delivery ON links (delivery_id);

CREATE TABLE IF NOT EXISTS queue_items (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    provider TEXT NOT NULL,
    env TEXT NOT NULL,
    event_type TEXT,
    strategy_name TEXT,
    strategy_version BIGINT,
    strategy_level TEXT,
    key_value TEXT,
    scope_hash TEXT,
    durable BOOLEAN NOT NULL,
    horizon_ms BIGINT,
    discriminants TEXT NOT NULL,
    existing_effect TEXT,
    first_delivery TEXT,
    differences TEXT NOT NULL,
    existing_result TEXT,
    proposed TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    resolution_outcome TEXT,
    resolution_ref TEXT,
    resolution_note TEXT,
    resolution_by TEXT,
    resolved_at BIGINT,
    resolution_effect TEXT
);
CREATE INDEX IF NOT EXISTS queue_status_created ON queue_items (status, created_at);
CREATE INDEX IF NOT EXISTS queue_delivery ON queue_items (delivery_id);
CREATE INDEX IF NOT EXISTS queue_existing_effect ON queue_items (existing_effect);
"#
    )
}

/// The table that records applied migrations.
pub(crate) const VERSION_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)";

/// PostgreSQL's time partitions (`oncegate partition`, see `partition`): the tables that grow
/// with every delivery, each with the column its ranges are on. A delivery's id is a ULID of
/// its reception time, so a range of ids is a range of time and the primary keys stay as they
/// are. Not a numbered migration: converting a large table is an operator's decision, taken
/// with the owner's privileges, and SQLite has no partitions.
/// The proofs are the journal's own rows since version 14 (`proofs_in_deliveries`).
pub(crate) const PARTITIONED: [(&str, &str); 1] = [("deliveries", "id")];

/// Turns `table` into a table range-partitioned on `column` whose rows so far are its partition
/// `<table>_history` (every id below `first`), plus a default partition for ids past the last
/// day created. `indexes` are the table's own (`pg_indexes`: name and definition, the primary
/// key's excluded), re-created on the partitioned table under their names, so the history's
/// (renamed) indexes are attached to them, not built again.
pub(crate) fn partition_table(
    table: &str,
    column: &str,
    indexes: &[(String, String)],
    first: &str,
) -> Vec<String> {
    let history = format!("{table}_history");
    // A row trigger of the partitioned table is cloned onto each partition, the history's
    // included, which must then not have one of the same name.
    let triggers = if table == "deliveries" {
        late_triggers(table, Dialect::Postgres)
    } else {
        Vec::new()
    };
    let mut sql: Vec<String> = triggers
        .iter()
        .filter_map(|t| t.split_whitespace().nth(2))
        .map(|name| format!("DROP TRIGGER IF EXISTS {name} ON {table}"))
        .collect();
    sql.extend([
        format!("ALTER TABLE {table} RENAME TO {history}"),
        format!("ALTER TABLE {history} RENAME CONSTRAINT {table}_pkey TO {history}_pkey"),
    ]);
    for (name, _) in indexes {
        let renamed = match name.strip_prefix(table) {
            Some(rest) => format!("{history}{rest}"),
            None => format!("{history}_{name}"),
        };
        sql.push(format!("ALTER INDEX {name} RENAME TO {renamed}"));
    }
    sql.push(format!(
        "CREATE TABLE {table} (LIKE {history} INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE ({column})"
    ));
    sql.push(format!(
        "ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY ({column})"
    ));
    // Each definition was read before the rename: it names the table, now the partitioned one.
    sql.extend(indexes.iter().map(|(_, def)| def.clone()));
    sql.extend(triggers);
    sql.push(format!(
        "ALTER TABLE {table} ATTACH PARTITION {history} FOR VALUES FROM (MINVALUE) TO ('{first}')"
    ));
    sql.push(format!(
        "CREATE TABLE {table}_default PARTITION OF {table} DEFAULT"
    ));
    if table == "deliveries" {
        // A view names the table it was made on, which is now the history: made again on the
        // partitioned table.
        sql.push(proofs_view("CREATE OR REPLACE VIEW"));
    }
    sql
}

/// `proofs`, the view of the decided deliveries' proofs (`proofs_in_deliveries`), made by
/// `create` (`CREATE VIEW`, or `CREATE OR REPLACE VIEW`).
fn proofs_view(create: &str) -> String {
    format!(
        "{create} proofs AS SELECT id AS delivery_id, tenant, provider, env, event_type, {} \
         FROM deliveries WHERE decided_at IS NOT NULL",
        proof_columns("")
    )
}

/// The partition of `table` for one day (`name` is `<table>_YYYYMMDD`), its ids from `from` to
/// `to` (the first ids of the day and of the next).
pub(crate) fn day_partition(table: &str, name: &str, from: &str, to: &str) -> String {
    format!("CREATE TABLE IF NOT EXISTS {name} PARTITION OF {table} FOR VALUES FROM ('{from}') TO ('{to}')")
}

/// Removes one day's partition whole: retention in one statement instead of a delete of every
/// row (see `retention`).
pub(crate) fn drop_partition(name: &str) -> String {
    format!("DROP TABLE {name}")
}

/// SQLite migrations, by version.
pub(crate) fn sqlite() -> Vec<(i64, String)> {
    vec![
        (1, tables("BLOB")),
        (2, reconciliation("")),
        (3, V3_BREAKERS.to_owned()),
        (4, format!("{V4_ALIASES}{V4_SHADOWS}")),
        (5, QUEUE_PAGES.to_owned()),
        (6, V6_FORWARDS.to_owned()),
        (7, LEANER_INDEXES.to_owned()),
        (8, SQLITE_CLUSTERED.to_owned()),
        (9, TIME_BY_ID.to_owned()),
        (10, format!("{LINKS_IN_PROOFS}{SQLITE_CLUSTERED_DECISIONS}")),
        (11, report_totals(Dialect::Sqlite)),
        (12, completes_in_place(Dialect::Sqlite)),
        (13, SLOTS_IN_EFFECTS.to_owned()),
        (14, proofs_in_deliveries(Dialect::Sqlite)),
    ]
}

/// PostgreSQL migrations, by version.
pub(crate) fn postgres() -> Vec<(i64, String)> {
    vec![
        (1, tables("BYTEA")),
        (2, reconciliation("IF NOT EXISTS ")),
        (3, V3_BREAKERS.to_owned()),
        (4, format!("{V4_ALIASES}{V4_SHADOWS}")),
        (5, QUEUE_PAGES.to_owned()),
        (6, V6_FORWARDS.to_owned()),
        (7, LEANER_INDEXES.to_owned()),
        // SQLite's version 8 rebuilds two tables as clustered ones; PostgreSQL's heap tables
        // have no such choice, so its version 8 changes nothing.
        (8, "SELECT 1".to_owned()),
        (9, TIME_BY_ID.to_owned()),
        (10, LINKS_IN_PROOFS.to_owned()),
        (11, report_totals(Dialect::Postgres)),
        (12, completes_in_place(Dialect::Postgres)),
        (13, SLOTS_IN_EFFECTS.to_owned()),
        (14, proofs_in_deliveries(Dialect::Postgres)),
    ]
}

/// The columns of a decision's proof in its delivery's row (schema version 14), with their
/// types, in the order the proof's writes bind them (`decision::writes`), after the delivery's
/// id: one list for the migration, the `proofs` view, the writes' empty proof and the archive.
pub(crate) const PROOF_COLUMNS: [(&str, &str); 20] = [
    ("decided_at", "BIGINT"),
    ("strategy_name", "TEXT"),
    ("strategy_version", "BIGINT"),
    ("strategy_level", "TEXT"),
    ("key_value", "TEXT"),
    ("confidence", "TEXT"),
    ("prior", "TEXT"),
    ("transport", "TEXT"),
    ("action", "TEXT"),
    ("layer", "TEXT"),
    ("reason", "TEXT"),
    ("flags", "TEXT"),
    ("rule", "TEXT"),
    ("matrix_version", "BIGINT"),
    ("reference_delivery", "TEXT"),
    ("effect_id", "TEXT"),
    ("queue_item_id", "TEXT"),
    ("differences", "TEXT"),
    ("details", "TEXT"),
    ("link_kind", "TEXT"),
];

/// `PROOF_COLUMNS`' names, each with `prefix`, comma-separated.
fn proof_columns(prefix: &str) -> String {
    PROOF_COLUMNS
        .iter()
        .map(|(name, _)| format!("{prefix}{name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The constraint that refuses a second decision of one delivery: a proof written over
/// another empties `decided_at` (see `decision::writes`), which this forbids. Its name tells a
/// refusal of it from any other (`postgres::sqlstate`).
pub(crate) const DECIDED_ONCE: &str = "deliveries_decided_once";

/// Version 14: a decision's proof is its delivery's own row. The proof's columns join
/// `deliveries`, empty until the delivery is decided: a reception and its decision are one row
/// and one insert (the journal entry written with its proof), where they were two rows, two
/// primary-key entries and two statements. A delivery decided after its entry was written
/// (a shadowed type, a decision missed while the store was down) has its proof written into
/// its row, an update that fails on a row already decided (`DECIDED_ONCE`), as the proof's
/// primary key did. `proofs` remains, as a view of the decided rows, for the readers and for
/// anyone querying the store; its two indexes move to `deliveries`, partial on the rows that
/// have what they index.
///
/// The proofs stored are copied into their deliveries' rows, in the upgrade's transaction,
/// then the table is dropped. A proof's event type is its delivery's from then on (the
/// decision's own, as the proof recorded it; the journal kept the same one, or none). A proof
/// whose delivery row is gone (none should be: purge removes both together) keeps a row of its
/// own, with an empty journal entry (no body hash, no headers, size 0), rather than being lost.
fn proofs_in_deliveries(dialect: Dialect) -> String {
    // A decided row has its proof's time and action; an undecided one neither.
    let once = "(decided_at IS NULL) = (action IS NULL)";
    let mut sql = String::new();
    for (name, kind) in PROOF_COLUMNS {
        // SQLite adds a constraint only with a column.
        let check = match (dialect, name) {
            (Dialect::Sqlite, "action") => format!(" CONSTRAINT {DECIDED_ONCE} CHECK ({once})"),
            _ => String::new(),
        };
        sql.push_str(&format!(
            "ALTER TABLE deliveries ADD COLUMN {name} {kind}{check};\n"
        ));
    }
    sql.push_str(&format!(
        "INSERT INTO deliveries (id, tenant, provider, env, event_type, received_at, size, body_sha256, headers_json) \
         SELECT p.delivery_id, p.tenant, p.provider, p.env, p.event_type, p.decided_at, 0, '', '{{}}' FROM proofs p \
         WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.id = p.delivery_id);\n\
         UPDATE deliveries SET (event_type, {cols}) = \
         (SELECT COALESCE(p.event_type, deliveries.event_type), {p_cols} FROM proofs p WHERE p.delivery_id = deliveries.id) \
         WHERE id IN (SELECT delivery_id FROM proofs);\n",
        cols = proof_columns(""),
        p_cols = proof_columns("p."),
    ));
    if dialect == Dialect::Postgres {
        sql.push_str(&format!(
            "ALTER TABLE deliveries ADD CONSTRAINT {DECIDED_ONCE} CHECK ({once});\n"
        ));
    }
    sql.push_str(&format!(
        "DROP TABLE proofs;\n{};\n\
         CREATE INDEX IF NOT EXISTS deliveries_effect ON deliveries (effect_id) WHERE effect_id IS NOT NULL;\n\
         CREATE INDEX IF NOT EXISTS deliveries_key ON deliveries (key_value) WHERE key_value IS NOT NULL;\n",
        proofs_view("CREATE VIEW")
    ));
    sql
}

/// Version 13: a key's index slot is its effect's own row. Each effect with a key is numbered
/// within its key's scope (`scope_seq`: 1, 2, … in the order they were made, unique with the
/// scope hash), and the effect that holds the key's slot says so itself (`indexed`, until
/// `index_expires_at`; `NULL`: for good). A reservation is then one row, the effect, written
/// with the number after the latest its decision's view saw: two decisions reserving one key
/// from the same view make the same number, the unique index keeps the first, and the other
/// is read and decided again, as the slot's own primary key did. The slot's row in
/// `effect_index`, its index entries and the view's join through it are gone from every
/// reservation, and `effects_scope` (the latest effect of a key) is the unique index's prefix.
/// Measured in two alternating pairs of the load bench (`docs/performance.md`): PostgreSQL's
/// CPU per decision 1.57–1.59× → 1.38–1.48× the hand-made endpoint's, SQLite's bytes written
/// per decision 62.3 → 51.8 KiB.
///
/// The slots written before this version stay in `effect_index`, read by the view as before
/// and purged when they expire: nothing is moved, so no slot can be lost on the way, and the
/// table empties as its slots expire (a durable slot stays there for good). Numbering the
/// effects already stored rewrites each keyed effect once, in the upgrade's transaction.
const SLOTS_IN_EFFECTS: &str = "\
ALTER TABLE effects ADD COLUMN scope_seq BIGINT;
ALTER TABLE effects ADD COLUMN indexed BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE effects ADD COLUMN index_expires_at BIGINT;
UPDATE effects SET scope_seq = r.n FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY scope_hash ORDER BY created_at, id) AS n \
FROM effects WHERE scope_hash IS NOT NULL) r WHERE effects.id = r.id;
CREATE UNIQUE INDEX IF NOT EXISTS effects_scope_seq ON effects (scope_hash, scope_seq);
DROP INDEX IF EXISTS effects_scope;
";

/// Version 12: a complete that PostgreSQL makes in place (a HOT update: no new index entry, the
/// new version on the same page). A complete changes `state`, `result` and `updated_at`, and
/// PostgreSQL rewrites every index of a row whose update changes a column any index names, in
/// its keys or its predicate: `state` was in the predicates of `effects_leases` (the sweeper's
/// reserved effects) and `effects_released` (the claimers'), so every complete wrote a new
/// tuple and three index entries. Measured in the load bench (`docs/performance.md`): the
/// completes' statement 31–33 → 12–15 µs per decision, PostgreSQL's CPU per decision 9 % less
/// on average over four runs of each.
///
/// - The sweeper reads expired leases from `effects_lease_until`, an index of every effect's
///   `lease_until` (a complete keeps its effect's), in windows: from the bound of its last pass,
///   kept in `sweep_marks` (see `reconciliation::expire_leases`), so each effect's entry is read
///   about once. The first bound is the earliest reserved lease, or now when no effect is
///   reserved; a store without effects has none, and its first pass reads from the start.
/// - The claimers read released effects from `effects_unleased`: a released effect is the only
///   one without a lease (`lease_until IS NULL`), so the effects settled without one before this
///   version are given their settlement's time.
/// - `fillfactor = 80` leaves room on each page for its effects' completes.
///
/// SQLite keeps its partial indexes (it updates only the indexes whose columns change, and has
/// no HOT to gain) and takes the same mark and leases, so both read alike.
fn completes_in_place(dialect: Dialect) -> String {
    let (now, pg) = match dialect {
        Dialect::Sqlite => ("CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)", ""),
        Dialect::Postgres => (
            "(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            "ALTER TABLE effects SET (fillfactor = 80);\n\
             DROP INDEX IF EXISTS effects_leases;\n\
             DROP INDEX IF EXISTS effects_released;\n\
             CREATE INDEX IF NOT EXISTS effects_lease_until ON effects (lease_until);\n\
             CREATE INDEX IF NOT EXISTS effects_unleased ON effects (created_at) WHERE lease_until IS NULL;\n",
        ),
    };
    format!(
        "CREATE TABLE IF NOT EXISTS sweep_marks (name TEXT PRIMARY KEY, at BIGINT NOT NULL);\n\
         INSERT INTO sweep_marks (name, at) \
         SELECT 'leases', COALESCE((SELECT MIN(lease_until) FROM effects WHERE state = 'reserved'), {now}) \
         WHERE EXISTS (SELECT 1 FROM effects) ON CONFLICT (name) DO NOTHING;\n\
         UPDATE effects SET lease_until = updated_at WHERE lease_until IS NULL AND state <> 'released';\n{pg}"
    )
}

/// Version 11: the report's minute totals (see `rollup`). `report_minutes` holds each counted
/// minute's figures per group, `report_rolled` the minutes counted, `report_stale` the minutes
/// a write changed since (with how many writes, so a count never clears a mark it did not
/// see). A write to a row older than `rollup::LATE_MS` marks its minute, from a trigger, so no
/// write path can forget to: a late journal entry, an effect created late, an effect whose
/// state changes late. A proof needs none: only a minute whose deliveries all have one is
/// counted, and a delivery has one proof at most. Retention marks what it removes itself.
fn report_totals(dialect: Dialect) -> String {
    let (clustered, tail) = match dialect {
        Dialect::Sqlite => (" WITHOUT ROWID", String::new()),
        Dialect::Postgres => ("", format!("{PG_STALE_FUNCTIONS}\n")),
    };
    let mut sql = format!(
        "CREATE TABLE IF NOT EXISTS report_minutes (minute BIGINT NOT NULL, tenant TEXT NOT NULL, \
         provider TEXT NOT NULL, env TEXT NOT NULL, event_type TEXT, received BIGINT NOT NULL, \
         rejected BIGINT NOT NULL, processed BIGINT NOT NULL, ignored_transport BIGINT NOT NULL, \
         ignored_effect BIGINT NOT NULL, quarantined BIGINT NOT NULL, reconcile BIGINT NOT NULL, \
         effects_completed BIGINT NOT NULL, effects_failed BIGINT NOT NULL, effects_unknown BIGINT NOT NULL);\n\
         CREATE INDEX IF NOT EXISTS report_minutes_minute ON report_minutes (minute);\n\
         CREATE TABLE IF NOT EXISTS report_rolled (minute BIGINT PRIMARY KEY){clustered};\n\
         CREATE TABLE IF NOT EXISTS report_stale (minute BIGINT PRIMARY KEY, changes BIGINT NOT NULL){clustered};\n{tail}"
    );
    for table in ["deliveries", "effects"] {
        for trigger in late_triggers(table, dialect) {
            sql.push_str(&trigger);
            sql.push_str(";\n");
        }
    }
    sql
}

/// PostgreSQL's trigger functions: the minute of the row's time marked stale.
const PG_STALE_FUNCTIONS: &str = "\
CREATE OR REPLACE FUNCTION report_stale_received() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
INSERT INTO report_stale (minute, changes) VALUES (NEW.received_at / 60000, 1) \
ON CONFLICT (minute) DO UPDATE SET changes = report_stale.changes + 1; RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION report_stale_created() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
INSERT INTO report_stale (minute, changes) VALUES (NEW.created_at / 60000, 1) \
ON CONFLICT (minute) DO UPDATE SET changes = report_stale.changes + 1; RETURN NULL; END $$;";

/// The triggers that mark a minute of the report stale when `table` (`deliveries` or
/// `effects`) is written late (see `report_totals`). The condition reads the database's own
/// clock when the row is written (PostgreSQL's `clock_timestamp()`, not the transaction's
/// start), which is what the count's bound is read against (`rollup`).
pub(crate) fn late_triggers(table: &str, dialect: Dialect) -> Vec<String> {
    let late = crate::rollup::LATE_MS;
    let now = match dialect {
        Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        Dialect::Postgres => "(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    };
    let events: &[(&str, &str, &str)] = match table {
        "deliveries" => &[("deliveries_late", "INSERT", "NEW.received_at")],
        _ => &[
            ("effects_late", "INSERT", "NEW.created_at"),
            ("effects_late_state", "UPDATE OF state", "NEW.created_at"),
        ],
    };
    events
        .iter()
        .map(|(name, event, column)| {
            let changed = if event.starts_with("UPDATE") {
                "NEW.state <> OLD.state AND "
            } else {
                ""
            };
            let when = format!("{changed}{column} < {now} - {late}");
            match dialect {
                Dialect::Sqlite => format!(
                    "CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON {table} WHEN {when} BEGIN \
                     INSERT INTO report_stale (minute, changes) VALUES ({column} / 60000, 1) \
                     ON CONFLICT (minute) DO UPDATE SET changes = changes + 1; END"
                ),
                Dialect::Postgres => {
                    let function = if *column == "NEW.received_at" {
                        "report_stale_received"
                    } else {
                        "report_stale_created"
                    };
                    format!(
                        "CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW WHEN ({when}) \
                         EXECUTE FUNCTION {function}()"
                    )
                }
            }
        })
        .collect()
}

/// Version 10: a decision's link to its effect is a column of its proof, not a row of
/// `links`. The proof already names the effect (`effect_id`, indexed), so the link row and its
/// two index entries repeated it for every decision that reserved, took over or linked an
/// effect. `links` keeps the links made after a decision (a resolution's, a claim's) and every
/// link written before this version: nothing is moved, and an effect's record reads both.
const LINKS_IN_PROOFS: &str = "ALTER TABLE proofs ADD COLUMN link_kind TEXT;\n";

/// Version 10, SQLite only: the proofs and the effects become `WITHOUT ROWID` tables, stored in
/// the B-tree of their primary key, as version 8 did for the index slots and the links. A rowid
/// table with a text primary key is two B-trees (the rows, and the key's unique index), so each
/// decision wrote its proof in two trees, and each reservation and complete its effect in two.
/// Their rows are a few hundred bytes and their ids grow with time (ULIDs), so the rows are
/// appended at the tree's right edge. The journal (`deliveries`) stays a rowid table: it holds
/// the raw bodies, which SQLite advises against storing in a clustered tree.
const SQLITE_CLUSTERED_DECISIONS: &str = "\
CREATE TABLE proofs_v10 (delivery_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, provider TEXT NOT NULL, env TEXT NOT NULL, \
event_type TEXT, decided_at BIGINT NOT NULL, strategy_name TEXT, strategy_version BIGINT, strategy_level TEXT, key_value TEXT, \
confidence TEXT, prior TEXT NOT NULL, transport TEXT NOT NULL, action TEXT NOT NULL, layer TEXT, reason TEXT NOT NULL, \
flags TEXT NOT NULL, rule TEXT NOT NULL, matrix_version BIGINT NOT NULL, reference_delivery TEXT, effect_id TEXT, \
queue_item_id TEXT, differences TEXT NOT NULL, details TEXT NOT NULL, link_kind TEXT) WITHOUT ROWID;
INSERT INTO proofs_v10 SELECT delivery_id, tenant, provider, env, event_type, decided_at, strategy_name, strategy_version, \
strategy_level, key_value, confidence, prior, transport, action, layer, reason, flags, rule, matrix_version, reference_delivery, \
effect_id, queue_item_id, differences, details, link_kind FROM proofs;
DROP TABLE proofs;
ALTER TABLE proofs_v10 RENAME TO proofs;
CREATE INDEX IF NOT EXISTS proofs_effect ON proofs (effect_id);
CREATE INDEX IF NOT EXISTS proofs_key ON proofs (key_value);
CREATE TABLE effects_v10 (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, provider TEXT NOT NULL, env TEXT NOT NULL, event_type TEXT, \
strategy_name TEXT, strategy_version BIGINT, strategy_level TEXT, key_value TEXT, scope_hash TEXT, durable BOOLEAN NOT NULL, \
state TEXT NOT NULL, fencing_token BIGINT NOT NULL, lease_until BIGINT, holder TEXT, discriminants TEXT NOT NULL, result TEXT, \
error TEXT, authoritative_ref TEXT, first_delivery TEXT NOT NULL, queue_item_id TEXT, created_at BIGINT NOT NULL, \
updated_at BIGINT NOT NULL, resource TEXT, critical BOOLEAN NOT NULL DEFAULT TRUE) WITHOUT ROWID;
INSERT INTO effects_v10 SELECT id, tenant, provider, env, event_type, strategy_name, strategy_version, strategy_level, key_value, \
scope_hash, durable, state, fencing_token, lease_until, holder, discriminants, result, error, authoritative_ref, first_delivery, \
queue_item_id, created_at, updated_at, resource, critical FROM effects;
DROP TABLE effects;
ALTER TABLE effects_v10 RENAME TO effects;
CREATE INDEX IF NOT EXISTS effects_scope ON effects (scope_hash, created_at);
CREATE INDEX IF NOT EXISTS effects_leases ON effects (lease_until) WHERE state = 'reserved';
CREATE INDEX IF NOT EXISTS effects_released ON effects (created_at) WHERE state = 'released';
CREATE INDEX IF NOT EXISTS effects_resource ON effects (tenant, provider, env, event_type, resource);
";

/// Version 9: deliveries are found by time through their ids. A delivery's id is a ULID of
/// its reception time, so a range of reception times is a range of ids on the primary key
/// (`codes::delivery_id_floor`), and the two indexes on `received_at` only cost every
/// journaled delivery two index entries more.
const TIME_BY_ID: &str = "\
DROP INDEX IF EXISTS deliveries_received;
DROP INDEX IF EXISTS deliveries_tenant_received;
";

/// Version 8, SQLite only: the index slots and the links become `WITHOUT ROWID` tables, stored
/// in the B-tree of their primary key. A rowid table with a text primary key is two B-trees
/// (the rows, and the key's unique index), so each decision that reserves a key or links a
/// delivery wrote a page in two trees where one does; both tables' rows are a few short
/// columns, the case SQLite recommends clustering for.
const SQLITE_CLUSTERED: &str = "\
CREATE TABLE effect_index_v8 (scope_hash TEXT PRIMARY KEY, effect_id TEXT NOT NULL, expires_at BIGINT) WITHOUT ROWID;
INSERT INTO effect_index_v8 (scope_hash, effect_id, expires_at) SELECT scope_hash, effect_id, expires_at FROM effect_index;
DROP TABLE effect_index;
ALTER TABLE effect_index_v8 RENAME TO effect_index;
CREATE INDEX IF NOT EXISTS effect_index_expires ON effect_index (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE links_v8 (effect_id TEXT NOT NULL, delivery_id TEXT NOT NULL, kind TEXT NOT NULL, at BIGINT NOT NULL, \
PRIMARY KEY (effect_id, delivery_id, kind)) WITHOUT ROWID;
INSERT INTO links_v8 (effect_id, delivery_id, kind, at) SELECT effect_id, delivery_id, kind, at FROM links;
DROP TABLE links;
ALTER TABLE links_v8 RENAME TO links;
CREATE INDEX IF NOT EXISTS links_delivery ON links (delivery_id);
";

/// Version 7: fewer index entries per delivery, and index choices that cannot go wrong.
///
/// - A delivery's transport key is looked up only when it is strong (the decision's view), so
///   only strong keys are indexed, the key first: under a plan made for any value (PostgreSQL's
///   generic plans, made once per connection, possibly while the table is still empty) the
///   `(tenant, …)` index also fitted that look-up and was picked over it, scanning every
///   delivery of the tenant on each decision (measured: 1.9 ms a decision instead of 40 µs
///   after 15 000 deliveries).
/// - Only deliveries with a correlation id, and only index slots with an expiry, are indexed
///   by them: the look-ups by correlation id and the purge of expired slots never ask for the
///   others.
/// - The reconciler's list of open items, in its own order, is read from an index instead of
///   sorting every open item on each pass.
const LEANER_INDEXES: &str = "\
DROP INDEX IF EXISTS deliveries_transport;
CREATE INDEX IF NOT EXISTS deliveries_strong_transport ON deliveries (transport_key, tenant, provider, env) WHERE transport_strength = 'strong';
DROP INDEX IF EXISTS deliveries_correlation;
CREATE INDEX IF NOT EXISTS deliveries_correlation_id ON deliveries (correlation_id) WHERE correlation_id IS NOT NULL;
DROP INDEX IF EXISTS effect_index_expiry;
CREATE INDEX IF NOT EXISTS effect_index_expires ON effect_index (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS queue_reconcile_order ON queue_items ((COALESCE(last_attempt_at, 0)), created_at, id) WHERE kind IN ('reconcile', 'quarantine') AND status = 'open';
";

/// Version 5: the queue listed in its own order whatever the status. `(status, created_at)`
/// serves the open (or resolved) tab; a listing of every status, paged on `(created_at, id)`,
/// otherwise reads and sorts the whole table for each page (measured: a sequential scan of
/// 200 000 items per page on PostgreSQL 15).
const QUEUE_PAGES: &str =
    "CREATE INDEX IF NOT EXISTS queue_created ON queue_items (created_at, id);\n";

/// Version 2: reconciliation. Effects learn their resource and criticality (what the
/// reconciler matches on, and what an expired lease turns into); queue items keep their last
/// reconciliation attempt and the evidence of their resolution; the invisible-losses sweep
/// keeps the authority operations it found without a local effect.
///
/// SQLite has no `ADD COLUMN IF NOT EXISTS`, but the whole migration runs in the same
/// transaction as its `schema_version` row, so it is applied exactly once. PostgreSQL (and
/// CockroachDB / YugabyteDB) get `if_not_exists`, so a migration racing a sibling instance is
/// harmless. Existing effects read as critical: an old reservation that expires is verified,
/// never re-run.
fn reconciliation(if_not_exists: &str) -> String {
    let add = |table: &str, column: &str| {
        format!("ALTER TABLE {table} ADD COLUMN {if_not_exists}{column};\n")
    };
    let mut sql = String::new();
    for (table, column) in [
        ("effects", "resource TEXT"),
        ("effects", "critical BOOLEAN NOT NULL DEFAULT TRUE"),
        ("queue_items", "resource TEXT"),
        ("queue_items", "critical BOOLEAN NOT NULL DEFAULT TRUE"),
        ("queue_items", "attempts BIGINT NOT NULL DEFAULT 0"),
        ("queue_items", "last_attempt_at BIGINT"),
        ("queue_items", "last_error TEXT"),
        ("queue_items", "last_evidence TEXT"),
        ("queue_items", "resolution_evidence TEXT"),
    ] {
        sql.push_str(&add(table, column));
    }
    sql.push_str(
        r#"
CREATE INDEX IF NOT EXISTS effects_resource ON effects (tenant, provider, env, event_type, resource);
CREATE TABLE IF NOT EXISTS missing_operations (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    provider TEXT NOT NULL,
    env TEXT NOT NULL,
    event_type TEXT NOT NULL,
    resource TEXT NOT NULL,
    reference TEXT NOT NULL,
    discriminants TEXT NOT NULL,
    first_seen_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    settled_at BIGINT
);
CREATE INDEX IF NOT EXISTS missing_operations_seen ON missing_operations (first_seen_at);
"#,
    );
    sql
}

/// The tables of schema version 3. Plain types, composite primary keys, no foreign keys: what
/// SQLite, PostgreSQL, CockroachDB and YugabyteDB all accept.
const V3_BREAKERS: &str = r#"
CREATE TABLE IF NOT EXISTS breaker_counts (
    provider TEXT NOT NULL,
    env TEXT NOT NULL,
    event_type TEXT NOT NULL,
    strategy_name TEXT NOT NULL,
    strategy_version BIGINT NOT NULL,
    bucket BIGINT NOT NULL,
    matches BIGINT NOT NULL,
    collisions BIGINT NOT NULL,
    PRIMARY KEY (provider, env, event_type, strategy_name, strategy_version, bucket)
);
CREATE INDEX IF NOT EXISTS breaker_counts_bucket ON breaker_counts (bucket);

CREATE TABLE IF NOT EXISTS breakers (
    provider TEXT NOT NULL,
    env TEXT NOT NULL,
    event_type TEXT NOT NULL,
    strategy_name TEXT NOT NULL,
    strategy_version BIGINT NOT NULL,
    state TEXT NOT NULL,
    opened_at BIGINT,
    reason TEXT,
    opened_matches BIGINT,
    opened_collisions BIGINT,
    closed_at BIGINT,
    closed_by TEXT,
    note TEXT,
    PRIMARY KEY (provider, env, event_type, strategy_name, strategy_version)
);
"#;

/// Schema version 4: the alias table. Identical for both backends.
const V4_ALIASES: &str = r#"
CREATE TABLE IF NOT EXISTS effect_aliases (
    alias_hash TEXT PRIMARY KEY,
    effect_id TEXT NOT NULL,
    strategy_name TEXT NOT NULL,
    strategy_version BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS effect_aliases_effect ON effect_aliases (effect_id);
"#;

/// Schema version 4's shadow tables (shipped with the aliases, the same version).
const V4_SHADOWS: &str = r#"
CREATE TABLE IF NOT EXISTS shadow_index (
    scope_hash TEXT PRIMARY KEY,
    first_delivery TEXT NOT NULL,
    discriminants TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT
);
CREATE TABLE IF NOT EXISTS shadow_disagreements (
    delivery_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    provider TEXT NOT NULL,
    env TEXT NOT NULL,
    event_type TEXT NOT NULL,
    strategy_name TEXT NOT NULL,
    strategy_version BIGINT NOT NULL,
    shadow_action TEXT NOT NULL,
    actual_action TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (delivery_id, strategy_name, strategy_version)
);
CREATE INDEX IF NOT EXISTS shadow_disagreements_at ON shadow_disagreements (at);
"#;

/// Schema v6: the forwards and their attempts.
const V6_FORWARDS: &str = r#"
CREATE TABLE IF NOT EXISTS forwards (
    effect_id TEXT PRIMARY KEY,
    delivery_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    provider TEXT NOT NULL,
    env TEXT NOT NULL,
    event_type TEXT,
    fencing_token BIGINT NOT NULL,
    series BIGINT NOT NULL,
    attempts BIGINT NOT NULL,
    state TEXT NOT NULL,
    due_at BIGINT NOT NULL,
    deadline BIGINT,
    last_status BIGINT,
    last_error TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS forwards_due ON forwards (due_at) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS forwards_sending ON forwards (deadline) WHERE state = 'sending';
CREATE INDEX IF NOT EXISTS forwards_state ON forwards (state, updated_at);
CREATE TABLE IF NOT EXISTS forward_attempts (
    effect_id TEXT NOT NULL,
    series BIGINT NOT NULL,
    attempt BIGINT NOT NULL,
    delivery_id TEXT NOT NULL,
    fencing_token BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    ended_at BIGINT,
    status BIGINT,
    latency_ms BIGINT,
    outcome TEXT,
    error TEXT,
    PRIMARY KEY (effect_id, series, attempt)
);
"#;

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    /// The store's DDL is written here and nowhere else: a table or index created, altered or
    /// dropped by another module would be a schema change no migration records.
    #[test]
    fn every_statement_of_ddl_is_a_migration_here() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![src];
        let mut found = Vec::new();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.file_name().is_some_and(|n| n == "schema.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for (n, line) in text.lines().enumerate() {
                    let code = line.trim_start();
                    if code.starts_with("//") {
                        continue;
                    }
                    for ddl in [
                        "CREATE TABLE",
                        "CREATE INDEX",
                        "CREATE UNIQUE INDEX",
                        "ALTER TABLE",
                        "DROP TABLE",
                        "DROP INDEX",
                    ] {
                        if code.contains(ddl) {
                            found.push(format!("{}:{}: {code}", path.display(), n + 1));
                        }
                    }
                }
            }
        }
        assert!(found.is_empty(), "DDL outside the migrations: {found:#?}");
    }

    /// A SQLite database migrated to the version before `version`, and `version`'s migration.
    fn just_before(version: i64) -> (Connection, String) {
        let conn = Connection::open_in_memory().unwrap();
        let mut next = None;
        for (v, sql) in super::sqlite() {
            if v < version {
                conn.execute_batch(&sql).unwrap();
            } else if v == version {
                next = Some(sql);
            }
        }
        (conn, next.expect("the version has a migration"))
    }

    fn count(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// Each table is stored in its primary key's B-tree, and each index is there.
    fn assert_clustered(conn: &Connection, tables: &[&str], indexes: &[&str]) {
        for table in tables {
            let sql: String = conn
                .query_row(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [table],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(sql.ends_with("WITHOUT ROWID"), "{table}: {sql}");
        }
        for index in indexes {
            let sql = format!(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = '{index}'"
            );
            assert_eq!(count(conn, &sql), 1, "{index}");
        }
    }

    /// Version 8 rebuilds two tables that hold every live key and every link: a database at
    /// version 7 keeps each row, and the tables come out clustered with their indexes.
    #[test]
    fn sqlite_version_8_keeps_every_slot_and_link() {
        let (conn, v8) = just_before(8);
        conn.execute_batch(
            "INSERT INTO effect_index VALUES ('h1', 'eff_1', NULL), ('h2', 'eff_2', 1700000000000), ('h3', 'eff_3', NULL);
             INSERT INTO links VALUES ('eff_1', 'dlv_1', 'reserved', 1), ('eff_1', 'dlv_2', 'retry', 2),
                                      ('eff_2', 'dlv_3', 'reserved', 3), ('eff_3', 'dlv_4', 'reserved', 4);",
        )
        .unwrap();
        conn.execute_batch(&v8).unwrap();

        assert_eq!(count(&conn, "SELECT COUNT(*) FROM effect_index"), 3);
        assert_eq!(count(&conn, "SELECT COUNT(*) FROM links"), 4);
        let expiring: (String, i64) = conn
            .query_row(
                "SELECT effect_id, expires_at FROM effect_index WHERE scope_hash = 'h2'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(expiring, ("eff_2".to_owned(), 1_700_000_000_000));
        assert_eq!(
            count(&conn, "SELECT COUNT(*) FROM links WHERE delivery_id = 'dlv_2' AND kind = 'retry' AND at = 2"),
            1
        );
        assert_clustered(
            &conn,
            &["effect_index", "links"],
            &["effect_index_expires", "links_delivery"],
        );
        // The unique keys still decide: a second slot for a live key is refused.
        assert!(conn
            .execute("INSERT INTO effect_index VALUES ('h1', 'eff_9', NULL)", [])
            .is_err());
    }

    /// Version 13 numbers every keyed effect within its key's scope in the order they were
    /// made, leaves the effects without a key unnumbered, and keeps every slot of
    /// `effect_index` where it was; a second effect of a number is refused.
    /// Version 14 writes each proof into its delivery's row and keeps `proofs` as their view:
    /// every column reads as it did, a delivery not decided has no proof, a proof whose
    /// delivery row was gone keeps a row of its own, and a row refuses a second proof.
    #[test]
    fn sqlite_version_14_moves_each_proof_into_its_delivery_row() {
        let (conn, v14) = just_before(14);
        let delivery = |id: &str, event_type: &str| {
            format!(
                "INSERT INTO deliveries (id, tenant, provider, env, event_type, received_at, size, body_sha256, headers_json) \
                 VALUES ('{id}', 'acme', 'payflow', 'live', {event_type}, 5, 10, 'h', '{{}}');"
            )
        };
        let proof = |id: &str, action: &str, effect: &str| {
            format!(
                "INSERT INTO proofs (delivery_id, tenant, provider, env, event_type, decided_at, strategy_name, \
                 strategy_version, strategy_level, key_value, confidence, prior, transport, action, layer, reason, flags, \
                 rule, matrix_version, reference_delivery, effect_id, queue_item_id, differences, details, link_kind) \
                 VALUES ('{id}', 'acme', 'payflow', 'live', 'payment.captured', 7, 'ref', 2, 'business_ref', 'k1', 'strong', \
                 'none', 'none', '{action}', 'effect', 'why', '[\"f\"]', 'R1', 1, 'dlv_0', {effect}, NULL, '[]', '{{\"d\":1}}', 'reserved');"
            )
        };
        conn.execute_batch(
            &[
                delivery("dlv_1", "NULL"),
                delivery("dlv_2", "'payment.captured'"),
                proof("dlv_1", "process", "'eff_1'"),
                proof("dlv_3", "ignore", "NULL"),
            ]
            .concat(),
        )
        .unwrap();
        // Every proof as it reads, cell by cell.
        let proofs = |conn: &Connection| -> Vec<Vec<rusqlite::types::Value>> {
            let mut stmt = conn
                .prepare("SELECT * FROM proofs ORDER BY delivery_id")
                .unwrap();
            let n = stmt.column_count();
            stmt.query_map([], |r| (0..n).map(|i| r.get(i)).collect())
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        let before = proofs(&conn);
        conn.execute_batch(&v14).unwrap();
        let after = proofs(&conn);
        assert_eq!(after, before, "every proof reads as it did");
        assert_eq!(count(&conn, "SELECT COUNT(*) FROM deliveries"), 3);
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM deliveries WHERE decided_at IS NULL"
            ),
            1,
            "dlv_2 is not decided"
        );
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM deliveries WHERE id = 'dlv_1' AND event_type = 'payment.captured'"
            ),
            1,
            "the journal takes its proof's event type"
        );
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM deliveries WHERE id = 'dlv_3' AND size = 0 AND body_sha256 = '' AND received_at = 7"
            ),
            1,
            "a proof without its delivery keeps an empty entry"
        );
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'proofs'"
            ),
            0
        );
        for index in ["deliveries_effect", "deliveries_key"] {
            assert_eq!(
                count(
                    &conn,
                    &format!("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = '{index}'")
                ),
                1,
                "{index}"
            );
        }
        // A second proof of dlv_1 empties its time, which the row refuses.
        let twice = conn.execute_batch(
            "UPDATE deliveries SET decided_at = CASE WHEN decided_at IS NULL THEN 9 END, action = 'ignore' WHERE id = 'dlv_1'",
        );
        let e = twice.expect_err("a second proof is refused").to_string();
        assert!(e.contains(super::DECIDED_ONCE), "{e}");
        conn.execute_batch(
            "UPDATE deliveries SET decided_at = CASE WHEN decided_at IS NULL THEN 9 END, action = 'ignore' WHERE id = 'dlv_2'",
        )
        .expect("a first proof is written");
    }

    #[test]
    fn sqlite_version_13_numbers_the_effects_of_each_key_and_keeps_the_slots() {
        let (conn, v13) = just_before(13);
        let effect = |id: &str, hash: &str, at: i64| {
            format!(
                "INSERT INTO effects (id, tenant, provider, env, scope_hash, durable, state, fencing_token, \
                 lease_until, discriminants, first_delivery, created_at, updated_at) \
                 VALUES ('{id}', 'acme', 'payflow', 'live', {hash}, 0, 'completed', 1, {at}, '{{}}', 'dlv_{id}', {at}, {at});"
            )
        };
        conn.execute_batch(
            &[
                effect("eff_b", "'h1'", 5),
                effect("eff_a", "'h1'", 9),
                effect("eff_c", "'h2'", 7),
                effect("eff_d", "NULL", 8),
                "INSERT INTO effect_index VALUES ('h1', 'eff_b', NULL);".to_owned(),
            ]
            .concat(),
        )
        .unwrap();
        conn.execute_batch(&v13).unwrap();
        let seq = |id: &str| {
            count(
                &conn,
                &format!("SELECT COALESCE(scope_seq, -1) FROM effects WHERE id = '{id}'"),
            )
        };
        assert_eq!(
            [seq("eff_b"), seq("eff_a"), seq("eff_c"), seq("eff_d")],
            [1, 2, 1, -1]
        );
        assert_eq!(
            count(&conn, "SELECT COUNT(*) FROM effects WHERE indexed"),
            0
        );
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM effect_index WHERE effect_id = 'eff_b'"
            ),
            1
        );
        assert!(conn
            .execute_batch(
                &effect("eff_e", "'h1'", 10)
                    .replace(
                        "created_at, updated_at)",
                        "created_at, updated_at, scope_seq)"
                    )
                    .replace("10, 10);", "10, 10, 2);")
            )
            .is_err());
    }

    /// Version 12 starts the lease sweeper's bound at the earliest reserved lease (so a pass
    /// after the upgrade still reads every expired one), and gives each effect settled without a
    /// lease its settlement's time, so a released effect is the only one without a lease.
    #[test]
    fn sqlite_version_12_bounds_the_sweep_at_the_earliest_reserved_lease() {
        let (conn, v12) = just_before(12);
        let fresh = Connection::open_in_memory().unwrap();
        for (_, sql) in super::sqlite() {
            fresh.execute_batch(&sql).unwrap();
        }
        // A store without effects has no bound: its first pass reads from the start.
        assert_eq!(count(&fresh, "SELECT COUNT(*) FROM sweep_marks"), 0);
        let effect = |id: &str, state: &str, lease: &str, at: i64| {
            format!(
                "INSERT INTO effects (id, tenant, provider, env, durable, state, fencing_token, lease_until, \
                 discriminants, first_delivery, created_at, updated_at) \
                 VALUES ('{id}', 'acme', 'payflow', 'live', 0, '{state}', 1, {lease}, '{{}}', 'dlv_{id}', {at}, {at});"
            )
        };
        conn.execute_batch(
            &[
                effect("eff_1", "reserved", "500", 1),
                effect("eff_2", "reserved", "300", 2),
                effect("eff_3", "completed", "NULL", 3),
                effect("eff_4", "released", "NULL", 4),
                effect("eff_5", "completed", "200", 5),
            ]
            .concat(),
        )
        .unwrap();
        conn.execute_batch(&v12).unwrap();
        assert_eq!(
            count(&conn, "SELECT at FROM sweep_marks WHERE name = 'leases'"),
            300
        );
        assert_eq!(
            count(&conn, "SELECT lease_until FROM effects WHERE id = 'eff_3'"),
            3
        );
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM effects WHERE lease_until IS NULL"
            ),
            1
        );
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM effects WHERE id = 'eff_4' AND lease_until IS NULL"
            ),
            1
        );
    }

    /// Version 10 rebuilds the proofs and the effects: a database at version 9 keeps every
    /// row, column by column, the links written before it stay where they were, and both tables
    /// come out clustered with their indexes.
    #[test]
    fn sqlite_version_10_keeps_every_proof_and_effect() {
        let (conn, v10) = just_before(10);
        conn.execute_batch(
            "INSERT INTO effects (id, tenant, provider, env, event_type, strategy_name, strategy_version, strategy_level, \
               key_value, scope_hash, durable, state, fencing_token, lease_until, holder, discriminants, result, error, \
               authoritative_ref, first_delivery, queue_item_id, created_at, updated_at, resource, critical) \
             VALUES ('eff_1', 'acme', 'payflow', 'live', 'refund.created', 'business_ref', 2, 'business_ref', 'rf_1', 'h1', 1, \
               'completed', 3, NULL, 'w1', '{\"amount\":\"10\"}', '{\"ok\":true}', NULL, NULL, 'dlv_1', NULL, 5, 6, 'ch_1', 0), \
               ('eff_2', 'acme', 'payflow', 'live', NULL, NULL, NULL, NULL, NULL, NULL, 0, 'reserved', 1, 99, NULL, '{}', NULL, \
               NULL, NULL, 'dlv_2', NULL, 7, 7, NULL, 1);
             INSERT INTO proofs (delivery_id, tenant, provider, env, event_type, decided_at, strategy_name, strategy_version, \
               strategy_level, key_value, confidence, prior, transport, action, layer, reason, flags, rule, matrix_version, \
               reference_delivery, effect_id, queue_item_id, differences, details) \
             VALUES ('dlv_1', 'acme', 'payflow', 'live', 'refund.created', 5, 'business_ref', 2, 'business_ref', 'rf_1', 'high', \
               'none', 'none', 'process', 'effect', 'new', '[]', 'R1', 3, NULL, 'eff_1', NULL, '[]', '{\"v\":1}');
             INSERT INTO links VALUES ('eff_1', 'dlv_1', 'reserved', 5);",
        )
        .unwrap();
        conn.execute_batch(&v10).unwrap();

        let effect: (String, i64, Option<String>, String, String, i64) = conn
            .query_row(
                "SELECT state, fencing_token, holder, discriminants, resource, critical FROM effects WHERE id = 'eff_1'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
            )
            .unwrap();
        assert_eq!(
            effect,
            (
                "completed".into(),
                3,
                Some("w1".into()),
                "{\"amount\":\"10\"}".into(),
                "ch_1".into(),
                0
            )
        );
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM effects WHERE state = 'reserved' AND lease_until = 99"
            ),
            1
        );
        let proof: (String, String, i64, Option<String>) = conn
            .query_row(
                "SELECT effect_id, details, matrix_version, link_kind FROM proofs WHERE delivery_id = 'dlv_1'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(proof, ("eff_1".into(), "{\"v\":1}".into(), 3, None));
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM links WHERE effect_id = 'eff_1'"
            ),
            1
        );
        assert_clustered(
            &conn,
            &["proofs", "effects"],
            &[
                "proofs_effect",
                "proofs_key",
                "effects_scope",
                "effects_leases",
                "effects_released",
                "effects_resource",
            ],
        );
        // The primary keys still decide: a second proof of a delivery is refused.
        assert!(conn
            .execute(
                "INSERT INTO proofs (delivery_id, tenant, provider, env, decided_at, prior, transport, action, reason, \
                 flags, rule, matrix_version, differences, details) \
                 VALUES ('dlv_1', 'acme', 'payflow', 'live', 9, 'none', 'none', 'process', 'new', '[]', 'R1', 3, '[]', '{}')",
                [],
            )
            .is_err());
    }
}
