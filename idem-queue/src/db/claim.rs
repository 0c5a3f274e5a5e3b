//! Claiming jobs: the claim-then-process statement (under a global limit too), the
//! claims that completions make for the slots they free, and the starts of prefetched jobs.

use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgExecutor, Row};
use tokio::time::Instant;

use crate::db::fragments::{in_state, logged, Table, COUNTED, MICROS};
use crate::job_record::QUEUE_SCOPE;
use crate::worker::claimed::Claimed;
use idem_postgres_core::extend::{duration_micros, micros_sql, unseen};

/// The parts every claiming statement is built of: the queue's claims, and the completions
/// that claim the next jobs for the slots they free.
pub(crate) struct Claiming {
    q: String,
    /// The fence of each claimed job's record, for jobs whose key has none yet (and that
    /// will run: attempts left). No record is written: the job's claim holds the key (see
    /// `job_store`).
    unheld: String,
    /// A claimed job's lease end (epoch µs), where its record's fence was reserved.
    lease_end: String,
    serial: String,
    serial_lapsed: String,
    serial_hold: String,
    lapsed: String,
}

impl Claiming {
    /// The parts for `t`'s queue.
    pub(crate) fn new(t: &Table) -> Claiming {
        let (q, serial_table) = (&t.q, &t.serial_table);
        let unheld = t.records.unheld(
            QUEUE_SCOPE,
            "SELECT key FROM claimed WHERE counted <= max_attempts",
        );
        let lease_end = format!(
            "CASE WHEN r.fence IS NOT NULL THEN {} END",
            micros_sql("c.available_at")
        );
        let now = unseen("now()", "timestamptz");
        let serial = format!(
            "(j.serial_key IS NULL OR NOT EXISTS (
                 SELECT 1 FROM {q} AS s
                 WHERE s.serial_key = j.serial_key
                   AND s.state IN ('queued', 'running') AND s.key <> j.key
                   AND ((s.created_at, s.key) < (j.created_at, j.key)
                        OR (s.state = 'running' AND s.available_at > {now}))))"
        );
        // A serial job whose worker stopped (its lease lapsed) still holds its key (below) until
        // a claim takes it over, which it may whatever the key's order: it was started first,
        // and its stalled worker may yet resume. Only another of the key's jobs running on a
        // live lease holds it back.
        let serial_lapsed = format!(
            "(j.serial_key IS NULL OR NOT EXISTS (
                 SELECT 1 FROM {q} AS s
                 WHERE s.serial_key = j.serial_key AND s.key <> j.key
                   AND s.state IN ('queued', 'running') AND {s_is_running}
                   AND s.available_at > {now}))",
            s_is_running = in_state("s.state", "running"),
        );
        // A running job whose lease lapsed is taken over: its attempt ended with its worker
        // (crashed, killed, stalled or cut off), logged as `lapsed` when the claim took it.
        let lapsed = logged(
            COUNTED,
            "'lapsed'",
            "'its worker stopped renewing the lease (crashed, killed, stalled or cut off from \
              the database)'",
        );
        let serial_hold = format!(
            "serial_held AS (
                 INSERT INTO {serial_table} AS s (serial_key, holder, xact)
                 SELECT DISTINCT ON (p.serial_key) p.serial_key, p.key, pg_current_xact_id()
                 FROM picked AS p WHERE p.serial_key IS NOT NULL
                 ORDER BY p.serial_key, p.lapsed DESC, p.key
                 ON CONFLICT (serial_key) DO UPDATE SET holder = excluded.holder, xact = excluded.xact
                 WHERE s.holder = excluded.holder
                    OR (pg_visible_in_snapshot(s.xact, pg_current_snapshot())
                        AND NOT EXISTS (
                            SELECT 1 FROM {q} AS h
                            WHERE h.key = s.holder AND {h_is_running} OFFSET 0))
                 RETURNING serial_key, holder
             )",
            h_is_running = in_state("h.state", "running"),
        );
        Claiming {
            q: q.clone(),
            unheld,
            lease_end,
            serial,
            serial_lapsed,
            serial_hold,
            lapsed,
        }
    }

    /// Running jobs whose lease lapsed come first (from `q_leases`, by lease end), then
    /// waiting ones (from `q_waiting`, by priority). The limit above the two reads the
    /// second (and locks its rows) only for the slots the first left. The first is read
    /// only where `rescue` (a boolean parameter) is true: it reads its queue's entries of
    /// `q_leases` up to now, past those of every job finished more than a lease ago until
    /// VACUUM removes them, a cost a claim should not pay each time; the workers look for
    /// lapsed jobs once in a while instead (`completer::rescue::Rescue`).
    fn pick(&self, queue: &str, limit: &str, also: &str, rescue: &str) -> String {
        let Claiming {
            q,
            serial,
            serial_lapsed,
            ..
        } = self;
        format!(
            "SELECT p.key, p.lapsed, p.serial_key, p.priority, p.due FROM (
                 SELECT l.key, true AS lapsed, l.serial_key, l.priority, l.due FROM (
                     SELECT j.key, j.serial_key, j.priority, j.available_at AS due FROM {q} AS j
                     WHERE {rescue} AND j.state = 'running' AND j.available_at <= now()
                       AND j.queue = {queue} {also} AND {serial_lapsed}
                     ORDER BY j.available_at
                     LIMIT {limit}
                     FOR UPDATE SKIP LOCKED
                 ) AS l
                 UNION ALL
                 SELECT w.key, false, w.serial_key, w.priority, w.due FROM (
                     SELECT j.key, j.serial_key, j.priority, j.available_at AS due FROM {q} AS j
                     WHERE j.state = 'queued' AND j.available_at <= now()
                       AND j.queue = {queue} {also} AND {serial}
                     ORDER BY j.priority DESC, j.available_at
                     LIMIT {limit}
                     FOR UPDATE SKIP LOCKED
                 ) AS w
             ) AS p
             LIMIT {limit}"
        )
    }

    /// The jobs `picked` (a query of their keys, and whether each is a lapsed one) claimed
    /// for `worker` on a lease; each returned says whether it was lapsed, so the workers
    /// know to look for more (`completer::rescue::Rescue`).
    /// A claim for a job that starts at once (`started`, an SQL boolean) notes when it
    /// started; a prefetched job's is noted when it starts (`mark_started`). A lapsed job
    /// taken over that never started ended no attempt: its claim is counted in `unrun`
    /// (see migration 9), not logged. Each claimed job comes with its attempt as counted.
    /// Each picked job of a serial key takes its key's row (see migration 10) and is claimed
    /// only if the row names it already, or if the claim that wrote the row is on this
    /// statement's snapshot and the job it names no longer runs. A holder whose lease
    /// lapsed still runs: its worker may only have stalled, and would resume beside the
    /// next job; the key is free once a claim took the holder over (and ran it) instead. The row is
    /// written with `ON CONFLICT DO UPDATE`, which waits for a claim of the key in progress
    /// and reads the row's newest version: a claim whose snapshot missed the key's latest
    /// claim (its job committed late, or the claim slow) then finds a holder it cannot see
    /// and takes nothing, and `serial` above keeps later snapshots right. Keys are written
    /// in one order, so two claims never wait on each other's rows. Of a key's jobs picked
    /// together (a lapsed one taken over, and the key's first waiting one), the lapsed one
    /// is taken. The holder's job is read
    /// on the snapshot, which only ever shows it running longer than it does: a claim waits
    /// when it need not, never the other way.
    fn claim_picked(&self, picked: &str, lease: &str, worker: &str, started: &str) -> String {
        let Claiming {
            q,
            serial_hold,
            lapsed,
            ..
        } = self;
        let micros = MICROS;
        // Unseen, so that a custom plan's width for it cannot price it below the generic.
        let worker_unseen = unseen(worker, "text");
        format!(
            "picked AS MATERIALIZED ({picked}),
             {serial_hold},
             claimed AS (
                 UPDATE {q}
                 SET state = 'running', attempts = attempts + 1,
                     worker = {worker_unseen},
                     available_at = now() + {lease}::bigint {micros},
                     attempted_at = CASE WHEN {started} THEN now() END,
                     unrun = unrun + CASE WHEN state = 'running' AND attempted_at IS NULL
                                          THEN 1 ELSE 0 END,
                     attempt_log = CASE WHEN state = 'running' AND attempted_at IS NOT NULL
                                        THEN {lapsed} ELSE attempt_log END
                 WHERE key = ANY(ARRAY(SELECT key FROM picked))
                   AND (serial_key IS NULL
                        OR (serial_key, key) IN (SELECT serial_key, holder FROM serial_held))
                 RETURNING key, payload, attempts, max_attempts, available_at,
                           cancel_requested_at IS NOT NULL AS cancel_requested, traceparent,
                           queue, key IN (SELECT key FROM picked WHERE lapsed) AS lapsed,
                           attempts - unrun AS counted
             )"
        )
    }

    /// The queue's name is `unseen` too: a custom plan that knew it would look cheaper than
    /// the generic one, and a pool connection would then plan every claim anew.
    pub(crate) fn claimed(
        &self,
        limit: &str,
        lease: &str,
        worker: &str,
        queue: &str,
        also: &str,
        rescue: &str,
    ) -> String {
        self.claim_picked(
            &self.pick(
                &unseen(queue, "text"),
                &unseen(limit, "bigint"),
                also,
                &unseen(rescue, "bool"),
            ),
            lease,
            worker,
            "true",
        )
    }

    /// The same, claiming up to `limits[i]` jobs of named queue `queues[i]` for each `i`
    /// (SQL arrays): one statement for slots of several named queues.
    pub(crate) fn claimed_in(
        &self,
        limits: &str,
        lease: &str,
        worker: &str,
        queues: &str,
        also: &str,
        rescue: &str,
    ) -> String {
        self.claim_picked(
            &format!(
                "SELECT p.key, p.lapsed, p.serial_key FROM unnest({}, {}) AS w(queue, n),
                     LATERAL ({}) AS p",
                unseen(queues, "text[]"),
                unseen(limits, "bigint[]"),
                self.pick("w.queue", "w.n", also, &unseen(rescue, "bool"))
            ),
            lease,
            worker,
            "true",
        )
    }

    /// Completions (`completing`: their CTEs) that also claim jobs (`claiming`: a `claimed`
    /// CTE), never one that `also` rules out: a row per completion (`answers`, its position
    /// first, over `from`), then a row per claimed job with its named queue last, each padded
    /// with the other's NULLs.
    pub(crate) fn and_claim(
        &self,
        completing: &str,
        answers: &str,
        from: &str,
        claiming: &str,
    ) -> String {
        let Claiming {
            unheld, lease_end, ..
        } = self;
        format!(
            "{completing}, {claiming}, records AS ({unheld})
             SELECT {answers},
                    NULL::text, NULL::text, NULL::int, NULL::int, NULL::bigint, NULL::bigint,
                    NULL::bool, NULL::text, NULL::bool, NULL::int, NULL::text
             {from}
             UNION ALL
             SELECT NULL, NULL, NULL, c.key, c.payload::text, c.attempts, c.max_attempts,
                    r.fence, {lease_end}, c.cancel_requested, c.traceparent, c.lapsed,
                    c.counted, c.queue
             FROM claimed c LEFT JOIN records r ON r.key = c.key"
        )
    }
}

/// The statements that claim jobs for a set of workers.
#[derive(Debug)]
pub struct ClaimSql {
    /// `schema.table`, naming the queue's advisory lock.
    name: String,
    /// `$1` limit, `$2` lease (µs), `$3` worker, `$4` named queue, `$5` whether to take back
    /// jobs whose lease lapsed too (first), `$6` whether the jobs start at once (else each is
    /// marked when it starts: `mark_started`). The claim-then-process statement,
    /// which also reserves a fence for each job's idempotency record when the key has none yet
    /// (returning it and the claim's lease end), so a fresh job's call needs no claim
    /// statement of its own. It writes no record: the job's row is the record (see
    /// `job_store`).
    claim: String,
    /// `$1` limit, `$2` lease µs, `$3` worker, `$4` queue, `$5` the queue's global limit, `$6`
    /// as `claim`'s `$5`: the claim, never past the global limit (run under the queue's
    /// advisory lock).
    claim_limited: String,
    /// `$1` queue, `$2` its global limit: whether that many of its jobs run now.
    limit_reached: String,
    /// `$1` keys, `$2` attempts, `$3` worker: notes when prefetched jobs started, while their
    /// claims are those attempts' and that worker's.
    mark_started: String,
}

/// A claim for a set of workers' free slots.
#[derive(Debug, Clone, Copy)]
pub struct ClaimFor<'a> {
    /// How many jobs to claim, at most.
    pub limit: i64,
    /// The claims' lease.
    pub lease: Duration,
    /// The workers' name in the queue's table.
    pub worker: &'a str,
    /// The named queue.
    pub queue: &'a str,
    /// Whether to take back jobs whose lease lapsed too (first).
    pub rescue: bool,
    /// Whether the jobs start at once (else each one's start is marked when it starts).
    pub started: bool,
    /// When the jobs must start by (see [`Claimed::start_by`]).
    pub start_by: Instant,
}

impl ClaimSql {
    /// The statements of `t`'s queue, claiming through `claiming`.
    pub(crate) fn new(t: &Table, claiming: &Claiming) -> ClaimSql {
        let (q, keys) = (&t.q, unseen("$1", "text[]"));
        let q_is_running = in_state("q.state", "running");
        let (unheld, lease_end) = (&claiming.unheld, &claiming.lease_end);
        let claimed =
            |limit: &str, lease: &str, worker: &str, queue: &str, also: &str, rescue: &str| {
                claiming.claimed(limit, lease, worker, queue, also, rescue)
            };
        let claim_picked = |picked: &str, lease: &str, worker: &str, started: &str| {
            claiming.claim_picked(picked, lease, worker, started)
        };
        let pick = |queue: &str, limit: &str, also: &str, rescue: &str| {
            claiming.pick(queue, limit, also, rescue)
        };
        // In the order they were picked (taken-over jobs first, then by priority), which is the
        // order prefetching workers start them in.
        let in_order = "FROM claimed c LEFT JOIN records r ON r.key = c.key
                        JOIN picked p ON p.key = c.key
                        ORDER BY p.lapsed DESC, p.priority DESC, p.due, c.key";
        ClaimSql {
            name: t.name.clone(),
            claim: format!(
                "WITH {}, records AS ({unheld})
                 SELECT c.key, c.payload::text, c.attempts, c.max_attempts, r.fence, {lease_end},
                        c.cancel_requested, c.traceparent, c.lapsed, c.counted
                 {in_order}",
                claim_picked(
                    &pick(
                        &unseen("$4", "text"),
                        &unseen("$1", "bigint"),
                        "",
                        &unseen("$5", "bool"),
                    ),
                    "$2",
                    "$3",
                    &unseen("$6", "bool"),
                )
            ),
            // The places the global limit leaves, counted once (the limit is read by each
            // part of the pick).
            claim_limited: format!(
                "WITH places AS MATERIALIZED (
                     SELECT GREATEST(0, LEAST($1::bigint, $5::bigint - (
                         SELECT count(*) FROM {q}
                         WHERE queue = $4 AND state = 'running' AND available_at > now()))) AS n
                 ),
                 {}, records AS ({unheld})
                 SELECT c.key, c.payload::text, c.attempts, c.max_attempts, r.fence, {lease_end},
                        c.cancel_requested, c.traceparent, c.lapsed, c.counted
                 {in_order}",
                claimed("(SELECT n FROM places)", "$2", "$3", "$4", "", "$6")
            ),
            limit_reached: format!(
                "SELECT count(*) >= $2 FROM {q}
                 WHERE queue = $1 AND state = 'running' AND available_at > now()"
            ),
            // A mark sent again (its answer lost) finds its own: it matches the claim, not
            // the missing start.
            mark_started: format!(
                "UPDATE {q} AS q SET attempted_at = coalesce(q.attempted_at, now())
                 WHERE q.key = ANY({keys}) AND q.attempts = ($2::int[])[array_position({keys}, q.key)]
                   AND q.worker = $3 AND {q_is_running}"
            ),
        }
    }

    /// Every statement, by name: what the plan tests read.
    #[cfg(feature = "testing")]
    pub fn named(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("claim", &self.claim),
            ("claim_limited", &self.claim_limited),
            ("limit_reached", &self.limit_reached),
            ("mark_started", &self.mark_started),
        ]
    }

    /// Claims jobs for `claim`'s slots on `conn` (never sent again: a claim applied but
    /// unanswered would leave its jobs claimed while a second claim took others).
    pub async fn claim(
        &self,
        conn: &mut PgConnection,
        claim: &ClaimFor<'_>,
    ) -> Result<Vec<Claimed>, sqlx::Error> {
        let rows = sqlx::query(&self.claim)
            .bind(claim.limit)
            .bind(duration_micros(claim.lease))
            .bind(claim.worker)
            .bind(claim.queue)
            .bind(claim.rescue)
            .bind(claim.started)
            .fetch_all(&mut *conn)
            .await?;
        rows.iter()
            .map(|row| decode_claimed(row, 0, claim.start_by))
            .collect()
    }

    /// Claims jobs for `claim`'s slots, never past the named queue's `global` limit of running
    /// jobs: in a transaction under the queue's advisory lock, so that the count of its
    /// running jobs the statement reads (on a snapshot taken after the lock) is not stale.
    /// Also says whether the limit held jobs back (fewer claimed than `claim.limit`, and the
    /// limit reached). A transaction cut short (its caller went away) leaves the connection
    /// mid-way: the store closes it, its own or the pool's, and the server rolls it back.
    pub async fn claim_limited(
        &self,
        conn: &mut PgConnection,
        claim: &ClaimFor<'_>,
        global: i64,
    ) -> Result<(Vec<Claimed>, bool), sqlx::Error> {
        // The lock is named by the table and queue, hashed by the server.
        let lock = format!("idem_queue:{}:{}", self.name, claim.queue);
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(&lock)
            .execute(&mut *tx)
            .await?;
        let rows = sqlx::query(&self.claim_limited)
            .bind(claim.limit)
            .bind(duration_micros(claim.lease))
            .bind(claim.worker)
            .bind(claim.queue)
            .bind(global)
            .bind(claim.rescue)
            .fetch_all(&mut *tx)
            .await?;
        // Held back when the claim took fewer than it could and the limit is reached now (its
        // own jobs counted: the transaction sees them running).
        let blocked = (rows.len() as i64) < claim.limit
            && sqlx::query_scalar::<_, bool>(&self.limit_reached)
                .bind(claim.queue)
                .bind(global)
                .fetch_one(&mut *tx)
                .await?;
        tx.commit().await?;
        let claimed = rows
            .iter()
            .map(|row| decode_claimed(row, 0, claim.start_by))
            .collect::<Result<_, _>>()?;
        Ok((claimed, blocked))
    }

    /// Notes that the prefetched jobs `keys` (claims `attempts`) of `worker` started, while
    /// their claims are still those; returns how many are.
    pub async fn mark_started<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        keys: &[String],
        attempts: &[i32],
        worker: &str,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(&self.mark_started)
            .bind(keys)
            .bind(attempts)
            .bind(worker)
            .execute(executor)
            .await?;
        Ok(done.rows_affected())
    }
}

/// Decodes a claimed job from the columns of a claim (key, payload, attempts, max attempts,
/// record fence, record lease end, cancel requested, traceparent, lapsed, counted attempt)
/// starting at column `first`, to start by `start_by`.
pub(crate) fn decode_claimed(
    row: &PgRow,
    first: usize,
    start_by: Instant,
) -> Result<Claimed, sqlx::Error> {
    Ok(Claimed {
        key: row.try_get(first)?,
        payload: row.try_get(first + 1)?,
        attempt: row.try_get(first + 2)?,
        max_attempts: row.try_get(first + 3)?,
        record: row
            .try_get::<Option<i64>, _>(first + 4)?
            .zip(row.try_get::<Option<i64>, _>(first + 5)?),
        cancel_requested: row.try_get::<Option<bool>, _>(first + 6)?.unwrap_or(false),
        traceparent: row.try_get(first + 7)?,
        lapsed: row.try_get::<Option<bool>, _>(first + 8)?.unwrap_or(false),
        counted: row.try_get(first + 9)?,
        start_by,
        start_noted: true,
    })
}
