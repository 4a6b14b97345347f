//! The store's typed errors: what a caller can act on, with a short cause and never raw
//! database text in the message (the service turns `Unavailable` into a 503 and shows the rest).

use std::error::Error as StdError;
use std::sync::Arc;

use oncegate_core::ids::EffectId;

/// The original driver error, kept as the `source()` for logs but never printed by `Display`;
/// shared, so an error that answers every member of a failed batch is one error cloned.
pub type Cause = Arc<dyn StdError + Send + Sync + 'static>;

/// Every way a store call can fail, each a plain sentence a caller can act on. `Unavailable`
/// is the one failure a later retry is meant to cure; the driver's own error is kept as the
/// `source()` of `Unavailable` and `Internal` for logs, never in the message.
#[derive(Debug, Clone, thiserror::Error)]
#[allow(missing_docs)] // each variant's message says what it and its fields hold
pub enum StoreError {
    /// The database cannot be reached or cannot write (connection refused, pool timeout, disk
    /// full, read-only file, no answer in time); the caller may retry later. Nothing was
    /// recorded unless `may_be_recorded`: the connection was lost after the work was sent, so
    /// it may have committed (a retry is decided from what the store holds, never done twice).
    #[error("the store is unavailable: {cause}")]
    Unavailable {
        /// A short plain cause ("connection refused", "disk is full"…), not the driver's text.
        cause: String,
        /// The work was sent and its answer lost: it may have committed.
        may_be_recorded: bool,
        /// The driver's error, for logs (`None` when the store itself found the cause).
        #[source]
        source: Option<Cause>,
    },
    /// The fencing token is not the effect's current one: another holder took over.
    #[error("effect {effect} is at fencing token {current}; token {presented} is stale")]
    StaleToken {
        /// The effect the caller tried to complete, fail or heartbeat.
        effect: EffectId,
        /// The token the caller presented.
        presented: u64,
        /// The effect's current token (held by whoever took it over).
        current: u64,
    },
    /// The token is current but the reservation is gone: its lease expired or an outcome was
    /// already recorded.
    #[error("effect {effect} is no longer reserved under token {token} (its lease expired or it already has an outcome)")]
    LeaseLost { effect: EffectId, token: u64 },
    /// The holder of the token already completed the effect, with another result than the one
    /// presented now: the first outcome stands (the same result presented again is no error).
    #[error("effect {effect} was already completed under token {token} with another result")]
    OutcomeRecorded { effect: EffectId, token: u64 },
    /// A stored record the request names does not exist (or no longer does, after a purge).
    #[error("{what} {id} was not found")]
    NotFound { what: &'static str, id: String },
    /// The request contradicts what is stored (a delivery decided twice, a queue item
    /// resolved twice, a race that did not settle).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database was migrated by a newer oncegate; this binary must not write to it.
    #[error("the database schema is at version {found} but this binary knows only up to {known}; upgrade oncegate")]
    SchemaTooNew { found: i64, known: i64 },
    /// A stored value cannot be read back (an unknown state name, malformed JSON).
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The store URL or an argument is not acceptable.
    #[error("invalid store configuration: {0}")]
    Config(String),
    /// The database refused a statement for a reason a retry cannot cure (a data exception, a
    /// missing table, a broken constraint): a defect or an operator's mistake, never an outage.
    /// `sqlstate` is the database's code, for the log; values are never part of it.
    #[error("the database refused a statement (SQLSTATE {sqlstate})")]
    Internal {
        /// PostgreSQL's five-character SQLSTATE code (`22P02`, `42P01`…).
        sqlstate: String,
        /// The driver's error, for logs.
        #[source]
        source: Option<Cause>,
    },
}

impl StoreError {
    /// True when the failure is the database's availability, not the request: the service
    /// answers 503 and the provider retries.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }

    pub(crate) fn unavailable(
        cause: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        StoreError::Unavailable {
            cause: cause.into(),
            may_be_recorded: false,
            source: Some(Arc::new(source)),
        }
    }

    /// The connection was lost after the work was sent: it may have committed.
    pub(crate) fn unanswered(
        cause: impl Into<String>,
        source: Option<impl StdError + Send + Sync + 'static>,
    ) -> Self {
        StoreError::Unavailable {
            cause: cause.into(),
            may_be_recorded: true,
            source: source.map(|s| Arc::new(s) as Cause),
        }
    }

    /// Whether the failed call may have been recorded all the same (see `Unavailable`).
    pub fn may_be_recorded(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable {
                may_be_recorded: true,
                ..
            }
        )
    }

    pub(crate) fn unavailable_plain(cause: impl Into<String>) -> Self {
        StoreError::Unavailable {
            cause: cause.into(),
            may_be_recorded: false,
            source: None,
        }
    }

    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        StoreError::Corrupt(what.into())
    }
}
