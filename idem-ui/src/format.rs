//! Times and sizes as the pages show them.

use std::time::{Duration, SystemTime};

/// `at` in RFC 3339, UTC, to the second.
pub(crate) fn time(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// `at` as [`time`], or a dash.
pub(crate) fn maybe_time(at: Option<SystemTime>) -> String {
    at.map_or_else(|| "-".to_owned(), time)
}

/// How far `at` is from now: "in 3m 2s" or "5s ago".
pub(crate) fn relative(at: SystemTime) -> String {
    let now = SystemTime::now();
    let round = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
    match at.duration_since(now) {
        Ok(ahead) => format!("in {}", round(ahead)),
        Err(past) => format!("{} ago", round(past.duration())),
    }
}
