//! The WAL's checkpoints, mostly off the writer's path. Left to SQLite, the connection whose
//! commit takes the WAL past 1,000 pages copies them all back into the database file and syncs
//! it before its commit returns: the writer, holding every caller of its batch. A decision
//! writes a page in each of its B-trees, so under load that was a checkpoint every 20 ms or so.
//!
//! Here a thread of its own runs a passive checkpoint (one that never waits for, nor blocks,
//! the writer or a reader) on its own connection: woken by the writer's commit once the WAL
//! holds `WAKE_AT` pages and again at each `WAKE_AT` more, and every `EVERY` besides. The
//! writer still checkpoints past `WRITER_AT` pages, SQLite's own threshold, and then only
//! finds what was written since the thread's last copy: that checkpoint is what lets the WAL
//! start over, since only a writer restarts it, and only when every frame was copied before
//! its transaction began (measured: without it the WAL grew by 800 MB in 20 s of the load
//! bench). A thread woken only by its
//! clock, every 100 ms, had left the writer nearly all the copying at 3,500 decisions a second
//! (a tenth of the writer's time).

use std::ffi::c_int;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use crate::error::StoreError;

/// How often the WAL is copied back when no commit asked.
const EVERY: Duration = Duration::from_millis(100);
/// The WAL's pages past which a commit wakes the checkpoint thread, and again each time as
/// many more were written.
const WAKE_AT: c_int = 256;
/// The WAL's pages past which the writer checkpoints after its commit (SQLite's default).
const WRITER_AT: c_int = 1000;

enum Signal {
    /// The WAL grew by `WAKE_AT` pages since the last wake-up.
    Wake,
    /// The store is closing: a last checkpoint, then the thread ends.
    Stop,
}

/// The checkpointing thread; dropping it stops the thread (after a last checkpoint).
pub(crate) struct Checkpointer {
    signals: mpsc::SyncSender<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing the database at `path`.
    pub fn start(path: &Path) -> Result<Checkpointer, StoreError> {
        Checkpointer::start_every(path, EVERY)
    }

    /// Starts checkpointing the database at `path` when woken, and every `every` besides.
    fn start_every(path: &Path, every: Duration) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path).map_err(super::sqlite_err)?;
        super::configure(&conn)?;
        // One wake-up waiting is enough: a checkpoint copies every frame committed before it.
        let (signals, received) = mpsc::sync_channel::<Signal>(1);
        let thread = std::thread::Builder::new()
            .name("oncegate-sqlite-checkpoint".to_owned())
            .spawn(move || loop {
                let last = match received.recv_timeout(every) {
                    Ok(Signal::Wake) | Err(mpsc::RecvTimeoutError::Timeout) => false,
                    Ok(Signal::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => true,
                };
                // A checkpoint that cannot finish (a reader still on old pages) copies what it
                // can, and one that fails (the disk) loses nothing: the pages stay in the WAL,
                // where every reader finds them, for the next one.
                let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                if last {
                    return;
                }
            })
            .map_err(|e| {
                StoreError::unavailable("the SQLite checkpoint thread could not start", e)
            })?;
        Ok(Checkpointer {
            signals,
            thread: Some(thread),
        })
    }

    /// Makes `writer`'s commits wake the thread as the WAL grows, and checkpoint themselves past
    /// `WRITER_AT` pages (this replaces SQLite's automatic checkpoint, which is itself a WAL
    /// hook).
    pub fn watch(&self, writer: &mut Connection) -> Result<(), StoreError> {
        let signals = self.signals.clone();
        let mut growth = Growth::default();
        writer
            .wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: c_int| {
                match growth.after_commit(pages) {
                    Step::Nothing => {}
                    // Full means a wake-up is already waiting; gone means the store is closing.
                    Step::Wake => {
                        let _ = signals.try_send(Signal::Wake);
                    }
                    // Passive: when the thread is copying, this one gives way and the next
                    // commit tries again. Its outcome is not the commit's: the commit is done,
                    // and an error returned here would be reported as the statement's.
                    Step::Checkpoint => {
                        let _ = wal.checkpoint();
                    }
                }
                Ok(())
            }))
            .map_err(super::sqlite_err)
    }
}

/// What a commit that left the WAL at some number of pages asks for.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Nothing,
    Wake,
    Checkpoint,
}

/// The WAL's growth as the writer's commits report it.
#[derive(Default)]
struct Growth {
    /// The WAL's pages at the last wake-up: the thread is woken again once `WAKE_AT` more were
    /// written, not by every commit past the threshold (each checkpoint syncs the database
    /// file, and a page copied back is copied again once it is written again).
    woken_at: c_int,
}

impl Growth {
    fn after_commit(&mut self, pages: c_int) -> Step {
        if pages < self.woken_at {
            // The WAL started over.
            self.woken_at = 0;
        }
        if pages >= WRITER_AT {
            Step::Checkpoint
        } else if pages - self.woken_at >= WAKE_AT {
            self.woken_at = pages;
            Step::Wake
        } else {
            Step::Nothing
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // Waits for room when a wake-up is pending; fails only when the thread already ended.
        let _ = self.signals.send(Signal::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The WAL's frames and how many of them are copied back, read without copying any.
    fn frames(conn: &Connection) -> (i64, i64) {
        conn.query_row("PRAGMA wal_checkpoint(NOOP)", [], |r| {
            Ok((r.get(1)?, r.get(2)?))
        })
        .unwrap()
    }

    /// Waits until the thread copied back the WAL's first `frames_in_log` frames.
    fn copied_back(observer: &Connection, frames_in_log: i64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while frames(observer).1 < frames_in_log {
            assert!(
                std::time::Instant::now() < deadline,
                "the WAL's {frames_in_log} frames were never copied back: {:?}",
                frames(observer)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A store's database as its writer opens it, its WAL emptied, watched by a checkpoint
    /// thread whose clock never strikes within the test.
    fn watched(dir: &Path) -> (Connection, Checkpointer, Connection) {
        let path = dir.join("wal.db");
        let mut writer = super::super::open_writer(&path).unwrap();
        writer
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let checkpointer = Checkpointer::start_every(&path, Duration::from_secs(3600)).unwrap();
        checkpointer.watch(&mut writer).unwrap();
        let observer = Connection::open(&path).unwrap();
        (writer, checkpointer, observer)
    }

    /// Writes `rows` rows of about a page each (a page of the table and one of its key's
    /// index) in one commit.
    fn commit_rows(writer: &Connection, first: i64, rows: i64) {
        writer.execute_batch("BEGIN").unwrap();
        for n in first..first + rows {
            writer
                .execute(
                    "INSERT INTO sweep_marks (name, at) VALUES (?1 || hex(zeroblob(1700)), ?1)",
                    [n],
                )
                .unwrap();
        }
        writer.execute_batch("COMMIT").unwrap();
    }

    #[test]
    fn a_commit_past_the_wake_threshold_has_the_thread_copy_the_wal() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, _checkpointer, observer) = watched(dir.path());
        commit_rows(&writer, 0, 200);
        let (log, _) = frames(&observer);
        assert!(
            (i64::from(WAKE_AT)..i64::from(WRITER_AT)).contains(&log),
            "the commit left {log} frames, between the thresholds"
        );
        copied_back(&observer, log);
    }

    #[test]
    fn a_commit_below_the_wake_threshold_leaves_the_wal_to_the_clock() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, _checkpointer, observer) = watched(dir.path());
        commit_rows(&writer, 0, 25);
        std::thread::sleep(Duration::from_millis(300));
        let (log, copied) = frames(&observer);
        assert!(log > 0 && log < i64::from(WAKE_AT), "{log} frames");
        assert_eq!(copied, 0, "nothing asked for a checkpoint");
    }

    #[test]
    fn the_thread_is_woken_again_once_as_many_more_pages_were_written() {
        let mut growth = Growth::default();
        let steps: Vec<Step> = [10, 255, 256, 300, 511, 512, 990, 1000, 1012, 8, 263, 264]
            .into_iter()
            .map(|pages| growth.after_commit(pages))
            .collect();
        use Step::*;
        assert_eq!(
            steps,
            [
                Nothing, Nothing, Wake, Nothing, Nothing, Wake, Wake, Checkpoint, Checkpoint,
                // The WAL started over.
                Nothing, Wake, Nothing
            ]
        );
    }

    #[test]
    fn the_wal_starts_over_under_a_stream_of_commits() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, checkpointer, observer) = watched(dir.path());
        let mut most = 0;
        for round in 0..200 {
            commit_rows(&writer, round * 20, 20);
            most = most.max(frames(&observer).0);
        }
        // Some 8,000 pages were written; the WAL never held many more than the writer's threshold.
        assert!(
            most < i64::from(WRITER_AT) + 400,
            "the WAL reached {most} frames"
        );
        drop(checkpointer);
        // The last checkpoint on stopping copied every frame back.
        let (log, copied) = frames(&observer);
        assert_eq!(log, copied);
    }
}
