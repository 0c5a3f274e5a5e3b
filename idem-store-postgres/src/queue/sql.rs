//! The queue's statements, written once per [`Queue`](super::Queue) from its store's validated
//! names. Where a statement touches a job's idempotency record, it goes through the store's
//! records interface ([`RecordsSql`]) rather than spelling the records SQL again.

use crate::records::RecordsSql;
use crate::time::{batch_start_sql, micros_sql};
use crate::unseen::unseen;
use crate::PgStore;

/// The channel idle workers LISTEN on; the payload names the queue (`schema.table`).
pub(crate) const CHANNEL: &str = "idem_queue";

/// Every statement of one queue.
#[derive(Debug)]
pub(crate) struct QueueSql {
    /// `schema.table`, the notification payload of this queue.
    pub(crate) name: String,
    /// `$1` key, `$2` payload (JSON text), `$3` max attempts, `$4` run-after (epoch µs or
    /// NULL for now), `$5` delay (µs). Returns (inserted, same payload as the stored row).
    pub(crate) enqueue: String,
    /// `$1` key: the stored payload equals `$2`?
    pub(crate) same_payload: String,
    /// `$1` limit, `$2` lease (µs), `$3` worker. The article's claim-then-process statement,
    /// which also claims each job's idempotency record when the key has none yet (returning its
    /// fence and lease end), so a fresh job's call needs no claim statement of its own.
    pub(crate) claim: String,
    /// `$1` keys, `$2` fences: deletes the records `claim` took for jobs that never ran.
    pub(crate) forget_records: String,
    /// The store's renewal of a job's call (`$1` key, `$2` fence, `$3` lease in µs) that also
    /// extends the job's claim (`$4` attempt) when it applies: one renewal per job, on the
    /// lease policy of idem-core's `lease` module. Returns how many records it renewed.
    pub(crate) renew: String,
    /// `$1` keys, `$2` attempts: marks finished jobs done, in one statement per batch.
    pub(crate) done: String,
    /// The store's completion of a job's call (`$1` key, `$2` fence, `$3` output, `$4` keep
    /// in µs) that also marks the job done (`$5` attempt) when it applies, so a finished job
    /// costs one statement. Returns (record completed, job marked done).
    pub(crate) complete_and_done: String,
    /// `complete_and_done` for many jobs at once (each key at most once): `$1` keys, `$2`
    /// fences, `$3` outputs, `$4` keeps (µs), `$5` attempts. Returns, for each position `i`
    /// (from 1, in order), (record completed, job marked done).
    pub(crate) complete_and_done_many: String,
    /// `complete_and_done_many` that also claims up to `$6` more jobs, as `claim` does (`$7`
    /// lease in µs, `$8` worker), for the slots those jobs free: the completions' keys are never
    /// among them. Returns, first, a row per completion (`i`, record completed, job marked
    /// done, then NULLs), then a row per claimed job (NULL, NULL, NULL, then `claim`'s
    /// columns).
    pub(crate) complete_and_claim_many: String,
    /// `$1` key, `$2` attempt, `$3` delay (µs), `$4` error.
    pub(crate) retry: String,
    /// `$1` key, `$2` attempt, `$3` error.
    pub(crate) dead: String,
    /// `$1` keys, `$2` attempts, `$3` delay (µs): gives claims back without counting them.
    pub(crate) release: String,
    pub(crate) stats: String,
    /// `$1` key.
    pub(crate) status: String,
    /// `$1` limit.
    pub(crate) list_dead: String,
    /// `$1` key. (The caller then notifies workers.)
    pub(crate) retry_dead: String,
    /// `$1` key.
    pub(crate) discard: String,
    /// `$1` older than (µs), `$2` limit, `$3` where the drain's previous batch ended (epoch µs,
    /// or NULL). Returns (jobs deleted, the last `finished_at` taken, epoch µs).
    pub(crate) purge_done: String,
}

impl QueueSql {
    pub(crate) fn new(store: &PgStore) -> QueueSql {
        let (schema, table) = store.names();
        let records: &RecordsSql = store.records();
        let q = format!("\"{schema}\".\"{table}_queue\"");
        let micros = "* interval '1 microsecond'";
        let claim_records = records.claim_unheld(
            super::QUEUE_SCOPE,
            "SELECT key FROM claimed WHERE attempts <= max_attempts",
            &format!("$2::bigint {micros}"),
            "$3::text",
        );
        let claim_next_records = records.claim_unheld(
            super::QUEUE_SCOPE,
            "SELECT key FROM claimed WHERE attempts <= max_attempts",
            &format!("$7::bigint {micros}"),
            "$8::text",
        );
        let (complete, renew) = (&records.complete, &records.renew);
        let complete_many = &records.complete_many;
        let (keys, key_count) = (
            unseen("$1", "text[]"),
            unseen("cardinality($1::text[])", "bigint"),
        );
        // The completions of many jobs, each marking its job done: the start of both batched
        // completion statements.
        let complete_and_done = format!(
            "WITH completed AS ({complete_many}),
             done AS (
                 UPDATE {q} AS q SET state = 'done', finished_at = now(), worker = NULL
                 FROM unnest($1::text[], $5::int[]) WITH ORDINALITY AS d(key, attempts, i)
                 WHERE q.key = ANY({keys}) AND q.key = d.key AND q.attempts = d.attempts
                   AND q.state = 'running' AND d.i IN (SELECT i FROM completed)
                 RETURNING d.i
             )"
        );
        // Claims up to `limit` jobs for `worker` with a lease of `lease` µs (SQL expressions),
        // skipping any that `also` (a condition on `key`) rules out. The picked keys are an
        // array (`= ANY(ARRAY(..))`, not `IN (..)`) so that the update finds them by primary
        // key in any plan: a generic plan (the store's connections keep one per statement)
        // estimates a `LIMIT $n` at a tenth of the table, and planned `IN (..)` as a hash join
        // over a sequential scan of the whole queue (2.2 ms a claim at 20,000 jobs, against
        // 0.26 ms this way; a custom plan instead costs 0.5-0.7 ms of planning per execution).
        // The limit, and the keys `also` names, are `unseen`, so that a connection that chooses
        // between custom and generic plans (the pool's) settles on the generic one too.
        let claimed = |limit: &str, lease: &str, worker: &str, also: &str| {
            let limit = unseen(limit, "bigint");
            format!(
                "claimed AS (
                     UPDATE {q}
                     SET state = 'running', attempts = attempts + 1, worker = {worker},
                         available_at = now() + {lease}::bigint {micros}
                     WHERE key = ANY(ARRAY(
                         SELECT key FROM {q}
                         WHERE state IN ('queued', 'running') AND available_at <= now() {also}
                         ORDER BY available_at
                         LIMIT {limit}
                         FOR UPDATE SKIP LOCKED
                     ))
                     RETURNING key, payload, attempts, max_attempts
                 )"
            )
        };
        let fenced = format!(
            "FROM unnest({keys}, {}) AS held(key, attempts)
             WHERE q.key = held.key AND q.attempts = held.attempts AND q.state = 'running'",
            unseen("$2", "int[]")
        );
        QueueSql {
            name: format!("{schema}.{table}"),
            enqueue: format!(
                "WITH inserted AS (
                     INSERT INTO {q} (key, payload, max_attempts, available_at)
                     VALUES ($1, $2::jsonb, $3,
                             COALESCE(to_timestamp($4::bigint / 1000000.0), now()) + $5::bigint {micros})
                     ON CONFLICT (key) DO NOTHING
                     RETURNING 1
                 )
                 SELECT EXISTS (SELECT 1 FROM inserted),
                        (SELECT payload = $2::jsonb FROM {q} WHERE key = $1)"
            ),
            same_payload: format!("SELECT payload = $2::jsonb FROM {q} WHERE key = $1"),
            claim: format!(
                "WITH {}, records AS ({claim_records})
                 SELECT c.key, c.payload::text, c.attempts, c.max_attempts, r.fence, r.expires_us
                 FROM claimed c LEFT JOIN records r ON r.key = c.key",
                claimed("$1", "$2", "$3", "")
            ),
            forget_records: records.release_batch(),
            renew: format!(
                "WITH renewed AS ({renew} RETURNING 1),
                 job AS (
                     UPDATE {q} SET available_at = now() + $3::bigint {micros}
                     WHERE key = $1 AND attempts = $4 AND state = 'running'
                       AND EXISTS (SELECT 1 FROM renewed)
                     RETURNING 1
                 )
                 SELECT (SELECT count(*) FROM renewed), (SELECT count(*) FROM job)"
            ),
            done: format!(
                "UPDATE {q} AS q SET state = 'done', finished_at = now(), worker = NULL {fenced}"
            ),
            complete_and_done: format!(
                "WITH completed AS ({complete} RETURNING 1),
                 done AS (
                     UPDATE {q} SET state = 'done', finished_at = now(), worker = NULL
                     WHERE key = $1 AND attempts = $5 AND state = 'running'
                       AND EXISTS (SELECT 1 FROM completed)
                     RETURNING 1
                 )
                 SELECT (SELECT count(*) FROM completed), (SELECT count(*) FROM done)"
            ),
            complete_and_done_many: format!(
                "{complete_and_done}
                 SELECT n.i IN (SELECT i FROM completed), n.i IN (SELECT i FROM done)
                 FROM generate_series(1, {key_count}) AS n(i)
                 ORDER BY n.i"
            ),
            complete_and_claim_many: format!(
                "{complete_and_done}, {}, records AS ({claim_next_records})
                 SELECT n.i, n.i IN (SELECT i FROM completed), n.i IN (SELECT i FROM done),
                        NULL::text, NULL::text, NULL::int, NULL::int, NULL::bigint, NULL::bigint
                 FROM generate_series(1, {key_count}) AS n(i)
                 UNION ALL
                 SELECT NULL, NULL, NULL, c.key, c.payload::text, c.attempts, c.max_attempts,
                        r.fence, r.expires_us
                 FROM claimed c LEFT JOIN records r ON r.key = c.key",
                claimed("$6", "$7", "$8", &format!("AND key <> ALL({keys})"))
            ),
            retry: format!(
                "UPDATE {q} SET state = 'queued', available_at = now() + $3::bigint {micros},
                     last_error = $4, worker = NULL
                 WHERE key = $1 AND attempts = $2 AND state = 'running'"
            ),
            dead: format!(
                "UPDATE {q} SET state = 'dead', finished_at = now(), last_error = $3, worker = NULL
                 WHERE key = $1 AND attempts = $2 AND state = 'running'"
            ),
            release: format!(
                "UPDATE {q} AS q SET state = 'queued', attempts = q.attempts - 1, worker = NULL,
                     available_at = now() + $3::bigint {micros} {fenced}"
            ),
            stats: format!(
                "SELECT count(*) FILTER (WHERE state = 'queued'),
                        count(*) FILTER (WHERE state = 'running'),
                        count(*) FILTER (WHERE state = 'done'),
                        count(*) FILTER (WHERE state = 'dead')
                 FROM {q}"
            ),
            status: format!(
                "SELECT state, attempts, max_attempts, last_error, payload::text FROM {q} WHERE key = $1"
            ),
            list_dead: format!(
                "SELECT key, payload::text, attempts, last_error,
                        (extract(epoch from finished_at) * 1000000)::bigint
                 FROM {q} WHERE state = 'dead' ORDER BY finished_at LIMIT $1"
            ),
            retry_dead: format!(
                "UPDATE {q} SET state = 'queued', attempts = 0, available_at = now(),
                     finished_at = NULL
                 WHERE key = $1 AND state = 'dead'"
            ),
            discard: format!("DELETE FROM {q} WHERE key = $1 AND state = 'dead'"),
            // In `finished_at` order from where the drain's previous batch ended ($3), as the
            // records' purge does: the index entries of the jobs a drain deleted stay until
            // VACUUM, and a batch that started at the start of the done jobs read past them all.
            purge_done: format!(
                "WITH due AS (
                     SELECT key, finished_at FROM {q}
                     WHERE state = 'done' AND finished_at < now() - $1::bigint {micros}
                       AND finished_at >= {}
                     ORDER BY finished_at LIMIT $2
                     FOR UPDATE SKIP LOCKED
                 ), purged AS (
                     DELETE FROM {q} WHERE key = ANY(ARRAY(SELECT key FROM due)) RETURNING 1
                 )
                 SELECT (SELECT count(*) FROM purged), (SELECT {} FROM due)",
                batch_start_sql(3),
                micros_sql("max(finished_at)")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::QueueSql;
    use crate::plan_tests::{generic_plan, whole_reads};

    /// Both claims find the jobs they pick by primary key in a generic plan, whatever the
    /// planner makes of `LIMIT $n`, with sequential scans allowed or not: written as
    /// `key IN (SELECT .. LIMIT $n ..)`, the generic plan updated them through a hash join over
    /// a sequential scan of the whole queue, which is why the store's connections could not
    /// keep one generic plan for the queue's statements (and planned each execution anew
    /// instead, for longer than it ran). (On a fresh store, every statement is checked in
    /// `plan_tests`; this one has 5,000 jobs queued and analyzed.)
    #[tokio::test]
    async fn claims_find_their_jobs_by_key_in_a_generic_plan() {
        let (pool, schema, store) = crate::test_store::store_in_new_schema("q_plans").await;
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
        crate::test_store::drop_schema(&pool, &schema).await;
    }

    /// On a connection that keeps the server's `plan_cache_mode = auto` (a pool connection, as
    /// with `through_pool`), every queue statement that takes a number of jobs or a batch of
    /// keys settles on a generic plan after the server's five custom ones, on a fresh queue
    /// and on one of 5,000 analyzed jobs: were its custom plans costed below its generic plan
    /// (as when they read a claim's `LIMIT`), the server would plan it at every execution.
    #[tokio::test]
    async fn statements_settle_on_generic_plans_through_the_pool() {
        use sqlx::Connection;
        let (pool, schema, store) = crate::test_store::store_in_new_schema("q_auto").await;
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
            let mut conn = sqlx::PgConnection::connect(&idem_testdb::database_url())
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
            for _ in 0..10 {
                let executions = [
                    sqlx::query(&sql.claim).bind(1i64).bind(lease).bind(worker),
                    completions(&sql.complete_and_claim_many)
                        .bind(1i64)
                        .bind(lease)
                        .bind(worker),
                    completions(&sql.complete_and_done_many),
                    sqlx::query(&sql.done).bind(&keys).bind(&attempts),
                    sqlx::query(&sql.release)
                        .bind(&keys)
                        .bind(&attempts)
                        .bind(0i64),
                    sqlx::query(&sql.forget_records).bind(&keys).bind(&fences),
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
                ("done", &sql.done),
                ("release", &sql.release),
                ("forget_records", &sql.forget_records),
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
        crate::test_store::drop_schema(&pool, &schema).await;
    }
}
