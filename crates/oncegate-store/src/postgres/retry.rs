//! One retry for every PostgreSQL call: a call that lost a serialization race (40001, 40P01)
//! is run again from the start after a jittered pause, a bounded number of times. Under
//! `SERIALIZABLE` (CockroachDB's default, YugabyteDB, or a PostgreSQL configured so) such
//! losses are routine, and a caller should never see one while a fresh attempt can succeed.

use std::future::Future;
use std::time::Duration;

use super::sqlstate::lost_race;
use crate::error::StoreError;

type Result<T> = std::result::Result<T, StoreError>;

/// How often a transaction is restarted after serialization failures before giving up.
/// Under `SERIALIZABLE` (CockroachDB, YugabyteDB, or a PostgreSQL configured so) concurrent
/// claimers and deciders abort one another routinely, so there is room for many attempts.
pub(super) const MAX_TX_ATTEMPTS: usize = 16;

/// Runs `attempt` until it does not lose a serialization race: a failure with SQLSTATE 40001
/// (serialization failure) or 40P01 (deadlock) runs it again from the start, after a jittered
/// pause, up to `MAX_TX_ATTEMPTS` attempts in all; any other outcome is returned as it is. Every
/// call of the store goes through here, so each attempt must begin its own transaction (or be
/// one statement).
pub(super) async fn retry<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut attempts = 1;
    loop {
        match attempt().await {
            Err(e) if lost_race(&e) && attempts < MAX_TX_ATTEMPTS => {
                retry_pause(attempts).await;
                attempts += 1;
            }
            result => return result,
        }
    }
}

/// The pause before attempt `attempt + 1` of a transaction that lost a serialization race:
/// exponential from 1 ms, capped at 64 ms, with full jitter so the losers of one collision do
/// not collide again in lock step.
pub(super) async fn retry_pause(attempt: usize) {
    let cap_us = 1_000u64 << attempt.min(6);
    // The ULID's random part is the jitter source the store already has.
    let jitter = (ulid::Ulid::new().random() as u64) % cap_us.max(1);
    tokio::time::sleep(Duration::from_micros(jitter)).await;
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::postgres::sqlstate::pg_err;
    use crate::testing::{pg_admin, pg_admin_url};

    /// A real refusal with `sqlstate`, as the store maps it.
    async fn refusal(client: &tokio_postgres::Client, sqlstate: &str) -> StoreError {
        let raise =
            format!("DO $$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '{sqlstate}'; END $$");
        pg_err(
            client
                .batch_execute(&raise)
                .await
                .expect_err("the block raises"),
        )
    }

    /// Runs `retry` over an attempt that is refused with `sqlstate` its first `refusals` times
    /// and then answers 7; returns the outcome and how many attempts ran.
    async fn run(refusals: usize, sqlstate: &str) -> (Result<u32>, usize) {
        let client = pg_admin(&pg_admin_url()).await;
        let attempts = AtomicUsize::new(0);
        let outcome = retry(|| async {
            if attempts.fetch_add(1, Ordering::SeqCst) < refusals {
                Err(refusal(&client, sqlstate).await)
            } else {
                Ok(7)
            }
        })
        .await;
        (outcome, attempts.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_lost_race_is_run_again_and_nothing_else_is() {
        let (outcome, attempts) = run(2, "40001").await;
        assert_eq!((outcome.expect("third attempt"), attempts), (7, 3));

        // Deadlocked every time: the last attempt's refusal reaches the caller.
        let (outcome, attempts) = run(usize::MAX, "40P01").await;
        assert!(outcome.expect_err("never through").is_unavailable());
        assert_eq!(attempts, MAX_TX_ATTEMPTS);

        // A unique violation, a NUL in a text, a connection refused by name: never retried.
        let (outcome, attempts) = run(usize::MAX, "23505").await;
        assert!(
            matches!(outcome, Err(StoreError::Conflict(_))),
            "{outcome:?}"
        );
        assert_eq!(attempts, 1);
        let (outcome, attempts) = run(usize::MAX, "22021").await;
        assert!(
            matches!(outcome, Err(StoreError::Internal { .. })),
            "{outcome:?}"
        );
        assert_eq!(attempts, 1);
        let (outcome, attempts) = run(usize::MAX, "08006").await;
        assert!(outcome.expect_err("refused").is_unavailable());
        assert_eq!(attempts, 1);
    }
}
