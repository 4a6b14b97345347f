//! A point in time written as a duration back from now (`90s`, `15m`, `2h`, `7d`, `1h 30m`) or
//! as an RFC 3339 instant: how the queue's `older_than` / `newer_than` filters are given, over
//! HTTP and on the command line alike.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Why a text is neither a duration nor an RFC 3339 instant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is neither a duration back from now (like 90s, 15m, 2h, 7d) nor an RFC 3339 instant (like 2024-05-03T09:00:00Z)")]
pub struct InstantError {
    /// The text that could not be read.
    pub input: String,
}

/// Reads `text` as an RFC 3339 instant, else as a duration before `now`.
///
/// ```
/// use oncegate_server::parse_instant;
/// use time::{Duration, OffsetDateTime};
///
/// let now = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
/// assert_eq!(parse_instant("2h", now).unwrap(), now - Duration::hours(2));
/// assert_eq!(
///     parse_instant("2023-11-14T22:13:20Z", now).unwrap(),
///     now,
/// );
/// assert!(parse_instant("yesterday", now).is_err());
/// ```
pub fn parse_instant(text: &str, now: OffsetDateTime) -> Result<OffsetDateTime, InstantError> {
    let refused = || InstantError {
        input: text.to_owned(),
    };
    let trimmed = text.trim();
    if let Ok(at) = OffsetDateTime::parse(trimmed, &Rfc3339) {
        return Ok(at);
    }
    let back = humantime::parse_duration(trimmed).map_err(|_| refused())?;
    let back = time::Duration::try_from(back).map_err(|_| refused())?;
    now.checked_sub(back).ok_or_else(refused)
}
