//! What a PostgreSQL refusal means to the caller, sorted once by its SQLSTATE: connection,
//! resources, shutdown, a lost serialization race or a statement timeout are `Unavailable` (a
//! retry can succeed: 503); a unique violation, or a second proof of one delivery
//! (`schema::DECIDED_ONCE`), is a `Conflict`; anything else is `Internal`
//! (the statement or the data is at fault). The driver's error is kept as the source, for the
//! log and for `retry` to recognize a lost race; its text is never shown.

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

use crate::error::StoreError;

/// Maps a driver error to what the caller can act on, with a short cause of our own words.
pub(super) fn pg_err(e: tokio_postgres::Error) -> StoreError {
    let Some(db) = e.as_db_error() else {
        // The connection failed under a statement already sent: the database may have run it,
        // a COMMIT included, and its answer is what was lost.
        let cause = if e.is_closed() {
            "the connection to the database closed"
        } else {
            "the connection to the database failed"
        };
        return StoreError::unanswered(cause, Some(e));
    };
    let code = db.code().clone();
    if code == SqlState::CHECK_VIOLATION && db.constraint() == Some(crate::schema::DECIDED_ONCE) {
        // A second proof of one delivery: its row refuses it, as a unique key would.
        return StoreError::Conflict("the delivery already has its proof".to_owned());
    }
    match class(&code) {
        ErrorClass::Unavailable(cause) => StoreError::unavailable(cause, e),
        ErrorClass::Conflict => {
            StoreError::Conflict("a uniqueness rule refused the write".to_owned())
        }
        ErrorClass::Internal => StoreError::Internal {
            sqlstate: code.code().to_owned(),
            source: Some(std::sync::Arc::new(e)),
        },
    }
}

/// What a SQLSTATE means to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorClass {
    /// A retry can succeed: the connection, the server's resources or a concurrent
    /// transaction stood in the way (a 503 for the service).
    Unavailable(&'static str),
    /// A unique constraint refused the write.
    Conflict,
    /// Anything else: the statement or the data is at fault and a retry fails the same way.
    Internal,
}

/// Sorts a SQLSTATE into what the service answers. Only availability is retryable: a 503
/// tells a provider to come back, and it would come back for days to a statement that can
/// never succeed.
fn class(code: &SqlState) -> ErrorClass {
    if *code == SqlState::UNIQUE_VIOLATION {
        return ErrorClass::Conflict;
    }
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        return ErrorClass::Unavailable("concurrent transactions kept colliding");
    }
    if *code == SqlState::QUERY_CANCELED || *code == SqlState::LOCK_NOT_AVAILABLE {
        return ErrorClass::Unavailable("the database gave up waiting on the statement");
    }
    match code.code().get(..2) {
        Some("08") => ErrorClass::Unavailable("the connection to the database failed"),
        Some("53") => ErrorClass::Unavailable("the database is out of resources"),
        Some("57") => ErrorClass::Unavailable("the database is shutting down or restarting"),
        Some("28") => ErrorClass::Unavailable("the database refused the credentials"),
        Some("3D") => ErrorClass::Unavailable("the database does not exist"),
        _ => ErrorClass::Internal,
    }
}

/// Maps a failure to get a pooled connection.
pub(super) fn pool_err(e: PoolError) -> StoreError {
    match e {
        // Whatever refuses a new connection (the database refusing connections, a shutdown, a
        // wrong password) is about reaching the database, never about a statement: a retry can
        // succeed once it is back.
        // Nothing was sent on a connection that was never made: nothing can be recorded.
        PoolError::Backend(e) => match pg_err(e) {
            StoreError::Internal { source, .. } => StoreError::Unavailable {
                cause: "the database refused a new connection".to_owned(),
                may_be_recorded: false,
                source,
            },
            StoreError::Unavailable { cause, source, .. } => StoreError::Unavailable {
                cause,
                may_be_recorded: false,
                source,
            },
            other => other,
        },
        PoolError::Timeout(_) => {
            StoreError::unavailable_plain("no database connection became available in time")
        }
        other => StoreError::unavailable("the database connection pool failed", other),
    }
}

/// A serialization failure or a deadlock: the transaction lost a race with another.
fn is_serialization(e: &tokio_postgres::Error) -> bool {
    matches!(e.code(), Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

/// Whether the store error is a transaction that lost a serialization race (its driver error
/// is kept as its source).
pub(super) fn lost_race(e: &StoreError) -> bool {
    match e {
        StoreError::Unavailable {
            source: Some(source),
            ..
        } => source
            .downcast_ref::<tokio_postgres::Error>()
            .is_some_and(is_serialization),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row per class: what a provider is told for each kind of database refusal.
    #[test]
    fn sqlstates_are_sorted_by_whether_a_retry_can_succeed() {
        let unavailable =
            |c: &str| matches!(class(&SqlState::from_code(c)), ErrorClass::Unavailable(_));
        // Connection loss, resources, shutdown.
        for c in ["08006", "08001", "53300", "53100", "57P01", "57P03"] {
            assert!(unavailable(c), "{c}");
        }
        // Serialization failure and deadlock (after the transaction's own retries ran out).
        assert!(unavailable("40001"));
        assert!(unavailable("40P01"));
        // A statement timeout or a lock wait given up.
        assert!(unavailable("57014"));
        assert!(unavailable("55P03"));
        assert_eq!(class(&SqlState::from_code("23505")), ErrorClass::Conflict);
        // Data exceptions (a NUL in text), missing tables, syntax, other constraints: defects.
        for c in [
            "22021", "22P02", "42P01", "42601", "42703", "23502", "23514", "XX000",
        ] {
            assert_eq!(class(&SqlState::from_code(c)), ErrorClass::Internal, "{c}");
        }
    }

    #[test]
    fn a_pool_timeout_is_unavailable_with_nothing_recorded() {
        let e = pool_err(PoolError::Timeout(deadpool_postgres::TimeoutType::Wait));
        assert!(e.is_unavailable(), "{e}");
        assert!(!e.may_be_recorded(), "no connection, nothing sent");
    }
}
