//! A schedule's state as the schedules' table (`<table>_schedules`) keeps it: the last tick
//! considered, the ticks verified, what was missed and when a tick last succeeded.

use std::time::SystemTime;

/// What the schedules' table says of one schedule ([`Queue::schedules`](crate::Queue::schedules)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleState {
    /// The schedule's name.
    pub name: String,
    /// What it fires on, as the code that last declared it said: the cron expression and its
    /// zone, or the interval.
    pub spec: String,
    /// Paused by an operator: its ticks are passed over, neither enqueued nor missed.
    pub paused: bool,
    /// The latest tick enqueued or counted as missed.
    pub last_tick: Option<SystemTime>,
    /// The next tick, as the last scheduler pass computed it.
    pub next_tick: Option<SystemTime>,
    /// Ticks missed: older than the catch-up window when a scheduler came back, or not
    /// completed within the grace period.
    pub missed: u64,
    /// When a missed tick was last counted.
    pub last_missed_at: Option<SystemTime>,
    /// When the latest tick verified as completed finished.
    pub last_success_at: Option<SystemTime>,
    /// When a scheduler last declared the schedule (one removed from the code stops firing; its
    /// row stays until removed).
    pub seen_at: SystemTime,
}

impl ScheduleState {
    /// The prefix every tick job of this schedule's key starts with, to list its ticks
    /// ([`JobsQuery::key_prefix`](crate::JobsQuery::key_prefix)).
    pub fn tick_key_prefix(&self) -> String {
        format!("{}{}:", super::tick::KEY_PREFIX, self.name)
    }

    /// The key of the job of its latest tick, if it had one.
    pub fn last_tick_key(&self) -> Option<String> {
        self.last_tick
            .map(|at| super::tick::tick_key(&self.name, at))
    }
}
