//! sqlx errors as store errors, classified by SQLSTATE, never by message text.

use idem_core::StoreError;

/// SQLSTATE: the relation does not exist.
const UNDEFINED_TABLE: &str = "42P01";
/// SQLSTATE: the schema does not exist.
const INVALID_SCHEMA_NAME: &str = "3F000";
/// SQLSTATE: a lock wait ran past `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The SQLSTATE code of a database error, if it is one.
pub(crate) fn sqlstate(error: &sqlx::Error) -> Option<String> {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .map(|code| code.into_owned())
}

/// Wraps a sqlx error, keeping it as the source, with a message that says what to do.
pub fn store_error(error: sqlx::Error) -> StoreError {
    let message = match sqlstate(&error).as_deref() {
        Some(UNDEFINED_TABLE) | Some(INVALID_SCHEMA_NAME) => {
            "the idem tables do not exist or are out of date; migrate once at start-up \
             (`PgStore::migrate()` or `Queue::migrate()` in code, `idem migrate` from a shell)"
        }
        Some(LOCK_NOT_AVAILABLE) => {
            "the record is locked by another transaction that holds the same key (a \
             transactional handler of the same key and scope, or a transaction of your own on \
             idem's table) and the wait was cut at the store's lock timeout; the statement was \
             not applied"
        }
        Some(code) if code.starts_with("08") => "lost the connection to PostgreSQL",
        Some(code) if code.starts_with("57") => "PostgreSQL is shutting down or unavailable",
        Some(_) => "PostgreSQL refused the statement",
        None => match &error {
            sqlx::Error::PoolTimedOut => {
                "timed out waiting for a pooled connection (is PostgreSQL reachable, and is the \
                 pool large enough?)"
            }
            sqlx::Error::Io(_) | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => {
                "cannot reach PostgreSQL"
            }
            _ => "PostgreSQL call failed",
        },
    };
    StoreError::new(message, error)
}

/// A copy of `error` when it says PostgreSQL cannot be reached at all (no pooled connection came
/// in time, the pool is closed, or the connection's socket failed), so that every call that
/// waited on it can be answered with it; `None` for any other error.
pub(crate) fn unreachable_copy(error: &sqlx::Error) -> Option<sqlx::Error> {
    match error {
        sqlx::Error::PoolTimedOut => Some(sqlx::Error::PoolTimedOut),
        sqlx::Error::PoolClosed => Some(sqlx::Error::PoolClosed),
        sqlx::Error::WorkerCrashed => Some(sqlx::Error::WorkerCrashed),
        sqlx::Error::Io(e) => Some(sqlx::Error::Io(std::io::Error::new(
            e.kind(),
            e.to_string(),
        ))),
        _ => None,
    }
}

/// Errors after which the connection is gone: retrying on a fresh one is safe.
pub(crate) fn is_connection_lost(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
        || sqlstate(error).is_some_and(|code| code.starts_with("08") || code == "57P01")
}
