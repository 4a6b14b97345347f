//! The store's calls on the key strategies' breakers: the tally of one decision, a breaker
//! read, the listing and an operator's close.

use time::OffsetDateTime;

use super::{Result, Store};
use crate::breaker::{self, Breaker, BreakerRecord, BreakerRule, BreakerScope, BreakerTally};

impl Store {
    /// Counts key matches of a strategy (decisions whose prior was not `None`; a collision
    /// when one was quarantined) in its breaker's rolling window, in one write, and opens the
    /// breaker when the window trips `rule` at one of them; `opened_now` is true for exactly
    /// one caller.
    pub async fn breaker_record(
        &self,
        scope: &BreakerScope,
        tally: &BreakerTally,
        rule: &BreakerRule,
        now: OffsetDateTime,
    ) -> Result<BreakerRecord> {
        self.write(
            true,
            (scope.clone(), tally.clone(), *rule),
            move |tx, (scope, tally, rule)| Box::pin(breaker::record(tx, scope, tally, rule, now)),
        )
        .await
    }

    /// The breaker of one strategy scope, with its window's counts (closed when it never opened).
    pub async fn breaker(
        &self,
        scope: &BreakerScope,
        rule: &BreakerRule,
        now: OffsetDateTime,
    ) -> Result<Breaker> {
        self.read((scope.clone(), *rule), move |tx, (scope, rule)| {
            Box::pin(breaker::read(tx, scope, rule, now))
        })
        .await
    }

    /// Every breaker that ever opened and every scope with matches in the window.
    pub async fn breakers(&self, rule: &BreakerRule, now: OffsetDateTime) -> Result<Vec<Breaker>> {
        self.read(*rule, move |tx, rule| {
            Box::pin(breaker::list(tx, rule, now))
        })
        .await
    }

    /// Closes an open breaker with an operator's note and clears its window; `Conflict` when it
    /// is not open, `NotFound` when it never opened.
    pub async fn breaker_close(
        &self,
        scope: &BreakerScope,
        note: &str,
        by: &str,
        now: OffsetDateTime,
    ) -> Result<Breaker> {
        self.write(
            true,
            (scope.clone(), note.to_owned(), by.to_owned()),
            move |tx, (scope, note, by)| Box::pin(breaker::close(tx, scope, note, by, now)),
        )
        .await
    }
}
