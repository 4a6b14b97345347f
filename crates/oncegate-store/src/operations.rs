//! The `Store` calls both backends run the same way, listed once: each call's signature, whether
//! it reads or writes, and the operation that runs it (written once against `sql::Tx`, beside
//! the records it reads or writes). A backend writes its `impl Store` with `store_impl!`, giving
//! the methods where the backends truly differ (the journal, the decision and the complete, SQLite's
//! writer thread against PostgreSQL's batches) and a macro that runs one listed operation its way: SQLite
//! on a reader or in the writer's next batch, PostgreSQL in a transaction of its own, retried.
//!
//! A macro, because the operations are generic over the executor and a generic function cannot
//! be passed as a value; and the list is expanded inside the macro that writes the `impl`,
//! because `async_trait` must see every method of it.

/// Writes `impl Store for $backend`: the methods in braces, then one per call of the list. The
/// `impl` sits in a block that imports the records the list names (`EffectId`, `QueueItem`, …),
/// so the methods in braces name them without importing them.
///
/// Each listed call becomes `$run!(self, read | write, keep, [argument: type, …], operation,
/// [call arguments…])`, with `keep` false only for a purge's dry run, and `operation(tx, call
/// arguments…)` the future to run inside the backend's transaction.
macro_rules! store_impl {
    ($backend:ty, $run:ident, { $($own:tt)* }) => {
        $crate::operations::store_impl! { @list $backend, $run, { $($own)* },
            write fail(
                effect: &EffectId, token: u64, retryable: bool, error: &str, now: OffsetDateTime
            ) -> () = effect::fail(effect, token, retryable, error, now);
            write heartbeat(effect: &EffectId, token: u64, lease: Duration, now: OffsetDateTime)
                -> OffsetDateTime = effect::heartbeat(effect, token, lease, now);
            read delivery(id: &DeliveryId) -> Option<DeliveryRecord> = delivery::read(id);
            read proof(id: &DeliveryId) -> Option<ProofRecord> = decision::proof(id);
            read effect(id: &EffectId) -> Option<EffectRecord> = effect::read(id);
            read effect_tenant(id: &EffectId) -> Option<String> = effect::tenant(id);
            read deliveries(filter: &DeliveryFilter) -> Vec<DeliverySummary>
                = delivery::list(filter);
            read queue_list(filter: &QueueFilter) -> Vec<QueueItem> = queue::list(filter);
            read queue_page(filter: &QueueFilter) -> QueuePage = queue::page(filter);
            read queue_item(id: &QueueItemId) -> Option<QueueItem> = queue::item(id);
            write resolve(item: &QueueItemId, resolution: Resolution) -> QueueItem
                = queue::resolution::resolve(item, &resolution);
            write claim(worker: &str, tenants: &TenantFilter, lease: Duration, now: OffsetDateTime)
                -> Option<Claim> = effect::claim(worker, tenants, lease, now);
            read report(tenants: &TenantFilter, since: OffsetDateTime) -> Report
                = report::build(tenants, since);
            read resource_effects(scope: &ResourceScope) -> Vec<EffectRecord>
                = reconciliation::resource_effects(scope);
            read open_reconcile_items(limit: u32) -> Vec<QueueItem>
                = reconciliation::open_reconcile_items(limit);
            write record_reconcile_attempt(item: &QueueItemId, attempt: ReconcileAttempt)
                -> QueueItem = reconciliation::record_attempt(item, &attempt);
            write resolve_with_evidence(item: &QueueItemId, resolution: Resolution, evidence: &str)
                -> QueueItem = reconciliation::resolve_with_evidence(item, &resolution, evidence);
            write settle_unknown(
                effect: &EffectId, verified: &Verified, resolution: Resolution, evidence: &str
            ) -> Vec<QueueItem>
                = settlement::settle_verified(effect, verified, &resolution, evidence);
            read resources_seen(provider: &str, event_type: &str, since: OffsetDateTime)
                -> Vec<ResourceScope> = reconciliation::resources_seen(provider, event_type, since);
            write record_missing(
                scope: &ResourceScope, missing: &[MissingOperation], now: OffsetDateTime
            ) -> u64 = reconciliation::record_missing(scope, missing, now);
            // A dry run is the same work rolled back, so its counts are exact.
            write(!dry_run) purge(policy: &PurgePolicy, now: OffsetDateTime, dry_run: bool)
                -> PurgeCounts = retention::purge(policy, now);
            write breaker_record(
                scope: &BreakerScope, tally: &BreakerTally, rule: &BreakerRule, now: OffsetDateTime
            ) -> BreakerRecord = breaker::record(scope, tally, rule, now);
            read breaker(scope: &BreakerScope, rule: &BreakerRule, now: OffsetDateTime)
                -> Breaker = breaker::read(scope, rule, now);
            read breakers(rule: &BreakerRule, now: OffsetDateTime) -> Vec<Breaker>
                = breaker::list(rule, now);
            write breaker_close(scope: &BreakerScope, note: &str, by: &str, now: OffsetDateTime)
                -> Breaker = breaker::close(scope, note, by, now);
            read migration_sources() -> Vec<MigrationSource> = alias::migration_sources();
            write record_alias(alias: &NewAlias) -> bool = alias::record_alias(alias);
            write rescope(scopes: &[OperationScope]) -> RescopeCounts = rescope::rescope(scopes);
            // A write: the look-up records the delivery as the shadow key's first when it is.
            write shadow_observe(observation: &ShadowObservation) -> Option<ShadowPrior>
                = shadow::observe(observation);
            write shadow_disagreement(d: &ShadowDisagreement) -> ()
                = shadow::record_disagreement(d);
            read shadow_counts(since: OffsetDateTime) -> Vec<ShadowCount> = shadow::counts(since);
            write forward_enqueue(forward: &NewForward) -> bool = forward::enqueue(forward);
            read forward(effect: &EffectId) -> Option<ForwardRecord> = forward::read(effect);
            read forwards(filter: &ForwardFilter) -> Vec<ForwardRecord> = forward::list(filter);
            read forwards_due(now: OffsetDateTime, limit: u32) -> Vec<ForwardRecord>
                = forward::due(now, limit);
            read forward_next_due() -> Option<OffsetDateTime> = forward::next_due();
            write forward_start(
                effect: &EffectId, token: u64, now: OffsetDateTime, deadline: OffsetDateTime
            ) -> Option<ForwardStart> = forward::start(effect, token, now, deadline);
            write forward_finish(
                effect: &EffectId, token: u64, series: u64, attempt: u64, end: &ForwardEnd
            ) -> ForwardState = forward::finish(effect, token, series, attempt, end);
            write forward_interrupt(effect: &EffectId, token: u64, now: OffsetDateTime) -> bool
                = forward::interrupt(effect, token, now);
            write forward_resend(effect: &EffectId, lease: Duration, now: OffsetDateTime)
                -> ForwardRecord = forward::resend(effect, lease, now);
            write forward_claim(types: &[ForwardType], lease: Duration, now: OffsetDateTime)
                -> Option<ForwardRecord> = forward::claim(types, lease, now);
            read forward_attempts(effect: &EffectId) -> Vec<ForwardAttempt>
                = forward::attempts(effect);
            read forward_counts(tenants: &TenantFilter) -> ForwardCounts
                = forward::counts(tenants);
        }
    };
    (@list $backend:ty, $run:ident, { $($own:tt)* },
     $($mode:ident $(($keep:expr))? $name:ident($($arg:ident: $ty:ty),*) -> $out:ty
        = $($operation:ident)::+($($call:expr),*);)*) => {
        const _: () = {
            use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
            use time::{Duration, OffsetDateTime};
            use $crate::alias::{MigrationSource, NewAlias};
            use $crate::breaker::{Breaker, BreakerRecord, BreakerRule, BreakerScope, BreakerTally};
            use $crate::decision::ProofRecord;
            use $crate::delivery::{
                DeliveryFilter, DeliveryRecord, DeliverySummary, TenantFilter,
            };
            use $crate::effect::{Claim, EffectRecord};
            use $crate::forward::{
                ForwardAttempt, ForwardCounts, ForwardEnd, ForwardFilter, ForwardRecord,
                ForwardStart, ForwardState, ForwardType, NewForward,
            };
            use $crate::queue::{QueueFilter, QueueItem, QueuePage, Resolution};
            use $crate::reconciliation::{MissingOperation, ReconcileAttempt, ResourceScope};
            use $crate::report::Report;
            use $crate::rescope::{OperationScope, RescopeCounts};
            use $crate::retention::{PurgeCounts, PurgePolicy};
            use $crate::settlement::Verified;
            use $crate::shadow::{
                ShadowCount, ShadowDisagreement, ShadowObservation, ShadowPrior,
            };

            #[async_trait::async_trait]
            impl $crate::Store for $backend {
                $($own)*

                $(
                    async fn $name(
                        &self,
                        $($arg: $ty),*
                    ) -> ::std::result::Result<$out, $crate::StoreError> {
                        $run!(
                            self,
                            $mode,
                            true $(&& $keep)?,
                            [$($arg: $ty),*],
                            $crate::$($operation)::+,
                            [$($call),*]
                        )
                    }
                )*
            }
        };
    };
}

pub(crate) use store_impl;
