//! Retention as data-model rules: what `purge` may remove and what it must keep. Purge is the
//! only code path that deletes anything.

use time::Duration;

/// How long each kind of record lives. The fast index has no entry here: each index row
/// carries its own expiry (its strategy's horizon), or none when the type is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgePolicy {
    /// Raw bodies are dropped after this; the delivery row and its proof stay.
    pub payload_retention: Duration,
    /// Proofs and their delivery rows are deleted after this, unless an open queue item still
    /// needs them. Effects of durable types keep their identity regardless.
    pub proof_retention: Duration,
}

/// What a purge removed (or, in a dry run, would remove).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PurgeCounts {
    /// Fast-index entries past their horizon.
    pub index_entries: u64,
    /// Raw bodies set to NULL.
    pub payloads: u64,
    pub proofs: u64,
    pub deliveries: u64,
    /// Non-durable effects left with no delivery, and no reservation in flight.
    pub effects: u64,
    /// Resolved queue items of purged deliveries.
    pub queue_items: u64,
    /// Effects of durable types whose deliveries and proofs are all gone and whose identity is
    /// kept regardless (what a late delivery of the same key still finds).
    pub durable_identities_kept: u64,
    /// Observations older than the proof retention: collision-breaker counter buckets and
    /// settled missing-operation records (a breaker's state and any open record stay).
    pub observations: u64,
}
