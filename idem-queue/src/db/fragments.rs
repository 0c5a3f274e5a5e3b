//! What the queue's statements share: the table they are written for, how a state is
//! compared, a job's columns as operators see them (and their decoding), its attempt log.

use idem_postgres_core::extend::{from_micros, micros_sql, RecordsSql};
use idem_store_postgres::PgStore;
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::job::{parse_payload, Attempt, JobFilter, JobInfo, JobState};

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
pub(crate) fn in_state(column: &str, state: &str) -> String {
    format!("{column} COLLATE \"C\" = '{state}'")
}

/// `* interval '1 microsecond'`: a `bigint` of microseconds times this is an interval.
pub(crate) const MICROS: &str = "* interval '1 microsecond'";

/// The tables one queue's statements are written for, from its store's validated names.
pub(crate) struct Table<'a> {
    /// `schema.table`, the queue's name in notifications, locks and metrics.
    pub name: String,
    /// The queue's table, quoted: `"schema"."table_queue"`.
    pub q: String,
    /// The serial keys' table, quoted: `"schema"."table_queue_serial"`.
    pub serial_table: String,
    /// The store's records table's statements, to compose with.
    pub records: &'a RecordsSql,
}

impl Table<'_> {
    /// The tables of `store`'s queue.
    pub(crate) fn new(store: &PgStore) -> Table<'_> {
        let (schema, table) = store.names();
        Table {
            name: format!("{schema}.{table}"),
            q: format!("\"{schema}\".\"{table}_queue\""),
            serial_table: format!("\"{schema}\".\"{table}_queue_serial\""),
            records: store.records(),
        }
    }
}

/// The columns of a job as operators see it: key, state (`stale` for a lapsed claim),
/// attempts, max attempts, worker, last error, payload, created, available, finished (µs),
/// attempt log, attempted at (µs), queue, priority, serial key, cancel requested at (µs).
pub(crate) fn job_columns() -> String {
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
pub(crate) fn logged(attempt: &str, outcome: &str, error: &str) -> String {
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
pub(crate) const COUNTED: &str = "(attempts - unrun)";

/// How many ended attempts a job's log keeps (the latest).
pub const MAX_LOGGED_ATTEMPTS: usize = 20;

/// SQL for the `timestamptz` of the epoch microseconds in `param` (exact: the product is a
/// double, exact below 2^53 µs, some 285 years).
pub(crate) fn from_micros_sql(param: &str) -> String {
    format!("('epoch'::timestamptz + {param}::bigint * interval '1 microsecond')")
}

/// A job as operators see it, from a row of [`job_columns`] starting at its first column.
pub(crate) fn job_info(row: &PgRow) -> JobInfo {
    let state = match row.get::<&str, _>(1) {
        "queued" => JobFilter::Queued,
        "running" => JobFilter::Running,
        "stale" => JobFilter::Stale,
        "done" => JobFilter::Done,
        "cancelled" => JobFilter::Cancelled,
        _ => JobFilter::Dead,
    };
    let attempts = row.get::<i32, _>(2).unsigned_abs();
    let time = |i: usize| row.get::<Option<i64>, _>(i).map(from_micros);
    let stored_state = match state {
        JobFilter::Queued => JobState::Queued,
        JobFilter::Running | JobFilter::Stale => JobState::Running,
        JobFilter::Done => JobState::Done,
        JobFilter::Dead => JobState::Dead,
        JobFilter::Cancelled => JobState::Cancelled,
    };
    JobInfo {
        key: row.get(0),
        state,
        attempts,
        max_attempts: row.get::<i32, _>(3).unsigned_abs(),
        worker: row.get(4),
        last_error: row.get(5),
        payload: parse_payload(row.get(6)),
        created_at: time(7).unwrap_or(std::time::SystemTime::UNIX_EPOCH),
        available_at: time(8).unwrap_or(std::time::SystemTime::UNIX_EPOCH),
        finished_at: time(9),
        attempt_log: Attempt::log(row.get(10), stored_state, attempts, time(11), time(9)),
        queue: row.get(12),
        priority: row.get(13),
        serial_key: row.get(14),
        cancel_requested_at: time(15),
    }
}
