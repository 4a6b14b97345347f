//! How many calls each group commit gathered: the backend that batches (SQLite's writer,
//! PostgreSQL's batches) records every batch it runs, and the metrics and the load bench read
//! the distribution. A batch of one pays a whole commit for one call; the fuller the batches,
//! the fewer commits and statements a decision costs. PostgreSQL's batches also count their
//! round trips to the server (one for a batch with no decision, two with one).

use std::sync::atomic::{AtomicU64, Ordering};

/// The upper bounds of the distribution's buckets: a batch of `n` calls counts in the first
/// bucket whose bound is at least `n`, or in one more bucket past the last bound.
pub const BATCH_SIZE_BOUNDS: [u64; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// The batches a store ran since it opened, by their number of calls. Shared and updated
/// without locks.
///
/// ```
/// use oncegate_store::BatchSizes;
///
/// let sizes = BatchSizes::default();
/// sizes.record(1);
/// sizes.record(6);
/// sizes.record(6);
/// sizes.record(600);
/// sizes.round_trip();
/// let seen = sizes.snapshot();
/// assert_eq!(seen.batches, 4);
/// assert_eq!(seen.calls, 613);
/// assert_eq!(seen.round_trips, 1);
/// assert_eq!(seen.per_bucket[0], 1); // one batch of one call
/// assert_eq!(seen.per_bucket[3], 2); // two of 5 to 8 calls
/// assert_eq!(seen.per_bucket[8], 1); // one past the last bound
/// ```
#[derive(Debug, Default)]
pub struct BatchSizes {
    per_bucket: [AtomicU64; BATCH_SIZE_BOUNDS.len() + 1],
    batches: AtomicU64,
    calls: AtomicU64,
    round_trips: AtomicU64,
}

impl BatchSizes {
    /// Counts one batch of `calls` calls.
    pub fn record(&self, calls: usize) {
        let calls = calls as u64;
        let at = BATCH_SIZE_BOUNDS
            .iter()
            .position(|&bound| calls <= bound)
            .unwrap_or(BATCH_SIZE_BOUNDS.len());
        self.per_bucket[at].fetch_add(1, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.calls.fetch_add(calls, Ordering::Relaxed);
    }

    /// Counts one round trip of a batch to its server.
    pub fn round_trip(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts as of now.
    pub fn snapshot(&self) -> BatchSizesSeen {
        BatchSizesSeen {
            per_bucket: std::array::from_fn(|i| self.per_bucket[i].load(Ordering::Relaxed)),
            batches: self.batches.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
            round_trips: self.round_trips.load(Ordering::Relaxed),
        }
    }
}

/// A reading of [`BatchSizes`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchSizesSeen {
    /// Batches per bucket of [`BATCH_SIZE_BOUNDS`] (not cumulative), then those larger than
    /// the last bound.
    pub per_bucket: [u64; BATCH_SIZE_BOUNDS.len() + 1],
    /// Batches run.
    pub batches: u64,
    /// Calls they held, in all.
    pub calls: u64,
    /// Round trips to the server they took, in all (none for a store in process).
    pub round_trips: u64,
}
