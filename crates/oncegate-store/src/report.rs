//! The report: received deliveries side by side with what became of them, per tenant,
//! provider, environment and type, and the unexplained gap that must be zero.

use time::OffsetDateTime;

/// Counts over one group (or the total). Every figure is computed from stored rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportCounts {
    pub received: u64,
    pub rejected: u64,
    pub processed: u64,
    pub ignored_transport: u64,
    pub ignored_effect: u64,
    pub quarantined: u64,
    /// Deliveries whose proof says `reconcile`.
    pub reconcile: u64,
    /// Reconcile queue items still open / resolved.
    pub reconcile_pending: u64,
    pub reconcile_resolved: u64,
    pub effects_completed: u64,
    pub effects_failed: u64,
    pub effects_unknown: u64,
    /// Key matches whose discriminants differed (the quarantines).
    pub collisions: u64,
    /// Operations the authority lists for resources seen recently that have no local effect
    /// (the invisible-losses sweep); not part of the gap, which counts deliveries.
    pub missing_at_source_check: u64,
    /// Deliveries for which a shadow strategy would have decided otherwise (not part of the
    /// gap: shadows never act).
    pub shadow_disagreements: u64,
    /// received − (rejected + processed + ignored + quarantined + reconcile): deliveries
    /// journaled without a documented outcome. Must be zero.
    pub unexplained_gap: i64,
}

impl ReportCounts {
    /// Recomputes the gap from the other figures.
    pub fn with_gap(mut self) -> Self {
        let explained = self.rejected
            + self.processed
            + self.ignored_transport
            + self.ignored_effect
            + self.quarantined
            + self.reconcile;
        self.unexplained_gap = self.received as i64 - explained as i64;
        self
    }

    pub(crate) fn add(&mut self, other: &ReportCounts) {
        self.received += other.received;
        self.rejected += other.rejected;
        self.processed += other.processed;
        self.ignored_transport += other.ignored_transport;
        self.ignored_effect += other.ignored_effect;
        self.quarantined += other.quarantined;
        self.reconcile += other.reconcile;
        self.reconcile_pending += other.reconcile_pending;
        self.reconcile_resolved += other.reconcile_resolved;
        self.effects_completed += other.effects_completed;
        self.effects_failed += other.effects_failed;
        self.effects_unknown += other.effects_unknown;
        self.collisions += other.collisions;
        self.missing_at_source_check += other.missing_at_source_check;
        self.shadow_disagreements += other.shadow_disagreements;
        self.unexplained_gap += other.unexplained_gap;
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRow {
    pub tenant: String,
    pub provider: String,
    pub env: String,
    /// `None` for deliveries rejected before their type was known.
    pub event_type: Option<String>,
    pub counts: ReportCounts,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub since: OffsetDateTime,
    /// Sorted by tenant, provider, env, type.
    pub rows: Vec<ReportRow>,
    pub total: ReportCounts,
}
