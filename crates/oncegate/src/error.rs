//! What can go wrong in the gate, sorted so a transport can answer it: the store (unavailable:
//! retry; a conflict: a stale token or a lost lease; not found), an outcome too large or not
//! JSON, an unusable CA file, or a pipeline that panicked.

use oncegate_store::StoreError;

use crate::trust::TrustError;

/// An error of the gate.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The store's answer (see [`StoreError`]: `Unavailable` is the only one a retry can fix).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An effect's result or failure text over the limit.
    #[error("the {what} is {bytes} bytes; keep it under {max} bytes with references (transaction, resource, rule version), not payloads")]
    TooLarge {
        /// `result` or `error`.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// An effect's result that is not JSON.
    #[error("the {what} is not JSON text")]
    NotJson {
        /// `result`.
        what: &'static str,
    },
    /// A CA file the authorities' HTTPS client cannot use.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// The pipeline panicked; the cause is in the log.
    #[error("the gate failed to decide this delivery; the cause is in its log")]
    Panicked,
}

impl GateError {
    /// Whether a retry can succeed (the store is unavailable).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, GateError::Store(e) if e.is_unavailable())
    }
}
