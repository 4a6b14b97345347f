//! The collision breakers' matches waiting to be counted: per strategy scope, the tally of
//! matches and collisions and the callers waiting for it to be written, and whether a flush
//! (`breaker`'s) is writing them now.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use oncegate_store::{BreakerScope, BreakerTally};
use tokio::sync::oneshot;

/// Matches waiting to be written, per scope, with their callers; and whether a flush runs.
#[derive(Default)]
pub(crate) struct Tallies {
    waiting: Mutex<HashMap<BreakerScope, Waiting>>,
    flushing: AtomicBool,
}

#[derive(Default)]
pub(crate) struct Waiting {
    pub tally: BreakerTally,
    pub callers: Vec<oneshot::Sender<()>>,
}

impl Tallies {
    /// Adds one match; the receiver hears once it is written.
    pub(crate) fn add(&self, scope: &BreakerScope, collision: bool) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut waiting = self.waiting.lock().expect("breaker tallies lock");
        let entry = waiting.entry(scope.clone()).or_default();
        entry.tally.push(collision);
        entry.callers.push(tx);
        rx
    }

    /// Ends the running flush (the next match, or the flush's own last look, starts another).
    pub(crate) fn release(&self) {
        self.flushing.store(false, Ordering::SeqCst);
    }

    /// Makes the caller the one flush running, unless one already runs.
    pub(crate) fn claim(&self) -> bool {
        !self.flushing.swap(true, Ordering::SeqCst)
    }

    pub(crate) fn take(&self) -> HashMap<BreakerScope, Waiting> {
        std::mem::take(&mut *self.waiting.lock().expect("breaker tallies lock"))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiting
            .lock()
            .expect("breaker tallies lock")
            .is_empty()
    }
}
