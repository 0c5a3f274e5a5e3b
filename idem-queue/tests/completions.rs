//! A job's completion as one statement against a real PostgreSQL: its call's record
//! completed, the job marked done and the next job claimed for the slot it frees; the
//! completions of concurrent jobs batched into one statement. Each job of one statement is
//! answered for itself, and like the statement of one. (The queue's other tests run jobs
//! through it; these check the answers a fallback could mask: a batch the database refuses is
//! sent job by job, so a wrong batched statement would still pass them.)

mod support;

use std::time::Duration;

use idem_core::{Claim, ClaimRequest, ClaimToken, Fence, Key, Store};
use idem_postgres_core::extend::fence_param;
use idem_queue::testing::{self, ClaimFor, Completion, Slots};
use idem_queue::{NewJob, Queue, DEFAULT_QUEUE, QUEUE_SCOPE};
use idem_store_postgres::sqlx::{self, PgPool};
use idem_store_postgres::PgStore;
use support::TestStore;

/// A store and its queue in a schema of their own (dropped with `test`).
async fn setup(prefix: &str) -> (TestStore, PgPool, String, PgStore, Queue) {
    let test = TestStore::new(prefix, 4).await;
    let queue = support::queue(&test).await;
    let (pool, schema, store) = (
        test.store.pool().clone(),
        test.schema.clone(),
        test.store.clone(),
    );
    (test, pool, schema, store, queue)
}

/// A running job `key` whose row names `row_attempt`, with its call's record claimed;
/// returns the record's fence.
async fn running(store: &PgStore, schema: &str, key: &str, row_attempt: i32) -> Fence {
    let k = Key::new(key).unwrap().with_scope(QUEUE_SCOPE).unwrap();
    let Claim::Acquired { fence, .. } = store
        .claim(ClaimRequest {
            key: &k,
            fingerprint: None,
            lease: Duration::from_secs(60),
            token: Some(ClaimToken::random()),
        })
        .await
        .unwrap()
    else {
        panic!("a fresh key is acquired");
    };
    sqlx::query(&format!(
        "INSERT INTO {schema}.idem_records_queue (key, payload, state, attempts, max_attempts)
         VALUES ($1, '{{}}', 'running', $2, 5)"
    ))
    .bind(key)
    .bind(row_attempt)
    .execute(store.pool())
    .await
    .unwrap();
    fence
}

async fn states(pool: &PgPool, schema: &str) -> Vec<(String, String)> {
    sqlx::query_as(&format!(
        "SELECT key, state FROM {schema}.idem_records_queue ORDER BY key"
    ))
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_statement_answers_each_job_as_its_own_would() {
    completions_answer_each_job("job_done_many", true).await;
}

/// The statement for one job (every completion at one worker) answers and writes as the
/// batched one does for that job, in each of the batch's cases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_completion_answers_as_it_would_in_a_batch() {
    completions_answer_each_job("job_done_one", false).await;
}

/// Completes a job in each case (applies, its job taken over, its record taken over, with
/// an output) in one batched statement (`batched`) or each in the statement for one job,
/// and checks the answers and what they wrote.
async fn completions_answer_each_job(prefix: &str, batched: bool) {
    let (_test, pool, schema, store, queue) = setup(prefix).await;
    let mut completions = Vec::new();
    // (key, fence offset, attempt written on the job's row, attempt the completion names)
    let cases = [
        ("applies", 0, 1, 1),
        ("job-taken-over", 0, 2, 1),
        ("record-taken-over", 1, 1, 1),
        ("output", 0, 3, 3),
    ];
    for (key, fence_offset, row_attempt, attempt) in cases {
        let fence = running(&store, &schema, key, row_attempt).await;
        completions.push(Completion {
            key: key.to_owned(),
            fence: fence_param(fence) + fence_offset,
            output: (key == "output").then(|| b"out".to_vec()),
            keep: 60_000_000,
            attempt,
            next: None,
        });
    }
    let mut conn = pool.acquire().await.unwrap();
    let answers = if batched {
        testing::complete_on(&mut conn, &queue, completions.clone())
            .await
            .expect("the batched statement runs")
    } else {
        let mut answers = Vec::new();
        for c in &completions {
            let answer = testing::complete_alone_on(&mut conn, &queue, c.clone()).await;
            answers.push(answer.expect("the statement for one job runs"));
        }
        answers
    };
    let answers: Vec<(bool, bool)> = answers
        .into_iter()
        .map(|(completed, done, next)| {
            assert!(next.is_none(), "nothing asked for a next job");
            (completed, done)
        })
        .collect();
    assert_eq!(
        answers,
        [(true, true), (true, false), (false, false), (true, true)],
        "completed / marked done, per job"
    );
    let states = states(&pool, &schema).await;
    let done: Vec<&str> = states
        .iter()
        .filter(|(_, state)| state == "done")
        .map(|(key, _)| key.as_str())
        .collect();
    assert_eq!(done, ["applies", "output"]);
    let record = store
        .get(&Key::new("output").unwrap().with_scope(QUEUE_SCOPE).unwrap())
        .await
        .unwrap()
        .expect("the record");
    assert!(matches!(
        record.state,
        idem_core::RecordState::Completed { output: Some(ref o), .. } if o == b"out"
    ));
    // A completion sent again alone answers as the batch did: the record is completed
    // already with this fence (applies again), the job is no longer running.
    let (completed, done, _) = testing::complete(&queue, completions[0].clone())
        .await
        .unwrap();
    assert_eq!((completed, done), (true, false));
    drop(conn);
}

/// The workers of `queue`, for a completion to claim a next job for.
fn workers(queue: &Queue) -> Slots {
    Slots::new(queue, "test-worker")
}

/// A lone completion that frees a slot claims the next job for it in its statement: the
/// queued job, held before it is answered, with its record's fence reserved; never the
/// completing job itself, though its lease has lapsed and it comes first in
/// `available_at`'s order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_completion_claims_the_next_job_for_its_slot() {
    let (_test, pool, schema, store, queue) = setup("job_one_next").await;
    let (workers, completion) = completion_claiming_next(&store, &schema, &queue).await;
    let (completed, done, next) = testing::complete(&queue, completion).await.unwrap();
    assert!(completed && done, "completed and marked done");
    let next = next.expect("the queued job, claimed for the slot");
    assert_eq!(next.key, "queued-0");
    assert_eq!(next.attempt, 1);
    assert!(next.record.is_some(), "its record's fence reserved with it");
    let held = workers.held();
    assert_eq!(held, ["queued-0"], "held before being answered");
    assert_eq!(
        states(&pool, &schema).await,
        [
            ("queued-0".to_owned(), "running".to_owned()),
            ("running-a".to_owned(), "done".to_owned())
        ]
    );
}

/// A job's statement waiting on a lock (the completion held behind a locked row).
const WAITING: &str = "SELECT pid FROM pg_stat_activity
                       WHERE wait_event_type = 'Lock' AND query LIKE '%idem_records_queue%'";

/// Waits until a job's statement waits on a lock; returns its backend's pid.
async fn until_waiting(pool: &PgPool) -> i32 {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(pid) = sqlx::query_scalar(WAITING)
            .fetch_optional(pool)
            .await
            .unwrap()
        {
            return pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the completion never waited"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A running job `running-a` and a queued `queued-0`, and the running job's completion,
/// which claims the next job for the returned workers' slot.
async fn completion_claiming_next(
    store: &PgStore,
    schema: &str,
    queue: &Queue,
) -> (Slots, Completion) {
    let fence = running(store, schema, "running-a", 1).await;
    let job = NewJob::new("queued-0", &0).unwrap();
    let _ = queue.enqueue(job).await.unwrap();
    let workers = workers(queue);
    let completion = Completion {
        key: "running-a".to_owned(),
        fence: fence_param(fence),
        output: None,
        keep: 60_000_000,
        attempt: 1,
        next: Some(workers.clone()),
    };
    (workers, completion)
}

/// [`completion_claiming_next`], with the running job's row locked by the returned
/// transaction (the completion waits on the lock once sent).
async fn completion_behind_a_lock(
    pool: &PgPool,
    schema: &str,
    store: &PgStore,
    queue: &Queue,
) -> (
    Slots,
    sqlx::Transaction<'static, sqlx::Postgres>,
    Completion,
) {
    let (workers, completion) = completion_claiming_next(store, schema, queue).await;
    let mut lock = pool.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM {schema}.idem_records_queue WHERE key = 'running-a' FOR UPDATE"
    ))
    .execute(&mut *lock)
    .await
    .unwrap();
    (workers, lock, completion)
}

/// A job's task goes away (aborted) while its completion, which claims the next job for
/// its slot, is on the wire: the job it claimed for nobody goes back to the queue at once,
/// its attempt not counted, instead of sitting claimed and unrun for a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_claimed_for_a_task_that_went_away_goes_back_to_the_queue() {
    let (_test, pool, schema, store, queue) = setup("job_orphan_next").await;
    let (workers, lock, completion) =
        completion_behind_a_lock(&pool, &schema, &store, &queue).await;
    let task = {
        let queue = queue.clone();
        tokio::spawn(async move { testing::submit_completion(&queue, completion).await })
    };
    until_waiting(&pool).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    lock.rollback().await.unwrap();

    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (state, attempts, finished): (String, i32, String) = sqlx::query_as(&format!(
            "SELECT q.state, q.attempts - q.unrun, a.state FROM {schema}.idem_records_queue q,
                    {schema}.idem_records_queue a
             WHERE q.key = 'queued-0' AND a.key = 'running-a'"
        ))
        .fetch_one(&pool)
        .await
        .unwrap();
        // The completion committed (and with it the claim of the next job); the job it
        // claimed was given back, and is no longer held once its release returned.
        if finished == "done" && state == "queued" && attempts == 0 && workers.held().is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the orphaned job stays {state} with {attempts} attempts"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A completion that claims the next job, cut off with its connection while on the wire, is
/// not sent again: had the server applied it before the cut, a second sending would claim a
/// second job while the first sat claimed for nobody. The caller hears the error (the
/// runtime then completes the call again without claiming).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_claims_is_never_sent_again_after_its_connection_died() {
    let (_test, pool, schema, store, queue) = setup("job_no_resend").await;
    let (_workers, lock, completion) =
        completion_behind_a_lock(&pool, &schema, &store, &queue).await;
    let mut task = {
        let queue = queue.clone();
        tokio::spawn(async move { testing::complete(&queue, completion).await })
    };
    let pid = until_waiting(&pool).await;
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .execute(&pool)
        .await
        .unwrap();
    // Either the caller hears of the cut, or the statement is sent again (and waits again).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let answered = loop {
        tokio::select! {
            answered = &mut task => break Some(answered.unwrap()),
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
        let again: Option<i32> = sqlx::query_scalar(WAITING)
            .fetch_optional(&pool)
            .await
            .unwrap();
        if again.is_some_and(|again| again != pid) {
            break None;
        }
        assert!(std::time::Instant::now() < deadline, "never answered");
    };
    lock.rollback().await.unwrap();
    let answered = answered.expect("the completion was sent again on another connection");
    assert!(
        answered.is_err(),
        "the caller hears of the cut: {answered:?}"
    );
    let states = states(&pool, &schema).await;
    assert_eq!(
        states,
        [
            ("queued-0".to_owned(), "queued".to_owned()),
            ("running-a".to_owned(), "running".to_owned())
        ],
        "nothing applied, nothing claimed"
    );
}

/// Completions that each free a slot claim one job per slot in the same statement: each a
/// queued job (never one of the completing ones), held for its workers before it is
/// answered, and the completions answered as without the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_claim_the_next_job_for_each_slot_they_free() {
    let (_test, pool, schema, store, queue) = setup("job_done_next").await;
    for i in 0..5 {
        let job = NewJob::new(format!("queued-{i}"), &i).unwrap();
        let _ = queue.enqueue(job).await.unwrap();
    }
    let workers = workers(&queue);
    let mut completions = Vec::new();
    for key in ["running-a", "running-b", "running-c"] {
        let fence = running(&store, &schema, key, 1).await;
        completions.push(Completion {
            key: key.to_owned(),
            fence: fence_param(fence),
            output: None,
            keep: 60_000_000,
            attempt: 1,
            next: Some(workers.clone()),
        });
    }
    // The one in the middle frees no slot (its workers are stopping, say).
    completions[1].next = None;
    let mut conn = pool.acquire().await.unwrap();
    let answers = testing::complete_on(&mut conn, &queue, completions.clone())
        .await
        .expect("the batched statement runs");
    drop(conn);
    let next: Vec<Option<String>> = answers
        .iter()
        .map(|(completed, done, next)| {
            assert!(*completed && *done, "completed and marked done");
            next.as_ref().map(|job| job.key.clone())
        })
        .collect();
    assert!(next[1].is_none(), "no job for a slot that was not freed");
    let (a, c) = (next[0].clone().unwrap(), next[2].clone().unwrap());
    assert_ne!(a, c);
    for job in answers.iter().filter_map(|(_, _, next)| next.as_ref()) {
        assert!(job.key.starts_with("queued-"), "{}", job.key);
        assert_eq!(job.attempt, 1);
        assert!(job.record.is_some(), "its record's fence reserved with it");
    }
    let held = workers.held();
    let mut expected = vec![a.clone(), c.clone()];
    expected.sort();
    assert_eq!(held, expected, "held before being answered");
    let states = states(&pool, &schema).await;
    let of = |state: &str| {
        states
            .iter()
            .filter(|(_, s)| s == state)
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(of("done"), ["running-a", "running-b", "running-c"]);
    let mut running = of("running");
    running.sort();
    assert_eq!(running, expected);
    assert_eq!(of("queued").len(), 3);
}

/// Records of the queue's scope: (key, fence, completed, purge_at = expires_at, holder).
async fn records(pool: &PgPool, schema: &str) -> Vec<(String, i64, bool, bool, Option<String>)> {
    sqlx::query_as(&format!(
        "SELECT key, fence, completed_at IS NOT NULL, purge_at = expires_at, holder
         FROM {schema}.idem_records WHERE scope = $1 ORDER BY key"
    ))
    .bind(QUEUE_SCOPE)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Claims every queued job with the queue's claim statement: (key, reserved fence).
async fn claim_all(queue: &Queue, pool: &PgPool) -> Vec<(String, i64)> {
    let mut conn = pool.acquire().await.unwrap();
    let claim = ClaimFor {
        limit: 100,
        lease: Duration::from_secs(60),
        worker: "test-worker",
        queue: DEFAULT_QUEUE,
        rescue: true,
        started: true,
        start_by: tokio::time::Instant::now(),
    };
    let jobs = testing::sql(queue)
        .claim
        .claim(&mut conn, &claim)
        .await
        .unwrap();
    let mut claimed: Vec<(String, i64)> = jobs
        .into_iter()
        .map(|job| {
            let (fence, _) = job.record.expect("a fresh key's fence is reserved");
            (job.key, fence)
        })
        .collect();
    claimed.sort();
    claimed
}

/// Jobs `kept` and `taken-over`, enqueued and claimed: (key, reserved fence), in that order.
async fn kept_and_taken_over(queue: &Queue, pool: &PgPool) -> Vec<(String, i64)> {
    for key in ["kept", "taken-over"] {
        let job = NewJob::new(key, &0).unwrap();
        let _ = queue.enqueue(job).await.unwrap();
    }
    claim_all(queue, pool).await
}

/// Another worker's claim of `taken-over` (its lease lapsed, say).
async fn take_over(pool: &PgPool, schema: &str) {
    sqlx::query(&format!(
        "UPDATE {schema}.idem_records_queue SET attempts = 2 WHERE key = 'taken-over'"
    ))
    .execute(pool)
    .await
    .unwrap();
}

fn completion(key: &str, fence: i64, attempt: i32) -> Completion {
    Completion {
        key: key.to_owned(),
        fence,
        output: None,
        keep: 3_600_000_000,
        attempt,
        next: None,
    }
}

/// A job's claim reserves its record's fence and writes no record, and neither does its
/// completion: the job's done row is its record (until it is purged). The completion
/// applies only while the job's claim is still the completing attempt's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_jobs_done_row_is_its_record() {
    let (_test, pool, schema, _store, queue) = setup("job_lazy_done").await;
    let claimed = kept_and_taken_over(&queue, &pool).await;
    assert_eq!(claimed.len(), 2);
    assert!(
        records(&pool, &schema).await.is_empty(),
        "the claim wrote no record"
    );
    take_over(&pool, &schema).await;
    let completions: Vec<Completion> = claimed
        .iter()
        .map(|(key, fence)| completion(key, *fence, 1))
        .collect();
    let mut conn = pool.acquire().await.unwrap();
    let answers = testing::complete_on(&mut conn, &queue, completions.clone())
        .await
        .unwrap();
    let answers: Vec<(bool, bool)> = answers.into_iter().map(|(c, d, _)| (c, d)).collect();
    assert_eq!(answers, [(true, true), (false, false)]);
    assert!(
        records(&pool, &schema).await.is_empty(),
        "no record written"
    );
    assert_eq!(
        states(&pool, &schema).await,
        [
            ("kept".to_owned(), "done".to_owned()),
            ("taken-over".to_owned(), "running".to_owned())
        ]
    );
    // Sent again (its answer lost, say), the completion applies again.
    let again = testing::complete_on(&mut conn, &queue, completions[..1].to_vec())
        .await
        .unwrap();
    assert_eq!((again[0].0, again[0].1), (true, false));
    drop(conn);
}

/// The first renewal of a job whose fence was reserved writes its record (in progress,
/// naming the worker), later ones renew it, and the completion completes it; a renewal
/// after another attempt claimed the job writes nothing and is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_writes_a_reserved_record_while_the_job_is_the_attempts() {
    let (_test, pool, schema, _store, queue) = setup("job_lazy_renew").await;
    let claimed = kept_and_taken_over(&queue, &pool).await;
    let renew = |key: &str, fence: i64| {
        let (key, pool, complete) = (key.to_owned(), &pool, &testing::sql(&queue).complete);
        async move {
            let fence = Fence(fence.unsigned_abs());
            let lease = Duration::from_secs(60);
            let renewed = complete
                .renew(pool, &key, fence, lease, 1, Some("test-worker"))
                .await
                .unwrap();
            (renewed.records, renewed.jobs)
        }
    };
    let (kept, kept_fence) = (&claimed[0].0, claimed[0].1);
    assert_eq!(renew(kept, kept_fence).await, (1, 1));
    assert_eq!(renew(kept, kept_fence).await, (1, 1));
    // The kept job's record, written by its renewal: (key, fence, completed, purge_at =
    // expires_at, holder).
    let written = |completed| {
        let holder = Some("test-worker".to_owned());
        [(kept.clone(), kept_fence, completed, false, holder)]
    };
    assert_eq!(records(&pool, &schema).await, written(false));
    assert_eq!(
        renew(kept, kept_fence + 1000).await,
        (0, 1),
        "another fence's renewal is refused"
    );
    take_over(&pool, &schema).await;
    let (taken, taken_fence) = (&claimed[1].0, claimed[1].1);
    assert_eq!(renew(taken, taken_fence).await, (0, 0));
    assert_eq!(
        records(&pool, &schema).await.len(),
        1,
        "nothing written for it"
    );
    let (completed, done, _) = testing::complete(&queue, completion(kept, kept_fence, 1))
        .await
        .unwrap();
    assert!(completed && done);
    assert_eq!(
        records(&pool, &schema).await,
        written(true),
        "the written record completed in place"
    );
}
