//! A schedule's tick as a job: the job's key names the schedule and the tick's time.

use std::time::SystemTime;

use chrono::{DateTime, SecondsFormat, Utc};

/// The prefix of every scheduled job's key: `schedule:NAME:TIME`.
pub(crate) const KEY_PREFIX: &str = "schedule:";

/// A tick of a schedule, as a scheduled job's [`Job::tick`](crate::Job::tick) names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// The schedule's name.
    pub schedule: String,
    /// When the tick fell due (the job runs from then on).
    pub at: SystemTime,
}

/// The key of `name`'s tick at `at`.
pub(crate) fn tick_key(name: &str, at: SystemTime) -> String {
    let time = DateTime::<Utc>::from(at).to_rfc3339_opts(SecondsFormat::AutoSi, true);
    format!("{KEY_PREFIX}{name}:{time}")
}

/// The schedule and tick time a scheduled job's key names, if it is one.
pub(crate) fn parse_tick_key(key: &str) -> Option<(&str, SystemTime)> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    // The name has no ':'; the time does.
    let (name, time) = rest.split_once(':')?;
    let at = DateTime::parse_from_rfc3339(time).ok()?;
    Some((name, SystemTime::from(at.with_timezone(&Utc))))
}
