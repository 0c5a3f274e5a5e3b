//! What a record's row says, for every path that reads or writes one: its times (integer µs
//! since the Unix epoch), the answer a live record gives a claim, whether a fenced write
//! applied, and the errors the store reports.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_core::{Claim, Fence, Fenced, StoreError};
use sqlx::Row;

/// Now, in µs since the Unix epoch, from this process's clock.
pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// A duration in µs, as stored.
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 4)
}

/// A stored time (µs since the Unix epoch).
pub(crate) fn at(us: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us.max(0) as u64)
}

/// Whether a fenced write changed its record's row.
pub(crate) fn applied(rows: u64) -> Fenced {
    if rows == 1 {
        Fenced::Applied
    } else {
        Fenced::Lost
    }
}

/// The answer for a live record (a claim in progress, or a completion within its keep).
pub(crate) fn judge(
    row: &sqlx::sqlite::SqliteRow,
    fingerprint: Option<&str>,
    token: Option<i64>,
) -> Claim {
    let stored: Option<String> = row.get("fingerprint");
    if let (Some(stored), Some(asked)) = (stored.as_deref(), fingerprint) {
        if stored != asked {
            return Claim::Mismatch;
        }
    }
    let expires: i64 = row.get("expires_us");
    match row.get::<Option<i64>, _>("completed_us") {
        Some(completed) => Claim::Completed {
            completed_at: at(completed),
            output: row.get("output"),
        },
        None if token.is_some() && row.get::<Option<i64>, _>("token") == token => Claim::Acquired {
            fence: Fence(row.get::<i64, _>("fence") as u64),
            lease_expires_at: at(expires),
            taken_over: false,
        },
        None => Claim::InProgress {
            lease_expires_at: at(expires),
        },
    }
}

/// A store error for `e`, saying when it is the busy timeout.
pub(crate) fn store_error(e: sqlx::Error) -> StoreError {
    StoreError::new(error_message(is_busy(&e)), e)
}

/// Whether `e` is SQLite's lock held past the busy timeout.
pub(crate) fn is_busy(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.message().contains("locked") || d.message().contains("busy"))
}

/// What a failure says, `busy` or not.
pub(crate) fn error_message(busy: bool) -> &'static str {
    if busy {
        "the SQLite database stayed locked by another writer past the busy timeout"
    } else {
        "the SQLite store failed"
    }
}
