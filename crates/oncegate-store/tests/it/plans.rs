//! The plans PostgreSQL makes for the batches' statements under the generic plans they run with
//! (`plan_cache_mode = force_generic_plan`), on a table whose statistics would tempt it away
//! from the primary key.

use crate::harness::Backend;

/// EXPLAIN of `sql` prepared under a generic plan, with `args` (SQL literals) as its values.
async fn generic_plan(admin: &tokio_postgres::Client, sql: &str, args: &str) -> String {
    admin
        .batch_execute(&format!(
            "SET plan_cache_mode = force_generic_plan; DEALLOCATE ALL; PREPARE s AS {sql}"
        ))
        .await
        .expect("prepare");
    let rows = admin
        .simple_query(&format!("EXPLAIN EXECUTE s({args})"))
        .await
        .expect("explain");
    rows.iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A batch's complete finds each effect by its primary key, even when so few effects are
/// reserved that the `effects_leases` partial index (reserved effects by lease) looks cheaper
/// to scan whole: with many leases live, that scan would read every one of them per batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_complete_finds_its_effects_by_primary_key() {
    let b = Backend::postgres().await;
    drop(b.open().await); // the schema
    let admin = oncegate_store::testing::pg_admin(&b.url).await;
    admin
        .batch_execute(
            "INSERT INTO effects (id, tenant, provider, env, scope_hash, durable, state, fencing_token, \
             lease_until, discriminants, first_delivery, created_at, updated_at) \
             SELECT 'eff_' || lpad(g::text, 10, '0'), 'acme', 'p', 'live', md5(g::text), false, \
             CASE WHEN g % 1000 = 0 THEN 'reserved' ELSE 'completed' END, 1, 1700000000000 + g, '{}', \
             'dlv_' || g, 1700000000000 + g, 1700000000000 + g FROM generate_series(1, 20000) g; \
             ANALYZE effects",
        )
        .await
        .expect("seed the effects");
    let plan = generic_plan(
        &admin,
        &oncegate_store::testing::pg_batch_complete_sql(),
        "'{eff_0000001000,eff_0000002000}', '{1,1}', '{1700000000000,1700000000000}', '{a,b}', '{0,1}'",
    )
    .await;
    assert!(plan.contains("effects_pkey"), "{plan}");
    assert!(!plan.contains("effects_leases"), "{plan}");
    drop(admin);
    b.cleanup().await;
}
