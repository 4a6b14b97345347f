//! The WAL's checkpoints, mostly off the writer's path. Left to SQLite, the connection whose
//! commit takes the WAL past 1,000 pages copies them all back into the database file and syncs
//! it before its commit returns: the writer, holding every caller of its batch. A decision
//! writes a page in each of its B-trees, so that was a checkpoint every few dozen decisions.
//! Here a thread of its own runs a passive checkpoint (one that never waits for, nor blocks,
//! the writer or a reader) every `EVERY`, on its own connection, so the writer's checkpoint
//! only finds what was written since; the writer still runs it, since only a writer starts
//! the WAL over once every frame is copied (measured: without it the WAL grew by 800 MB in
//! 20 s of the load bench).

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use crate::error::StoreError;

/// How often the WAL is copied back into the database file.
const EVERY: Duration = Duration::from_millis(100);

/// The checkpointing thread; dropping it stops the thread (after a last checkpoint).
pub(crate) struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing the database at `path`, whose writer runs with
    /// `wal_autocheckpoint = 0`.
    pub fn start(path: &Path) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path).map_err(super::sqlite_err)?;
        super::configure(&conn)?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("oncegate-sqlite-checkpoint".to_owned())
            .spawn(move || loop {
                let last = !matches!(
                    stopped.recv_timeout(EVERY),
                    Err(mpsc::RecvTimeoutError::Timeout)
                );
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
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
