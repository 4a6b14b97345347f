//! The exit statuses each command documents in its `--help`, in one place so the texts agree
//! with `main`'s mapping: 2 for any error (clap's usage errors are 2 as well) and
//! [`crate::output::CLOSED_PIPE_EXIT`] for a closed standard output.

/// Joins a command's own lines with the lines every command shares.
macro_rules! statuses {
    ($($line:literal),* $(,)?) => {
        concat!(
            "Exit status:\n",
            $("  ", $line, "\n",)*
            "  2    an error, or a usage error; the message is on stderr\n",
            "  141  standard output was closed before the output was written (`| head`)\n",
            "\n",
            "With --json, stdout holds one JSON document on one line; an error prints no JSON:\n",
            "its message is on stderr and the status is non-zero, as without --json.",
        )
    };
}

pub const EXPLAIN: &str =
    statuses!("0    the delivery's proof was printed (a delivery with no recorded decision too)");
pub const REPORT: &str =
    statuses!("0    the report was printed, whatever its unexplained gap (read `unexplained_gap`)");
pub const CHECK: &str =
    statuses!("0    the contract is valid (an invalid one is status 2, each error named)");
pub const INIT: &str =
    statuses!("0    the contract was written (or, with --list, the catalog listed)");
pub const KEY: &str = statuses!(
    "0    an effect key was made",
    "1    no strategy applies to the event: it has no effect key"
);
pub const QUEUE_LIST: &str = statuses!("0    the page was printed (an empty page too)");
pub const QUEUE_SHOW: &str = statuses!("0    the item was printed");
pub const FORWARD_LIST: &str = statuses!("0    the forwards were printed (none matching too)");
pub const FORWARD_RESEND: &str =
    statuses!("0    the dead letter is pending again (not dead, or no forward: status 2)");
pub const BREAKER_LIST: &str = statuses!("0    the breakers were printed, open ones too");
pub const PURGE: &str = statuses!("0    the purge ran (or, with --dry-run, was counted)");
pub const RECONCILE: &str = statuses!(
    "0    the pass ran; items left open and sweep errors are in the output, not the status"
);
