//! A job's completion as one statement: its call's record completed, the job marked done, and
//! the next job claimed for the slot it frees; the completions of concurrent jobs batched into
//! one statement.

use std::hash::Hasher;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Operation, StoreError};
use idem_store_postgres::extend::duration_micros;
use idem_store_postgres::extend::store_error;
use idem_store_postgres::extend::Resend;
use idem_store_postgres::extend::{hash_record, Op};
use idem_store_postgres::PgStore;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use crate::completer::settle::settle;
use crate::completer::settlement::Settle;
use crate::db::statements::QueueSql;
use crate::job_record::QUEUE_SCOPE;
use crate::worker::claimed::Claimed;
use crate::worker::held::Holder;

/// A job's completion (its call's, which also marks the job done), owning its parts to travel
/// to a batch's driver.
pub(crate) struct JobCompletion {
    /// The queue's statements (one queue per store, so every request of a batch has the same).
    pub sql: Arc<QueueSql>,
    pub key: String,
    pub fence: i64,
    pub output: Option<Vec<u8>>,
    pub keep: i64,
    pub attempt: i32,
    /// The workers whose slot this job frees, when its completion is to claim the next job
    /// for it.
    pub next: Option<Arc<Holder>>,
}

/// Completions of concurrent jobs, in one statement: answered (record completed, job marked
/// done, the next job claimed for its slot) for each. A refused batch is sent again job by
/// job (batch.rs).
pub(crate) struct JobCompleteOp;

impl JobCompleteOp {
    /// One job's completion (and the claim of the next job for its slot, when it frees one),
    /// answered as [`Op::many`] answers each job of a batch. Its statement takes scalars, so
    /// the server sets up no arrays to unnest and join: at one worker, where every completion
    /// goes alone, that is a sizeable share of the server's CPU per job.
    pub(crate) async fn single(
        conn: &mut PgConnection,
        c: &JobCompletion,
    ) -> Result<<Self as Op>::Answer, sqlx::Error> {
        // The completion's parameters, which both statements start with.
        let completion = |statement| {
            sqlx::query(statement)
                .bind(&c.key)
                .bind(c.fence)
                .bind(c.output.as_deref())
                .bind(c.keep)
                .bind(c.attempt)
        };
        let Some(workers) = &c.next else {
            let row = completion(&c.sql.complete_and_done_one)
                .fetch_one(&mut *conn)
                .await?;
            return Ok((row.try_get(0)?, row.try_get(1)?, None));
        };
        let looked = workers.rescue.due();
        let start_by = crate::worker::claimed::start_by(tokio::time::Instant::now(), workers.lease);
        let rows = completion(&c.sql.complete_and_claim_one)
            .bind(1i64)
            .bind(duration_micros(workers.lease))
            .bind(&workers.worker)
            .bind(&workers.queue)
            .bind(looked)
            .fetch_all(&mut *conn)
            .await?;
        let mut answers = Self::settle(&rows, 1, vec![(0, workers)], looked, start_by)?;
        Ok(answers.pop().expect("one answer per completion"))
    }

    /// Many jobs' completions (and the claims of next jobs for the slots they free) in one
    /// statement on `conn`, answered as [`single`](JobCompleteOp::single) answers each.
    pub(crate) async fn many_on(
        conn: &mut PgConnection,
        batch: &[JobCompletion],
    ) -> Result<Vec<<Self as Op>::Answer>, sqlx::Error> {
        let keys: Vec<&str> = batch.iter().map(|c| c.key.as_str()).collect();
        let fences: Vec<i64> = batch.iter().map(|c| c.fence).collect();
        let outputs: Vec<Option<&[u8]>> = batch.iter().map(|c| c.output.as_deref()).collect();
        let keeps: Vec<i64> = batch.iter().map(|c| c.keep).collect();
        let attempts: Vec<i32> = batch.iter().map(|c| c.attempt).collect();
        // The next jobs are claimed for the slots of the first completion's workers (one name,
        // one lease), in each slot's named queue. Completions of other workers in the batch
        // claim nothing; their producers fill their slots.
        let first = batch.iter().find_map(|c| c.next.as_ref());
        let slots: Vec<(usize, &Arc<Holder>)> = batch
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.next.as_ref().map(|workers| (i, workers)))
            .filter(|(_, workers)| {
                first.is_some_and(|first| {
                    first.worker == workers.worker && first.lease == workers.lease
                })
            })
            .collect();
        let mut queues: Vec<&str> = Vec::new();
        let mut wanted: Vec<i64> = Vec::new();
        // Lapsed jobs are looked for in every queue of the statement when one is due (see
        // `Rescue`): each queue's look is due on its own timer, and is taken here when due.
        let mut rescue = false;
        for (_, workers) in &slots {
            match queues.iter().position(|q| *q == workers.queue) {
                Some(i) => wanted[i] += 1,
                None => {
                    queues.push(&workers.queue);
                    wanted.push(1);
                    rescue |= workers.rescue.due();
                }
            }
        }
        let sql = &batch[0].sql;
        let Some(&(_, workers)) = slots.first() else {
            let rows = sqlx::query(&sql.complete_and_done_many)
                .bind(&keys)
                .bind(&fences)
                .bind(&outputs)
                .bind(&keeps)
                .bind(&attempts)
                .fetch_all(&mut *conn)
                .await?;
            return Ok(rows
                .iter()
                .map(|row| (row.get(0), row.get(1), None))
                .collect());
        };
        let start_by = crate::worker::claimed::start_by(tokio::time::Instant::now(), workers.lease);
        let rows = sqlx::query(&sql.complete_and_claim_many)
            .bind(&keys)
            .bind(&fences)
            .bind(&outputs)
            .bind(&keeps)
            .bind(&attempts)
            .bind(&wanted)
            .bind(duration_micros(workers.lease))
            .bind(&workers.worker)
            .bind(&queues)
            .bind(rescue)
            .fetch_all(&mut *conn)
            .await?;
        JobCompleteOp::settle(&rows, batch.len(), slots, rescue, start_by)
    }

    /// The answers of `count` completions from the rows of a completion-and-claim statement (a
    /// row per completion, its position first, then a row per claimed job, its named queue
    /// last), each claimed job given to a slot of `slots` of its queue (the position of the
    /// completion that freed it, and its workers) and held there before any slot hears of it
    /// (it is given back at shutdown). Each queue's workers hear what it took, and whether
    /// the statement `looked` for lapsed jobs (`Rescue::took`). The jobs start by `start_by`.
    fn settle(
        rows: &[PgRow],
        count: usize,
        slots: Vec<(usize, &Arc<Holder>)>,
        looked: bool,
        start_by: tokio::time::Instant,
    ) -> Result<Vec<<Self as Op>::Answer>, sqlx::Error> {
        let mut answers: Vec<<Self as Op>::Answer> =
            (0..count).map(|_| (false, false, None)).collect();
        let mut claimed = Vec::new();
        for row in rows {
            match row.try_get::<Option<i64>, _>(0)? {
                Some(i) => {
                    let answer = usize::try_from(i - 1)
                        .ok()
                        .and_then(|i| answers.get_mut(i))
                        .ok_or_else(|| sqlx::Error::Protocol(format!("no completion {i}")))?;
                    (answer.0, answer.1) = (row.try_get(1)?, row.try_get(2)?);
                }
                None => claimed.push((
                    Claimed::decode(row, 3, start_by),
                    row.try_get::<String, _>(13)?,
                )),
            }
        }
        // Each claimed job to a free slot of its named queue. The statement claims no more of a
        // queue than it has slots; one that did (never seen) gives the job back at once rather
        // than fail after its claims were made, which would leave them claimed and unrun.
        let any_holder = slots.first().map(|(_, workers)| Arc::clone(workers));
        // Per named queue (each of its slots' holders is that queue's): its slots, the jobs
        // it took, and how many of those were lapsed.
        let mut took: Vec<(&Arc<Holder>, usize, usize, usize)> = Vec::new();
        for (_, workers) in &slots {
            match took.iter_mut().find(|(w, ..)| w.queue == workers.queue) {
                Some(entry) => entry.1 += 1,
                None => took.push((workers, 1, 0, 0)),
            }
        }
        for (job, queue) in &claimed {
            if let Some(entry) = took.iter_mut().find(|(w, ..)| &w.queue == queue) {
                entry.2 += 1;
                entry.3 += usize::from(job.lapsed);
            }
        }
        for (workers, slots, got, lapsed) in took {
            workers.rescue.took(looked, lapsed, got, slots);
        }
        let mut free = slots;
        for (job, queue) in claimed {
            match free.iter().position(|(_, workers)| workers.queue == queue) {
                Some(at) => {
                    let (slot, workers) = free.swap_remove(at);
                    workers.held.hold(&job);
                    answers[slot].2 = Some(job);
                }
                None => {
                    if let Some(holder) = &any_holder {
                        give_back(Arc::clone(holder), job, &queue);
                    }
                }
            }
        }
        Ok(answers)
    }
}

/// Gives a claimed job that no slot can run back to the queue, on the runtime, its attempt not
/// counted.
fn give_back(holder: Arc<Holder>, job: Claimed, queue: &str) {
    tracing::error!(key = %job.key, queue, "a job was claimed for no slot of its queue; giving it back");
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return; // it returns when its lease lapses
    };
    idem_core::pending::spawn(&runtime, async move {
        settle(
            &holder,
            &job,
            Settle::Release {
                delay: Duration::ZERO,
            },
        )
        .await;
    });
}

impl Op for JobCompleteOp {
    type Executor = PgStore;
    type Request = JobCompletion;
    type Answer = (bool, bool, Option<Claimed>);

    fn record(request: &JobCompletion, state: &mut impl Hasher) {
        hash_record(&request.key, QUEUE_SCOPE, state);
    }

    const NAME: &'static str = "job completion";
    const OPERATION: Operation = Operation::Complete;
    const SEND_AGAIN: bool = false;

    /// Sent once only: a completion that claims is not safe to send again (see
    /// [`Op::SEND_AGAIN`]).
    async fn many(
        store: &PgStore,
        batch: &[JobCompletion],
    ) -> Result<Vec<Self::Answer>, sqlx::Error> {
        idem_store_postgres::on_connection!(store, Resend::Never, conn => JobCompleteOp::many_on(conn, batch))
    }

    async fn one(store: &PgStore, c: &JobCompletion) -> Result<Self::Answer, StoreError> {
        idem_store_postgres::on_connection!(store, Resend::Never, conn => JobCompleteOp::single(conn, c))
            .map_err(|e| store_error(e).during(Self::OPERATION))
    }

    /// A job claimed for the slot of a job whose task went away would sit `running` for a
    /// whole lease, unrun, with an attempt counted: it goes back to the queue at once, its
    /// attempt not counted.
    fn orphaned(_store: &PgStore, completion: JobCompletion, answer: Self::Answer) {
        let (Some(job), Some(workers)) = (answer.2, completion.next) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime to send it on: the job returns when its lease lapses
        };
        tracing::info!(key = %job.key, "the job claimed for a slot whose task went away goes back to the queue");
        idem_core::pending::spawn(&runtime, async move {
            settle(
                &workers,
                &job,
                Settle::Release {
                    delay: Duration::ZERO,
                },
            )
            .await;
            workers.held.forget(&job.key, job.attempt);
        });
    }
}

/// The batched statement against a real PostgreSQL (`DATABASE_URL`, as every test of this
/// crate): each job of one statement is answered for itself, and like the statement of one.
/// (The queue's tests run jobs through it; this checks the answers a fallback could mask: a
/// batch the database refuses is sent job by job, so a wrong `many` would still pass them.)
#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Queue;
    use idem_core::ClaimToken;
    use idem_core::{Claim, ClaimRequest, Fence, Key, Store};
    use idem_store_postgres::extend::{self as batch, fence_param};

    /// A store and its queue in a schema of their own.
    async fn setup(prefix: &str) -> (sqlx::PgPool, String, PgStore, Queue) {
        let (pool, schema, store) = crate::testing::store_in_new_schema(prefix).await;
        let queue = Queue::new(&store);
        (pool, schema, store, queue)
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

    async fn states(pool: &sqlx::PgPool, schema: &str) -> Vec<(String, String)> {
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
        let (pool, schema, store, queue) = setup(prefix).await;
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
            completions.push(JobCompletion {
                sql: queue.sql.clone(),
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
            JobCompleteOp::many_on(&mut conn, &completions)
                .await
                .expect("the batched statement runs")
        } else {
            let mut answers = Vec::new();
            for c in &completions {
                let answer = JobCompleteOp::single(&mut conn, c).await;
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
        let (completed, done, _) = JobCompleteOp::one(&store, &completions[0]).await.unwrap();
        assert_eq!((completed, done), (true, false));
        drop(conn);
        crate::testing::drop_schema(&pool, &schema).await;
    }

    /// The workers of `queue`, for a completion to claim a next job for.
    fn workers(queue: &Queue) -> Arc<Holder> {
        Arc::new(Holder {
            store: queue.store().clone(),
            sql: queue.sql.clone(),
            queue: crate::job::DEFAULT_QUEUE.to_owned(),
            global_limit: None,
            lease: Duration::from_secs(60),
            worker: "test-worker".to_owned(),
            held: Default::default(),
            stopping: Default::default(),
            rescue: crate::completer::rescue::Rescue::new(Duration::from_secs(60)),
            prefetch: 0,
            starts: Default::default(),
        })
    }

    /// A lone completion that frees a slot claims the next job for it in its statement: the
    /// queued job, held before it is answered, with its record's fence reserved; never the
    /// completing job itself, though its lease has lapsed and it comes first in
    /// `available_at`'s order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lone_completion_claims_the_next_job_for_its_slot() {
        let (pool, schema, store, queue) = setup("job_one_next").await;
        let (workers, completion) = completion_claiming_next(&store, &schema, &queue).await;
        let (completed, done, next) = JobCompleteOp::one(&store, &completion).await.unwrap();
        assert!(completed && done, "completed and marked done");
        let next = next.expect("the queued job, claimed for the slot");
        assert_eq!(next.key, "queued-0");
        assert_eq!(next.attempt, 1);
        assert!(next.record.is_some(), "its record's fence reserved with it");
        let held: Vec<String> = workers
            .held
            .snapshot()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(held, ["queued-0"], "held before being answered");
        assert_eq!(
            states(&pool, &schema).await,
            [
                ("queued-0".to_owned(), "running".to_owned()),
                ("running-a".to_owned(), "done".to_owned())
            ]
        );
        crate::testing::drop_schema(&pool, &schema).await;
    }

    /// A job's statement waiting on a lock (the completion held behind a locked row).
    const WAITING: &str = "SELECT pid FROM pg_stat_activity
                           WHERE wait_event_type = 'Lock' AND query LIKE '%idem_records_queue%'";

    /// Waits until a job's statement waits on a lock; returns its backend's pid.
    async fn until_waiting(pool: &sqlx::PgPool) -> i32 {
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
    ) -> (Arc<Holder>, JobCompletion) {
        let fence = running(store, schema, "running-a", 1).await;
        let job = crate::job::NewJob::new("queued-0", &0).unwrap();
        let _ = queue.enqueue(job).await.unwrap();
        let workers = workers(queue);
        let completion = JobCompletion {
            sql: queue.sql.clone(),
            key: "running-a".to_owned(),
            fence: fence_param(fence),
            output: None,
            keep: 60_000_000,
            attempt: 1,
            next: Some(Arc::clone(&workers)),
        };
        (workers, completion)
    }

    /// [`completion_claiming_next`], with the running job's row locked by the returned
    /// transaction (the completion waits on the lock once sent).
    async fn completion_behind_a_lock(
        pool: &sqlx::PgPool,
        schema: &str,
        store: &PgStore,
        queue: &Queue,
    ) -> (
        Arc<Holder>,
        sqlx::Transaction<'static, sqlx::Postgres>,
        JobCompletion,
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
        let (pool, schema, store, queue) = setup("job_orphan_next").await;
        let (workers, lock, completion) =
            completion_behind_a_lock(&pool, &schema, &store, &queue).await;
        let task = {
            let (store, queue) = (store.clone(), queue.clone());
            tokio::spawn(async move {
                let batcher = queue.completions.as_ref().expect("batched");
                batch::submit(&store, batcher, completion).await
            })
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
            if finished == "done"
                && state == "queued"
                && attempts == 0
                && workers.held.snapshot().is_empty()
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the orphaned job stays {state} with {attempts} attempts"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        crate::testing::drop_schema(&pool, &schema).await;
    }

    /// A completion that claims the next job, cut off with its connection while on the wire, is
    /// not sent again: had the server applied it before the cut, a second sending would claim a
    /// second job while the first sat claimed for nobody. The caller hears the error (the
    /// runtime then completes the call again without claiming).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_completion_that_claims_is_never_sent_again_after_its_connection_died() {
        let (pool, schema, store, queue) = setup("job_no_resend").await;
        let (_workers, lock, completion) =
            completion_behind_a_lock(&pool, &schema, &store, &queue).await;
        let mut task = {
            let store = store.clone();
            tokio::spawn(async move { JobCompleteOp::one(&store, &completion).await })
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
        crate::testing::drop_schema(&pool, &schema).await;
    }

    /// Completions that each free a slot claim one job per slot in the same statement: each a
    /// queued job (never one of the completing ones), held for its workers before it is
    /// answered, and the completions answered as without the claim.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn completions_claim_the_next_job_for_each_slot_they_free() {
        let (pool, schema, store, queue) = setup("job_done_next").await;
        for i in 0..5 {
            let job = crate::job::NewJob::new(format!("queued-{i}"), &i).unwrap();
            let _ = queue.enqueue(job).await.unwrap();
        }
        let workers = workers(&queue);
        let mut completions = Vec::new();
        for key in ["running-a", "running-b", "running-c"] {
            let fence = running(&store, &schema, key, 1).await;
            completions.push(JobCompletion {
                sql: queue.sql.clone(),
                key: key.to_owned(),
                fence: fence_param(fence),
                output: None,
                keep: 60_000_000,
                attempt: 1,
                next: Some(Arc::clone(&workers)),
            });
        }
        // The one in the middle frees no slot (its workers are stopping, say).
        completions[1].next = None;
        let mut conn = pool.acquire().await.unwrap();
        let answers = JobCompleteOp::many_on(&mut conn, &completions)
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
        let mut held: Vec<String> = workers
            .held
            .snapshot()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        held.sort();
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
        crate::testing::drop_schema(&pool, &schema).await;
    }

    /// Records of the queue's scope: (key, fence, completed, purge_at = expires_at, holder).
    async fn records(
        pool: &sqlx::PgPool,
        schema: &str,
    ) -> Vec<(String, i64, bool, bool, Option<String>)> {
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
    async fn claim_all(queue: &Queue, pool: &sqlx::PgPool) -> Vec<(String, i64)> {
        let rows = sqlx::query(&queue.sql.claim)
            .bind(100i64)
            .bind(60_000_000i64)
            .bind("test-worker")
            .bind(crate::job::DEFAULT_QUEUE)
            .bind(true)
            .bind(true)
            .fetch_all(pool)
            .await
            .unwrap();
        let mut claimed: Vec<(String, i64)> = rows
            .iter()
            .map(|row| {
                let job = Claimed::decode(row, 0, tokio::time::Instant::now());
                let (fence, _) = job.record.expect("a fresh key's fence is reserved");
                (job.key, fence)
            })
            .collect();
        claimed.sort();
        claimed
    }

    /// Jobs `kept` and `taken-over`, enqueued and claimed: (key, reserved fence), in that order.
    async fn kept_and_taken_over(queue: &Queue, pool: &sqlx::PgPool) -> Vec<(String, i64)> {
        for key in ["kept", "taken-over"] {
            let job = crate::job::NewJob::new(key, &0).unwrap();
            let _ = queue.enqueue(job).await.unwrap();
        }
        claim_all(queue, pool).await
    }

    /// Another worker's claim of `taken-over` (its lease lapsed, say).
    async fn take_over(pool: &sqlx::PgPool, schema: &str) {
        sqlx::query(&format!(
            "UPDATE {schema}.idem_records_queue SET attempts = 2 WHERE key = 'taken-over'"
        ))
        .execute(pool)
        .await
        .unwrap();
    }

    fn completion(queue: &Queue, key: &str, fence: i64, attempt: i32) -> JobCompletion {
        JobCompletion {
            sql: queue.sql.clone(),
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
        let (pool, schema, _store, queue) = setup("job_lazy_done").await;
        let claimed = kept_and_taken_over(&queue, &pool).await;
        assert_eq!(claimed.len(), 2);
        assert!(
            records(&pool, &schema).await.is_empty(),
            "the claim wrote no record"
        );
        take_over(&pool, &schema).await;
        let completions: Vec<JobCompletion> = claimed
            .iter()
            .map(|(key, fence)| completion(&queue, key, *fence, 1))
            .collect();
        let mut conn = pool.acquire().await.unwrap();
        let answers = JobCompleteOp::many_on(&mut conn, &completions)
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
        let again = JobCompleteOp::many_on(&mut conn, &completions[..1])
            .await
            .unwrap();
        assert_eq!((again[0].0, again[0].1), (true, false));
        drop(conn);
        crate::testing::drop_schema(&pool, &schema).await;
    }

    /// The first renewal of a job whose fence was reserved writes its record (in progress,
    /// naming the worker), later ones renew it, and the completion completes it; a renewal
    /// after another attempt claimed the job writes nothing and is refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_renewal_writes_a_reserved_record_while_the_job_is_the_attempts() {
        let (pool, schema, store, queue) = setup("job_lazy_renew").await;
        let claimed = kept_and_taken_over(&queue, &pool).await;
        let renew = |key: &str, fence: i64| {
            sqlx::query_as::<_, (i64, i64)>(&queue.sql.renew)
                .bind(key.to_owned())
                .bind(fence)
                .bind(60_000_000i64)
                .bind(1i32)
                .bind("test-worker")
        };
        let (kept, kept_fence) = (&claimed[0].0, claimed[0].1);
        assert_eq!(
            renew(kept, kept_fence).fetch_one(&pool).await.unwrap(),
            (1, 1)
        );
        assert_eq!(
            renew(kept, kept_fence).fetch_one(&pool).await.unwrap(),
            (1, 1)
        );
        // The kept job's record, written by its renewal: (key, fence, completed, purge_at =
        // expires_at, holder).
        let written = |completed| {
            let holder = Some("test-worker".to_owned());
            [(kept.clone(), kept_fence, completed, false, holder)]
        };
        assert_eq!(records(&pool, &schema).await, written(false));
        assert_eq!(
            renew(kept, kept_fence + 1000)
                .fetch_one(&pool)
                .await
                .unwrap(),
            (0, 1),
            "another fence's renewal is refused"
        );
        take_over(&pool, &schema).await;
        let (taken, taken_fence) = (&claimed[1].0, claimed[1].1);
        assert_eq!(
            renew(taken, taken_fence).fetch_one(&pool).await.unwrap(),
            (0, 0)
        );
        assert_eq!(
            records(&pool, &schema).await.len(),
            1,
            "nothing written for it"
        );
        let (completed, done, _) =
            JobCompleteOp::one(&store, &completion(&queue, kept, kept_fence, 1))
                .await
                .unwrap();
        assert!(completed && done);
        assert_eq!(
            records(&pool, &schema).await,
            written(true),
            "the written record completed in place"
        );
        crate::testing::drop_schema(&pool, &schema).await;
    }
}
