//! What operators read and do to single jobs: counts, one job's state and result, dead
//! letters, cancelling, purging finished jobs, waking workers.

use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::{PgExecutor, Row};

use crate::db::fragments::{
    in_state, job_columns, job_info, Table, CHANNEL, COUNTED, LAPSED_SQL, MICROS,
};
use crate::job::{
    parse_payload, Attempt, DeadJob, JobInfo, JobResult, JobState, JobStatus, QueueStats,
};
use crate::job_record::{JOB_KEEP, QUEUE_SCOPE};
use idem_postgres_core::extend::{batch_start_sql, duration_micros, from_micros, micros_sql};

/// The operators' statements.
#[derive(Debug)]
pub struct AdminSql {
    /// `schema.table`, the notification payload of this queue.
    name: String,
    /// `$1` named queue: how many of its jobs waiting or running carry no HTTP target.
    #[cfg(feature = "http")]
    without_http_target: String,
    stats: String,
    /// `$1` key.
    status: String,
    /// `$1` key: the job as operators see it (`job_columns`).
    job: String,
    /// `$1` state filter (`queued`, `running`, `stale`, `done`, `dead`) or NULL, `$2` limit:
    /// jobs newest first, as operators see them.
    jobs: String,
    /// `$1` limit.
    list_dead: String,
    /// `$1` key. (The caller then notifies workers.)
    retry_dead: String,
    /// `$1` key.
    discard: String,
    /// `$1` older than (µs), `$2` limit, `$3` where the drain's previous batch ended (epoch µs,
    /// or NULL). Returns (jobs deleted, the last `finished_at` taken, epoch µs). A deleted job
    /// finished less than [`JOB_KEEP`](JOB_KEEP) ago leaves its record, completed at its
    /// `finished_at` and kept for the rest of its keep, where it has none (its done row was its
    /// record until then).
    purge_done: String,
    /// `$1` key, `$2` reason: cancels a queued job at once, or asks a running one (live or
    /// lapsed) to stop. Returns (the state it saw or NULL, cancelled now, asked).
    cancel: String,
    /// `$1` key: state, result, last error.
    result: String,
}

/// What a cancel found: the job's state (`None`: no such job), whether it was cancelled now,
/// and whether a running job was asked to stop.
pub type Cancelling = (Option<String>, bool, bool);

impl AdminSql {
    /// The statements of `t`'s queue.
    pub(crate) fn new(t: &Table) -> AdminSql {
        let (q, serial_table, records) = (&t.q, &t.serial_table, t.records);
        let micros = MICROS;
        let keep = duration_micros(JOB_KEEP);
        let is_running = in_state("state", "running");
        let is_dead = in_state("state", "dead");
        AdminSql {
            name: t.name.clone(),
            // The two states apart, so that each reads its own index (waiting, running).
            #[cfg(feature = "http")]
            without_http_target: format!(
                "SELECT count(*) FROM {q}
                 WHERE queue = $1 AND (state = 'queued' OR state = 'running')
                   AND NOT (payload ? 'http')"
            ),
            stats: format!(
                "SELECT count(*) FILTER (WHERE state = 'queued'),
                        count(*) FILTER (WHERE state = 'running' AND NOT {LAPSED_SQL}),
                        count(*) FILTER (WHERE {LAPSED_SQL}),
                        count(*) FILTER (WHERE state = 'done'),
                        count(*) FILTER (WHERE state = 'dead'),
                        count(*) FILTER (WHERE state = 'cancelled')
                 FROM {q}"
            ),
            status: format!(
                "SELECT state, {COUNTED}, max_attempts, last_error, payload::text, attempt_log::text,
                        {}, {}
                 FROM {q} WHERE key = $1",
                micros_sql("attempted_at"),
                micros_sql("finished_at")
            ),
            job: format!("SELECT {} FROM {q} WHERE key = $1", job_columns()),
            jobs: format!(
                "SELECT {} FROM {q} WHERE $1::text IS NULL
                     OR (state = $1 AND NOT ({LAPSED_SQL}))
                     OR ($1 = 'stale' AND {LAPSED_SQL})
                 ORDER BY created_at DESC LIMIT $2",
                job_columns()
            ),
            list_dead: format!(
                "SELECT key, payload::text, {COUNTED}, last_error,
                        (extract(epoch from finished_at) * 1000000)::bigint
                 FROM {q} WHERE state = 'dead' ORDER BY finished_at LIMIT $1"
            ),
            // Counted attempts start again (`unrun` takes them all) while `attempts`, the fence
            // of each claim, goes on growing: a worker that stalled on an earlier claim and
            // resumes cannot renew or settle the retried run's.
            retry_dead: format!(
                "UPDATE {q} SET state = 'queued', unrun = attempts, available_at = now(),
                     finished_at = NULL, cancel_requested_at = NULL, cancel_reason = NULL
                 WHERE key = $1 AND {is_dead}"
            ),
            discard: format!(
                "DELETE FROM {q} WHERE key = $1 AND ({is_dead} OR {})",
                in_state("state", "cancelled")
            ),
            // In `finished_at` order from where the drain's previous batch ended ($3), as the
            // records' purge does: the index entries of the jobs a drain deleted stay until
            // VACUUM, and a batch that started at the start of the done jobs would read past
            // them all. Cancelled jobs that never started go too, without a record (their key
            // may be enqueued again; one cancelled while or after it ran stays, as its key
            // enqueued again must not run it again), and so do the serial keys' rows that name
            // a purged job: a job done or cancelled holds no key, and a claim of the key since
            // (a newer holder) is read by the delete as it is now. Those rows are locked in
            // key order, the order claims lock them in, so the two never wait on each other.
            purge_done: format!(
                "WITH due AS (
                     SELECT key, finished_at FROM {q}
                     WHERE state = 'done' AND finished_at < now() - $1::bigint {micros}
                       AND finished_at >= {}
                     ORDER BY finished_at LIMIT $2
                     FOR UPDATE SKIP LOCKED
                 ), cancelled AS (
                     SELECT key FROM {q}
                     WHERE state = 'cancelled' AND finished_at < now() - $1::bigint {micros}
                       AND attempts = unrun AND attempted_at IS NULL
                     ORDER BY finished_at LIMIT $2
                     FOR UPDATE SKIP LOCKED
                 ), purged AS (
                     DELETE FROM {q} WHERE key = ANY(ARRAY(SELECT key FROM due))
                     RETURNING key, finished_at, serial_key
                 ), purged_cancelled AS (
                     DELETE FROM {q} WHERE key = ANY(ARRAY(SELECT key FROM cancelled))
                     RETURNING key, serial_key
                 ), gone AS (
                     SELECT key, serial_key FROM purged WHERE serial_key IS NOT NULL
                     UNION ALL
                     SELECT key, serial_key FROM purged_cancelled WHERE serial_key IS NOT NULL
                 ), unheld AS (
                     SELECT serial_key FROM {serial_table}
                     WHERE serial_key = ANY(ARRAY(SELECT serial_key FROM gone))
                       AND holder = ANY(ARRAY(SELECT key FROM gone))
                     ORDER BY serial_key
                     FOR UPDATE
                 ), unheld_keys AS (
                     DELETE FROM {serial_table}
                     WHERE serial_key = ANY(ARRAY(SELECT serial_key FROM unheld))
                       AND holder = ANY(ARRAY(SELECT key FROM gone))
                 ), kept AS ({})
                 SELECT (SELECT count(*) FROM purged) + (SELECT count(*) FROM purged_cancelled),
                        (SELECT {} FROM due)",
                batch_start_sql(3),
                records.insert_completed(
                    QUEUE_SCOPE,
                    &format!(
                        "SELECT key, finished_at AS completed_at,
                                finished_at + {keep}::bigint {micros} AS expires_at
                         FROM purged WHERE finished_at + {keep}::bigint {micros} > now()"
                    )
                ),
                micros_sql("max(finished_at)")
            ),
            cancel: format!(
                "WITH now_cancelled AS (
                     UPDATE {q} SET state = 'cancelled', finished_at = now(), last_error = $2,
                         worker = NULL
                     WHERE key = $1 AND {is_queued}
                     RETURNING 1
                 ),
                 asked AS (
                     UPDATE {q} SET cancel_requested_at = coalesce(cancel_requested_at, now()),
                         cancel_reason = coalesce(cancel_reason, $2)
                     WHERE key = $1 AND {is_running}
                     RETURNING 1
                 )
                 SELECT (SELECT state FROM {q} WHERE key = $1),
                        EXISTS (SELECT 1 FROM now_cancelled), EXISTS (SELECT 1 FROM asked)",
                is_queued = in_state("state", "queued"),
            ),
            result: format!("SELECT state, result, last_error FROM {q} WHERE key = $1"),
        }
    }

    /// Every statement, by name: what the plan tests read.
    #[cfg(feature = "testing")]
    pub fn named(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("stats", &self.stats),
            ("status", &self.status),
            ("job", &self.job),
            ("jobs", &self.jobs),
            ("list_dead", &self.list_dead),
            ("retry_dead", &self.retry_dead),
            ("discard", &self.discard),
            ("purge_done", &self.purge_done),
            ("cancel", &self.cancel),
            ("result", &self.result),
        ]
    }

    /// Counts of jobs by state.
    pub async fn stats<'e>(
        &self,
        executor: impl PgExecutor<'e>,
    ) -> Result<QueueStats, sqlx::Error> {
        let row = sqlx::query(&self.stats).fetch_one(executor).await?;
        let count = |i: usize| row.try_get::<i64, _>(i).map(i64::unsigned_abs);
        Ok(QueueStats {
            queued: count(0)?,
            running: count(1)?,
            stale: count(2)?,
            done: count(3)?,
            dead: count(4)?,
            cancelled: count(5)?,
        })
    }

    /// The job `key`'s state, attempts and log.
    pub async fn status<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        key: &str,
    ) -> Result<Option<JobStatus>, sqlx::Error> {
        let row = sqlx::query(&self.status)
            .bind(key)
            .fetch_optional(executor)
            .await?;
        row.map(|row| {
            let state = JobState::parse(row.try_get(0)?);
            let attempts = row.try_get::<i32, _>(1)?.unsigned_abs();
            let time =
                |i: usize| Ok::<_, sqlx::Error>(row.try_get::<Option<i64>, _>(i)?.map(from_micros));
            Ok(JobStatus {
                state,
                attempts,
                max_attempts: row.try_get::<i32, _>(2)?.unsigned_abs(),
                last_error: row.try_get(3)?,
                payload: parse_payload(row.try_get(4)?),
                attempt_log: Attempt::log(row.try_get(5)?, state, attempts, time(6)?, time(7)?),
            })
        })
        .transpose()
    }

    /// The job `key` as operators see it.
    pub async fn job<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        key: &str,
    ) -> Result<Option<JobInfo>, sqlx::Error> {
        let row = sqlx::query(&self.job)
            .bind(key)
            .fetch_optional(executor)
            .await?;
        Ok(row.as_ref().map(job_info))
    }

    /// Up to `limit` jobs, newest first, in the state `filter` names (every job without one).
    pub async fn jobs<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        filter: Option<&str>,
        limit: i64,
    ) -> Result<Vec<JobInfo>, sqlx::Error> {
        let rows = sqlx::query(&self.jobs)
            .bind(filter)
            .bind(limit)
            .fetch_all(executor)
            .await?;
        Ok(rows.iter().map(job_info).collect())
    }

    /// Up to `limit` dead-lettered jobs, oldest first.
    pub async fn dead<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        limit: i64,
    ) -> Result<Vec<DeadJob>, sqlx::Error> {
        let rows = sqlx::query(&self.list_dead)
            .bind(limit)
            .fetch_all(executor)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(DeadJob {
                    key: row.try_get(0)?,
                    payload: parse_payload(row.try_get(1)?),
                    attempts: row.try_get::<i32, _>(2)?.unsigned_abs(),
                    last_error: row.try_get(3)?,
                    failed_at: from_micros(row.try_get(4)?),
                })
            })
            .collect()
    }

    /// Puts the dead job `key` back in the queue with a fresh attempt count; whether it was
    /// dead. (The caller then wakes the workers.)
    pub async fn retry_dead<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        key: &str,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(&self.retry_dead)
            .bind(key)
            .execute(executor)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes the dead or cancelled job `key`; whether there was one.
    pub async fn discard<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        key: &str,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(&self.discard)
            .bind(key)
            .execute(executor)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// One purge batch: up to `limit` jobs finished more than `older_than` ago, from where the
    /// drain's previous batch ended (`from`, epoch µs). Returns (jobs deleted, the last
    /// `finished_at` taken, epoch µs).
    pub async fn purge_done<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        older_than: Duration,
        limit: i64,
        from: Option<i64>,
    ) -> Result<(u64, Option<i64>), sqlx::Error> {
        let row = sqlx::query(&self.purge_done)
            .bind(duration_micros(older_than))
            .bind(limit)
            .bind(from)
            .fetch_one(executor)
            .await?;
        Ok((row.try_get::<i64, _>(0)?.unsigned_abs(), row.try_get(1)?))
    }

    /// Cancels the queued job `key` at once, or asks the running one to stop, keeping
    /// `reason` as its last error.
    pub async fn cancel<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        key: &str,
        reason: &str,
    ) -> Result<Cancelling, sqlx::Error> {
        let row = sqlx::query(&self.cancel)
            .bind(key)
            .bind(reason)
            .fetch_one(executor)
            .await?;
        Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
    }

    /// How the job `key` ended, or [`JobResult::Pending`]; `None` without such a job.
    pub async fn result<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        key: &str,
    ) -> Result<Option<JobResult>, sqlx::Error> {
        let row = sqlx::query(&self.result)
            .bind(key)
            .fetch_optional(executor)
            .await?;
        row.map(|row| result(&row)).transpose()
    }

    /// Wakes the queue's idle workers in every process.
    pub async fn notify<'e>(&self, executor: impl PgExecutor<'e>) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(&self.name)
            .execute(executor)
            .await
            .map(|_| ())
    }

    /// How many jobs waiting or running in the named queue `queue` carry no HTTP target
    /// (`payload.http`).
    #[cfg(feature = "http")]
    pub async fn without_http_target<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        queue: &str,
    ) -> Result<u64, sqlx::Error> {
        let jobs: i64 = sqlx::query_scalar(&self.without_http_target)
            .bind(queue)
            .fetch_one(executor)
            .await?;
        Ok(jobs.unsigned_abs())
    }
}

/// A row of `result`: state, result, last error.
fn result(row: &PgRow) -> Result<JobResult, sqlx::Error> {
    let error: Option<String> = row.try_get(2)?;
    Ok(match JobState::parse(row.try_get(0)?) {
        JobState::Queued | JobState::Running => JobResult::Pending,
        JobState::Done => JobResult::Done(
            row.try_get::<Option<Vec<u8>>, _>(1)?
                .and_then(|bytes| serde_json::from_slice(&bytes).ok()),
        ),
        JobState::Dead => JobResult::Dead(error),
        JobState::Cancelled => JobResult::Cancelled(error),
    })
}
