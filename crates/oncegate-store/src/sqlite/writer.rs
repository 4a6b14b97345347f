//! The writer thread: the only writing connection, fed on a channel. It gathers the requests
//! waiting, runs each in its own SAVEPOINT inside one transaction, commits once (one fsync for
//! the batch) and only then answers every caller.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Instant;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::executor::SqliteTx;
use super::{control, sqlite_err};
use crate::error::StoreError;

type Result<T> = std::result::Result<T, StoreError>;

/// The most requests one group commit takes; beyond it the next batch starts, so one huge
/// burst cannot hold every caller behind a single long transaction.
const MAX_BATCH: usize = 512;

/// The longest the writer waits for the callers of its last batch to come back before it
/// starts the next one (see `writer_loop`); well under the cost of the commit it saves.
const GATHER: std::time::Duration = std::time::Duration::from_micros(500);

/// One request to the writer, type-erased so different operations share the channel.
pub(super) trait WriteJob: Send {
    /// Runs inside the batch transaction; returns whether its writes are to be kept.
    fn run(&mut self, conn: &mut Connection) -> bool;
    /// Answers the caller once the batch's fate is known (`Some(cause)` if it did not commit).
    fn answer(self: Box<Self>, failure: Option<&str>);
}

/// One caller's work, whether to keep its writes, and where its answer goes.
pub(super) struct Pending<T, F> {
    pub(super) work: Option<F>,
    pub(super) keep: bool,
    pub(super) result: Option<Result<T>>,
    pub(super) reply: oneshot::Sender<Result<T>>,
}

impl<T, F> WriteJob for Pending<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut SqliteTx<'_>) -> Result<T> + Send + 'static,
{
    fn run(&mut self, conn: &mut Connection) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        // A panicking item must not take the writer (and every other caller) down with it.
        let result = catch_unwind(AssertUnwindSafe(|| work(&mut SqliteTx { conn })))
            .unwrap_or_else(|_| {
                Err(StoreError::Corrupt(
                    "a write failed unexpectedly and was rolled back".to_owned(),
                ))
            });
        let keep = self.keep && result.is_ok();
        self.result = Some(result);
        keep
    }

    fn answer(self: Box<Self>, failure: Option<&str>) {
        let this = *self;
        let answer = match (this.result, failure) {
            // An item that failed on its own keeps its own error, whatever became of the batch.
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(v)), None) => Ok(v),
            (_, Some(cause)) => Err(StoreError::unavailable_plain(cause)),
            (None, None) => Err(StoreError::unavailable_plain("the write was not run")),
        };
        let _ = this.reply.send(answer);
    }
}

pub(super) fn writer_loop(
    mut conn: Connection,
    jobs: mpsc::Receiver<Box<dyn WriteJob>>,
    sizes: &crate::BatchSizes,
) {
    // The callers answered by the last commit usually come straight back with their next
    // request, but one at a time: starting the next batch with only the first of them would
    // pay a whole commit (an fsync) for a handful of items while the rest queue behind it.
    // So the writer gathers until as many requests as the last batch held are in, or for at
    // most `GATHER`. A lone caller (a batch of one) never waits.
    let mut expected = 1;
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        let deadline = Instant::now() + GATHER;
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(mpsc::TryRecvError::Disconnected) => break,
                Err(mpsc::TryRecvError::Empty) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if batch.len() >= expected || left.is_zero() {
                        break;
                    }
                    match jobs.recv_timeout(left) {
                        Ok(job) => batch.push(job),
                        Err(_) => break,
                    }
                }
            }
        }
        expected = batch.len();
        sizes.record(batch.len());
        run_batch(&mut conn, batch);
    }
}

fn short_cause(e: rusqlite::Error) -> String {
    match sqlite_err(e) {
        StoreError::Unavailable { cause, .. } => cause,
        other => other.to_string(),
    }
}

fn run_batch(conn: &mut Connection, mut batch: Vec<Box<dyn WriteJob>>) {
    let mut failure: Option<String> = control(conn, "BEGIN IMMEDIATE").err().map(short_cause);
    if failure.is_none() {
        for job in batch.iter_mut() {
            // Some errors (a full disk, an I/O error) make SQLite roll the whole transaction
            // back; running further items would then commit them one by one, outside the
            // batch's all-or-nothing answer, so the batch stops there.
            if conn.is_autocommit() {
                failure = Some("the transaction was aborted by the database".to_owned());
                break;
            }
            if let Err(e) = control(conn, "SAVEPOINT item") {
                failure = Some(short_cause(e));
                break;
            }
            let keep = job.run(conn);
            let end = if keep {
                control(conn, "RELEASE item")
            } else {
                control(conn, "ROLLBACK TO item").and_then(|()| control(conn, "RELEASE item"))
            };
            if let Err(e) = end {
                failure = Some(short_cause(e));
                break;
            }
        }
    }
    if failure.is_none() {
        failure = control(conn, "COMMIT").err().map(short_cause);
    }
    if failure.is_some() && !conn.is_autocommit() {
        let _ = control(conn, "ROLLBACK");
    }
    for job in batch {
        job.answer(failure.as_deref());
    }
}
