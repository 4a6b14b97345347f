//! The deployment guide's least privileges on PostgreSQL: once the migrations ran as the
//! tables' owner, an instance connected as a role that may only read and write them (no DDL,
//! no CREATE on the schema) opens the store and does its whole job, on a store the owner
//! partitioned by day too (its purge deletes the rows of days it may not drop, and it leaves
//! the days ahead to the owner), and counts the report's totals.

use oncegate_core::matrix::{Action, Confidence};
use oncegate_store::testing::{pg_admin, TestDatabase};
use oncegate_store::{
    DecideRequest, EffectKey, Horizon, NewReception, PurgePolicy, StrategyRef, TenantFilter,
};
use time::{Duration, OffsetDateTime};

/// The URL with another user.
fn as_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let rest = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}@{rest}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_instances_need_only_read_and_write_privileges() {
    let db = TestDatabase::postgres("oncegate_priv").await;
    let (admin, name) = db.admin.clone().unwrap();
    let role = format!("{name}_app");
    let server = pg_admin(&admin).await;
    server
        .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
        .await
        .unwrap();
    // The guide's grants, given before the owner's migrations create the tables.
    pg_admin(&db.url)
        .await
        .batch_execute(&format!(
            "REVOKE ALL ON SCHEMA public FROM PUBLIC; GRANT USAGE ON SCHEMA public TO {role}; \
             ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role};"
        ))
        .await
        .unwrap();
    let now = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
    let owner = oncegate_store::open(&db.url)
        .await
        .expect("the owner migrates");
    let days = owner
        .partition(10, now - Duration::days(5))
        .await
        .expect("the owner partitions");
    assert!(days.converted && !days.created.is_empty());
    drop(owner);

    let store = oncegate_store::open(&as_user(&db.url, &role))
        .await
        .expect("the traffic role opens an up-to-date store without DDL");
    let id = store
        .journal(NewReception {
            tenant: "acme".into(),
            provider: "pay".into(),
            env: "live".into(),
            event_type: Some("payment.captured".into()),
            received_at: now,
            size: 2,
            body_sha256: "h".into(),
            headers_json: "{}".into(),
            payload: Some(b"{}".to_vec()),
            transport_key: None,
            correlation_id: None,
        })
        .await
        .unwrap();
    let outcome = store
        .decide(
            DecideRequest {
                delivery: id,
                event_type: Some("payment.captured".into()),
                key: Some(EffectKey {
                    strategy: StrategyRef {
                        name: "capture-id".into(),
                        version: 1,
                        level: "business_ref".into(),
                    },
                    value: "k".into(),
                    scope: Default::default(),
                    confidence: Confidence::Strong,
                    horizon: Horizon::For(Duration::hours(1)),
                    discriminants: Default::default(),
                }),
                lease: Duration::seconds(30),
                details_json: "{}".into(),
                now,
                resource: None,
                critical: true,
            },
            &crate::harness::strong_critical,
        )
        .await
        .unwrap();
    assert_eq!(outcome.decision.action, Action::Process);
    let r = outcome.reservation.unwrap();
    store
        .complete(&r.effect, r.fencing_token, "{}", now)
        .await
        .unwrap();
    store.expire_leases(now).await.unwrap();
    store
        .purge(
            &PurgePolicy {
                payload_retention: Duration::hours(1),
                proof_retention: Duration::days(1),
            },
            now + Duration::days(3),
            false,
        )
        .await
        .expect("the purge needs DELETE only");
    let ahead = store
        .extend_partitions(30, now)
        .await
        .expect("the days ahead are the owner's to create, not an error");
    assert!(ahead.created.is_empty(), "{ahead:?}");
    // Its writes dated in the past marked their minutes from the triggers (as this role), and
    // it counts the report's totals: an advisory lock, its own transaction id, the tables.
    // The purge removed every row, so what is left to count is the minute it marked.
    let counted = crate::totals::roll_up(&store).await;
    assert_eq!(counted.recounted, 1, "{counted:?}");
    store.report(&TenantFilter::All, now).await.unwrap();
    drop(store);

    db.cleanup().await;
    server
        .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
        .await
        .unwrap();
}
