//! The schedules' table (`<table>_schedules`): per schedule, the last tick considered, the
//! ticks verified, what was missed and when a tick last succeeded; and what operators read and
//! change in it (list, pause, resume, remove).

use std::time::SystemTime;

use idem_core::{Operation, StoreError};
use idem_store_postgres::extend::from_micros;
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::schedule::Schedule;
use crate::queue::{failed, Queue};

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
            .map_err(failed(Operation::Schedule))?;
        Ok(done.rows_affected() > 0)
    }

    /// Stores `schedule` in the database, replacing a stored one of its name: a schedule that
    /// no program declares, which a scheduler of [`stored_schedules`](Self::stored_schedules)
    /// (`idem worker`) fires. Its ticks start now.
    pub async fn store_schedule(&self, schedule: &Schedule) -> Result<(), StoreError> {
        schedule
            .check()
            .map_err(|e| StoreError::msg(e.to_string()).during(Operation::Schedule))?;
        sqlx::query(&self.schedule_sql.store)
            .bind(schedule.name())
            .bind(schedule.spec())
            .bind(schedule.to_stored().to_string())
            .execute(self.store.pool())
            .await
            .map_err(failed(Operation::Schedule))?;
        Ok(())
    }

    /// The schedules stored in the database ([`store_schedule`](Self::store_schedule)). A
    /// stored definition this version cannot read is an error, naming it.
    pub async fn stored_schedules(&self) -> Result<Vec<Schedule>, StoreError> {
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
                Schedule::from_stored(&name, &value)
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
