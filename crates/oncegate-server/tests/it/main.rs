//! Integration tests of the oncegate service: a real HTTP server on 127.0.0.1:0, driven with
//! `reqwest`, every scenario run unchanged against SQLite and PostgreSQL.

mod auth;
mod batches;
mod console_browser;
mod console_http;
mod console_pages;
mod console_support;
mod data_shapes;
mod deadlines;
mod decisions;
mod effects;
mod gateway;
mod harness;
mod layer;
mod limits;
mod monitoring;
mod network;
mod openapi;
mod operation_scope;
mod operations;
mod queue;
mod reconcile;
mod safety;
mod signatures;
mod tls;
mod vectors;
mod verify;

/// Instantiates each scenario once per backend, as `sqlite::<name>` and `postgres::<name>`.
macro_rules! both_backends {
    ($($module:ident :: $name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    crate::$module::$name(crate::harness::Kind::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    crate::$module::$name(crate::harness::Kind::Postgres).await;
                }
            )*
        }
    };
}

both_backends!(
    batches::a_batch_is_decided_item_by_item_and_answered_as_the_provider_expects,
    gateway::a_forwarded_delivery_is_answered_without_a_token_and_its_dead_letter_resent,
    operations::health_metrics_and_unknown_routes,
    monitoring::alerts_and_dashboard_name_exported_metrics,
    openapi::the_document_describes_exactly_the_routes_served,
    operations::report_gap_is_zero_after_a_mixed_run,
    operations::proofs_show_why_and_guard_the_payload,
    auth::signatures_are_verified_and_failures_journaled,
    auth::tenants_are_isolated,
    auth::roles_guard_the_routes,
    signatures::a_stripe_signed_delivery_is_decided_and_a_refusal_reveals_nothing,
    signatures::every_preset_verifies_rotated_secrets_and_refuses_forgeries_over_http,
    decisions::fifty_identical_deliveries_make_one_effect,
    decisions::a_reencoded_retry_is_ignored_with_the_first_result,
    decisions::the_seed_second_refund_is_reconciled_not_dropped,
    decisions::unknown_types_and_providers_are_reconciled,
    decisions::a_differing_discriminant_is_quarantined,
    effects::effect_outcomes_need_the_current_token,
    effects::an_expired_lease_is_lost_not_rerun,
    limits::json_test_suite_n_files_are_refused_in_the_error_shape,
    limits::body_and_depth_limits_are_enforced,
    limits::shutdown_lets_in_flight_deliveries_finish,
    safety::the_breaker_opens_past_its_threshold_and_closes_only_by_an_operator,
    safety::the_breaker_waits_for_its_minimum_sample,
    safety::concurrent_matches_are_each_counted_once,
    safety::a_late_replay_finds_the_result_through_the_proof,
    safety::a_replay_after_the_payload_purge_asks_for_approval,
    reconcile::the_authority_releases_the_second_refund_and_recognizes_retries,
    reconcile::a_dead_authority_leaves_the_item_open_and_never_slows_ingestion,
    reconcile::the_worker_in_serve_reconciles_and_counts_attempts,
    reconcile::expired_leases_verify_critical_and_release_reversible,
    reconcile::the_sweep_reports_operations_with_no_local_effect,
    reconcile::the_worker_publishes_missing_effects,
    reconcile::a_queued_item_is_attempted_as_soon_as_it_is_queued,
    reconcile::a_woken_pass_attempts_only_the_new_items,
    reconcile::a_collision_is_settled_through_the_authority,
    verify::the_consumer_settles_unknown_outcomes,
    verify::without_a_verifier_an_unknown_outcome_waits_for_a_person,
    verify::a_pass_writes_its_attempts_in_one_transaction,
    operation_scope::the_second_type_of_one_operation_is_ignored_with_the_first_result,
    layer::the_layer_runs_the_handler_once_and_answers_retries_with_its_result,
    layer::a_failing_handler_is_retried_and_a_permanent_failure_is_kept,
    layer::an_outcome_the_store_refuses_is_answered_as_its_error,
    operation_scope::a_differing_discriminant_across_the_two_types_is_quarantined,
    operation_scope::thirty_two_racers_across_the_two_types_make_one_process,
    data_shapes::nul_in_values_and_keys_is_decided_and_provable,
    data_shapes::unclean_path_segments_are_refused_with_400,
    tls::an_https_authority_signed_by_a_private_ca_needs_that_ca,
    deadlines::a_trickled_body_is_answered_408_and_journaled,
    queue::every_listed_item_is_resolvable_by_the_id_it_shows,
    queue::the_queue_pages_filters_and_counts,
    console_http::console_the_session_cookie_is_strict_http_only_and_never_holds_the_token,
    console_http::console_a_session_holds_on_a_sibling_and_dies_with_its_token,
    console_http::console_forms_without_the_session_csrf_token_are_refused,
    console_http::console_a_tenant_restricted_session_never_sees_another_tenant,
    console_http::console_markup_in_stored_values_renders_as_text,
    console_http::console_the_report_page_reads_a_day_unless_asked_for_more,
    console_http::console_the_queue_resolves_in_place_or_by_redirect,
    console_http::console_a_thousand_item_queue_is_paged_and_fast,
    console_browser::console_an_operator_works_the_console_in_a_browser,
    console_pages::console_the_proof_page_shows_what_the_proof_says,
    console_pages::console_deliveries_filter_and_page,
    console_pages::console_an_open_breaker_closes_with_a_note_only,
);

/// The store going away is exercised on PostgreSQL, where it can really go away under a
/// running service (an open SQLite file cannot be taken from its process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_unavailable_answers_503_and_recovers() {
    limits::store_unavailable_answers_503_and_recovers().await;
}

/// A permanent refusal by the database is a 500, on PostgreSQL where a constraint can be
/// added under a running service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_statement_the_database_refuses_is_internal_not_unavailable() {
    limits::a_statement_the_database_refuses_is_internal_not_unavailable().await;
}

/// The queue hint travels between instances on PostgreSQL (LISTEN/NOTIFY).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_sibling_instance_is_woken_by_the_queue_hint() {
    reconcile::a_sibling_instance_is_woken_by_the_queue_hint().await;
}
