//! The plans PostgreSQL makes for the batches' statements under the settings their transaction
//! runs with (generic plans, made once per connection, and no sequential scans), and for the
//! statements outside batches that find one row by primary key, on tables whose statistics
//! would tempt it away from the primary key: empty, as when a connection makes its plans at
//! start-up, or with few effects reserved.

use crate::harness::Backend;

/// EXPLAIN of `sql` prepared in a transaction that starts with `settings`, with `args` (SQL
/// literals) as its values.
async fn plan_under(
    admin: &tokio_postgres::Client,
    settings: &str,
    sql: &str,
    args: &str,
) -> String {
    admin
        .batch_execute(&format!(
            "DEALLOCATE ALL; BEGIN; {settings}; PREPARE s AS {sql}"
        ))
        .await
        .unwrap_or_else(|e| panic!("prepare {sql}: {e}"));
    let rows = admin
        .simple_query(&if args.is_empty() {
            "EXPLAIN EXECUTE s".to_owned()
        } else {
            format!("EXPLAIN EXECUTE s({args})")
        })
        .await
        .unwrap_or_else(|e| panic!("explain {sql}: {e}"));
    admin.batch_execute("ROLLBACK").await.expect("rollback");
    rows.iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// EXPLAIN of `sql` as a batch plans it, with `args` (SQL literals) as its values.
async fn batch_plan(admin: &tokio_postgres::Client, sql: &str, args: &str) -> String {
    plan_under(admin, oncegate_store::testing::pg_batch_plans(), sql, args).await
}

/// A batch's complete finds each effect by its primary key: on an empty table (a plan made
/// then would scan the whole table for every batch, as it grows), and when so few effects are
/// reserved that an index of the leases looks cheaper to scan (with many leases live, that would
/// read every one of them per batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_complete_finds_its_effects_by_primary_key() {
    let b = Backend::postgres().await;
    drop(b.open().await); // the schema
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    let sql = oncegate_store::testing::pg_batch_complete_sql();
    let args = "'{eff_0000001000,eff_0000002000}', '{1,1}', '{1700000000000,1700000000000}', \
                '{a,b}', '{0,1}'";
    // A batch of one call binds its values, not arrays.
    let one = oncegate_store::testing::pg_batch_complete_one_sql();
    let one_args = "'eff_0000001000', 1, 1700000000000, 'a', 0";
    let empty = batch_plan(&admin, &sql, args).await;
    let one_empty = batch_plan(&admin, &one, one_args).await;
    seed_effects(&admin, 20_000).await;
    let few_reserved = batch_plan(&admin, &sql, args).await;
    let one_few_reserved = batch_plan(&admin, &one, one_args).await;
    for plan in [empty, few_reserved, one_empty, one_few_reserved] {
        assert!(plan.contains("Index Scan using effects_pkey"), "{plan}");
        assert!(!plan.contains("effects_lease_until"), "{plan}");
        assert!(!plan.contains("Seq Scan"), "{plan}");
    }
    drop(admin);
    b.cleanup().await;
}

/// Every statement that finds one row by its primary key and tests the row's state (a
/// reconcile attempt, a resolution, a holder's write, a forward's steps) is planned on that
/// key by a generic plan made while its table is empty, the plan a connection keeps for the
/// statement until the next `ANALYZE`: with the state as an index condition, the plan read
/// every row in that state (every open item, every live lease, every pending forward) per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_by_primary_key_are_planned_on_it_from_an_empty_table() {
    let b = Backend::postgres().await;
    drop(b.open().await); // the schema
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    let statements = oncegate_store::testing::pg_by_key_statements();
    assert!(statements.len() >= 11);
    for (what, sql, args, key) in statements {
        let plan = plan_under(
            &admin,
            "SET LOCAL plan_cache_mode = force_generic_plan",
            &sql,
            args,
        )
        .await;
        assert!(
            plan.contains(&format!("Index Scan using {key}")),
            "{what} is not planned on {key}:\n{sql}\n{plan}"
        );
    }
    drop(admin);
    b.cleanup().await;
}

/// The invisible-losses sweep reads the effects of its window by their ids (an effect's id is
/// a ULID of its creation time), not every effect ever stored: no index leads with the provider
/// and the type it asks for, so without the id range each sweep scanned the whole table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_reads_the_effects_of_its_window_by_id() {
    let b = Backend::postgres().await;
    drop(b.open().await); // the schema
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    let (sql, floor) = oncegate_store::testing::pg_resources_seen();
    // 20,000 effects over 20 days, one an hour-ish, each with a resource.
    let start = time::OffsetDateTime::from_unix_timestamp(1_760_000_000).expect("a time");
    let (mut ids, mut times) = (Vec::new(), Vec::new());
    for i in 0..20_000_i64 {
        let at = start + time::Duration::seconds(i * 86);
        let ms = (at.unix_timestamp_nanos() / 1_000_000) as i64;
        let id = oncegate_core::ids::EffectId::from_u128(((ms as u128) << 80) | i as u128);
        ids.push(id.as_str().to_owned());
        times.push(ms);
    }
    admin
        .execute(
            "INSERT INTO effects (id, tenant, provider, env, event_type, resource, durable, state, fencing_token, \
             discriminants, first_delivery, created_at, updated_at) \
             SELECT i, 'acme', 'payflow', 'live', 'refund.created', 'pay_' || t, false, 'completed', 1, '{}', \
             'dlv_' || t, t, t FROM unnest($1::text[], $2::int8[]) AS s(i, t)",
            &[&ids, &times],
        )
        .await
        .expect("seed the effects");
    admin
        .batch_execute("ANALYZE effects")
        .await
        .expect("analyze");
    let since = start + time::Duration::days(19);
    let ms = (since.unix_timestamp_nanos() / 1_000_000) as i64;
    let args = format!("'payflow', 'refund.created', {ms}, '{}'", floor(since));
    let plan = plan_under(&admin, "SELECT 1", sql, &args).await;
    assert!(plan.contains("effects_pkey"), "{plan}");
    assert!(!plan.contains("Seq Scan on effects"), "{plan}");
    drop(admin);
    b.cleanup().await;
}

/// Seeds `n` effects, one reserved in a thousand and the rest completed, their leases one
/// millisecond apart from 1,700,000,000,000, one in a hundred completed ones released; then
/// `ANALYZE`.
async fn seed_effects(admin: &tokio_postgres::Client, n: i64) {
    admin
        .batch_execute(&format!(
            "INSERT INTO effects (id, tenant, provider, env, scope_hash, durable, state, fencing_token, \
             lease_until, discriminants, first_delivery, created_at, updated_at) \
             SELECT 'eff_' || lpad(g::text, 10, '0'), 'acme', 'p', 'live', md5(g::text), false, \
             CASE WHEN g % 1000 = 0 THEN 'reserved' WHEN g % 100 = 0 THEN 'released' ELSE 'completed' END, 1, \
             CASE WHEN g % 100 = 0 AND g % 1000 <> 0 THEN NULL ELSE 1700000000000 + g END, '{{}}', \
             'dlv_' || g, 1700000000000 + g, 1700000000000 + g FROM generate_series(1, {n}) g; \
             ANALYZE effects"
        ))
        .await
        .expect("seed the effects");
}

/// A complete changes no column any index of `effects` names, in its keys or its predicate
/// (schema v12), so PostgreSQL makes it in place: a HOT update, with no new index entry. Both
/// the batch's complete and the single call's; on the schema before v12, whose partial indexes
/// named `state`, neither was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_is_made_in_place() {
    let b = Backend::postgres().await;
    drop(b.open().await); // the schema
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    seed_effects(&admin, 3000).await;
    // eff_0000001000 and eff_0000002000 are reserved, their leases running at 1,700,000,000,000.
    let batch = oncegate_store::testing::pg_batch_complete_sql();
    let single = oncegate_store::testing::pg_complete_sql();
    for (what, sql, completed) in [
        (
            "the batch's complete",
            format!(
                "PREPARE c AS {batch}; EXECUTE c('{{eff_0000001000}}', '{{1}}', '{{1700000000000}}', '{{\"{{}}\"}}', '{{0}}')"
            ),
            "eff_0000001000",
        ),
        (
            "a single complete",
            format!(
                "PREPARE c AS {single}; EXECUTE c('eff_0000002000', 1, 1700000000000, '{{}}')"
            ),
            "eff_0000002000",
        ),
    ] {
        // The connection's counts not yet reported are read with the transaction's: the
        // difference is this statement's.
        let counts = "SELECT pg_stat_get_xact_tuples_updated('effects'::regclass), \
                      pg_stat_get_xact_tuples_hot_updated('effects'::regclass)";
        admin.batch_execute("BEGIN").await.expect("begin");
        let before = admin.query_one(counts, &[]).await.expect("the counts");
        admin
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let after = admin.query_one(counts, &[]).await.expect("the counts");
        let state: String = admin
            .query_one("SELECT state FROM effects WHERE id = $1", &[&completed])
            .await
            .expect("the effect")
            .get(0);
        admin
            .batch_execute("COMMIT; DEALLOCATE ALL")
            .await
            .expect("commit");
        let updated = after.get::<_, i64>(0) - before.get::<_, i64>(0);
        let hot = after.get::<_, i64>(1) - before.get::<_, i64>(1);
        assert_eq!((updated, state.as_str()), (1, "completed"), "{what}");
        assert_eq!(hot, 1, "{what} was not made in place");
    }
    drop(admin);
    b.cleanup().await;
}

/// The lease sweeper reads its window through `effects_lease_until` (every effect's lease,
/// settled ones included), not every effect stored: on an empty table, as a connection may
/// plan it at start-up, and on 20,000 effects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_sweep_reads_its_window_by_lease() {
    let b = Backend::postgres().await;
    drop(b.open().await); // the schema
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    let generic = "SET LOCAL plan_cache_mode = force_generic_plan";
    let args = "1700000010000, 1700000005000";
    let mut plans = Vec::new();
    for sql in oncegate_store::testing::pg_lease_sweep_statements() {
        plans.push(plan_under(&admin, generic, sql, args).await);
    }
    seed_effects(&admin, 20_000).await;
    for sql in oncegate_store::testing::pg_lease_sweep_statements() {
        plans.push(plan_under(&admin, generic, sql, args).await);
    }
    for plan in plans {
        assert!(plan.contains("effects_lease_until"), "{plan}");
        assert!(!plan.contains("Seq Scan"), "{plan}");
    }
    drop(admin);
    b.cleanup().await;
}

/// The claimers find the oldest released effect through `effects_unleased` (a released effect
/// is the only one without a lease), not by reading every effect stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimers_read_released_effects_by_their_missing_lease() {
    let b = Backend::postgres().await;
    drop(b.open().await); // the schema
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    seed_effects(&admin, 20_000).await;
    let sql = oncegate_store::testing::pg_oldest_released_sql();
    let plan = plan_under(&admin, "SELECT 1", &sql, "").await;
    assert!(plan.contains("effects_unleased"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "{plan}");
    drop(admin);
    b.cleanup().await;
}
