//! The schedules' table (`<table>_schedules`): per schedule, the last tick considered, the
//! ticks verified, what was missed and when a tick last succeeded; and what operators read and
//! change in it (list, pause, resume, remove).

use std::time::SystemTime;

use idem_core::{Operation, StoreError};
use idem_store_postgres::extend::{from_micros, micros_sql};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::{failed, Queue};

/// A tick of a schedule, as a scheduled job's [`Job::tick`](crate::Job::tick) names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// The schedule's name.
    pub schedule: String,
    /// When the tick fell due (the job runs from then on).
    pub at: SystemTime,
}

/// What the schedules' table says of one schedule ([`Queue::schedules`]).
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

/// The schedules' statements, written once per queue.
#[derive(Debug)]
pub(crate) struct ScheduleSql {
    /// `$1` name, `$2` spec, `$3` now (µs): declares a schedule; a new one starts at `$3`
    /// (no catch-up before it existed).
    pub register: String,
    /// `$1` name: paused, last tick, verified through, paused at, resumed at (µs).
    pub load: String,
    /// `$1` name, `$2` last tick seen (µs), `$3` new last tick (µs), `$4` missed, `$5` next
    /// tick (µs or NULL): moves the last tick on, if no other scheduler did first.
    pub advance: String,
    /// `$1` name, `$2` verified through seen (µs), `$3` new verified through (µs), `$4` late
    /// ticks, `$5` latest success (µs or NULL).
    pub verify: String,
    /// `$1` keys: each job's state and finish time (µs).
    pub jobs: String,
    /// Every schedule's state, by name.
    pub list: String,
    /// `$1` name: pauses it (a pause already on keeps its start).
    pub pause: String,
    /// `$1` name: ends its pause, if it is paused.
    pub resume: String,
    /// `$1` name.
    pub remove: String,
    /// `$1` name, `$2` spec, `$3` stored definition (JSON text): a schedule of the database's.
    pub store: String,
    /// Every stored schedule: name, definition (JSON text).
    pub stored: String,
    /// The database's clock (µs).
    pub now: String,
}

fn ts(n: u8) -> String {
    format!("(timestamptz 'epoch' + ${n}::bigint * interval '1 microsecond')")
}

impl ScheduleSql {
    pub(crate) fn new(schema: &str, table: &str) -> ScheduleSql {
        let s = format!("\"{schema}\".\"{table}_schedules\"");
        let q = format!("\"{schema}\".\"{table}_queue\"");
        let us = micros_sql;
        ScheduleSql {
            register: format!(
                "INSERT INTO {s} (name, spec, last_tick, verified_through)
                 VALUES ($1, $2, {t3}, {t3})
                 ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, seen_at = now()",
                t3 = ts(3)
            ),
            load: format!(
                "SELECT paused, {}, {}, {}, {} FROM {s} WHERE name = $1",
                us("last_tick"),
                us("verified_through"),
                us("paused_at"),
                us("resumed_at")
            ),
            advance: format!(
                "UPDATE {s} SET last_tick = {t3}, missed = missed + $4,
                     last_missed_at = CASE WHEN $4 > 0 THEN now() ELSE last_missed_at END,
                     next_tick = {t5}
                 WHERE name = $1 AND last_tick = {t2}",
                t2 = ts(2),
                t3 = ts(3),
                t5 = ts(5)
            ),
            verify: format!(
                "UPDATE {s} SET verified_through = {t3}, missed = missed + $4,
                     last_missed_at = CASE WHEN $4 > 0 THEN now() ELSE last_missed_at END,
                     last_success_at = greatest(last_success_at, {t5})
                 WHERE name = $1 AND verified_through = {t2}",
                t2 = ts(2),
                t3 = ts(3),
                t5 = ts(5)
            ),
            jobs: format!(
                "SELECT key, state, {} FROM {q} WHERE key = ANY($1)",
                us("finished_at")
            ),
            list: format!(
                "SELECT name, spec, paused, {}, {}, missed, {}, {}, {} FROM {s} ORDER BY name",
                us("last_tick"),
                us("next_tick"),
                us("last_missed_at"),
                us("last_success_at"),
                us("seen_at")
            ),
            pause: format!(
                "UPDATE {s} SET paused_at = CASE WHEN paused THEN paused_at ELSE now() END,
                     resumed_at = CASE WHEN paused THEN resumed_at END,
                     paused = true
                 WHERE name = $1"
            ),
            resume: format!(
                "UPDATE {s} SET resumed_at = CASE WHEN paused THEN now() ELSE resumed_at END,
                     paused = false
                 WHERE name = $1"
            ),
            remove: format!("DELETE FROM {s} WHERE name = $1"),
            store: format!(
                "INSERT INTO {s} (name, spec, stored, last_tick, verified_through)
                 VALUES ($1, $2, $3::jsonb, now(), now())
                 ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, stored = excluded.stored"
            ),
            stored: format!(
                "SELECT name, stored::text FROM {s} WHERE stored IS NOT NULL ORDER BY name"
            ),
            now: format!("SELECT {}", us("now()")),
        }
    }
}

fn time(row: &PgRow, i: usize) -> Option<SystemTime> {
    row.get::<Option<i64>, _>(i).map(from_micros)
}

impl Queue {
    /// Every schedule's state, by name: what `idem schedules list` shows.
    pub async fn schedules(&self) -> Result<Vec<ScheduleState>, StoreError> {
        let rows = sqlx::query(&self.schedule_sql.list)
            .fetch_all(self.store.pool())
            .await
            .map_err(failed(Operation::Get))?;
        Ok(rows
            .iter()
            .map(|row| ScheduleState {
                name: row.get(0),
                spec: row.get(1),
                paused: row.get(2),
                last_tick: time(row, 3),
                next_tick: time(row, 4),
                missed: row.get::<i64, _>(5).unsigned_abs(),
                last_missed_at: time(row, 6),
                last_success_at: time(row, 7),
                seen_at: time(row, 8).unwrap_or(SystemTime::UNIX_EPOCH),
            })
            .collect())
    }

    /// Pauses the schedule `name` without a deploy: schedulers pass over its ticks from now
    /// on (neither enqueued nor counted as missed) until it is resumed; ticks that fell due
    /// before the pause are still enqueued or counted. Returns whether it exists.
    pub async fn pause_schedule(&self, name: &str) -> Result<bool, StoreError> {
        self.change(&self.schedule_sql.pause, name).await
    }

    /// Resumes the paused schedule `name`: it fires from its next tick after now (the ticks
    /// of the pause are not caught up). A schedule that is not paused is left as it is.
    /// Returns whether it exists.
    pub async fn resume_schedule(&self, name: &str) -> Result<bool, StoreError> {
        self.change(&self.schedule_sql.resume, name).await
    }

    async fn change(&self, statement: &str, name: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(statement)
            .bind(name)
            .execute(self.store.pool())
            .await
            .map_err(failed(Operation::Release))?;
        Ok(done.rows_affected() > 0)
    }

    /// Stores `schedule` in the database, replacing a stored one of its name: a schedule that
    /// no program declares, which a scheduler of [`stored_schedules`](Self::stored_schedules)
    /// (`idem worker`) fires. Its ticks start now.
    pub async fn store_schedule(&self, schedule: &crate::Schedule) -> Result<(), StoreError> {
        schedule
            .check()
            .map_err(|e| StoreError::msg(e.to_string()).during(Operation::Claim))?;
        sqlx::query(&self.schedule_sql.store)
            .bind(schedule.name())
            .bind(schedule.spec())
            .bind(schedule.to_stored().to_string())
            .execute(self.store.pool())
            .await
            .map_err(failed(Operation::Claim))?;
        Ok(())
    }

    /// The schedules stored in the database ([`store_schedule`](Self::store_schedule)). A
    /// stored definition this version cannot read is an error, naming it.
    pub async fn stored_schedules(&self) -> Result<Vec<crate::Schedule>, StoreError> {
        let rows = sqlx::query(&self.schedule_sql.stored)
            .fetch_all(self.store.pool())
            .await
            .map_err(failed(Operation::Get))?;
        rows.iter()
            .map(|row| {
                let name: String = row.get(0);
                let stored: String = row.get(1);
                let value: serde_json::Value = serde_json::from_str(&stored)
                    .map_err(|e| StoreError::msg(format!("stored schedule {name:?}: {e}")))?;
                crate::Schedule::from_stored(&name, &value)
                    .map_err(|e| StoreError::msg(e.to_string()).during(Operation::Get))
            })
            .collect()
    }

    /// Deletes the state of the schedule `name` (its jobs stay in the queue). For a schedule
    /// no longer in the code; one a running scheduler still declares starts again from its
    /// next tick. Returns whether it existed.
    pub async fn remove_schedule(&self, name: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(&self.schedule_sql.remove)
            .bind(name)
            .execute(self.store.pool())
            .await
            .map_err(failed(Operation::Purge))?;
        Ok(done.rows_affected() > 0)
    }
}
