//! Completing jobs' calls: each job's record completed and the job marked done in one
//! statement, for one job or a batch, claiming the next jobs for the slots they free; and the
//! renewal of a running job's call, which extends its claim too.

use std::time::Duration;

use idem_core::Fence;
use sqlx::{PgConnection, PgExecutor, Row};
use tokio::time::Instant;

use crate::db::claim::{decode_claimed, Claiming};
use crate::db::fragments::{in_state, Table, MICROS};
use crate::job_record::QUEUE_SCOPE;
use crate::worker::claimed::Claimed;
use idem_postgres_core::extend::{batch_rows, duration_micros, fence_param, unseen};

/// The statements that complete jobs' calls, and renew them.
#[derive(Debug)]
pub struct CompleteSql {
    /// The store's completion of many jobs' calls (each key at most once: `$1` keys, `$2`
    /// fences, `$3` outputs, `$4` keeps in µs) that also marks each job done (`$5` attempts),
    /// so a finished job costs one statement. A job is marked done while its claim is still
    /// the attempt's and no other run's record holds its key; its record is completed where
    /// one is written with the call's fence, and none is written where there is none (the done
    /// row is the record). Returns, for each position `i` (from 1, in order), (call completed,
    /// job marked done).
    complete_and_done_many: String,
    /// `complete_and_done_many` that also claims more jobs, as `claim` does: up to `$6[i]`
    /// (`bigint[]`) of named queue `$9[i]` (`text[]`) for each `i` (`$7` lease in µs, `$8`
    /// worker, `$10` as `claim`'s `$5`), for the slots those jobs free: the completions' keys
    /// are never among them.
    /// Returns, first, a row per completion (`i`, call completed, job marked done, then NULLs),
    /// then a row per claimed job (NULL, NULL, NULL, then `claim`'s columns, then its queue).
    complete_and_claim_many: String,
    /// `complete_and_done_many` for one job: the same parameters, each a scalar (`$1` key,
    /// `$2` fence, `$3` output, `$4` keep in µs, `$5` attempt). Returns one row: (call
    /// completed, job marked done).
    complete_and_done_one: String,
    /// `complete_and_claim_many` for one job, with scalars as `complete_and_done_one` (`$6`
    /// limit, `$7` lease in µs, `$8` worker, `$9` named queue, `$10`, as there). Returns the same rows, the
    /// completion's first with `1` for its position.
    complete_and_claim_one: String,
    /// The store's renewal of a job's call (`$1` key, `$2` fence, `$3` lease in µs, `$5`
    /// holder) that also extends the job's claim (`$4` attempt): one renewal per job, on the
    /// lease policy of idem-core's `lease` module. Applies while the job's claim is this
    /// attempt's and the record is the call's or not written yet (then it writes it, in
    /// progress). Returns (records written or renewed, jobs extended).
    renew: String,
}

/// One job's completion: its call's record and its claim.
#[derive(Debug, Clone, Copy)]
pub struct Completing<'a> {
    /// The job's key.
    pub key: &'a str,
    /// The call's fence.
    pub fence: i64,
    /// The call's stored output.
    pub output: Option<&'a [u8]>,
    /// How long the record is kept (µs).
    pub keep: i64,
    /// The job's claim (its attempt).
    pub attempt: i32,
}

/// The jobs a completion claims for the slots it frees: in each of `queues`, as many as
/// `wanted` says (one named queue, one job, for a lone completion).
#[derive(Debug, Clone, Copy)]
pub struct ClaimNext<'a> {
    /// How many jobs each named queue's slots want.
    pub wanted: &'a [i64],
    /// The named queues.
    pub queues: &'a [&'a str],
    /// The claims' lease.
    pub lease: Duration,
    /// The workers' name in the queue's table.
    pub worker: &'a str,
    /// Whether to take back jobs whose lease lapsed too (first).
    pub rescue: bool,
    /// When the jobs must start by.
    pub start_by: Instant,
}

/// A row of a completion that claims: a completion's answer, or a job it claimed.
#[derive(Debug)]
pub enum CompletionRow {
    /// A completion's answer.
    Answer {
        /// Its position in the batch, from 0.
        at: usize,
        /// The call's record was completed.
        completed: bool,
        /// The job was marked done.
        done: bool,
    },
    /// A job claimed.
    Claimed {
        /// The job.
        job: Claimed,
        /// Its named queue.
        queue: String,
    },
}

/// A renewal's answer.
#[derive(Debug, Clone, Copy)]
pub struct Renewed {
    /// The call's records written or renewed: 1, or 0 when the record is another run's.
    pub records: u64,
    /// The job's claims extended: 1, or 0 when the claim is no longer this attempt's.
    pub jobs: u64,
    /// An operator asked to cancel the job.
    pub cancel: bool,
}

impl CompleteSql {
    /// The statements of `t`'s queue, claiming through `claiming`.
    pub(crate) fn new(t: &Table, claiming: &Claiming) -> CompleteSql {
        let (q, records) = (&t.q, t.records);
        let micros = MICROS;
        let complete_many = &records.complete_many();
        let (is_running, q_is_running, is_done, q_is_done) = (
            in_state("state", "running"),
            in_state("q.state", "running"),
            in_state("state", "done"),
            in_state("q.state", "done"),
        );
        let (keys, key_count) = (
            unseen("$1", "text[]"),
            unseen("cardinality($1::text[])", "bigint"),
        );
        // The completions of many jobs: each marks its job done while the job's claim is still
        // this attempt's and no other run's record holds its key, and completes the job's
        // record where one is written with the call's fence (a renewal or a journal entry
        // wrote it, or the call claimed it through the store). A job whose record was never
        // written gets none: its done row is its record until it is purged (`purge_done`
        // writes the record then, for the rest of its keep). Answered by
        // `completion_answers`: a completion sent again (its answer lost) finds its job done
        // with its attempt (`done_before`), and applies again. Both find the batch's jobs by
        // key (`batch_rows`): a check per completion by `key = ($1)[n.i]` would be a subquery
        // the planner may run hashed, reading every done job into the hash, as a generic plan
        // made while the queue had few done jobs or none counted does (a fresh deployment's,
        // kept until the queue is analyzed again).
        //
        // `done` finds each job's completion by its position in the batch (`array_position`,
        // a scan of the keys in memory), not by joining the batch unnested: nothing tells the
        // planner how many jobs a batch holds, and a generic plan pairs the two in a nested
        // loop that reads the whole batch again for each job, a cost that grows with the
        // square of the batch (and batches of a hundred completions are common once slots
        // free up before their completions are written). Its check of each job's record is a
        // subquery of its own (`OFFSET 0`), so that it is a lookup by key in any plan (joined,
        // a plan made on a records table analyzed empty reads the whole scope).
        let at = format!("array_position({keys}, q.key)");
        let complete_and_done = format!(
            "WITH done AS (
                 UPDATE {q} AS q SET state = 'done', finished_at = now(), worker = NULL,
                     result = ($3::bytea[])[{at}], attempted_at = coalesce(q.attempted_at, now())
                 WHERE q.key = ANY({keys}) AND q.attempts = ($5::int[])[{at}] AND {q_is_running}
                   AND NOT EXISTS ({} OFFSET 0)
                 RETURNING {at}::bigint AS i
             ),
             done_before AS (
                 SELECT d.i
                 FROM {q} AS q, unnest({keys}, $5::int[]) WITH ORDINALITY AS d(key, attempts, i)
                 WHERE {in_batch} AND q.attempts = d.attempts AND {q_is_done}
             ),
             updated AS ({complete_many})",
            records.held_by_another(QUEUE_SCOPE, "q.key", &format!("($2::bigint[])[{at}]")),
            in_batch = batch_rows("q", &keys, "d"),
        );
        // The same for one job, with scalar parameters: no arrays for the server to unnest and
        // join, a sizeable share of a lone completion's server time (and at one worker every
        // completion goes alone).
        let complete_and_done_one = format!(
            "WITH done AS (
                 UPDATE {q} AS q SET state = 'done', finished_at = now(), worker = NULL,
                     result = $3, attempted_at = coalesce(q.attempted_at, now())
                 WHERE q.key = $1 AND q.attempts = $5 AND {q_is_running}
                   AND NOT EXISTS ({})
                 RETURNING 1
             ),
             updated AS ({} RETURNING 1)",
            records.held_by_another(QUEUE_SCOPE, "$1", "$2"),
            records.complete(),
        );
        let completion_answer = format!(
            "EXISTS (SELECT 1 FROM updated) OR EXISTS (SELECT 1 FROM done)
                 OR EXISTS (
                     SELECT 1 FROM {q} WHERE key = $1 AND attempts = $5 AND {is_done}
                 ),
             EXISTS (SELECT 1 FROM done)"
        );
        // Per completion `n.i`: (call completed, job marked done).
        let completion_answers = "n.i IN (SELECT i FROM updated) OR n.i IN (SELECT i FROM done)
                 OR n.i IN (SELECT i FROM done_before),
             n.i IN (SELECT i FROM done)";
        let and_claim = |completing: &str, answers: &str, from: &str, claiming_cte: &str| {
            claiming.and_claim(completing, answers, from, claiming_cte)
        };
        let claimed =
            |limit: &str, lease: &str, worker: &str, queue: &str, also: &str, rescue: &str| {
                claiming.claimed(limit, lease, worker, queue, also, rescue)
            };
        let claimed_in =
            |limits: &str, lease: &str, worker: &str, queues: &str, also: &str, rescue: &str| {
                claiming.claimed_in(limits, lease, worker, queues, also, rescue)
            };
        CompleteSql {
            complete_and_done_many: format!(
                "{complete_and_done}
                 SELECT {completion_answers}
                 FROM generate_series(1, {key_count}) AS n(i)
                 ORDER BY n.i"
            ),
            complete_and_claim_many: and_claim(
                &complete_and_done,
                &format!("n.i, {completion_answers}"),
                &format!("FROM generate_series(1, {key_count}) AS n(i)"),
                &claimed_in(
                    "$6",
                    "$7",
                    "$8",
                    "$9",
                    &format!("AND j.key <> ALL({keys})"),
                    "$10",
                ),
            ),
            complete_and_done_one: format!("{complete_and_done_one} SELECT {completion_answer}"),
            complete_and_claim_one: and_claim(
                &complete_and_done_one,
                &format!("1::bigint, {completion_answer}"),
                "",
                &claimed(
                    "$6",
                    "$7",
                    "$8",
                    "$9",
                    &format!("AND j.key <> {}", unseen("$1", "text")),
                    "$10",
                ),
            ),
            // The job's claim is extended while it is still this attempt's; the record is
            // renewed when it is written with the call's fence, and written (the first
            // renewal of a job whose claim reserved its fence) when there is none.
            renew: format!(
                "WITH job AS (
                     UPDATE {q} SET available_at = now() + $3::bigint {micros}
                     WHERE key = $1 AND attempts = $4 AND {is_running}
                     RETURNING cancel_requested_at IS NOT NULL AS cancel
                 ),
                 held AS ({})
                 SELECT (SELECT count(*) FROM held), (SELECT count(*) FROM job),
                        coalesce((SELECT bool_or(cancel) FROM job), false)",
                records.hold(
                    QUEUE_SCOPE,
                    "SELECT $1::text AS key, $2::bigint AS fence FROM job",
                    &format!("$3::bigint {micros}"),
                    "$5::text"
                )
            ),
        }
    }

    /// Every statement, by name: what the plan tests read.
    #[cfg(feature = "testing")]
    pub fn named(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("complete_and_done_many", &self.complete_and_done_many),
            ("complete_and_claim_many", &self.complete_and_claim_many),
            ("complete_and_done_one", &self.complete_and_done_one),
            ("complete_and_claim_one", &self.complete_and_claim_one),
            ("renew", &self.renew),
        ]
    }

    /// Completes one job's call and marks it done: (call completed, job marked done). Its
    /// statement takes scalars, so the server sets up no arrays to unnest and join: at one
    /// worker, where every completion goes alone, that is a sizeable share of the server's
    /// CPU per job.
    pub async fn complete_one(
        &self,
        conn: &mut PgConnection,
        c: &Completing<'_>,
    ) -> Result<(bool, bool), sqlx::Error> {
        let row = Self::bind_one(&self.complete_and_done_one, c)
            .fetch_one(&mut *conn)
            .await?;
        Ok((row.try_get(0)?, row.try_get(1)?))
    }

    /// [`complete_one`](Self::complete_one) that also claims the next job for the slot it
    /// frees (`next`: one named queue): the completion's row, then the job claimed, if any.
    pub async fn complete_one_and_claim(
        &self,
        conn: &mut PgConnection,
        c: &Completing<'_>,
        next: &ClaimNext<'_>,
    ) -> Result<Vec<CompletionRow>, sqlx::Error> {
        let rows = Self::bind_one(&self.complete_and_claim_one, c)
            .bind(next.wanted.first().copied().unwrap_or(1))
            .bind(duration_micros(next.lease))
            .bind(next.worker)
            .bind(next.queues.first().copied().unwrap_or_default())
            .bind(next.rescue)
            .fetch_all(&mut *conn)
            .await?;
        rows.iter()
            .map(|row| completion_row(row, next.start_by))
            .collect()
    }

    /// Completes many jobs' calls in one statement (each key at most once): per job, in
    /// order, (call completed, job marked done).
    pub async fn complete_many(
        &self,
        conn: &mut PgConnection,
        batch: &[Completing<'_>],
    ) -> Result<Vec<(bool, bool)>, sqlx::Error> {
        let rows = Self::bind_many(&self.complete_and_done_many, batch)
            .fetch_all(&mut *conn)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect()
    }

    /// [`complete_many`](Self::complete_many) that also claims the next jobs for the slots
    /// they free (never one of the batch's keys): a row per completion, then a row per job
    /// claimed.
    pub async fn complete_many_and_claim(
        &self,
        conn: &mut PgConnection,
        batch: &[Completing<'_>],
        next: &ClaimNext<'_>,
    ) -> Result<Vec<CompletionRow>, sqlx::Error> {
        let rows = Self::bind_many(&self.complete_and_claim_many, batch)
            .bind(next.wanted)
            .bind(duration_micros(next.lease))
            .bind(next.worker)
            .bind(next.queues)
            .bind(next.rescue)
            .fetch_all(&mut *conn)
            .await?;
        rows.iter()
            .map(|row| completion_row(row, next.start_by))
            .collect()
    }

    /// `statement` with one completion bound, as scalars (`$1` to `$5`).
    fn bind_one<'q>(
        statement: &'q str,
        c: &Completing<'q>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        sqlx::query(statement)
            .bind(c.key)
            .bind(c.fence)
            .bind(c.output)
            .bind(c.keep)
            .bind(c.attempt)
    }

    /// `statement` with a batch's completions bound, as arrays (`$1` to `$5`).
    fn bind_many<'q>(
        statement: &'q str,
        batch: &'q [Completing<'q>],
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        sqlx::query(statement)
            .bind(batch.iter().map(|c| c.key).collect::<Vec<_>>())
            .bind(batch.iter().map(|c| c.fence).collect::<Vec<_>>())
            .bind(batch.iter().map(|c| c.output).collect::<Vec<_>>())
            .bind(batch.iter().map(|c| c.keep).collect::<Vec<_>>())
            .bind(batch.iter().map(|c| c.attempt).collect::<Vec<_>>())
    }

    /// Renews the call of the job `key` (record fence `fence`, for `lease`, held by
    /// `holder`) and extends the job's claim `attempt`: one renewal per job.
    pub async fn renew<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        key: &str,
        fence: Fence,
        lease: Duration,
        attempt: i32,
        holder: Option<&str>,
    ) -> Result<Renewed, sqlx::Error> {
        let row = sqlx::query(&self.renew)
            .bind(key)
            .bind(fence_param(fence))
            .bind(duration_micros(lease))
            .bind(attempt)
            .bind(holder)
            .fetch_one(executor)
            .await?;
        Ok(Renewed {
            records: row.try_get::<i64, _>(0)?.unsigned_abs(),
            jobs: row.try_get::<i64, _>(1)?.unsigned_abs(),
            cancel: row.try_get(2)?,
        })
    }
}

/// A row of a completion that claims: a completion (its position first, from 1), or a
/// claimed job (position NULL, `claim`'s columns from the fourth, its queue last).
fn completion_row(
    row: &sqlx::postgres::PgRow,
    start_by: Instant,
) -> Result<CompletionRow, sqlx::Error> {
    Ok(match row.try_get::<Option<i64>, _>(0)? {
        Some(i) => CompletionRow::Answer {
            at: usize::try_from(i - 1)
                .map_err(|_| sqlx::Error::Protocol(format!("no completion {i}")))?,
            completed: row.try_get(1)?,
            done: row.try_get(2)?,
        },
        None => CompletionRow::Claimed {
            job: decode_claimed(row, 3, start_by)?,
            queue: row.try_get(13)?,
        },
    })
}
