//! The storage conformance suite: every scenario runs unchanged against SQLite and PostgreSQL.
//!
//! Decisions use the real decision matrix of `oncegate-core`, fed from the store's view, so
//! the suite checks the store the way the service will use it. Time is passed in, never read.

mod harness;
mod scenarios;

/// Instantiates each scenario once per backend, as `sqlite::<name>` and `postgres::<name>`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let backend = crate::harness::Backend::sqlite().await;
                    crate::scenarios::$name(&backend).await;
                    backend.cleanup().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let backend = crate::harness::Backend::postgres().await;
                    crate::scenarios::$name(&backend).await;
                    backend.cleanup().await;
                }
            )*
        }
    };
}

conformance!(
    journal_and_read_back,
    racing_reservations_have_exactly_one_winner,
    stale_tokens_are_refused,
    a_retryable_failure_is_taken_over_with_the_next_token,
    an_expired_lease_reads_as_unknown_and_is_never_rerun_blindly,
    two_claimers_never_get_the_same_work,
    purge_keeps_proofs_and_durable_identities,
    past_the_horizon_the_key_reads_as_purged,
    acknowledged_writes_survive_reopening,
    a_store_that_is_down_is_unavailable,
    a_database_that_goes_away_makes_every_call_unavailable,
    a_newer_schema_is_refused,
    report_explains_every_delivery,
    queue_resolution_releases_or_links,
    listings_respect_the_tenant_filter,
    transport_retries_and_reused_ids,
    possible_duplicates_get_their_own_effect,
    misuse_gets_typed_errors,
);
