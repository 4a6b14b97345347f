//! The storage conformance suite: every scenario runs unchanged against SQLite, PostgreSQL, and
//! PostgreSQL with every transaction serializable (as CockroachDB and YugabyteDB run).
//!
//! Decisions use the real decision matrix of `oncegate-core`, fed from the store's view, so
//! the suite checks the store the way the service will use it. Time is passed in, never read.

mod aliases;
mod archive;
mod batches;
mod checkpoint;
mod forwards;
mod harness;
mod partitions;
mod plans;
mod privileges;
mod queue;
mod reconciliation;
mod rescope;
mod safety;
mod scale;
mod scenarios;
mod shadows;
mod totals;
mod upgrades;

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
        /// The same scenarios with every PostgreSQL transaction serializable.
        mod postgres_serializable {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let backend = crate::harness::Backend::postgres_serializable().await;
                    crate::scenarios::$name(&backend).await;
                    backend.cleanup().await;
                }
            )*
        }
    };
}

conformance!(
    journal_and_read_back,
    delivery_time_ranges_are_exact_to_the_millisecond,
    a_complete_retried_after_its_commit_is_done,
    racing_reservations_have_exactly_one_winner,
    stale_tokens_are_refused,
    a_retryable_failure_is_taken_over_with_the_next_token,
    an_expired_lease_reads_as_unknown_and_is_never_rerun_blindly,
    two_claimers_never_get_the_same_work,
    purge_keeps_proofs_and_durable_identities,
    a_slot_written_before_the_effects_held_them_still_answers,
    past_the_horizon_the_key_reads_as_purged,
    racing_reservations_past_the_horizon_have_exactly_one_winner,
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

/// Like `conformance!`, for the scenarios of another module: instantiates each as
/// `sqlite::<name>` and `postgres::<name>` inside the module it is invoked in.
macro_rules! conformance_of {
    ($module:ident; $($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let backend = crate::harness::Backend::sqlite().await;
                    crate::$module::$name(&backend).await;
                    backend.cleanup().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let backend = crate::harness::Backend::postgres().await;
                    crate::$module::$name(&backend).await;
                    backend.cleanup().await;
                }
            )*
        }
        /// The same scenarios with every PostgreSQL transaction serializable.
        mod postgres_serializable {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let backend = crate::harness::Backend::postgres_serializable().await;
                    crate::$module::$name(&backend).await;
                    backend.cleanup().await;
                }
            )*
        }
    };
}

/// Reconciliation (schema v2), as `reconciliation_on::{sqlite,postgres}::<name>`.
mod reconciliation_on {
    conformance_of!(
        reconciliation;
        effects_are_listed_by_resource,
        expired_leases_verify_critical_and_release_reversible,
        the_lease_sweep_reads_from_its_last_bound,
        attempts_and_evidence_are_recorded,
        a_pass_records_its_attempts_together,
        a_verified_unknown_outcome_is_completed_not_rerun,
        missing_operations_reach_the_report,
        items_that_keep_failing_go_to_the_back,
    );
}

/// The safety nets (schema v3) and report/proof details, as `safety_on::{sqlite,postgres}::<name>`.
mod safety_on {
    conformance_of!(
        safety;
        the_breaker_opens_once_past_the_threshold_and_an_operator_closes_it,
        old_matches_leave_the_breaker_window,
        a_tally_trips_the_breaker_where_one_of_its_matches_would,
        purge_removes_old_breaker_counters,
        a_transport_ignore_points_at_the_effects_first_delivery,
        report_rows_are_per_tenant,
    );
}

/// Archives of a period: export, verify, one delivery read back, as
/// `archive_on::{sqlite,postgres,postgres_serializable}::<name>`.
mod archive_on {
    conformance_of!(
        archive;
        an_archive_holds_every_row_before_its_cut_and_reads_back,
        a_changed_archive_does_not_verify,
    );
}

/// Group commit, as `batches_on::{sqlite,postgres,postgres_serializable}::<name>`.
mod batches_on {
    conformance_of!(
        batches;
        concurrent_callers_share_commits_and_keep_one_winner_per_key,
        a_member_that_fails_fails_alone,
        a_journal_entry_that_fails_fails_alone,
        every_kind_of_decision_shares_a_batch,
        a_reception_is_journaled_with_its_decisions_event_type,
        a_delivery_decided_by_many_callers_at_once_is_decided_once,
        a_call_alone_takes_only_the_round_trips_it_needs,
    );
}

/// Key aliases for a versioned cut-over (schema v4), as `aliases_on::{sqlite,postgres}::<name>`.
mod aliases_on {
    conformance_of!(aliases; an_aliased_key_finds_the_old_effect);
}

/// Shadow strategies' index and disagreements (schema v4), as `shadows_on::{sqlite,postgres}::<name>`.
mod shadows_on {
    conformance_of!(
        shadows;
        a_shadow_key_remembers_its_first_delivery_until_it_expires
    );
}

/// Operation scope and the move of keys written under their event type, as
/// `rescope_on::{sqlite,postgres}::<name>`.
mod rescope_on {
    conformance_of!(
        rescope;
        an_operation_key_is_one_effect_across_types,
        keys_written_under_the_event_type_move_to_the_operation,
    );
}

/// The queue walked by people and consoles: unknown outcomes settled once for every item
/// waiting on them, pages, filters and counts, as `queue_on::{sqlite,postgres}::<name>`.
mod queue_on {
    conformance_of!(
        queue;
        a_verified_effect_settles_every_item_waiting_on_it,
        a_retry_confirmed_duplicate_also_settles_the_verify_item,
        a_verify_item_resolved_distinct_releases_the_same_effect_once,
        a_retry_resolved_distinct_leaves_the_unknown_effect_alone,
        paging_returns_each_item_once_in_order_while_items_arrive,
        paging_backwards_shows_the_same_pages_in_reverse,
        filters_and_counts_narrow_the_queue,
        a_delivery_id_names_its_one_open_item_or_is_ambiguous,
    );
}

/// Gateway mode's forwards and attempts (schema v6), as `forwards_on::{sqlite,postgres}::<name>`.
mod forwards_on {
    conformance_of!(
        forwards;
        attempts_run_one_at_a_time_and_a_2xx_completes,
        a_late_answer_of_an_old_attempt_cannot_complete_a_newer_one,
        an_interrupted_critical_attempt_is_verified_never_resent,
        a_dead_letter_is_resent_with_a_fresh_series,
    );
}

/// The report's minute totals, as `totals_on::{sqlite,postgres,postgres_serializable}::<name>`.
mod totals_on {
    conformance_of!(totals; totals_read_as_the_rows_and_follow_late_writes);
}
