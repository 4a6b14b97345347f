//! Structured logs with `tracing`: human-readable by default, one JSON object per line when
//! asked (`ONCEGATE_LOG=json` in the CLI). The level filter comes from `RUST_LOG`, `info` when
//! unset.
//!
//! Lines are written to standard output, in colour only when it is a terminal (and `NO_COLOR`
//! is unset): a log file or a pipe gets plain text, never ANSI escapes.
//!
//! What is logged is chosen where it is logged: decisions carry ids, scope, strategy and action,
//! never a body, a header value, a secret or a sensitive field's value.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Calling it twice (a test harness, an embedding program
/// that already installed one) leaves the first in place.
pub fn init_logging(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // `no-color.org`: any non-empty NO_COLOR turns colour off even on a terminal.
    let colour = std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // A log line that cannot be written (a full disk under the log file) is dropped, never
    // reported on stderr: stderr is often the same full file, and the report's `eprintln!`
    // would panic the request that logged, closing its connection with no answer.
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stdout)
        .log_internal_errors(false)
        .with_ansi(colour)
        .with_env_filter(filter)
        .with_target(false);
    let _ = if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init()
    } else {
        builder.try_init()
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn installing_twice_keeps_the_first_subscriber() {
        super::init_logging(true);
        super::init_logging(false);
        tracing::info!(
            delivery_id = "dlv_test",
            "logging works after a second install"
        );
    }
}
