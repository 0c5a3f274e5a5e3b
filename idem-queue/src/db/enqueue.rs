//! Storing jobs: one, one replacing a waiting job of its key, many in one statement; each
//! idempotent on its key.

use sqlx::{PgExecutor, Row};

use crate::db::fragments::{Table, MICROS};
use crate::job::NewJob;
use idem_postgres_core::extend::{duration_micros, to_micros};

/// The statements that store jobs.
#[derive(Debug)]
pub struct EnqueueSql {
    /// `$1` key, `$2` payload (JSON text), `$3` max attempts, `$4` run-after (epoch µs or
    /// NULL for now), `$5` delay (µs). Returns (inserted, same payload as the stored row).
    enqueue: String,
    /// `$1` key: the stored payload equals `$2`?
    same_payload: String,
    /// `enqueue`'s parameters: stores the job, or replaces a waiting one's. Returns (stored or
    /// replaced now, inserted rather than replaced, the stored payload is the same).
    enqueue_replacing: String,
    /// Arrays of `enqueue`'s parameters (`$1`..`$8`, one element per job): stores each job
    /// whose key is free, timed (`created_at`) in the batch's order and inserted in key order (two
    /// batches that share keys then meet them in one order: they wait, never deadlock).
    /// Returns per job, in order: (inserted, the stored or the batch's first
    /// payload of its key is the same; NULL when another transaction's job is not yet visible).
    enqueue_many: String,
}

/// What storing one job found.
#[derive(Debug, Clone, Copy)]
pub struct Stored {
    /// The job was stored now (inserted, or a waiting job of its key replaced).
    pub written: bool,
    /// It was inserted rather than replaced (as `written` without `replace`).
    pub inserted: bool,
    /// The stored job's payload is the same; `None` when that job is not visible to the
    /// statement (it committed after the statement's snapshot was taken).
    pub same: Option<bool>,
}

impl EnqueueSql {
    /// The statements of `t`'s queue.
    pub(crate) fn new(t: &Table) -> EnqueueSql {
        let q = &t.q;
        let micros = MICROS;
        EnqueueSql {
            enqueue: format!(
                "WITH inserted AS (
                     INSERT INTO {q} (key, payload, max_attempts, available_at, queue, priority,
                                      serial_key, traceparent)
                     VALUES ($1, $2::jsonb, $3,
                             COALESCE(to_timestamp($4::bigint / 1000000.0), now()) + $5::bigint {micros},
                             $6, $7, $8, $9)
                     ON CONFLICT (key) DO NOTHING
                     RETURNING 1
                 )
                 SELECT EXISTS (SELECT 1 FROM inserted),
                        (SELECT payload = $2::jsonb FROM {q} WHERE key = $1)"
            ),
            same_payload: format!("SELECT payload = $2::jsonb FROM {q} WHERE key = $1"),
            enqueue_replacing: format!(
                "WITH written AS (
                     INSERT INTO {q} AS q (key, payload, max_attempts, available_at, queue,
                                           priority, serial_key, traceparent)
                     VALUES ($1, $2::jsonb, $3,
                             COALESCE(to_timestamp($4::bigint / 1000000.0), now()) + $5::bigint {micros},
                             $6, $7, $8, $9)
                     ON CONFLICT (key) DO UPDATE
                     SET payload = excluded.payload, max_attempts = excluded.max_attempts,
                         available_at = excluded.available_at, queue = excluded.queue,
                         priority = excluded.priority, serial_key = excluded.serial_key,
                         traceparent = excluded.traceparent
                     WHERE q.state = 'queued'
                     RETURNING xmax = 0 AS inserted
                 )
                 SELECT EXISTS (SELECT 1 FROM written),
                        coalesce((SELECT inserted FROM written), false),
                        (SELECT payload = $2::jsonb FROM {q} WHERE key = $1)"
            ),
            enqueue_many: format!(
                "WITH input AS (
                     SELECT i.*, i.n = min(i.n) OVER (PARTITION BY i.key) AS first,
                            first_value(i.payload) OVER (PARTITION BY i.key ORDER BY i.n)
                                AS first_payload
                     FROM (
                         SELECT u.*, clock_timestamp() AS created_at
                         FROM unnest($1::text[], $2::jsonb[], $3::int[], $4::bigint[],
                                     $5::bigint[], $6::text[], $7::smallint[], $8::text[],
                                     $9::text[])
                              WITH ORDINALITY AS u(key, payload, max_attempts, run_after, delay,
                                                   queue, priority, serial_key, traceparent, n)
                     ) AS i
                 ),
                 inserted AS (
                     INSERT INTO {q} (key, payload, max_attempts, available_at, queue, priority,
                                      serial_key, traceparent, created_at)
                     SELECT key, payload, max_attempts,
                            COALESCE(to_timestamp(run_after / 1000000.0), now()) + delay {micros},
                            queue, priority, serial_key, traceparent, created_at
                     FROM input WHERE first ORDER BY key
                     ON CONFLICT (key) DO NOTHING
                     RETURNING key
                 )
                 SELECT i.first AND i.key IN (SELECT key FROM inserted),
                        CASE WHEN i.key IN (SELECT key FROM inserted) THEN i.payload = i.first_payload
                             ELSE (SELECT q.payload = i.payload FROM {q} q WHERE q.key = i.key) END
                 FROM input i ORDER BY i.n"
            ),
        }
    }

    /// Every statement, by name: what the plan tests read.
    #[cfg(feature = "testing")]
    pub fn named(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("enqueue", &self.enqueue),
            ("same_payload", &self.same_payload),
            ("enqueue_replacing", &self.enqueue_replacing),
            ("enqueue_many", &self.enqueue_many),
        ]
    }

    /// Stores `job` unless its key is taken (or, with [`NewJob::replace`], replaces the waiting
    /// job of its key), on `executor`.
    pub async fn enqueue<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        job: &NewJob,
    ) -> Result<Stored, sqlx::Error> {
        let statement = if job.replace {
            &self.enqueue_replacing
        } else {
            &self.enqueue
        };
        let row = sqlx::query(statement)
            .bind(job.key.as_str())
            .bind(&job.payload)
            .bind(job.max_attempts as i32)
            .bind(job.run_after.map(to_micros))
            .bind(duration_micros(job.delay))
            .bind(&job.queue)
            .bind(job.priority)
            .bind(job.serial_key.as_deref())
            .bind(job.traceparent.as_deref())
            .fetch_one(executor)
            .await?;
        let written: bool = row.try_get(0)?;
        Ok(if job.replace {
            Stored {
                written,
                inserted: row.try_get(1)?,
                same: row.try_get(2)?,
            }
        } else {
            Stored {
                written,
                inserted: written,
                same: row.try_get(1)?,
            }
        })
    }

    /// Whether the job stored under `key` has `payload`; `None` when there is none.
    pub async fn same_payload<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        key: &str,
        payload: &str,
    ) -> Result<Option<bool>, sqlx::Error> {
        sqlx::query_scalar(&self.same_payload)
            .bind(key)
            .bind(payload)
            .fetch_optional(executor)
            .await
    }

    /// Stores each of `jobs` whose key is free, in one statement; per job, in order: (stored
    /// now, the stored job's payload is the same, as [`Stored::same`]).
    pub async fn enqueue_many<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        jobs: &[NewJob],
    ) -> Result<Vec<(bool, Option<bool>)>, sqlx::Error> {
        let rows = sqlx::query(&self.enqueue_many)
            .bind(jobs.iter().map(|j| j.key.as_str()).collect::<Vec<_>>())
            .bind(jobs.iter().map(|j| j.payload.as_str()).collect::<Vec<_>>())
            .bind(
                jobs.iter()
                    .map(|j| j.max_attempts as i32)
                    .collect::<Vec<_>>(),
            )
            .bind(
                jobs.iter()
                    .map(|j| j.run_after.map(to_micros))
                    .collect::<Vec<_>>(),
            )
            .bind(
                jobs.iter()
                    .map(|j| duration_micros(j.delay))
                    .collect::<Vec<_>>(),
            )
            .bind(jobs.iter().map(|j| j.queue.as_str()).collect::<Vec<_>>())
            .bind(jobs.iter().map(|j| j.priority).collect::<Vec<_>>())
            .bind(
                jobs.iter()
                    .map(|j| j.serial_key.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(
                jobs.iter()
                    .map(|j| j.traceparent.as_deref())
                    .collect::<Vec<_>>(),
            )
            .fetch_all(executor)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect()
    }
}
