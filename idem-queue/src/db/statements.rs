//! The queue's statements, written once per [`Queue`](super::Queue) from its store's validated
//! names. Where a statement touches a job's idempotency record, it goes through the store's
//! records interface ([`RecordsSql`]) rather than spelling the records SQL again.

use crate::job_record::{JOB_KEEP, QUEUE_SCOPE};
use idem_store_postgres::extend::unseen;
use idem_store_postgres::extend::{batch_rows, RecordsSql};
use idem_store_postgres::extend::{batch_start_sql, duration_micros, micros_sql};
use idem_store_postgres::PgStore;

/// The SQL condition a row of the queue's table meets when its job is running on a lease that
/// lapsed: its worker died or stalled, and a claim that looks for such jobs takes it again.
/// [`QueueStats::stale`](crate::QueueStats::stale) counts these rows, and `idem jobs` shows their state as `stale`.
pub const LAPSED_SQL: &str = "(state = 'running' AND available_at <= now())";

/// The channel idle workers LISTEN on; the payload names the queue (`schema.table`).
pub(crate) const CHANNEL: &str = "idem_queue";

/// `column = 'state'`, compared in the "C" collation (bytes, as the default collation's
/// equality does) so that no plan can find a job through one of the queue's partial indexes,
/// whose predicates name the state in the default collation: a statement that finds its jobs by
/// key also checks their state this way. Otherwise a generic plan made on a queue never
/// analyzed, or analyzed while empty (an `ANALYZE` right after `migrate`), may read every
/// running job (`q_leases`) to find one by key, or every done job (`q_finished`), and the plan
/// is kept until the queue is analyzed again. `tests/plans.rs` checks both states.
fn in_state(column: &str, state: &str) -> String {
    format!("{column} COLLATE \"C\" = '{state}'")
}

/// Every statement of one queue.
#[derive(Debug)]
pub(crate) struct QueueSql {
    /// `schema.table`, the notification payload of this queue.
    pub(crate) name: String,
    /// `$1` key, `$2` payload (JSON text), `$3` max attempts, `$4` run-after (epoch µs or
    /// NULL for now), `$5` delay (µs). Returns (inserted, same payload as the stored row).
    pub(crate) enqueue: String,
    /// `$1` key: the job as operators see it (`job_columns`).
    pub(crate) job: String,
    /// `$1` state filter (`queued`, `running`, `stale`, `done`, `dead`) or NULL, `$2` limit:
    /// jobs newest first, as operators see them.
    pub(crate) jobs: String,
    /// `$1` key: the stored payload equals `$2`?
    pub(crate) same_payload: String,
    /// `enqueue`'s parameters: stores the job, or replaces a waiting one's. Returns (stored or
    /// replaced now, inserted rather than replaced, the stored payload is the same).
    pub(crate) enqueue_replacing: String,
    /// Arrays of `enqueue`'s parameters (`$1`..`$8`, one element per job): stores each job
    /// whose key is free, timed (`created_at`) in the batch's order and inserted in key order (two
    /// batches that share keys then meet them in one order: they wait, never deadlock).
    /// Returns per job, in order: (inserted, the stored or the batch's first
    /// payload of its key is the same; NULL when another transaction's job is not yet visible).
    pub(crate) enqueue_many: String,
    /// `$1` limit, `$2` lease (µs), `$3` worker, `$4` named queue, `$5` whether to take back
    /// jobs whose lease lapsed too (first), `$6` whether the jobs start at once (else each is
    /// marked when it starts: `mark_started`). The claim-then-process statement,
    /// which also reserves a fence for each job's idempotency record when the key has none yet
    /// (returning it and the claim's lease end), so a fresh job's call needs no claim
    /// statement of its own. It writes no record: the job's row is the record (see
    /// `job_store`).
    pub(crate) claim: String,
    /// `$1` limit, `$2` lease µs, `$3` worker, `$4` queue, `$5` the queue's global limit, `$6`
    /// as `claim`'s `$5`: the claim, never past the global limit (run under the queue's
    /// advisory lock).
    pub(crate) claim_limited: String,
    /// `$1` queue, `$2` its global limit: whether that many of its jobs run now.
    pub(crate) limit_reached: String,
    /// `$1` key, `$2` attempt, `$3` delay µs, `$4` message: back to the queue after the delay,
    /// the attempt given back, logged `snoozed`.
    pub(crate) snooze: String,
    /// `$1` key, `$2` attempt, `$3` reason: the running job ends `cancelled`.
    pub(crate) cancelled: String,
    /// `$1` key, `$2` reason: cancels a queued job at once, or asks a running one (live or
    /// lapsed) to stop. Returns (the state it saw or NULL, cancelled now, asked).
    pub(crate) cancel: String,
    /// `$1` key: state, result, last error.
    pub(crate) result: String,
    /// The store's renewal of a job's call (`$1` key, `$2` fence, `$3` lease in µs, `$5`
    /// holder) that also extends the job's claim (`$4` attempt): one renewal per job, on the
    /// lease policy of idem-core's `lease` module. Applies while the job's claim is this
    /// attempt's and the record is the call's or not written yet (then it writes it, in
    /// progress). Returns (records written or renewed, jobs extended).
    pub(crate) renew: String,
    /// `$1` keys, `$2` attempts, `$3` a result (or NULL): marks finished jobs done.
    pub(crate) done: String,
    /// The store's completion of many jobs' calls (each key at most once: `$1` keys, `$2`
    /// fences, `$3` outputs, `$4` keeps in µs) that also marks each job done (`$5` attempts),
    /// so a finished job costs one statement. A job is marked done while its claim is still
    /// the attempt's and no other run's record holds its key; its record is completed where
    /// one is written with the call's fence, and none is written where there is none (the done
    /// row is the record). Returns, for each position `i` (from 1, in order), (call completed,
    /// job marked done).
    pub(crate) complete_and_done_many: String,
    /// `complete_and_done_many` that also claims more jobs, as `claim` does: up to `$6[i]`
    /// (`bigint[]`) of named queue `$9[i]` (`text[]`) for each `i` (`$7` lease in µs, `$8`
    /// worker, `$10` as `claim`'s `$5`), for the slots those jobs free: the completions' keys
    /// are never among them.
    /// Returns, first, a row per completion (`i`, call completed, job marked done, then NULLs),
    /// then a row per claimed job (NULL, NULL, NULL, then `claim`'s columns, then its queue).
    pub(crate) complete_and_claim_many: String,
    /// `complete_and_done_many` for one job: the same parameters, each a scalar (`$1` key,
    /// `$2` fence, `$3` output, `$4` keep in µs, `$5` attempt). Returns one row: (call
    /// completed, job marked done).
    pub(crate) complete_and_done_one: String,
    /// `complete_and_claim_many` for one job, with scalars as `complete_and_done_one` (`$6`
    /// limit, `$7` lease in µs, `$8` worker, `$9` named queue, `$10`, as there). Returns the same rows, the
    /// completion's first with `1` for its position.
    pub(crate) complete_and_claim_one: String,
    /// `$1` key, `$2` attempt, `$3` delay (µs), `$4` error.
    pub(crate) retry: String,
    /// `$1` key, `$2` attempt, `$3` error.
    pub(crate) dead: String,
    /// `$1` keys, `$2` attempts, `$3` delay (µs), `$4` whether the jobs started (else only
    /// those whose start was noted are logged): gives claims back without counting them.
    pub(crate) release: String,
    /// `$1` keys, `$2` attempts, `$3` worker: notes when prefetched jobs started, while their
    /// claims are those attempts' and that worker's.
    pub(crate) mark_started: String,
    pub(crate) stats: String,
    /// `$1` state filter or NULL, `$2` queue or NULL, `$3` key prefix or NULL, `$4` the key the
    /// page starts at (inclusive), `$5` limit, `$6` the most rows read: a page in key order (the
    /// primary key).
    pub(crate) page_from: String,
    /// As `page_from`, starting just after the key `$4`.
    pub(crate) page_after: String,
    /// `$1` key, `$2` rows to pass: the key a page that started at `$1` read last when it read
    /// `$2 + 1` rows (none: it reached the end).
    pub(crate) scan_end_from: String,
    /// As `scan_end_from`, starting just after `$1`.
    pub(crate) scan_end_after: String,
    /// `$1` a finished state, `$2` finished at (epoch µs) and `$3` key of the previous page's
    /// last job, `$4` rows to pass: as `scan_end_from`, for `page_finished` (finished at, key).
    pub(crate) scan_end_finished: String,
    /// `$1` a finished state, `$2` queue or NULL, `$3` key prefix or NULL, `$4` finished at
    /// (epoch µs) and `$5` key of the previous page's last job, `$6` limit, `$7` the most rows
    /// read: a page of one finished state, newest first, from the finished jobs' index.
    pub(crate) page_finished: String,
    /// `$1` the most finished jobs read: counts by queue and state (a queue's rows to add up).
    pub(crate) queue_counts: String,
    /// `$1` keys: each job's key and state (`stale` for a lapsed claim).
    pub(crate) states_of: String,
    /// `$1` since (epoch µs): jobs done and dead per minute (epoch µs of the minute, done,
    /// dead), from the finished jobs' index.
    pub(crate) finished_per_minute: String,
    /// `$1` key.
    pub(crate) status: String,
    /// `$1` limit.
    pub(crate) list_dead: String,
    /// `$1` key. (The caller then notifies workers.)
    pub(crate) retry_dead: String,
    /// `$1` key.
    pub(crate) discard: String,
    /// `$1` older than (µs), `$2` limit, `$3` where the drain's previous batch ended (epoch µs,
    /// or NULL). Returns (jobs deleted, the last `finished_at` taken, epoch µs). A deleted job
    /// finished less than [`JOB_KEEP`](JOB_KEEP) ago leaves its record, completed at its
    /// `finished_at` and kept for the rest of its keep, where it has none (its done row was its
    /// record until then).
    pub(crate) purge_done: String,
}

/// The columns of a job as operators see it: key, state (`stale` for a lapsed claim),
/// attempts, max attempts, worker, last error, payload, created, available, finished (µs),
/// attempt log, attempted at (µs), queue, priority, serial key, cancel requested at (µs).
fn job_columns() -> String {
    format!(
        "key, CASE WHEN {LAPSED_SQL} THEN 'stale' ELSE state END, {COUNTED}, max_attempts,
         worker, last_error, payload::text, {}, {}, {}, attempt_log::text, {},
         queue, priority, serial_key, {}",
        micros_sql("created_at"),
        micros_sql("available_at"),
        micros_sql("finished_at"),
        micros_sql("attempted_at"),
        micros_sql("cancel_requested_at")
    )
}

/// The attempt log (`attempt_log`, see migration 4) with one more entry: the attempt numbered
/// `attempt` (an SQL expression of the row's), from `attempted_at` to now, its `outcome` and
/// `error` (SQL expressions); the oldest entry goes once there are more than
/// [`MAX_LOGGED_ATTEMPTS`].
fn logged(attempt: &str, outcome: &str, error: &str) -> String {
    let entry = format!(
        "jsonb_build_object('attempt', {attempt}, 'started_at', coalesce(attempted_at, now()),
                            'ended_at', now(),
                            'outcome', {outcome}, 'error', {error})"
    );
    format!(
        "CASE WHEN jsonb_array_length(attempt_log) >= {MAX_LOGGED_ATTEMPTS}
              THEN (attempt_log - 0) || {entry} ELSE attempt_log || {entry} END"
    )
}

/// A job's attempts as counted (for its limit, its log, and operators): its claims, less those
/// that ended no attempt (see migration 9): given back, snoozed, or lapsed before the job
/// started; and less all of them when an operator retries a dead job. `attempts` itself only
/// grows, so no two claims of a job share a fence, a retried job's included.
const COUNTED: &str = "(attempts - unrun)";

/// How many ended attempts a job's log keeps (the latest).
pub const MAX_LOGGED_ATTEMPTS: usize = 20;

/// SQL for the `timestamptz` of the epoch microseconds in `param` (exact: the product is a
/// double, exact below 2^53 µs, some 285 years).
fn from_micros_sql(param: &str) -> String {
    format!("('epoch'::timestamptz + {param}::bigint * interval '1 microsecond')")
}

impl QueueSql {
    pub(crate) fn new(store: &PgStore) -> QueueSql {
        let (schema, table) = store.names();
        let records: &RecordsSql = store.records();
        let q = format!("\"{schema}\".\"{table}_queue\"");
        let serial_table = format!("\"{schema}\".\"{table}_queue_serial\"");
        let micros = "* interval '1 microsecond'";
        let keep = duration_micros(JOB_KEEP);
        // Keyset paging: `key > ..` is a range of the primary key, so the plan walks the index
        // from there and stops when the page is full.
        // The inner range reads at most `$6` rows of the primary key; the outer filter stops it
        // as soon as the page is full (the executor pulls rows one by one).
        let page = |from: &str| {
            format!(
                "SELECT {} FROM (SELECT * FROM {q} WHERE key {from} $4::text
                                 ORDER BY key LIMIT $6) AS scan
                 WHERE ($1::text IS NULL OR (state = $1 AND NOT ({LAPSED_SQL}))
                        OR ($1 = 'stale' AND {LAPSED_SQL}))
                   AND ($2::text IS NULL OR queue = $2)
                   AND ($3::text IS NULL OR starts_with(key, $3))
                 ORDER BY key LIMIT $5",
                job_columns()
            )
        };
        let scan_end = |from: &str| {
            format!("SELECT key FROM {q} WHERE key {from} $1::text ORDER BY key OFFSET $2 LIMIT 1")
        };
        // The fence of each claimed job's record, for jobs whose key has none yet (and that
        // will run: attempts left). No record is written: the job's claim holds the key (see
        // `job_store`).
        let unheld = records.unheld(
            QUEUE_SCOPE,
            "SELECT key FROM claimed WHERE counted <= max_attempts",
        );
        let complete_many = &records.complete_many();
        let (is_running, q_is_running) =
            (in_state("state", "running"), in_state("q.state", "running"));
        let (is_done, q_is_done, is_dead) = (
            in_state("state", "done"),
            in_state("q.state", "done"),
            in_state("state", "dead"),
        );
        // A claimed job's lease end (epoch µs), where its record's fence was reserved.
        let lease_end = format!(
            "CASE WHEN r.fence IS NOT NULL THEN {} END",
            micros_sql("c.available_at")
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
        // Claims up to `limit` jobs for `worker` with a lease of `lease` µs (SQL expressions),
        // skipping any that `also` (a condition on `key`) rules out. The picked keys are an
        // array (`= ANY(ARRAY(..))`, not `IN (..)`) so that the update finds them by primary
        // key in any plan: a generic plan (the store's connections keep one per statement)
        // estimates a `LIMIT $n` at a tenth of the table, and plans `IN (..)` as a hash join
        // over a sequential scan of the whole queue, a cost that grows with the queue (and a
        // custom plan instead costs more planning per execution than the claim takes to run).
        // The limit, and the keys `also` names, are `unseen`, so that a connection that chooses
        // between custom and generic plans (the pool's) settles on the generic one too.
        //
        // Only jobs of the named queue `queue`: those a stopped worker left (lease lapsed)
        // first, then waiting ones by priority, then by when they became available; of a
        // serial key's jobs, only its first unfinished one in enqueue order
        // (`created_at`, each row's insertion time), and only while no other job of the
        // key runs on a live lease. This orders a key's jobs; what keeps two of them from
        // running at once is the key's row (`serial_held` below): the snapshot misses a job of
        // the key that committed late (its transaction began before a later job of the key was
        // enqueued) or a claim of the key that committed while this statement ran.
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
        // Running jobs whose lease lapsed come first (from `q_leases`, by lease end), then
        // waiting ones (from `q_waiting`, by priority). The limit above the two reads the
        // second (and locks its rows) only for the slots the first left. The first is read
        // only where `rescue` (a boolean parameter) is true: it reads its queue's entries of
        // `q_leases` up to now, past those of every job finished more than a lease ago until
        // VACUUM removes them, a cost a claim should not pay each time; the workers look for
        // lapsed jobs once in a while instead (`completer::rescue::Rescue`).
        let pick = |queue: &str, limit: &str, also: &str, rescue: &str| {
            format!(
                "SELECT p.key, p.lapsed, p.serial_key FROM (
                     SELECT l.key, true AS lapsed, l.serial_key FROM (
                         SELECT j.key, j.serial_key FROM {q} AS j
                         WHERE {rescue} AND j.state = 'running' AND j.available_at <= now()
                           AND j.queue = {queue} {also} AND {serial_lapsed}
                         ORDER BY j.available_at
                         LIMIT {limit}
                         FOR UPDATE SKIP LOCKED
                     ) AS l
                     UNION ALL
                     SELECT w.key, false, w.serial_key FROM (
                         SELECT j.key, j.serial_key FROM {q} AS j
                         WHERE j.state = 'queued' AND j.available_at <= now()
                           AND j.queue = {queue} {also} AND {serial}
                         ORDER BY j.priority DESC, j.available_at
                         LIMIT {limit}
                         FOR UPDATE SKIP LOCKED
                     ) AS w
                 ) AS p
                 LIMIT {limit}"
            )
        };
        // The jobs `picked` (a query of their keys, and whether each is a lapsed one) claimed
        // for `worker` on a lease; each returned says whether it was lapsed, so the workers
        // know to look for more (`completer::rescue::Rescue`).
        // A running job whose lease lapsed is taken over: its attempt ended with its worker
        // (crashed, killed, stalled or cut off), logged as `lapsed` when the claim took it.
        let lapsed = logged(
            COUNTED,
            "'lapsed'",
            "'its worker stopped renewing the lease (crashed, killed, stalled or cut off from \
              the database)'",
        );
        // A claim for a job that starts at once (`started`, an SQL boolean) notes when it
        // started; a prefetched job's is noted when it starts (`mark_started`). A lapsed job
        // taken over that never started ended no attempt: its claim is counted in `unrun`
        // (see migration 9), not logged. Each claimed job comes with its attempt as counted.
        // Each picked job of a serial key takes its key's row (see migration 10) and is claimed
        // only if the row names it already, or if the claim that wrote the row is on this
        // statement's snapshot and the job it names no longer runs. A holder whose lease
        // lapsed still runs: its worker may only have stalled, and would resume beside the
        // next job; the key is free once a claim took the holder over (and ran it) instead. The row is
        // written with `ON CONFLICT DO UPDATE`, which waits for a claim of the key in progress
        // and reads the row's newest version: a claim whose snapshot missed the key's latest
        // claim (its job committed late, or the claim slow) then finds a holder it cannot see
        // and takes nothing, and `serial` above keeps later snapshots right. Keys are written
        // in one order, so two claims never wait on each other's rows. Of a key's jobs picked
        // together (a lapsed one taken over, and the key's first waiting one), the lapsed one
        // is taken. The holder's job is read
        // on the snapshot, which only ever shows it running longer than it does: a claim waits
        // when it need not, never the other way.
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
        let claim_picked = |picked: &str, lease: &str, worker: &str, started: &str| {
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
        };
        // The queue's name is `unseen` too: a custom plan that knew it would look cheaper than
        // the generic one, and a pool connection would then plan every claim anew.
        let claimed = |limit: &str, lease: &str, worker: &str, queue: &str, also: &str, rescue| {
            claim_picked(
                &pick(
                    &unseen(queue, "text"),
                    &unseen(limit, "bigint"),
                    also,
                    &unseen(rescue, "bool"),
                ),
                lease,
                worker,
                "true",
            )
        };
        // The same, claiming up to `limits[i]` jobs of named queue `queues[i]` for each `i`
        // (SQL arrays): one statement for slots of several named queues.
        let claimed_in =
            |limits: &str, lease: &str, worker: &str, queues: &str, also: &str, rescue: &str| {
                claim_picked(
                    &format!(
                        "SELECT p.key, p.lapsed, p.serial_key FROM unnest({}, {}) AS w(queue, n),
                         LATERAL ({}) AS p",
                        unseen(queues, "text[]"),
                        unseen(limits, "bigint[]"),
                        pick("w.queue", "w.n", also, &unseen(rescue, "bool"))
                    ),
                    lease,
                    worker,
                    "true",
                )
            };
        // Completions (`completing`: their CTEs) that also claim jobs (`claiming`: a `claimed`
        // CTE), never one that `also` rules out: a row per completion (`answers`, its position
        // first, over `from`), then a row per claimed job with its named queue last, each padded
        // with the other's NULLs.
        let and_claim = |completing: &str, answers: &str, from: &str, claiming: &str| {
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
        };
        // The jobs of a batch (`done`, `release`), each while its claim is this attempt's.
        let fenced = format!(
            "FROM unnest({keys}, {}) AS held(key, attempts)
             WHERE {} AND q.attempts = held.attempts AND {q_is_running}",
            unseen("$2", "int[]"),
            batch_rows("q", &keys, "held"),
        );
        QueueSql {
            name: format!("{schema}.{table}"),
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
            claim: format!(
                "WITH {}, records AS ({unheld})
                 SELECT c.key, c.payload::text, c.attempts, c.max_attempts, r.fence, {lease_end},
                        c.cancel_requested, c.traceparent, c.lapsed, c.counted
                 FROM claimed c LEFT JOIN records r ON r.key = c.key",
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
                 FROM claimed c LEFT JOIN records r ON r.key = c.key",
                claimed("(SELECT n FROM places)", "$2", "$3", "$4", "", "$6")
            ),
            limit_reached: format!(
                "SELECT count(*) >= $2 FROM {q}
                 WHERE queue = $1 AND state = 'running' AND available_at > now()"
            ),
            snooze: format!(
                "UPDATE {q} SET state = 'queued', unrun = unrun + 1, worker = NULL,
                     available_at = now() + $3::bigint {micros},
                     attempted_at = coalesce(attempted_at, now()), attempt_log = {}
                 WHERE key = $1 AND attempts = $2 AND {is_running}",
                logged(COUNTED, "'snoozed'", "$4::text")
            ),
            // An operator's reason (`cancel_reason`), when one asked, is the job's last error;
            // the attempt log adds how the handler ended.
            cancelled: format!(
                "UPDATE {q} SET state = 'cancelled', finished_at = now(),
                     last_error = coalesce(cancel_reason, $3),
                     worker = NULL, attempted_at = coalesce(attempted_at, now()),
                     attempt_log = {}
                 WHERE key = $1 AND attempts = $2 AND {is_running}",
                logged(
                    COUNTED,
                    "'cancelled'",
                    "coalesce(cancel_reason || ' (' || $3::text || ')', $3::text)"
                )
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
            done: format!(
                "UPDATE {q} AS q SET state = 'done', finished_at = now(), worker = NULL,
                     result = coalesce($3, q.result),
                     attempted_at = coalesce(q.attempted_at, now()) {fenced}"
            ),
            // A mark sent again (its answer lost) finds its own: it matches the claim, not
            // the missing start.
            mark_started: format!(
                "UPDATE {q} AS q SET attempted_at = coalesce(q.attempted_at, now())
                 WHERE q.key = ANY({keys}) AND q.attempts = ($2::int[])[array_position({keys}, q.key)]
                   AND q.worker = $3 AND {q_is_running}"
            ),
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
            retry: format!(
                "UPDATE {q} SET state = 'queued', available_at = now() + $3::bigint {micros},
                     last_error = $4, worker = NULL,
                     attempted_at = coalesce(attempted_at, now()), attempt_log = {}
                 WHERE key = $1 AND attempts = $2 AND {is_running}",
                logged(COUNTED, "'retried'", "$4::text")
            ),
            dead: format!(
                "UPDATE {q} SET state = 'dead', finished_at = now(), last_error = $3, worker = NULL,
                     attempted_at = coalesce(attempted_at, now()), attempt_log = {}
                 WHERE key = $1 AND attempts = $2 AND {is_running}",
                logged(COUNTED, "'dead'", "$3::text")
            ),
            release: format!(
                "UPDATE {q} AS q SET state = 'queued', unrun = q.unrun + 1, worker = NULL,
                     available_at = now() + $3::bigint {micros},
                     attempt_log = CASE WHEN $4 OR q.attempted_at IS NOT NULL THEN {}
                                        ELSE q.attempt_log END {fenced}",
                logged("q.attempts - q.unrun", "'released'", "NULL::text")
            ),
            page_from: page(">="),
            page_after: page(">"),
            // The literal `state IN (..)` lets every plan, generic ones too, use the finished
            // jobs' partial index; `(finished_at, key) < (..)` is that index's range from the
            // previous page on (`tests/plans.rs`).
            page_finished: format!(
                "SELECT {} FROM (SELECT * FROM {q}
                                 WHERE state IN ('done', 'dead', 'cancelled') AND state = $1
                                   AND (finished_at, key) < ({at}, $5::text)
                                 ORDER BY finished_at DESC, key DESC LIMIT $7) AS scan
                 WHERE ($2::text IS NULL OR queue = $2)
                   AND ($3::text IS NULL OR starts_with(key, $3))
                 ORDER BY finished_at DESC, key DESC LIMIT $6",
                job_columns(),
                at = from_micros_sql("$4"),
            ),
            scan_end_from: scan_end(">="),
            scan_end_after: scan_end(">"),
            scan_end_finished: format!(
                "SELECT {}, key FROM {q}
                 WHERE state IN ('done', 'dead', 'cancelled') AND state = $1
                   AND (finished_at, key) < ({at}, $3::text)
                 ORDER BY finished_at DESC, key DESC OFFSET $4 LIMIT 1",
                micros_sql("finished_at"),
                at = from_micros_sql("$2"),
            ),
            states_of: format!(
                "SELECT key, CASE WHEN {LAPSED_SQL} THEN 'stale' ELSE state END
                 FROM {q} WHERE key = ANY($1::text[])"
            ),
            // Waiting and running jobs from their own indexes, every one; finished jobs (the
            // bulk of a big table) only as many as `$1`, so the cost stays bounded.
            queue_counts: format!(
                "SELECT queue, count(*), 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint
                 FROM {q} WHERE state = 'queued' GROUP BY queue
                 UNION ALL
                 SELECT queue, 0, count(*) FILTER (WHERE NOT {LAPSED_SQL}),
                        count(*) FILTER (WHERE {LAPSED_SQL}), 0, 0, 0
                 FROM {q} WHERE state = 'running' GROUP BY queue
                 UNION ALL
                 SELECT queue, 0, 0, 0, count(*) FILTER (WHERE state = 'done'),
                        count(*) FILTER (WHERE state = 'dead'),
                        count(*) FILTER (WHERE state = 'cancelled')
                 FROM (SELECT queue, state FROM {q}
                       WHERE state IN ('done', 'dead', 'cancelled') LIMIT $1) AS finished
                 GROUP BY queue"
            ),
            finished_per_minute: format!(
                "SELECT {}, count(*) FILTER (WHERE state = 'done'),
                        count(*) FILTER (WHERE state = 'dead')
                 FROM {q}
                 WHERE state IN ('done', 'dead') AND finished_at >= {since}
                 GROUP BY 1 ORDER BY 1",
                micros_sql("date_trunc('minute', finished_at)"),
                since = from_micros_sql("$1"),
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
            job: format!("SELECT {} FROM {q} WHERE key = $1", job_columns()),
            jobs: format!(
                "SELECT {} FROM {q} WHERE $1::text IS NULL
                     OR (state = $1 AND NOT ({LAPSED_SQL}))
                     OR ($1 = 'stale' AND {LAPSED_SQL})
                 ORDER BY created_at DESC LIMIT $2",
                job_columns()
            ),
            status: format!(
                "SELECT state, {COUNTED}, max_attempts, last_error, payload::text, attempt_log::text,
                        {}, {}
                 FROM {q} WHERE key = $1",
                micros_sql("attempted_at"),
                micros_sql("finished_at")
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::QueueSql;
    use idem_store_postgres::testing::{
        arrays_scanned_per_row, generic_plan, generic_plan_json, whole_reads,
    };

    /// Every statement the queue runs, by name.
    fn statements(q: QueueSql) -> Vec<(&'static str, String)> {
        vec![
            ("enqueue", q.enqueue),
            ("same_payload", q.same_payload),
            ("enqueue_replacing", q.enqueue_replacing),
            ("enqueue_many", q.enqueue_many),
            ("claim", q.claim),
            ("claim_limited", q.claim_limited),
            ("limit_reached", q.limit_reached),
            ("renew", q.renew),
            ("done", q.done),
            ("complete_and_done_many", q.complete_and_done_many),
            ("complete_and_claim_many", q.complete_and_claim_many),
            ("complete_and_done_one", q.complete_and_done_one),
            ("complete_and_claim_one", q.complete_and_claim_one),
            ("mark_started", q.mark_started),
            ("retry", q.retry),
            ("dead", q.dead),
            ("release", q.release),
            ("snooze", q.snooze),
            ("cancelled", q.cancelled),
            ("cancel", q.cancel),
            ("result", q.result),
            ("status", q.status),
            ("job", q.job),
            ("retry_dead", q.retry_dead),
            ("discard", q.discard),
            ("purge_done", q.purge_done),
            ("states_of", q.states_of),
        ]
    }

    /// Every statement finds its rows by key in the generic plan a connection of the store's
    /// keeps: on a fresh queue (never analyzed, as a new deployment's), once its empty tables
    /// are analyzed, and on one that grew fast since (50,000 jobs and records, never analyzed),
    /// where no statement may scan a batch's array of keys once per row either. A claim whose
    /// check for a pre-scope record is an anti-join fails the first (it reads every entry of
    /// the records' primary key with `scope = ''`); `done` and `release` fail the second if
    /// they find their jobs by a join to the batch alone.
    #[tokio::test]
    async fn every_statement_finds_its_rows_by_key_as_the_queue_grows() {
        let (pool, schema, store) = crate::testing::store_in_new_schema("q_fresh").await;
        let mut conn = pool.acquire().await.unwrap();
        let states = [
            ("never analyzed", String::new()),
            (
                "analyzed empty",
                format!("ANALYZE {schema}.idem_records, {schema}.idem_records_queue"),
            ),
            (
                "grown",
                format!(
                    "INSERT INTO {schema}.idem_records (key, scope, fence, expires_at, purge_at)
                         SELECT 'k' || i, '', i, now() + interval '1 day', now() + interval '1 day'
                         FROM generate_series(1, 50000) i;
                     INSERT INTO {schema}.idem_records_queue (key, payload, max_attempts)
                         SELECT 'job:' || i, to_jsonb(i), 25 FROM generate_series(1, 50000) i"
                ),
            ),
        ];
        let mut failures = Vec::new();
        for (state, setup) in states {
            if !setup.is_empty() {
                sqlx::raw_sql(&setup).execute(&mut *conn).await.unwrap();
            }
            for (name, statement) in statements(QueueSql::new(&store)) {
                let plan = generic_plan(&mut conn, &statement, false).await;
                let reads = whole_reads(&plan);
                let json = generic_plan_json(&mut conn, &statement).await;
                let per_row = arrays_scanned_per_row(&json);
                if !reads.is_empty() || !per_row.is_empty() {
                    failures.push(format!("{name} ({state}): {reads:?} {per_row:?}\n{plan}"));
                }
            }
        }
        drop(conn);
        crate::testing::drop_schema(&pool, &schema).await;
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }

    /// Both claims find the jobs they pick by primary key in a generic plan, whatever the
    /// planner makes of `LIMIT $n`, with sequential scans allowed or not: written as
    /// `key IN (SELECT .. LIMIT $n ..)`, the generic plan would update them through a hash join
    /// over a sequential scan of the whole queue, and the store's connections could not keep
    /// one generic plan for the queue's statements (they would plan each execution anew
    /// instead, for longer than it runs). (On a fresh store, every statement is checked in
    /// `tests/plans.rs`; this one has 5,000 jobs queued and analyzed.)
    #[tokio::test]
    async fn claims_find_their_jobs_by_key_in_a_generic_plan() {
        let (pool, schema, store) = crate::testing::store_in_new_schema("q_plans").await;
        // Enough queued jobs for a tenth of them to outweigh a lookup by key.
        sqlx::raw_sql(&format!(
            "INSERT INTO {schema}.idem_records_queue (key, payload, max_attempts)
                 SELECT 'job:' || i, to_jsonb(i), 25 FROM generate_series(1, 5000) i;
             ANALYZE {schema}.idem_records_queue"
        ))
        .execute(&pool)
        .await
        .unwrap();
        let sql = QueueSql::new(&store);
        let mut conn = pool.acquire().await.unwrap();
        let statements = [
            ("claim", &sql.claim),
            ("complete_and_claim_many", &sql.complete_and_claim_many),
            ("complete_and_claim_one", &sql.complete_and_claim_one),
        ];
        for (name, statement) in statements {
            for seqscan in [true, false] {
                let plan = generic_plan(&mut conn, statement, seqscan).await;
                let reads = whole_reads(&plan);
                assert!(
                    reads.is_empty(),
                    "{name} (enable_seqscan {seqscan}) reads a whole table or index: {reads:?}\n{plan}"
                );
            }
        }
        drop(conn);
        crate::testing::drop_schema(&pool, &schema).await;
    }

    /// A claim takes back a job whose lease lapsed only when it is told to look (`Rescue`
    /// says when), and then before any waiting job, whatever its priority, saying which it
    /// took over; otherwise it reads waiting jobs only.
    #[tokio::test]
    async fn a_claim_takes_lapsed_jobs_back_only_when_it_looks_for_them() {
        let (pool, schema, store) = crate::testing::store_in_new_schema("q_rescue").await;
        sqlx::raw_sql(&format!(
            "INSERT INTO {schema}.idem_records_queue
                 (key, payload, max_attempts, state, attempts, available_at, priority)
             VALUES ('orphan', '1', 5, 'running', 1, now() - interval '1 second', 0),
                    ('urgent', '2', 5, 'queued', 0, now() - interval '1 hour', 9),
                    ('later', '3', 5, 'queued', 0, now() - interval '1 hour', 0)"
        ))
        .execute(&pool)
        .await
        .unwrap();
        let sql = QueueSql::new(&store);
        let claim = |limit: i64, rescue: bool| {
            let (sql, pool) = (&sql, &pool);
            async move {
                let rows = sqlx::query(&sql.claim)
                    .bind(limit)
                    .bind(60_000_000i64)
                    .bind("test-worker")
                    .bind(crate::job::DEFAULT_QUEUE)
                    .bind(rescue)
                    .bind(true)
                    .fetch_all(pool)
                    .await
                    .unwrap();
                rows.iter()
                    .map(|row| {
                        let job = crate::worker::claimed::Claimed::decode(
                            row,
                            0,
                            tokio::time::Instant::now(),
                        );
                        (job.key, job.lapsed)
                    })
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(claim(1, false).await, [("urgent".to_owned(), false)]);
        assert_eq!(claim(1, true).await, [("orphan".to_owned(), true)]);
        assert_eq!(claim(2, true).await, [("later".to_owned(), false)]);
        crate::testing::drop_schema(&pool, &schema).await;
    }

    /// A prefetching claim leaves the start unnoted; a lapsed claim that never started is
    /// taken over without counting an attempt (counted in `unrun`, nothing logged), one that
    /// started is counted and logged. A start mark sent again finds its own claim; one from
    /// another worker finds none.
    #[tokio::test]
    async fn a_lapsed_claim_counts_an_attempt_only_if_it_started() {
        let (pool, schema, store) = crate::testing::store_in_new_schema("q_unrun").await;
        sqlx::raw_sql(&format!(
            "INSERT INTO {schema}.idem_records_queue (key, payload, max_attempts)
             VALUES ('job', '1', 5)"
        ))
        .execute(&pool)
        .await
        .unwrap();
        let sql = QueueSql::new(&store);
        let claim = |worker: &'static str| {
            let (sql, pool) = (&sql, &pool);
            async move {
                let rows = sqlx::query(&sql.claim)
                    .bind(1i64)
                    .bind(60_000_000i64)
                    .bind(worker)
                    .bind(crate::job::DEFAULT_QUEUE)
                    .bind(true)
                    .bind(false)
                    .fetch_all(pool)
                    .await
                    .unwrap();
                let job = crate::worker::claimed::Claimed::decode(
                    &rows[0],
                    0,
                    tokio::time::Instant::now(),
                );
                (job.attempt, job.counted, job.lapsed)
            }
        };
        let mark = |worker: &'static str, attempt: i32| {
            let (sql, pool) = (&sql, &pool);
            async move {
                sqlx::query(&sql.mark_started)
                    .bind(vec!["job"])
                    .bind(vec![attempt])
                    .bind(worker)
                    .execute(pool)
                    .await
                    .unwrap()
                    .rows_affected()
            }
        };
        let lapse_sql = format!(
            "UPDATE {schema}.idem_records_queue SET available_at = now() - interval '1 second'"
        );
        let lapse = || sqlx::raw_sql(&lapse_sql).execute(&pool);
        let row_sql = format!(
            "SELECT attempts, unrun, attempted_at IS NOT NULL, jsonb_array_length(attempt_log)
             FROM {schema}.idem_records_queue"
        );
        let row = || sqlx::query_as::<_, (i32, i32, bool, i32)>(&row_sql).fetch_one(&pool);
        assert_eq!(claim("a").await, (1, 1, false));
        assert_eq!(
            row().await.unwrap(),
            (1, 0, false, 0),
            "claimed, not started"
        );
        lapse().await.unwrap();
        assert_eq!(
            claim("b").await,
            (2, 1, true),
            "taken over, no attempt counted"
        );
        assert_eq!(row().await.unwrap(), (2, 1, false, 0));
        assert_eq!(mark("a", 2).await, 0, "another worker's mark");
        assert_eq!(mark("b", 1).await, 0, "an earlier claim's mark");
        assert_eq!(mark("b", 2).await, 1);
        assert_eq!(mark("b", 2).await, 1, "sent again, it finds its own");
        assert_eq!(row().await.unwrap(), (2, 1, true, 0));
        lapse().await.unwrap();
        assert_eq!(claim("c").await, (3, 2, true), "it started: counted");
        assert_eq!(row().await.unwrap(), (3, 1, false, 1), "and logged");
        crate::testing::drop_schema(&pool, &schema).await;
    }

    /// A page of jobs (the dashboard's lists: `Queue::jobs_page`) is an index range on a queue
    /// of 200,000 jobs: in key order the primary key from the page's start, for a finished
    /// state the finished jobs' index from the last page's finish; so is the overview's count
    /// of jobs finished per minute. No plan reads the queue whole or sorts it, in the plan the
    /// server makes with the values (first and deep pages) and in the generic one.
    #[tokio::test]
    async fn pages_of_jobs_are_index_ranges() {
        use idem_store_postgres::testing::custom_plan;
        let (pool, schema, store) = crate::testing::store_in_new_schema("q_pages").await;
        sqlx::raw_sql(&format!(
            "INSERT INTO {schema}.idem_records_queue
                 (key, payload, max_attempts, state, finished_at, queue)
                 SELECT 'job:' || i, to_jsonb(i), 25,
                        CASE WHEN i % 100 = 0 THEN 'dead' WHEN i % 2 = 0 THEN 'done'
                             ELSE 'queued' END,
                        CASE WHEN i % 2 = 0 THEN now() - i * interval '1 second' END,
                        CASE WHEN i % 3 = 0 THEN 'mail' ELSE 'default' END
                 FROM generate_series(1, 200000) i;
             ANALYZE {schema}.idem_records_queue"
        ))
        .execute(&pool)
        .await
        .unwrap();
        let sql = QueueSql::new(&store);
        let deep = "(extract(epoch from now() - interval '1 day') * 1000000)::bigint";
        let cases = [
            (
                "page_from",
                &sql.page_from,
                "NULL, NULL, NULL, '', 50, 10000".to_owned(),
                "_queue_pkey",
            ),
            (
                "page_after",
                &sql.page_after,
                "'queued', 'mail', 'job:1', 'job:150000', 50, 10000".to_owned(),
                "_queue_pkey",
            ),
            (
                "page_finished",
                &sql.page_finished,
                "'dead', NULL, NULL, 9007199254740992, '', 50, 10000".to_owned(),
                "_q_finished",
            ),
            (
                "page_finished deep",
                &sql.page_finished,
                format!("'done', 'mail', NULL, {deep}, 'job:9', 50, 10000"),
                "_q_finished",
            ),
            (
                "finished_per_minute",
                &sql.finished_per_minute,
                deep.to_owned(),
                "_q_finished",
            ),
        ];
        let mut conn = pool.acquire().await.unwrap();
        let mut failures = Vec::new();
        for (name, statement, args, index) in cases {
            let plans = [
                ("generic", generic_plan(&mut conn, statement, true).await),
                ("custom", custom_plan(&mut conn, statement, &args).await),
            ];
            for (which, plan) in plans {
                let ranged = plan
                    .lines()
                    .skip_while(|line| !(line.contains("Index") && line.contains(index)))
                    .nth(1)
                    .is_some_and(|cond| {
                        cond.contains("Index Cond:")
                            && (cond.contains("key >") || cond.contains("finished_at"))
                    });
                // A sort of the rows read (an incremental sort only orders ties of the index).
                let sorted = plan.lines().any(|l| {
                    l.trim_start()
                        .trim_start_matches("->")
                        .trim_start()
                        .starts_with("Sort  (")
                }) && name != "finished_per_minute";
                if !ranged || sorted || plan.contains("Seq Scan") {
                    failures.push(format!("{name} ({which}):\n{plan}"));
                }
            }
        }
        drop(conn);
        crate::testing::drop_schema(&pool, &schema).await;
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }

    /// On a connection that keeps the server's `plan_cache_mode = auto` (a pool connection, as
    /// with `through_pool`), every queue statement that takes a number of jobs or a batch of
    /// keys (and the renewal, which may write a record, and the completions of one job)
    /// settles on a generic plan after the server's five custom ones, on a fresh queue and on
    /// one of 5,000 analyzed jobs: were its custom plans costed below its generic plan (as
    /// when they read a claim's `LIMIT`), the server would plan it at every execution.
    #[tokio::test]
    async fn statements_settle_on_generic_plans_through_the_pool() {
        use sqlx::Connection;
        let (pool, schema, store) = crate::testing::store_in_new_schema("q_auto").await;
        let sql = QueueSql::new(&store);
        let queued = |jobs: u32| {
            format!(
                "INSERT INTO {schema}.idem_records_queue (key, payload, max_attempts)
                     SELECT 'job:' || i, to_jsonb(i), 25 FROM generate_series(1, {jobs}) i"
            )
        };
        for setup in [
            queued(10),
            format!("{}; ANALYZE {schema}.idem_records_queue", queued(5000)),
        ] {
            sqlx::raw_sql(&format!(
                "TRUNCATE {schema}.idem_records_queue, {schema}.idem_records; {setup}"
            ))
            .execute(&pool)
            .await
            .unwrap();
            // A connection of its own, so that no statement is prepared on it yet.
            let mut conn =
                sqlx::PgConnection::connect(&idem_store_postgres::testing::database_url())
                    .await
                    .unwrap();
            sqlx::raw_sql("SET plan_cache_mode = auto")
                .execute(&mut conn)
                .await
                .unwrap();
            let (keys, fences, attempts) = (vec!["job:x".to_owned()], vec![1i64], vec![1i32]);
            let (outputs, keeps) = (vec![Vec::<u8>::new()], vec![1_000_000i64]);
            let (lease, worker) = (30_000_000i64, "w");
            // The completions' arguments, which both batched completion statements start with.
            let completions = |statement| {
                sqlx::query(statement)
                    .bind(&keys)
                    .bind(&fences)
                    .bind(&outputs)
                    .bind(&keeps)
                    .bind(&attempts)
            };
            // The same for one job, each a scalar.
            let completion = |statement| {
                sqlx::query(statement)
                    .bind("job:x")
                    .bind(1i64)
                    .bind(Vec::<u8>::new())
                    .bind(1_000_000i64)
                    .bind(1i32)
            };
            for i in 0..10 {
                // Looking for lapsed jobs or not, as the workers alternate.
                let rescue = i % 2 == 0;
                let executions = [
                    sqlx::query(&sql.claim)
                        .bind(1i64)
                        .bind(lease)
                        .bind(worker)
                        .bind("default")
                        .bind(rescue)
                        .bind(rescue),
                    completions(&sql.complete_and_claim_many)
                        .bind(vec![1i64])
                        .bind(lease)
                        .bind(worker)
                        .bind(vec!["default"])
                        .bind(rescue),
                    completions(&sql.complete_and_done_many),
                    completion(&sql.complete_and_claim_one)
                        .bind(1i64)
                        .bind(lease)
                        .bind(worker)
                        .bind("default")
                        .bind(rescue),
                    completion(&sql.complete_and_done_one),
                    sqlx::query(&sql.done)
                        .bind(&keys)
                        .bind(&attempts)
                        .bind(None::<Vec<u8>>),
                    sqlx::query(&sql.mark_started)
                        .bind(&keys)
                        .bind(&attempts)
                        .bind(worker),
                    sqlx::query(&sql.release)
                        .bind(&keys)
                        .bind(&attempts)
                        .bind(0i64)
                        .bind(false),
                    sqlx::query(&sql.renew)
                        .bind("job:x")
                        .bind(1i64)
                        .bind(lease)
                        .bind(1i32)
                        .bind(worker),
                ];
                for query in executions {
                    query.execute(&mut conn).await.unwrap();
                }
            }
            let plans: Vec<(String, i64, i64)> = sqlx::query_as(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap();
            let statements = [
                ("claim", &sql.claim),
                ("complete_and_claim_many", &sql.complete_and_claim_many),
                ("complete_and_done_many", &sql.complete_and_done_many),
                ("complete_and_claim_one", &sql.complete_and_claim_one),
                ("complete_and_done_one", &sql.complete_and_done_one),
                ("done", &sql.done),
                ("release", &sql.release),
                ("renew", &sql.renew),
            ];
            for (name, statement) in statements {
                let (_, generic, custom) = plans
                    .iter()
                    .find(|(text, _, _)| text == statement)
                    .unwrap_or_else(|| panic!("{name} is not prepared on the connection"));
                assert!(
                    (*generic, *custom) == (5, 5),
                    "{name} after {setup:?}: {generic} generic plans, {custom} custom (expected 5 and 5)"
                );
            }
            conn.close().await.unwrap();
        }
        crate::testing::drop_schema(&pool, &schema).await;
    }
}
