//! The one way the CLI writes to its standard output and error: every write returns its error,
//! and a standard output whose reader went away (`oncegate check | head -1`) ends the command
//! quietly instead of panicking.
//!
//! `println!` panics when stdout is a closed pipe, because Rust ignores SIGPIPE; resetting the
//! signal would need `unsafe` (forbidden in the workspace), so commands print through [`out!`]
//! and [`outln!`], which return the error for `?`, and `main` turns a closed stdout into a
//! quiet exit (`exit::Status::ClosedPipe`).

use std::fmt;
use std::io::{self, Write};

/// Standard output went away: its reader closed the pipe.
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Standard output, locked, whose broken-pipe error is marked as [`StdoutClosed`] so it can be
/// told from a broken pipe elsewhere (a database connection's, say), which is a real error.
pub struct Stdout(io::StdoutLock<'static>);

pub fn stdout() -> Stdout {
    Stdout(io::stdout().lock())
}

fn marked(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        io::Error::new(io::ErrorKind::BrokenPipe, StdoutClosed)
    } else {
        e
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(marked)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(marked)
    }
}

/// Writes formatted text to standard output and flushes it (what [`out!`] calls).
pub fn print(args: fmt::Arguments<'_>) -> io::Result<()> {
    let mut out = stdout();
    out.write_fmt(args)?;
    out.flush()
}

/// A line on standard error. Its failure is ignored: with stderr gone there is nowhere left to
/// report anything, and a warning must never stop a command.
pub fn warn(args: fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr(), "{args}");
}

/// Whether `e` is (or was caused by) standard output being closed.
pub fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.is::<StdoutClosed>()
            || cause
                .downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.is::<StdoutClosed>())
    })
}

/// `print!` that returns the write's error.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::print(format_args!($($arg)*))
    };
}

/// `println!` that returns the write's error.
macro_rules! outln {
    () => {
        $crate::output::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that never panics.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::warn(format_args!($($arg)*))
    };
}
