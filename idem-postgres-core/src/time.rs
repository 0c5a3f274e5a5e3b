//! Timestamps cross the wire as microseconds since the Unix epoch, computed by the database.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// SQL for a `timestamptz` expression as epoch microseconds (`bigint`).
pub fn micros_sql(expr: &str) -> String {
    format!("(extract(epoch from {expr}) * 1000000)::bigint")
}

/// SQL for where a drain's batch starts in a `timestamptz` index: one microsecond before
/// parameter `$n` (epoch µs, the previous batch's last value), or at the start when it is NULL
/// (the first batch). One microsecond early, so rows that share the previous batch's last
/// value, and a rounding of the epoch, are never passed over.
pub fn batch_start_sql(n: u8) -> String {
    format!(
        "coalesce(to_timestamp(0) + (${n}::bigint - 1) * interval '1 microsecond', '-infinity')"
    )
}

/// Epoch microseconds (as the statements return times) as a `SystemTime`.
pub fn from_micros(micros: i64) -> SystemTime {
    if micros >= 0 {
        UNIX_EPOCH + Duration::from_micros(micros.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_micros(micros.unsigned_abs())
    }
}

/// A `SystemTime` as epoch microseconds (negative before 1970), as the statements take times:
/// the inverse of [`from_micros`], saturating.
pub fn to_micros(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(since) => duration_micros(since),
        Err(before) => -duration_micros(before.duration()),
    }
}

/// A duration as whole microseconds for `$n * interval '1 microsecond'`, saturating.
pub fn duration_micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}
