//! Signals to the processes the tests start, sent by the test itself: no external `kill`.

use std::process::Child;

use rustix::process::{kill_process, Pid, Signal};

/// Sends SIGTERM to `child`, as systemd or a container runtime stops the service.
pub fn terminate(child: &Child) {
    let pid = Pid::from_child(child);
    kill_process(pid, Signal::TERM)
        .unwrap_or_else(|e| panic!("sending SIGTERM to process {}: {e}", child.id()));
}
