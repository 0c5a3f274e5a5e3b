//! A schedule: parsed, validated, and the ticks it fires.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;
use serde_json::Value;

use super::tick::tick_key;
use crate::job::{EnqueueError, NewJob, DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE};

/// How far back a scheduler that was down enqueues the ticks it missed, by default: ticks
/// older than this when it comes back are counted as missed instead. An hour: a restart or a
/// deploy catches up, a weekend-long outage does not flood the queue with stale work.
pub const DEFAULT_CATCH_UP: Duration = Duration::from_secs(3600);

/// How long a tick's job may take to complete, by default, before the tick is reported as
/// missed (a metric, a warning, and `idem schedules list`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(15 * 60);

/// The longest schedule name: the name and an RFC 3339 time make the job's key.
pub const MAX_NAME_LEN: usize = 100;

/// Why a schedule cannot be built: said when it is declared, never at its first tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleError(pub(super) String);

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScheduleError {}

/// When a schedule fires.
#[derive(Clone)]
enum When {
    /// A cron expression read in a time zone.
    Cron { cron: Box<Cron>, zone: Tz },
    /// Every `interval`, counted from the Unix epoch (so every replica agrees on the ticks).
    Every(Duration),
}

/// A named schedule: when it fires, and the job each tick enqueues.
///
/// ```
/// use idem_queue::Schedule;
/// use std::time::Duration;
///
/// // 06:00 every day, Paris time; 5-field expressions, or 6 with seconds first.
/// let daily = Schedule::cron("daily-report", "0 6 * * *")?.time_zone("Europe/Paris")?;
/// // Every 30 seconds, with a payload for the handler and a shorter catch-up window.
/// let poll = Schedule::every("poll-feeds", Duration::from_secs(30))?
///     .payload(serde_json::json!({"feeds": "all"}))
///     .catch_up(Duration::from_secs(300));
/// assert_eq!(daily.name(), "daily-report");
/// # Ok::<_, idem_queue::ScheduleError>(())
/// ```
#[derive(Clone)]
pub struct Schedule {
    name: String,
    expression: String,
    when: When,
    payload: Value,
    catch_up: Duration,
    grace: Duration,
    max_attempts: u32,
    queue: String,
    /// Read from the database ([`Schedule::from_stored`]), not declared in code.
    stored: bool,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("name", &self.name)
            .field("spec", &self.spec())
            .field("catch_up", &self.catch_up)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

fn check_name(name: &str) -> Result<(), ScheduleError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(ScheduleError(format!(
            "invalid schedule name {name:?}: 1 to {MAX_NAME_LEN} ASCII letters, digits, '-', '_' \
             or '.'"
        )))
    }
}

impl Schedule {
    /// A schedule named `name` firing on the cron expression `expression`: five fields
    /// (minute, hour, day of month, month, day of week) or six (seconds first), with lists,
    /// ranges, steps, names and `@daily`-style nicknames. Read in UTC unless
    /// [`time_zone`](Self::time_zone) says otherwise.
    ///
    /// Fails, saying why, for an invalid name or expression, or one that never fires.
    pub fn cron(name: impl Into<String>, expression: &str) -> Result<Schedule, ScheduleError> {
        let name = name.into();
        check_name(&name)?;
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|e| {
                ScheduleError(format!(
                    "schedule {name:?}: invalid cron expression {expression:?}: {e}"
                ))
            })?;
        let schedule = Schedule::new(
            name,
            expression.to_owned(),
            When::Cron {
                cron: Box::new(cron),
                zone: Tz::UTC,
            },
        );
        if schedule.next_after(SystemTime::now()).is_none() {
            return Err(ScheduleError(format!(
                "schedule {:?}: the cron expression {expression:?} never fires",
                schedule.name
            )));
        }
        Ok(schedule)
    }

    /// A schedule named `name` firing every `interval` (at least one second), on the multiples
    /// of `interval` since the Unix epoch: every replica computes the same ticks.
    pub fn every(name: impl Into<String>, interval: Duration) -> Result<Schedule, ScheduleError> {
        let name = name.into();
        check_name(&name)?;
        if interval < Duration::from_secs(1) || interval.subsec_nanos() != 0 {
            return Err(ScheduleError(format!(
                "schedule {name:?}: an interval is whole seconds, at least one (got {interval:?})"
            )));
        }
        let expression = format!("every {}s", interval.as_secs());
        Ok(Schedule::new(name, expression, When::Every(interval)))
    }

    fn new(name: String, expression: String, when: When) -> Schedule {
        Schedule {
            name,
            expression,
            when,
            payload: Value::Null,
            catch_up: DEFAULT_CATCH_UP,
            grace: DEFAULT_GRACE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            queue: DEFAULT_QUEUE.to_owned(),
            stored: false,
        }
    }

    /// Reads the cron expression in the IANA time zone `zone` (`"Europe/Paris"`). Across a
    /// daylight-saving change a fixed time runs once: a time the clocks skip (02:30 on a
    /// spring-forward night) runs at the first time after the gap, and a time they repeat runs
    /// at its first occurrence only. Expressions with steps or wildcards in their time fields
    /// run on each real occurrence instead. Fails for an unknown zone, or on an interval
    /// schedule.
    pub fn time_zone(mut self, zone: &str) -> Result<Schedule, ScheduleError> {
        let parsed = Tz::from_str(zone).map_err(|_| {
            ScheduleError(format!(
                "schedule {:?}: unknown time zone {zone:?} (an IANA name such as \
                 \"Europe/Paris\")",
                self.name
            ))
        })?;
        match &mut self.when {
            When::Cron { zone, .. } => *zone = parsed,
            When::Every(_) => {
                return Err(ScheduleError(format!(
                    "schedule {:?}: an interval has no time zone",
                    self.name
                )))
            }
        }
        Ok(self)
    }

    /// The named queue of every tick's job (default [`DEFAULT_QUEUE`]); checked with the
    /// schedule, before anything fires.
    pub fn queue(mut self, name: impl Into<String>) -> Schedule {
        self.queue = name.into();
        self
    }

    /// The payload of every tick's job (default `null`).
    pub fn payload(mut self, payload: Value) -> Schedule {
        self.payload = payload;
        self
    }

    /// How far back ticks missed while no scheduler ran are still enqueued (default
    /// [`DEFAULT_CATCH_UP`]); older ones are counted as missed.
    pub fn catch_up(mut self, window: Duration) -> Schedule {
        self.catch_up = window;
        self
    }

    /// How long a tick's job may take to complete before the tick is reported as missed
    /// (default [`DEFAULT_GRACE`]).
    pub fn grace(mut self, grace: Duration) -> Schedule {
        self.grace = grace;
        self
    }

    /// The attempts of each tick's job (default [`DEFAULT_MAX_ATTEMPTS`](DEFAULT_MAX_ATTEMPTS)).
    pub fn max_attempts(mut self, attempts: u32) -> Schedule {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the schedule fires on, as stored and shown to operators: the cron expression and
    /// its zone, or the interval.
    pub fn spec(&self) -> String {
        match &self.when {
            When::Cron { zone, .. } => format!("{} ({zone})", self.expression),
            When::Every(_) => self.expression.clone(),
        }
    }

    /// The first tick strictly after `after`, or `None` when there is none.
    pub fn next_after(&self, after: SystemTime) -> Option<SystemTime> {
        match &self.when {
            When::Every(interval) => {
                let since = after.duration_since(SystemTime::UNIX_EPOCH).ok()?;
                let step = interval.as_secs();
                let next = (since.as_secs() / step + 1) * step;
                Some(SystemTime::UNIX_EPOCH + Duration::from_secs(next))
            }
            When::Cron { cron, zone } => {
                // Ticks fall on whole seconds, whatever the fraction of the moment searched
                // from: replicas searching from different moments find the same ticks.
                let whole = after.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
                let after = SystemTime::UNIX_EPOCH + Duration::from_secs(whole);
                let at = DateTime::<Utc>::from(after).with_timezone(zone);
                let next = cron
                    .find_next_occurrence(&at, false)
                    .ok()
                    .map(|next| SystemTime::from(next.with_timezone(&Utc)))?;
                // Never a tick at or before the moment searched from, whatever a local-time
                // search makes of a repeated hour: a scheduler only moves forward.
                (next > after).then_some(next)
            }
        }
    }

    /// The ticks in `(after, until]`, oldest first, at most `limit` of them.
    pub(crate) fn ticks(
        &self,
        after: SystemTime,
        until: SystemTime,
        limit: usize,
    ) -> Vec<SystemTime> {
        let mut ticks = Vec::new();
        let mut at = after;
        while ticks.len() < limit {
            match self.next_after(at) {
                Some(next) if next <= until => {
                    ticks.push(next);
                    at = next;
                }
                _ => break,
            }
        }
        ticks
    }

    /// The job key of the tick at `at`: `schedule:NAME:2026-11-01T06:00:00Z` (the same on every
    /// replica, so the enqueue dedupes).
    pub fn tick_key(&self, at: SystemTime) -> String {
        tick_key(&self.name, at)
    }

    /// Fails for what would fail at every tick: a payload no job can carry, or a catch-up
    /// window under a second (every tick would be missed).
    pub(crate) fn check(&self) -> Result<(), ScheduleError> {
        if self.catch_up < Duration::from_secs(1) {
            return Err(ScheduleError(format!(
                "schedule {:?}: a catch-up window under a second would count every tick as \
                 missed",
                self.name
            )));
        }
        NewJob::new(self.tick_key(SystemTime::UNIX_EPOCH), &self.payload)
            .map(|job| job.queue(self.queue.clone()))
            .and_then(|job| job.check().map_err(EnqueueError::Invalid))
            .map_err(|e| ScheduleError(format!("schedule {:?}: {e}", self.name)))
    }

    pub(crate) fn payload_value(&self) -> &Value {
        &self.payload
    }

    pub(crate) fn catch_up_window(&self) -> Duration {
        self.catch_up
    }

    pub(crate) fn grace_period(&self) -> Duration {
        self.grace
    }

    pub(crate) fn attempts(&self) -> u32 {
        self.max_attempts
    }

    pub(crate) fn queue_name(&self) -> &str {
        &self.queue
    }

    /// Whether it was read from the database rather than declared in code.
    pub(crate) fn is_stored(&self) -> bool {
        self.stored
    }
}

impl Schedule {
    /// The schedule as a stored definition ([`Queue::store_schedule`](crate::Queue::store_schedule)):
    /// what [`from_stored`](Self::from_stored) builds it again from.
    pub fn to_stored(&self) -> Value {
        let (kind, zone) = match &self.when {
            When::Cron { zone, .. } => ("cron", Some(zone.name())),
            When::Every(_) => ("every", None),
        };
        let expression = match &self.when {
            When::Every(interval) => Value::from(interval.as_secs()),
            When::Cron { .. } => Value::from(self.expression.clone()),
        };
        serde_json::json!({
            "kind": kind,
            "expression": expression,
            "zone": zone,
            "catch_up_s": self.catch_up.as_secs(),
            "grace_s": self.grace.as_secs(),
            "max_attempts": self.max_attempts,
            "payload": self.payload,
            "queue": self.queue,
        })
    }

    /// The schedule named `name` that `stored` ([`to_stored`](Self::to_stored)'s form) defines.
    pub fn from_stored(name: &str, stored: &Value) -> Result<Schedule, ScheduleError> {
        let bad = |what: &str| ScheduleError(format!("stored schedule {name:?}: {what}"));
        let secs = |field: &str, default: Duration| {
            stored[field].as_u64().map_or(default, Duration::from_secs)
        };
        let schedule = match stored["kind"].as_str() {
            Some("cron") => {
                let expression = stored["expression"]
                    .as_str()
                    .ok_or_else(|| bad("no expression"))?;
                let schedule = Schedule::cron(name, expression)?;
                match stored["zone"].as_str() {
                    Some(zone) => schedule.time_zone(zone)?,
                    None => schedule,
                }
            }
            Some("every") => {
                let interval = stored["expression"]
                    .as_u64()
                    .ok_or_else(|| bad("no interval"))?;
                Schedule::every(name, Duration::from_secs(interval))?
            }
            _ => return Err(bad("unknown kind")),
        };
        let mut schedule = schedule;
        schedule.stored = true;
        Ok(schedule
            .catch_up(secs("catch_up_s", DEFAULT_CATCH_UP))
            .grace(secs("grace_s", DEFAULT_GRACE))
            .max_attempts(
                stored["max_attempts"]
                    .as_u64()
                    .map_or(DEFAULT_MAX_ATTEMPTS, |n| n as u32),
            )
            .payload(stored["payload"].clone())
            .queue(stored["queue"].as_str().unwrap_or(DEFAULT_QUEUE)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedules::tick::parse_tick_key;
    use chrono::TimeZone;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> SystemTime {
        SystemTime::from(Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap())
    }

    fn in_zone(zone: Tz, at: SystemTime) -> String {
        DateTime::<Utc>::from(at)
            .with_timezone(&zone)
            .format("%Y-%m-%d %H:%M:%S %Z")
            .to_string()
    }

    #[test]
    fn five_and_six_field_expressions_fire_on_their_ticks() {
        let minutely = Schedule::cron("m", "*/15 * * * *").unwrap();
        let ticks = minutely.ticks(utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 1, 1, 0, 0), 100);
        assert_eq!(ticks.len(), 4);
        assert_eq!(ticks[0], utc(2026, 1, 1, 0, 15, 0));
        let seconds = Schedule::cron("s", "*/20 * * * * *").unwrap();
        let ticks = seconds.ticks(utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 1, 0, 1, 0), 100);
        assert_eq!(
            ticks,
            [
                utc(2026, 1, 1, 0, 0, 20),
                utc(2026, 1, 1, 0, 0, 40),
                utc(2026, 1, 1, 0, 1, 0)
            ]
        );
        let daily = Schedule::cron("d", "@daily").unwrap();
        assert_eq!(
            daily.next_after(utc(2026, 1, 1, 12, 0, 0)),
            Some(utc(2026, 1, 2, 0, 0, 0))
        );
    }

    #[test]
    fn wrong_expressions_names_and_zones_are_refused_when_declared() {
        for bad in [
            "",
            "* * *",
            "61 * * * *",
            "* * * * * * * *",
            "0 0 31 2 *",
            "nonsense",
        ] {
            let error = Schedule::cron("bad", bad).unwrap_err().to_string();
            assert!(error.contains("\"bad\""), "{bad:?}: {error}");
        }
        for name in ["", "with space", "a:b", &"n".repeat(MAX_NAME_LEN + 1)] {
            assert!(Schedule::cron(name, "* * * * *").is_err(), "{name:?}");
        }
        let zone = Schedule::cron("z", "0 6 * * *")
            .unwrap()
            .time_zone("Mars/Olympus");
        assert!(zone.unwrap_err().to_string().contains("Mars/Olympus"));
        assert!(Schedule::every("i", Duration::from_millis(500)).is_err());
        assert!(Schedule::every("i", Duration::from_secs(1))
            .unwrap()
            .time_zone("UTC")
            .is_err());
    }

    /// Europe/Paris springs forward on 2026-03-29 at 02:00 (to 03:00): 02:30 does not exist
    /// that night. The daily 02:30 schedule fires once that day, right after the gap, and on
    /// the days around it at 02:30.
    #[test]
    fn a_time_the_clocks_skip_fires_once_after_the_gap() {
        let zone = Tz::Europe__Paris;
        let s = Schedule::cron("dst", "30 2 * * *")
            .unwrap()
            .time_zone("Europe/Paris")
            .unwrap();
        let ticks = s.ticks(utc(2026, 3, 27, 12, 0, 0), utc(2026, 3, 31, 12, 0, 0), 100);
        let shown: Vec<String> = ticks.iter().map(|t| in_zone(zone, *t)).collect();
        assert_eq!(
            shown,
            [
                "2026-03-28 02:30:00 CET",
                "2026-03-29 03:00:00 CEST",
                "2026-03-30 02:30:00 CEST",
                "2026-03-31 02:30:00 CEST",
            ]
        );
    }

    /// Europe/Paris falls back on 2026-10-25 at 03:00 (to 02:00): 02:30 happens twice that
    /// night. The daily 02:30 schedule fires once, at the first.
    #[test]
    fn a_time_the_clocks_repeat_fires_once() {
        let zone = Tz::Europe__Paris;
        let s = Schedule::cron("dst", "30 2 * * *")
            .unwrap()
            .time_zone("Europe/Paris")
            .unwrap();
        let ticks = s.ticks(
            utc(2026, 10, 24, 12, 0, 0),
            utc(2026, 10, 26, 12, 0, 0),
            100,
        );
        let shown: Vec<String> = ticks.iter().map(|t| in_zone(zone, *t)).collect();
        assert_eq!(
            shown,
            ["2026-10-25 02:30:00 CEST", "2026-10-26 02:30:00 CET"]
        );
    }

    /// Replicas search from different moments, most with a fraction of a second: the ticks
    /// they find are the same whole seconds.
    #[test]
    fn ticks_fall_on_whole_seconds_whatever_the_moment_searched_from() {
        let s = Schedule::cron("s", "* * * * * *").unwrap();
        let base = utc(2026, 1, 1, 0, 0, 0);
        for fraction in [0, 1, 527_750, 999_999] {
            let from = base + Duration::from_micros(fraction);
            assert_eq!(
                s.next_after(from),
                Some(base + Duration::from_secs(1)),
                "{fraction}"
            );
        }
    }

    /// Across the repeated hour of 2026-10-25 in Paris (02:00-02:59 happens in CEST, then in
    /// CET), a schedule with a step in its time fields fires on each real quarter hour, both
    /// passes included, in real-time order; a search that starts inside the second pass finds
    /// the next quarter hour of that pass, never an earlier one.
    #[test]
    fn a_stepped_schedule_fires_every_real_quarter_through_a_repeated_hour() {
        let s = Schedule::cron("q", "*/15 * * * *")
            .unwrap()
            .time_zone("Europe/Paris")
            .unwrap();
        // 01:30 CEST to 03:30 CET: three real hours.
        let ticks = s.ticks(
            utc(2026, 10, 24, 23, 30, 0),
            utc(2026, 10, 25, 2, 30, 0),
            100,
        );
        assert_eq!(
            ticks.len(),
            12,
            "{:?}",
            ticks
                .iter()
                .map(|t| in_zone(Tz::Europe__Paris, *t))
                .collect::<Vec<_>>()
        );
        for pair in ticks.windows(2) {
            assert_eq!(
                pair[1].duration_since(pair[0]).unwrap(),
                Duration::from_secs(900)
            );
        }
        // 02:10 CET (01:10 UTC), inside the second pass.
        let inside = utc(2026, 10, 25, 1, 10, 0);
        assert_eq!(s.next_after(inside), Some(utc(2026, 10, 25, 1, 15, 0)));
    }

    #[test]
    fn intervals_tick_on_multiples_of_themselves_since_the_epoch() {
        let s = Schedule::every("i", Duration::from_secs(60)).unwrap();
        let ticks = s.ticks(utc(2026, 1, 1, 0, 0, 30), utc(2026, 1, 1, 0, 3, 0), 100);
        assert_eq!(
            ticks,
            [
                utc(2026, 1, 1, 0, 1, 0),
                utc(2026, 1, 1, 0, 2, 0),
                utc(2026, 1, 1, 0, 3, 0)
            ]
        );
        assert_eq!(
            s.ticks(utc(2026, 1, 1, 0, 0, 0), utc(2027, 1, 1, 0, 0, 0), 10)
                .len(),
            10
        );
    }

    #[test]
    fn a_schedule_stored_and_read_back_is_the_same_schedule() {
        let s = Schedule::cron("report", "0 6 * * 1-5")
            .unwrap()
            .time_zone("America/New_York")
            .unwrap()
            .catch_up(Duration::from_secs(120))
            .payload(serde_json::json!({"http": {"url": "http://x/"}}));
        let back = Schedule::from_stored("report", &s.to_stored()).unwrap();
        assert_eq!(back.to_stored(), s.to_stored());
        assert_eq!(back.spec(), "0 6 * * 1-5 (America/New_York)");
        let from = utc(2026, 1, 5, 0, 0, 0);
        assert_eq!(back.next_after(from), s.next_after(from));
        let every = Schedule::every("e", Duration::from_secs(90)).unwrap();
        let back = Schedule::from_stored("e", &every.to_stored()).unwrap();
        assert_eq!(back.spec(), "every 90s");
        assert!(Schedule::from_stored("x", &serde_json::json!({"kind": "cron"})).is_err());
    }

    #[test]
    fn a_tick_key_names_the_schedule_and_its_utc_time_and_reads_back() {
        let at = utc(2026, 11, 1, 6, 0, 0);
        let key = tick_key("daily-report", at);
        assert_eq!(key, "schedule:daily-report:2026-11-01T06:00:00Z");
        assert_eq!(parse_tick_key(&key), Some(("daily-report", at)));
        assert_eq!(parse_tick_key("welcome:42"), None);
    }
}
