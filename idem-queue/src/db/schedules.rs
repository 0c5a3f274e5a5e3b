//! The schedules' table: declaring, advancing and verifying a schedule's ticks
//! (compare-and-set, so racing replicas count nothing twice), what operators read and change,
//! and the stored schedules.

use std::time::SystemTime;

use idem_postgres_core::extend::{from_micros, micros_sql, to_micros};
use sqlx::postgres::PgRow;
use sqlx::{PgExecutor, Row};

use crate::schedules::state::ScheduleState;

/// The schedules' statements, written once per queue.
#[derive(Debug)]
pub struct ScheduleSql {
    /// `$1` name, `$2` spec, `$3` now (µs): declares a schedule; a new one starts at `$3`
    /// (no catch-up before it existed).
    register: String,
    /// `$1` name: paused, last tick, verified through, paused at, resumed at (µs).
    load: String,
    /// `$1` name, `$2` last tick seen (µs), `$3` new last tick (µs), `$4` missed, `$5` next
    /// tick (µs or NULL): moves the last tick on, if no other scheduler did first.
    advance: String,
    /// `$1` name, `$2` verified through seen (µs), `$3` new verified through (µs), `$4` late
    /// ticks, `$5` latest success (µs or NULL).
    verify: String,
    /// `$1` keys: each job's state and finish time (µs).
    jobs: String,
    /// Every schedule's state, by name.
    list: String,
    /// `$1` name: pauses it (a pause already on keeps its start).
    pause: String,
    /// `$1` name: ends its pause, if it is paused.
    resume: String,
    /// `$1` name.
    remove: String,
    /// `$1` name, `$2` spec, `$3` stored definition (JSON text): a schedule of the database's.
    store: String,
    /// Every stored schedule: name, definition (JSON text).
    stored: String,
    /// The database's clock (µs).
    now: String,
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

/// A schedule's row, as a scheduler's pass reads it (times as system times).
#[derive(Debug, Clone, Copy)]
pub struct Loaded {
    /// Paused now.
    pub paused: bool,
    /// The last tick considered.
    pub last_tick: SystemTime,
    /// The ticks checked for completion up to here.
    pub verified_through: SystemTime,
    /// When the latest pause began.
    pub paused_at: Option<SystemTime>,
    /// When the latest pause ended.
    pub resumed_at: Option<SystemTime>,
}

fn time(row: &PgRow, i: usize) -> Result<Option<SystemTime>, sqlx::Error> {
    Ok(row.try_get::<Option<i64>, _>(i)?.map(from_micros))
}

impl ScheduleSql {
    /// Declares the schedule `name` (`spec`); a new one starts at `now`.
    pub async fn register<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        name: &str,
        spec: &str,
        now: SystemTime,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(&self.register)
            .bind(name)
            .bind(spec)
            .bind(to_micros(now))
            .execute(executor)
            .await
            .map(|_| ())
    }

    /// The schedule `name`'s row, if it has one.
    pub async fn load<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        name: &str,
    ) -> Result<Option<Loaded>, sqlx::Error> {
        let row = sqlx::query(&self.load)
            .bind(name)
            .fetch_optional(executor)
            .await?;
        row.map(|row| {
            Ok(Loaded {
                paused: row.try_get(0)?,
                last_tick: from_micros(row.try_get(1)?),
                verified_through: from_micros(row.try_get(2)?),
                paused_at: time(&row, 3)?,
                resumed_at: time(&row, 4)?,
            })
        })
        .transpose()
    }

    /// Moves the schedule `name`'s last tick from `seen` to `latest`, adding `missed`, if no
    /// other scheduler moved it first; whether it did.
    pub async fn advance<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        name: &str,
        seen: SystemTime,
        latest: SystemTime,
        missed: i64,
        next: Option<SystemTime>,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(&self.advance)
            .bind(name)
            .bind(to_micros(seen))
            .bind(to_micros(latest))
            .bind(missed)
            .bind(next.map(to_micros))
            .execute(executor)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Moves the schedule `name`'s verified ticks from `seen` to `through`, adding `late`
    /// missed and the latest `success` (epoch µs), if no other scheduler did first; whether it
    /// did.
    pub async fn verify<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        name: &str,
        seen: SystemTime,
        through: SystemTime,
        late: i64,
        success: Option<i64>,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(&self.verify)
            .bind(name)
            .bind(to_micros(seen))
            .bind(to_micros(through))
            .bind(late)
            .bind(success)
            .execute(executor)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The jobs of `keys` that exist: (key, state, finished at in epoch µs).
    pub async fn jobs<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        keys: &[String],
    ) -> Result<Vec<(String, String, Option<i64>)>, sqlx::Error> {
        let rows = sqlx::query(&self.jobs)
            .bind(keys)
            .fetch_all(executor)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
            .collect()
    }

    /// Every schedule's state, by name.
    pub async fn list<'e>(
        &self,
        executor: impl PgExecutor<'e>,
    ) -> Result<Vec<ScheduleState>, sqlx::Error> {
        let rows = sqlx::query(&self.list).fetch_all(executor).await?;
        rows.iter()
            .map(|row| {
                Ok(ScheduleState {
                    name: row.try_get(0)?,
                    spec: row.try_get(1)?,
                    paused: row.try_get(2)?,
                    last_tick: time(row, 3)?,
                    next_tick: time(row, 4)?,
                    missed: row.try_get::<i64, _>(5)?.unsigned_abs(),
                    last_missed_at: time(row, 6)?,
                    last_success_at: time(row, 7)?,
                    seen_at: time(row, 8)?.unwrap_or(SystemTime::UNIX_EPOCH),
                })
            })
            .collect()
    }

    /// Pauses (`true`) or resumes the schedule `name`; whether it exists.
    pub async fn pause<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        name: &str,
        pause: bool,
    ) -> Result<bool, sqlx::Error> {
        let statement = if pause { &self.pause } else { &self.resume };
        let done = sqlx::query(statement).bind(name).execute(executor).await?;
        Ok(done.rows_affected() > 0)
    }

    /// Deletes the schedule `name`'s row; whether it existed.
    pub async fn remove<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        name: &str,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(&self.remove)
            .bind(name)
            .execute(executor)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Stores the schedule `name` (`spec`, its definition as JSON text).
    pub async fn store<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        name: &str,
        spec: &str,
        stored: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(&self.store)
            .bind(name)
            .bind(spec)
            .bind(stored)
            .execute(executor)
            .await
            .map(|_| ())
    }

    /// Every stored schedule: (name, definition as JSON text).
    pub async fn stored<'e>(
        &self,
        executor: impl PgExecutor<'e>,
    ) -> Result<Vec<(String, String)>, sqlx::Error> {
        let rows = sqlx::query(&self.stored).fetch_all(executor).await?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect()
    }

    /// The database's clock.
    pub async fn now<'e>(&self, executor: impl PgExecutor<'e>) -> Result<SystemTime, sqlx::Error> {
        let now: i64 = sqlx::query_scalar(&self.now).fetch_one(executor).await?;
        Ok(from_micros(now))
    }
}
