//! The queue's statements against a real PostgreSQL: each finds its rows by key (or reads an
//! index range) in the plans the store's connections keep, whatever the planner knows of the
//! tables; settles on a generic plan through a pool; and the claim's rules for lapsed jobs and
//! their attempts hold statement by statement.

mod support;

use std::time::Duration;

use idem_core::Fence;
use idem_queue::testing::{self, ClaimFor, ClaimNext, Completing, Settle};
use idem_queue::{Queue, DEFAULT_QUEUE};
use idem_store_postgres::sqlx::{self, PgPool};
use idem_store_postgres::testing::{
    arrays_scanned_per_row, generic_plan, generic_plan_json, whole_reads_bounded, RECORDS_INDEXES,
};
use support::TestStore;

/// The queue's indexes that a read must bound, each with what its condition must name: its
/// primary key by the key; its partial indexes by their column: `q_waiting` without `queue`
/// reads every queued job of every named queue (a backlog), `q_leases` without `queue` every
/// running one, `q_finished` without `finished_at` every done or dead one (a table's bulk,
/// until purged).
const QUEUE_INDEXES: &[(&str, &str)] = &[
    ("idem_records_queue_pkey", "key ="),
    ("idem_records_q_waiting", "queue"),
    ("idem_records_q_leases", "queue"),
    ("idem_records_q_finished", "finished_at"),
];

/// A store and its queue in a schema of their own (dropped with the returned `TestStore`).
async fn setup(prefix: &str) -> (TestStore, PgPool, String, Queue) {
    let test = TestStore::new(prefix, 4).await;
    let queue = support::queue(&test).await;
    let (pool, schema) = (test.store.pool().clone(), test.schema.clone());
    (test, pool, schema, queue)
}

/// A claim of `limit` jobs of the default queue for `worker`, on a lease of a minute.
fn claim_for(limit: i64, worker: &str, rescue: bool, started: bool) -> ClaimFor<'_> {
    ClaimFor {
        limit,
        lease: Duration::from_secs(60),
        worker,
        queue: DEFAULT_QUEUE,
        rescue,
        started,
        start_by: tokio::time::Instant::now(),
    }
}

/// The statements that find their rows by key (every statement but the counts and pages,
/// which read ranges), by name.
const BY_KEY: &[&str] = &[
    "enqueue",
    "same_payload",
    "enqueue_replacing",
    "enqueue_many",
    "claim",
    "claim_limited",
    "limit_reached",
    "renew",
    "done",
    "complete_and_done_many",
    "complete_and_claim_many",
    "complete_and_done_one",
    "complete_and_claim_one",
    "mark_started",
    "retry",
    "dead",
    "release",
    "snooze",
    "cancelled",
    "cancel",
    "result",
    "status",
    "job",
    "retry_dead",
    "discard",
    "purge_done",
    "states_of",
];

/// The statement `name` of `queue`.
fn statement<'q>(queue: &'q Queue, name: &str) -> &'q str {
    testing::sql(queue)
        .named()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no statement {name}"))
        .1
}

/// What in `plan` reads one of the queue's or the store's tables whole: the store's rules,
/// and the queue's indexes bounded by their keys and columns.
fn whole_reads(plan: &str) -> Vec<String> {
    whole_reads_bounded(plan, &[RECORDS_INDEXES, QUEUE_INDEXES].concat())
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
    let (_test, pool, schema, queue) = setup("q_fresh").await;
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
        for &name in BY_KEY {
            let statement = statement(&queue, name);
            let plan = generic_plan(&mut conn, statement, false).await;
            let reads = whole_reads(&plan);
            let json = generic_plan_json(&mut conn, statement).await;
            let per_row = arrays_scanned_per_row(&json);
            if !reads.is_empty() || !per_row.is_empty() {
                failures.push(format!("{name} ({state}): {reads:?} {per_row:?}\n{plan}"));
            }
        }
    }
    drop(conn);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Both claims find the jobs they pick by primary key in a generic plan, whatever the
/// planner makes of `LIMIT $n`, with sequential scans allowed or not: written as
/// `key IN (SELECT .. LIMIT $n ..)`, the generic plan would update them through a hash join
/// over a sequential scan of the whole queue, and the store's connections could not keep
/// one generic plan for the queue's statements (they would plan each execution anew
/// instead, for longer than it runs). (Every statement is checked on a fresh queue above;
/// this one has 5,000 jobs queued and analyzed.)
#[tokio::test]
async fn claims_find_their_jobs_by_key_in_a_generic_plan() {
    let (_test, pool, schema, queue) = setup("q_plans").await;
    // Enough queued jobs for a tenth of them to outweigh a lookup by key.
    sqlx::raw_sql(&format!(
        "INSERT INTO {schema}.idem_records_queue (key, payload, max_attempts)
             SELECT 'job:' || i, to_jsonb(i), 25 FROM generate_series(1, 5000) i;
         ANALYZE {schema}.idem_records_queue"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    for name in ["claim", "complete_and_claim_many", "complete_and_claim_one"] {
        let statement = statement(&queue, name);
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
}

/// A claim takes back a job whose lease lapsed only when it is told to look (`Rescue`
/// says when), and then before any waiting job, whatever its priority, saying which it
/// took over; otherwise it reads waiting jobs only.
#[tokio::test]
async fn a_claim_takes_lapsed_jobs_back_only_when_it_looks_for_them() {
    let (_test, pool, schema, queue) = setup("q_rescue").await;
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
    let claim = |limit: i64, rescue: bool| {
        let (queue, pool) = (&queue, &pool);
        async move {
            let mut conn = pool.acquire().await.unwrap();
            let claim = claim_for(limit, "test-worker", rescue, true);
            let jobs = testing::sql(queue)
                .claim
                .claim(&mut conn, &claim)
                .await
                .unwrap();
            jobs.into_iter()
                .map(|job| (job.key, job.lapsed))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(claim(1, false).await, [("urgent".to_owned(), false)]);
    assert_eq!(claim(1, true).await, [("orphan".to_owned(), true)]);
    assert_eq!(claim(2, true).await, [("later".to_owned(), false)]);
}

/// A prefetching claim leaves the start unnoted; a lapsed claim that never started is
/// taken over without counting an attempt (counted in `unrun`, nothing logged), one that
/// started is counted and logged. A start mark sent again finds its own claim; one from
/// another worker finds none.
#[tokio::test]
async fn a_lapsed_claim_counts_an_attempt_only_if_it_started() {
    let (_test, pool, schema, queue) = setup("q_unrun").await;
    sqlx::raw_sql(&format!(
        "INSERT INTO {schema}.idem_records_queue (key, payload, max_attempts)
         VALUES ('job', '1', 5)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let sql = testing::sql(&queue);
    let claim = |worker: &'static str| {
        let pool = &pool;
        async move {
            let mut conn = pool.acquire().await.unwrap();
            let claim = claim_for(1, worker, true, false);
            let jobs = sql.claim.claim(&mut conn, &claim).await.unwrap();
            let job = &jobs[0];
            (job.attempt, job.counted, job.lapsed)
        }
    };
    let mark = |worker: &'static str, attempt: i32| {
        let pool = &pool;
        async move {
            let keys = ["job".to_owned()];
            sql.claim
                .mark_started(pool, &keys, &[attempt], worker)
                .await
                .unwrap()
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
}

/// A page of jobs (the dashboard's lists: `Queue::jobs_page`) is an index range on a queue
/// of 200,000 jobs: in key order the primary key from the page's start, for a finished
/// state the finished jobs' index from the last page's finish; so is the overview's count
/// of jobs finished per minute. No plan reads the queue whole or sorts it, in the plan the
/// server makes with the values (first and deep pages) and in the generic one.
#[tokio::test]
async fn pages_of_jobs_are_index_ranges() {
    use idem_store_postgres::testing::custom_plan;
    let (_test, pool, schema, queue) = setup("q_pages").await;
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
    let sql = |name| statement(&queue, name);
    let deep = "(extract(epoch from now() - interval '1 day') * 1000000)::bigint";
    let cases = [
        (
            "page_from",
            sql("page_from"),
            "NULL, NULL, NULL, '', 50, 10000".to_owned(),
            "_queue_pkey",
        ),
        (
            "page_after",
            sql("page_after"),
            "'queued', 'mail', 'job:1', 'job:150000', 50, 10000".to_owned(),
            "_queue_pkey",
        ),
        (
            "page_finished",
            sql("page_finished"),
            "'dead', NULL, NULL, 9007199254740992, '', 50, 10000".to_owned(),
            "_q_finished",
        ),
        (
            "page_finished deep",
            sql("page_finished"),
            format!("'done', 'mail', NULL, {deep}, 'job:9', 50, 10000"),
            "_q_finished",
        ),
        (
            "finished_per_minute",
            sql("finished_per_minute"),
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
    let (_test, pool, schema, queue) = setup("q_auto").await;
    let sql = testing::sql(&queue);
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
        let mut conn = sqlx::PgConnection::connect(&idem_store_postgres::testing::database_url())
            .await
            .unwrap();
        sqlx::raw_sql("SET plan_cache_mode = auto")
            .execute(&mut conn)
            .await
            .unwrap();
        let keys = ["job:x".to_owned()];
        let (lease, worker) = (Duration::from_secs(30), "w");
        let completing = [Completing {
            key: "job:x",
            fence: 1,
            output: Some(&[]),
            keep: 1_000_000,
            attempt: 1,
        }];
        for i in 0..10 {
            // Looking for lapsed jobs or not, as the workers alternate.
            let rescue = i % 2 == 0;
            let mut claim = claim_for(1, worker, rescue, rescue);
            claim.lease = lease;
            let next = ClaimNext {
                wanted: &[1],
                queues: &[DEFAULT_QUEUE],
                lease,
                worker,
                rescue,
                start_by: tokio::time::Instant::now(),
            };
            sql.claim.claim(&mut conn, &claim).await.unwrap();
            sql.complete
                .complete_many_and_claim(&mut conn, &completing, &next)
                .await
                .unwrap();
            sql.complete
                .complete_many(&mut conn, &completing)
                .await
                .unwrap();
            sql.complete
                .complete_one_and_claim(&mut conn, &completing[0], &next)
                .await
                .unwrap();
            sql.complete
                .complete_one(&mut conn, &completing[0])
                .await
                .unwrap();
            let done = Settle::Done { result: None };
            sql.settle
                .settle(&mut conn, "job:x", 1, &done)
                .await
                .unwrap();
            sql.claim
                .mark_started(&mut conn, &keys, &[1], worker)
                .await
                .unwrap();
            sql.settle
                .release(&mut conn, &["job:x"], &[1], Duration::ZERO, false)
                .await
                .unwrap();
            sql.complete
                .renew(&mut conn, "job:x", Fence(1), lease, 1, Some(worker))
                .await
                .unwrap();
        }
        let plans: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let statements = [
            "claim",
            "complete_and_claim_many",
            "complete_and_done_many",
            "complete_and_claim_one",
            "complete_and_done_one",
            "done",
            "release",
            "renew",
        ];
        for name in statements {
            let statement = statement(&queue, name);
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
}

/// The queue's partial indexes read without a bound on their column are every job of their
/// states, as the queue's batched completions read them before they found the batch's jobs by
/// key alone: every unfinished job to mark the batch's done, and (hashed) every done job to
/// check whether a completion sent again found its job done. Read with a bound, as a claim
/// reads `q_waiting` (by its named queue) and `purge_done` reads `q_finished`, they are not.
#[test]
fn the_queues_partial_indexes_read_without_a_bound_are_whole_reads() {
    let every_done = "->  Bitmap Index Scan on idem_records_q_finished  (cost=0.00..4.13 rows=114 width=0)\n      Index Cond: (state = 'done'::text)";
    assert_eq!(whole_reads(every_done).len(), 1);
    let expired = "->  Index Scan using idem_records_q_finished on idem_records_queue\n      Index Cond: ((state = 'done'::text) AND (finished_at < $1))";
    assert!(whole_reads(expired).is_empty());
    let every_unfinished = "->  Bitmap Index Scan on idem_records_q_waiting  (cost=0.00..4.13 rows=4 width=0)\n->  Function Scan on d";
    assert_eq!(whole_reads(every_unfinished).len(), 1);
    let available = "->  Index Scan using idem_records_q_waiting on idem_records_queue j\n      Index Cond: ((queue = $4) AND (available_at <= now()))";
    assert!(whole_reads(available).is_empty());
}
