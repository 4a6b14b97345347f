//! The engine's integration tests: the gate and its upkeep over a real store (a temporary
//! SQLite file, a fresh PostgreSQL database), every scenario run on both.

mod catalog;
mod gateway;

/// Instantiates each scenario once per backend, as `sqlite::<name>` and `postgres::<name>`.
macro_rules! both_backends {
    ($($module:ident :: $name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = oncegate_store::testing::TestDatabase::sqlite();
                    crate::$module::$name(&db.url).await;
                    db.cleanup().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = oncegate_store::testing::TestDatabase::postgres("oncegate_gateway").await;
                    crate::$module::$name(&db.url).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}

both_backends!(
    catalog::every_provider_payload_is_decided_as_its_contract_says,
    catalog::every_github_payload_is_decided_as_its_contract_says,
    catalog::ids_reused_across_events_are_collisions_never_ignores,
    gateway::a_destination_down_then_up_gets_it_once,
    gateway::a_destination_slow_past_the_timeout_is_retried_and_completed_once,
    gateway::a_500_then_a_200_completes_with_the_200s_body,
    gateway::a_crash_mid_attempt_verifies_a_critical_effect_and_resends_a_reversible_one,
    gateway::fifty_concurrent_retries_are_forwarded_once,
    gateway::a_dead_letter_is_resent_and_delivered,
    gateway::two_instances_on_one_store_forward_each_effect_once,
);
