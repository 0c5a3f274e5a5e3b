//! Period keys for recurring jobs: `daily-report:2026-11-01`, `invoice-run:2026-11`.
//!
//! **Compute the period from the time the job is *for*, never from when the delivery arrived.**
//! A scheduler fires `daily-report` for 2026-11-01 at 23:59:50; the first try times out and the
//! retry arrives at 00:00:05 on the 2nd. Keyed by arrival, the retry is `2026-11-02`: new work,
//! so the report runs twice, and the real 2026-11-02 run later is skipped as a duplicate. Keyed by
//! the scheduled time carried in the payload, both deliveries are `2026-11-01`.
//!
//! ```
//! use idem_core::period;
//! use std::time::{Duration, UNIX_EPOCH};
//!
//! let scheduled_for = UNIX_EPOCH + Duration::from_secs(1_793_577_590); // 2026-11-01T23:59:50Z
//! assert_eq!(period::day(scheduled_for), "2026-11-01");
//! assert_eq!(period::month(scheduled_for), "2026-11");
//! ```
//!
//! All periods are in UTC.

use std::time::{SystemTime, UNIX_EPOCH};

/// (year, month, day, hour) in UTC.
fn civil(at: SystemTime) -> (i64, u32, u32, u32) {
    let secs = match at.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs_f64().ceil() as i64),
    };
    let days = secs.div_euclid(86_400);
    let hour = (secs.rem_euclid(86_400) / 3_600) as u32;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, hour)
}

/// The UTC day of `at`: `2026-11-01`.
pub fn day(at: SystemTime) -> String {
    let (y, m, d, _) = civil(at);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The UTC month of `at`: `2026-11`.
pub fn month(at: SystemTime) -> String {
    let (y, m, _, _) = civil(at);
    format!("{y:04}-{m:02}")
}

/// The UTC hour of `at`: `2026-11-01T23`.
pub fn hour(at: SystemTime) -> String {
    let (y, m, d, h) = civil(at);
    format!("{y:04}-{m:02}-{d:02}T{h:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn known_dates() {
        assert_eq!(day(at(0)), "1970-01-01");
        assert_eq!(day(at(951_782_400)), "2000-02-29"); // leap day
        assert_eq!(day(at(1_793_577_590)), "2026-11-01");
        assert_eq!(hour(at(1_793_577_590)), "2026-11-01T23");
        assert_eq!(month(at(1_796_083_199)), "2026-11"); // 2026-11-30T23:59:59Z
        assert_eq!(month(at(1_796_083_200)), "2026-12");
        assert_eq!(day(UNIX_EPOCH - Duration::from_secs(1)), "1969-12-31");
    }

    #[test]
    fn every_day_of_four_centuries_round_trips_in_order() {
        let mut previous = String::new();
        for d in 0..146_097u64 {
            let today = day(at(d * 86_400 + 43_200));
            assert!(today > previous, "{today} after {previous}");
            previous = today;
        }
    }
}
