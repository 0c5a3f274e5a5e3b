//! The work queue against a real PostgreSQL: idempotent enqueue (also inside a transaction),
//! workers that run each job once, retries with growing backoff into the dead-letter state,
//! leases that keep a slow job, wake-up by notification, and graceful shutdown.
//!
//! The multi-process and SIGKILL proofs are in the workspace's `tests/pg_queue.rs`.

mod support;

use idem_core::{context, Call, Key, Outcome, Store};
use idem_queue::{
    Backoff, EnqueueError, Enqueued, Job, JobState, NewJob, Queue, ShutdownReport, WorkerBuilder,
    Workers,
};
use serde_json::json;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use support::TestStore;

/// Polls `check` until it holds, failing the test after `limit`.
async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn state(queue: &Queue, key: &str) -> Option<JobState> {
    queue.status(key).await.unwrap().map(|s| s.state)
}

fn job(key: &str, payload: serde_json::Value) -> NewJob {
    NewJob::new(key, &payload).unwrap()
}

/// Handler runs per key.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<String, Vec<Instant>>>>);

impl Runs {
    fn record(&self, key: &str) -> usize {
        let mut runs = self.0.lock().unwrap();
        let entry = runs.entry(key.to_owned()).or_default();
        entry.push(Instant::now());
        entry.len()
    }
    fn count(&self, key: &str) -> usize {
        self.0.lock().unwrap().get(key).map_or(0, Vec::len)
    }
    fn times(&self, key: &str) -> Vec<Instant> {
        self.0.lock().unwrap().get(key).cloned().unwrap_or_default()
    }
    fn total(&self) -> usize {
        self.0.lock().unwrap().values().map(Vec::len).sum()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_is_idempotent_on_the_key_and_refuses_another_payload() {
    let test = TestStore::new("q_enqueue", 20).await;
    let queue = support::queue(&test).await;
    let first = queue
        .enqueue(job("welcome:1", json!({"user": 1, "lang": "en"})))
        .await
        .unwrap();
    assert_eq!(first, Enqueued::Queued);
    // The same payload, with its keys in another order, is the same job.
    let again = queue
        .enqueue(job("welcome:1", json!({"lang": "en", "user": 1})))
        .await
        .unwrap();
    assert_eq!(again, Enqueued::Duplicate);
    let other = queue.enqueue(job("welcome:1", json!({"user": 2}))).await;
    assert!(
        matches!(&other, Err(EnqueueError::KeyReused { key }) if key == "welcome:1"),
        "{other:?}"
    );
    assert!(other.unwrap_err().to_string().contains("different payload"));
    let status = queue.status("welcome:1").await.unwrap().unwrap();
    assert_eq!(status.payload, json!({"user": 1, "lang": "en"}));
    assert_eq!((status.state, status.attempts), (JobState::Queued, 0));

    let invalid = NewJob::new("", &json!({}));
    assert!(matches!(invalid, Err(EnqueueError::InvalidKey(_))));
    let too_long = NewJob::new("k".repeat(10_000), &json!({}));
    assert!(matches!(too_long, Err(EnqueueError::InvalidKey(_))));

    // Fifty concurrent enqueues of one new key: one stores it.
    let queued = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (queue, queued) = (queue.clone(), queued.clone());
            tokio::spawn(async move {
                if queue.enqueue(job("race", json!([1, 2]))).await.unwrap() == Enqueued::Queued {
                    queued.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(queued.load(Ordering::SeqCst), 1);
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.queued, stats.running, stats.done, stats.dead),
        (2, 0, 0, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_in_a_transaction_commits_or_rolls_back_with_it() {
    let test = TestStore::new("q_tx", 20).await;
    let queue = support::queue(&test).await;
    let orders = format!("\"{}\".orders", test.schema);
    sqlx::query(&format!("CREATE TABLE {orders} (id int PRIMARY KEY)"))
        .execute(test.store.pool())
        .await
        .unwrap();

    let mut tx = test.store.pool().begin().await.unwrap();
    sqlx::query(&format!("INSERT INTO {orders} VALUES (1)"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let enqueued = queue.enqueue_in(&mut *tx, job("confirm:1", json!(1))).await;
    assert_eq!(enqueued.unwrap(), Enqueued::Queued);
    assert_eq!(
        state(&queue, "confirm:1").await,
        None,
        "not visible before commit"
    );
    tx.rollback().await.unwrap();
    assert_eq!(
        state(&queue, "confirm:1").await,
        None,
        "rolled back with the order"
    );

    let mut tx = test.store.pool().begin().await.unwrap();
    sqlx::query(&format!("INSERT INTO {orders} VALUES (2)"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let enqueued = queue.enqueue_in(&mut *tx, job("confirm:2", json!(2))).await;
    assert_eq!(enqueued.unwrap(), Enqueued::Queued);
    tx.commit().await.unwrap();
    assert_eq!(state(&queue, "confirm:2").await, Some(JobState::Queued));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_each_job_once_as_an_idempotent_call() {
    run_each_job_once(TestStore::new("q_once", 30).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_dedicated_connections_run_each_job_once() {
    run_each_job_once(TestStore::dedicated("q_once_d", 10, 6).await).await;
}

/// Through the pool the server chooses each statement's plan itself (`plan_cache_mode =
/// auto`): custom plans for a connection's first five executions, then the generic one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_through_the_pool_run_each_job_once() {
    run_each_job_once(TestStore::through_pool("q_once_p", 10).await).await;
}

async fn run_each_job_once(test: TestStore) {
    let queue = support::queue(&test).await;
    for i in 0..300 {
        let _ = queue
            .enqueue(job(&format!("job:{i}"), json!({"i": i})))
            .await
            .unwrap();
    }
    let runs = Runs::default();
    let wrong_context = Arc::new(AtomicUsize::new(0));
    let start = |runs: Runs, wrong: Arc<AtomicUsize>| {
        queue
            .worker(move |job: Job| {
                let (runs, wrong) = (runs.clone(), wrong.clone());
                async move {
                    // The job runs inside an idempotent call keyed by the job's key.
                    let key = context::current().map(|c| c.key().as_str().to_owned());
                    let i = job.payload()["i"].as_u64().unwrap();
                    if key.as_deref() != Some(job.key()) || job.key() != format!("job:{i}") {
                        wrong.fetch_add(1, Ordering::SeqCst);
                    }
                    runs.record(job.key());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    Ok::<_, std::io::Error>(())
                }
            })
            .concurrency(4)
            .batch_size(3)
            .poll_interval(Duration::from_millis(50))
            .start()
    };
    let a = start(runs.clone(), wrong_context.clone());
    let b = start(runs.clone(), wrong_context.clone());
    eventually("all 300 jobs are done", Duration::from_secs(60), || async {
        queue.stats().await.unwrap().done == 300
    })
    .await;
    assert_eq!(a.shutdown(Duration::from_secs(5)).await.released, 0);
    assert_eq!(b.shutdown(Duration::from_secs(5)).await.released, 0);
    assert_eq!(runs.total(), 300);
    assert!((0..300).all(|i| runs.count(&format!("job:{i}")) == 1));
    assert_eq!(wrong_context.load(Ordering::SeqCst), 0);
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.queued, stats.running, stats.dead), (0, 0, 0));
    // A finished key enqueued again is a duplicate, and nothing runs.
    assert_eq!(
        queue.enqueue(job("job:7", json!({"i": 7}))).await.unwrap(),
        Enqueued::Duplicate
    );
}

/// Many jobs at once, half of them long enough to renew their lease (which writes their
/// record) and half not (their row is their record): three sets of workers, completions
/// batched, each job run once; every long job's record is written and completed, and no short
/// job has one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_and_short_jobs_side_by_side_run_once_with_their_records_settled() {
    let test = TestStore::new("q_renew_mix", 20).await;
    let queue = support::queue(&test).await;
    const JOBS: usize = 120;
    for i in 0..JOBS {
        let _ = queue
            .enqueue(job(&format!("mix:{i}"), json!({"long": i % 2 == 0})))
            .await
            .unwrap();
    }
    let runs = Runs::default();
    let lease = Duration::from_millis(600);
    // The long jobs run past several renewals (one every third of the lease).
    let start = || {
        recording_for(&queue, &runs, move |job| {
            if job.payload()["long"] == json!(true) {
                lease + lease / 2
            } else {
                Duration::ZERO
            }
        })
        .lease(lease)
        .concurrency(8)
        .poll_interval(Duration::from_millis(20))
        .start()
    };
    let workers = [start(), start(), start()];
    eventually("every job is done", Duration::from_secs(60), || async {
        queue.stats().await.unwrap().done == JOBS as u64
    })
    .await;
    for workers in workers {
        assert_eq!(workers.shutdown(Duration::from_secs(5)).await.released, 0);
    }
    assert_eq!(runs.total(), JOBS, "each job ran once");
    let records: Vec<(String, bool)> = sqlx::query_as(&format!(
        "SELECT key, completed_at IS NOT NULL FROM \"{}\".idem_records
         WHERE scope = $1 ORDER BY key",
        test.schema
    ))
    .bind(idem_queue::QUEUE_SCOPE)
    .fetch_all(test.store.pool())
    .await
    .unwrap();
    let mut long: Vec<String> = (0..JOBS).step_by(2).map(|i| format!("mix:{i}")).collect();
    long.sort();
    assert_eq!(
        records,
        long.into_iter().map(|k| (k, true)).collect::<Vec<_>>(),
        "the long jobs' records, written by their renewal and completed; none for short jobs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_completed_before_its_claim_was_settled_does_not_run_again() {
    // A worker that died between finishing a job and settling its row: the job's idempotent
    // call is complete, the row is not. The next claim must see the completion.
    let test = TestStore::new("q_settle", 20).await;
    let queue = support::queue(&test).await;
    // The job's call: its key in the queue's scope.
    let outcome = Call::new(&test.store, "charge:9")
        .scope(idem_queue::QUEUE_SCOPE)
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Executed(()));
    let _ = queue
        .enqueue(job("charge:9", json!({"cents": 500})))
        .await
        .unwrap();
    let runs = Runs::default();
    let workers = recording(&queue, &runs, Duration::ZERO)
        .poll_interval(Duration::from_millis(20))
        .start();
    eventually("the job is done", Duration::from_secs(20), || async {
        state(&queue, "charge:9").await == Some(JobState::Done)
    })
    .await;
    workers.shutdown(Duration::from_secs(5)).await;
    assert_eq!(runs.count("charge:9"), 0, "the handler did not run again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_jobs_back_off_more_each_time_then_dead_letter() {
    let test = TestStore::new("q_poison", 20).await;
    let queue = support::queue(&test).await;
    let poison = |key: &str| job(key, json!({"poison": true})).max_attempts(4);
    let _ = queue.enqueue(poison("poison:err")).await.unwrap();
    let _ = queue.enqueue(poison("poison:panic")).await.unwrap();
    let _ = queue.enqueue(job("fine", json!({}))).await.unwrap();
    let runs = Runs::default();
    let healed = Arc::new(AtomicUsize::new(0));
    let (handler_runs, handler_healed) = (runs.clone(), healed.clone());
    let base = Duration::from_millis(200);
    let workers = queue
        .worker(move |job: Job| {
            let (runs, healed) = (handler_runs.clone(), handler_healed.clone());
            async move {
                let n = runs.record(job.key());
                if healed.load(Ordering::SeqCst) == 1 || job.key() == "fine" {
                    // A retried dead job starts counting again.
                    assert_eq!(job.attempt(), 1);
                    return Ok(());
                }
                assert_eq!(job.attempt() as usize, n, "attempts count every run");
                if job.key() == "poison:panic" {
                    panic!("bad payload in attempt {n}");
                }
                Err(format!(
                    "provider said no (attempt {n} of {})",
                    job.max_attempts()
                ))
            }
        })
        .backoff(Backoff::new(base, Duration::from_secs(30)))
        .poll_interval(Duration::from_millis(10))
        .start();
    eventually(
        "both poison jobs are dead",
        Duration::from_secs(30),
        || async { queue.stats().await.unwrap().dead == 2 },
    )
    .await;

    for key in ["poison:err", "poison:panic"] {
        let times = runs.times(key);
        assert_eq!(times.len(), 4, "{key} ran exactly max_attempts times");
        let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
        // After failed attempt n the wait is at least half of base * 2^(n-1), at most all of it.
        // The floors prove the growth: the third wait's floor (4 * base / 2) is above the
        // first wait's ceiling (base). Only floors are asserted: a gap also holds the handler's
        // own time, and under RUST_BACKTRACE=1 the first panic's hook symbolizes a backtrace
        // for hundreds of milliseconds, so comparing two measured gaps would flake.
        for (i, gap) in gaps.iter().enumerate() {
            let floor = base * (1 << i) / 2;
            assert!(
                *gap >= floor,
                "{key}: gap {i} {gap:?} < {floor:?} ({gaps:?})"
            );
        }
    }
    let dead = queue.dead(10).await.unwrap();
    assert_eq!(dead.len(), 2);
    let by_key: HashMap<_, _> = dead.iter().map(|d| (d.key.as_str(), d)).collect();
    let err = by_key["poison:err"];
    assert_eq!(err.attempts, 4);
    assert_eq!(
        err.last_error.as_deref(),
        Some("provider said no (attempt 4 of 4)")
    );
    assert_eq!(err.payload, json!({"poison": true}));
    assert!(err.failed_at <= SystemTime::now());
    let panicked = by_key["poison:panic"].last_error.as_deref().unwrap();
    assert_eq!(panicked, "panicked: bad payload in attempt 4");
    assert_eq!(state(&queue, "fine").await, Some(JobState::Done));

    // Dead jobs stay dead; retried, one runs again (and now succeeds); discarded, one is gone
    // and its key can be enqueued anew.
    healed.store(1, Ordering::SeqCst);
    assert!(queue.retry_dead("poison:err").await.unwrap());
    assert!(!queue.retry_dead("fine").await.unwrap(), "only dead jobs");
    eventually(
        "the retried job is done",
        Duration::from_secs(20),
        || async { state(&queue, "poison:err").await == Some(JobState::Done) },
    )
    .await;
    assert_eq!(runs.count("poison:err"), 5);
    assert!(queue.discard("poison:panic").await.unwrap());
    assert!(!queue.discard("poison:panic").await.unwrap());
    assert_eq!(state(&queue, "poison:panic").await, None);
    assert_eq!(
        queue.enqueue(poison("poison:panic")).await.unwrap(),
        Enqueued::Queued
    );
    workers.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_after_holds_a_job_back() {
    let test = TestStore::new("q_later", 20).await;
    let queue = support::queue(&test).await;
    let later = job("later", json!(1)).after(Duration::from_secs(3600));
    let _ = queue.enqueue(later).await.unwrap();
    let past = job("past", json!(2)).run_at(SystemTime::now() - Duration::from_secs(5));
    let _ = queue.enqueue(past).await.unwrap();
    let _ = queue.enqueue(job("now", json!(3))).await.unwrap();
    let runs = Runs::default();
    let workers = recording(&queue, &runs, Duration::ZERO)
        .poll_interval(Duration::from_millis(10))
        .start();
    eventually("the due jobs are done", Duration::from_secs(20), || async {
        queue.stats().await.unwrap().done == 2
    })
    .await;
    // A later poll found nothing due.
    workers.wait_idle().await;
    workers.shutdown(Duration::from_secs(5)).await;
    assert_eq!(state(&queue, "later").await, Some(JobState::Queued));
    assert_eq!(runs.count("later"), 0);
    assert_eq!((runs.count("past"), runs.count("now")), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_job_keeps_its_claim_for_many_leases() {
    let test = TestStore::new("q_slow", 30).await;
    let queue = support::queue(&test).await;
    let _ = queue.enqueue(job("slow", json!({}))).await.unwrap();
    let runs = Runs::default();
    let lease = Duration::from_millis(300);
    let start = |runs: Runs| {
        queue
            .worker(move |job: Job| {
                let runs = runs.clone();
                async move {
                    runs.record(job.key());
                    tokio::time::sleep(lease * 5).await;
                    Ok::<_, std::io::Error>(())
                }
            })
            .lease(lease)
            .poll_interval(Duration::from_millis(10))
            .start()
    };
    let (a, b) = (start(runs.clone()), start(runs.clone()));
    eventually("the slow job is done", Duration::from_secs(20), || async {
        state(&queue, "slow").await == Some(JobState::Done)
    })
    .await;
    a.shutdown(Duration::from_secs(5)).await;
    b.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        runs.count("slow"),
        1,
        "no other worker took it while it ran"
    );
    let status = queue.status("slow").await.unwrap().unwrap();
    assert_eq!(status.attempts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_workers_wake_on_notification_not_polling() {
    let test = TestStore::new("q_wake", 20).await;
    let queue = support::queue(&test).await;
    let runs = Runs::default();
    // Polling once an hour: only a notification can get these jobs run within the test.
    let workers = recording(&queue, &runs, Duration::ZERO)
        .poll_interval(Duration::from_secs(3600))
        .start();
    // Idle and listening: from now on only a notification gets new work run in time.
    workers.wait_idle().await;
    let _ = queue.enqueue(job("wake:1", json!(1))).await.unwrap();
    eventually("the first job ran", Duration::from_secs(20), || async {
        runs.count("wake:1") == 1
    })
    .await;
    // Enqueued in a transaction: announced at commit.
    workers.wait_idle().await;
    let mut tx = test.store.pool().begin().await.unwrap();
    let _ = queue
        .enqueue_in(&mut *tx, job("wake:2", json!(2)))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    eventually("the second job ran", Duration::from_secs(20), || async {
        runs.count("wake:2") == 1
    })
    .await;
    workers.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_notifications_polling_still_finds_the_work() {
    let test = TestStore::new("q_poll", 20).await;
    let queue = support::queue(&test).await;
    let runs = Runs::default();
    let workers = recording(&queue, &runs, Duration::ZERO)
        .listen(false)
        .poll_interval(Duration::from_millis(50))
        .start();
    workers.wait_idle().await;
    for i in 0..5 {
        let _ = queue
            .enqueue(job(&format!("poll:{i}"), json!(i)))
            .await
            .unwrap();
    }
    eventually("the jobs ran", Duration::from_secs(20), || async {
        queue.stats().await.unwrap().done == 5
    })
    .await;
    workers.shutdown(Duration::from_secs(5)).await;
    assert_eq!(runs.total(), 5);
}

/// Workers (4 at once, polling every 10 ms) whose jobs record that they started, then take
/// `work`.
fn recording(queue: &Queue, runs: &Runs, work: Duration) -> WorkerBuilder {
    recording_for(queue, runs, move |_| work)
}

/// [`recording`], each job taking what `work` says for it.
fn recording_for(
    queue: &Queue,
    runs: &Runs,
    work: impl Fn(&Job) -> Duration + Send + Sync + 'static,
) -> WorkerBuilder {
    let runs = runs.clone();
    queue
        .worker(move |job: Job| {
            let runs = runs.clone();
            let work = work(&job);
            async move {
                runs.record(job.key());
                tokio::time::sleep(work).await;
                Ok::<_, std::io::Error>(())
            }
        })
        .concurrency(4)
        .poll_interval(Duration::from_millis(10))
}

/// Ten jobs `<prefix>:0..10` and four workers, once four of the jobs (each `work` long) run.
async fn four_running(prefix: &str, work: Duration) -> (TestStore, Queue, Runs, Workers) {
    let test = TestStore::new(&format!("q_{prefix}"), 20).await;
    let queue = support::queue(&test).await;
    for i in 0..10 {
        let _ = queue
            .enqueue(job(&format!("{prefix}:{i}"), json!(i)))
            .await
            .unwrap();
    }
    let runs = Runs::default();
    let workers = recording(&queue, &runs, work).start();
    eventually("four jobs are running", Duration::from_secs(20), || async {
        runs.total() == 4
    })
    .await;
    (test, queue, runs, workers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_running_jobs_finish_and_claims_no_more() {
    let (_test, queue, runs, workers) = four_running("drain", Duration::from_millis(400)).await;
    let report = workers.shutdown(Duration::from_secs(30)).await;
    assert_eq!(
        report,
        ShutdownReport {
            finished: 4,
            released: 0,
            unsettled: 0
        }
    );
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.done, stats.queued, stats.running), (4, 6, 0));
    assert_eq!(runs.total(), 4, "nothing claimed after shutdown began");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_past_its_deadline_gives_jobs_back_and_loses_none() {
    let (test, queue, runs, workers) = four_running("cut", Duration::from_secs(3600)).await;
    let report = workers.shutdown(Duration::from_millis(100)).await;
    assert_eq!(
        report,
        ShutdownReport {
            finished: 0,
            released: 4,
            unsettled: 0
        }
    );
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.queued, stats.running, stats.done), (10, 0, 0));
    for i in 0..10 {
        let status = queue.status(&format!("cut:{i}")).await.unwrap().unwrap();
        assert_eq!(
            status.attempts, 0,
            "a cut-off run does not count as an attempt"
        );
        let key = Key::new(format!("cut:{i}")).unwrap();
        let record = test.store.get(&key).await.unwrap();
        assert_eq!(
            record, None,
            "its idempotency record is freed too, so it runs at once"
        );
    }

    // The next workers run everything, the four cut-off jobs from the start.
    let workers = recording(&queue, &runs, Duration::from_millis(1)).start();
    eventually("all ten are done", Duration::from_secs(30), || async {
        queue.stats().await.unwrap().done == 10
    })
    .await;
    workers.shutdown(Duration::from_secs(5)).await;
    assert_eq!(runs.total(), 14);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_over_its_timeout_is_a_failed_attempt() {
    let test = TestStore::new("q_timeout", 20).await;
    let queue = support::queue(&test).await;
    let _ = queue
        .enqueue(job("stuck", json!({})).max_attempts(2))
        .await
        .unwrap();
    let _ = queue.enqueue(job("quick", json!({}))).await.unwrap();
    let runs = Runs::default();
    let handler_runs = runs.clone();
    let workers = queue
        .worker(move |job: Job| {
            let runs = handler_runs.clone();
            async move {
                runs.record(job.key());
                if job.key() == "stuck" {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Ok::<_, std::io::Error>(())
            }
        })
        .timeout(Duration::from_millis(200))
        // Should the retry find the cut-off call's claim not yet abandoned, it waits a lease.
        .lease(Duration::from_secs(2))
        .backoff(Backoff::new(
            Duration::from_millis(50),
            Duration::from_secs(1),
        ))
        .poll_interval(Duration::from_millis(10))
        .start();
    eventually("the stuck job is dead", Duration::from_secs(20), || async {
        state(&queue, "stuck").await == Some(JobState::Dead)
    })
    .await;
    workers.shutdown(Duration::from_secs(5)).await;
    let status = queue.status("stuck").await.unwrap().unwrap();
    assert_eq!(status.attempts, 2);
    assert_eq!(status.last_error.as_deref(), Some("timed out after 200ms"));
    assert_eq!(
        runs.count("stuck"),
        2,
        "the retry could claim the timed-out call's key"
    );
    assert_eq!(state(&queue, "quick").await, Some(JobState::Done));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_deletes_finished_jobs_only() {
    let test = TestStore::new("q_purge", 20).await;
    let queue = support::queue(&test).await;
    for i in 0..3 {
        let _ = queue
            .enqueue(job(&format!("old:{i}"), json!(i)))
            .await
            .unwrap();
    }
    let _ = queue
        .enqueue(job("doomed", json!({"fail": true})).max_attempts(1))
        .await
        .unwrap();
    let workers = queue
        .worker(|job: Job| async move {
            match job.payload()["fail"].as_bool() {
                Some(true) => Err("no"),
                _ => Ok(()),
            }
        })
        .poll_interval(Duration::from_millis(10))
        .start();
    eventually("all jobs finished", Duration::from_secs(20), || async {
        let stats = queue.stats().await.unwrap();
        (stats.done, stats.dead) == (3, 1)
    })
    .await;
    workers.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        queue
            .purge_done(Duration::from_secs(3600), 10)
            .await
            .unwrap(),
        0,
        "too recent"
    );
    assert_eq!(
        queue.purge_done(Duration::ZERO, 2).await.unwrap(),
        2,
        "a batch at a time"
    );
    let purger = queue.spawn_purger(Duration::from_millis(10), Duration::ZERO, 1);
    eventually(
        "the purger deleted the rest",
        Duration::from_secs(20),
        || async { queue.stats().await.unwrap().done == 0 },
    )
    .await;
    purger.abort();
    assert_eq!(
        state(&queue, "doomed").await,
        Some(JobState::Dead),
        "dead jobs stay"
    );
    assert_eq!(
        queue.enqueue(job("old:0", json!(0))).await.unwrap(),
        Enqueued::Queued,
        "a purged key is new work"
    );
}

/// A done job's row is its idempotency record: finishing it writes no record, and purging it
/// writes one for the rest of its keep (a day), so the key enqueued again is recognised as done
/// and not run; a job finished longer ago than that leaves none, and its key is new work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_job_leaves_its_record_for_the_rest_of_its_keep() {
    let test = TestStore::new("q_purge_keep", 20).await;
    let queue = support::queue(&test).await;
    let record = |key: &str| {
        let key = Key::new(key)
            .unwrap()
            .with_scope(idem_queue::QUEUE_SCOPE)
            .unwrap();
        let store = test.store.clone();
        async move { store.get(&key).await.unwrap() }
    };
    let runs = Runs::default();
    let drain = |expected: u64| {
        let (queue, runs) = (queue.clone(), runs.clone());
        async move {
            let workers = recording(&queue, &runs, Duration::ZERO)
                .poll_interval(Duration::from_millis(10))
                .start();
            eventually("the jobs are done", Duration::from_secs(20), || async {
                queue.stats().await.unwrap().done == expected
            })
            .await;
            workers.shutdown(Duration::from_secs(5)).await;
        }
    };
    for key in ["recent", "ancient"] {
        let _ = queue.enqueue(job(key, json!({}))).await.unwrap();
    }
    drain(2).await;
    assert!(
        record("recent").await.is_none(),
        "finishing wrote no record"
    );
    sqlx::query(&format!(
        "UPDATE \"{}\".idem_records_queue SET finished_at = now() - interval '25 hours'
         WHERE key = 'ancient'",
        test.schema
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    assert_eq!(queue.purge_done(Duration::ZERO, 10).await.unwrap(), 2);
    let kept = record("recent").await.expect("purging wrote its record");
    assert!(
        matches!(kept.state, idem_core::RecordState::Completed { .. }),
        "{kept:?}"
    );
    assert!(record("ancient").await.is_none(), "its keep had ended");
    for key in ["recent", "ancient"] {
        let _ = queue.enqueue(job(key, json!({}))).await.unwrap();
    }
    drain(2).await;
    assert_eq!(runs.count("recent"), 1, "recognised as done, not run again");
    assert_eq!(runs.count("ancient"), 2, "new work");
}

/// Purging deletes cancelled jobs too, and leaves no record for them: they never ran, and
/// their key enqueued again is new work. A serial key's row naming a purged job goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_deletes_cancelled_jobs_and_their_keys_are_new_work() {
    let test = TestStore::new("q_purge_cancelled", 20).await;
    let queue = support::queue(&test).await;
    let _ = queue
        .enqueue(job("called-off", json!({})).serial_key("acct"))
        .await
        .unwrap();
    let _ = queue.cancel("called-off", "not needed").await.unwrap();
    let _ = queue
        .enqueue(job("finished", json!({})).serial_key("acct"))
        .await
        .unwrap();
    let runs = Runs::default();
    let workers = recording(&queue, &runs, Duration::ZERO)
        .poll_interval(Duration::from_millis(10))
        .start();
    eventually("the job is done", Duration::from_secs(20), || async {
        queue.stats().await.unwrap().done == 1
    })
    .await;
    workers.shutdown(Duration::from_secs(5)).await;
    let serial_rows = || async {
        sqlx::query_scalar::<_, i64>(&format!(
            "SELECT count(*) FROM \"{}\".idem_records_queue_serial",
            test.schema
        ))
        .fetch_one(test.store.pool())
        .await
        .unwrap()
    };
    assert_eq!(serial_rows().await, 1, "the claim took the key's row");
    assert_eq!(queue.purge_done(Duration::ZERO, 10).await.unwrap(), 2);
    assert_eq!(
        state(&queue, "called-off").await,
        None,
        "the cancelled job is gone"
    );
    assert_eq!(serial_rows().await, 0, "the key's row went with its holder");
    assert_eq!(
        queue.enqueue(job("called-off", json!({}))).await.unwrap(),
        Enqueued::Queued,
        "a purged cancelled key is new work"
    );
}

/// Inserts `n` done jobs (`done:1` ..), three to each microsecond of `finished_at`, an hour
/// ago and in random order, so batches end in the middle of a microsecond.
async fn done_jobs(test: &TestStore, n: u32) -> String {
    let table = format!("\"{}\".idem_records_queue", test.schema);
    sqlx::query(&format!(
        "INSERT INTO {table} (key, payload, max_attempts, state, attempts, finished_at)
         SELECT 'done:' || i, to_jsonb(i), 1, 'done', 1,
                now() - interval '1 hour' + (i / 3) * interval '1 microsecond'
         FROM generate_series(1, $1) i ORDER BY random()"
    ))
    .bind(i64::from(n))
    .execute(test.store.pool())
    .await
    .unwrap();
    table
}

/// A drain of finished jobs goes on from where each batch ended (one microsecond early), so
/// jobs that share a `finished_at` across a batch's end are all deleted, and so is every job
/// behind them; dead jobs stay.
#[tokio::test]
async fn a_drain_of_done_jobs_passes_over_nothing() {
    let test = TestStore::new("q_purge_cursor", 4).await;
    let queue = support::queue(&test).await;
    let table = done_jobs(&test, 5000).await;
    sqlx::query(&format!(
        "INSERT INTO {table} (key, payload, max_attempts, state, attempts, finished_at)
         VALUES ('dead:1', '1', 1, 'dead', 1, now() - interval '2 hours')"
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    assert_eq!(
        queue
            .purge_all_done(Duration::from_secs(60), 700)
            .await
            .unwrap(),
        5000
    );
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.done, stats.dead),
        (0, 1),
        "every done job, no dead one"
    );
}

/// A done job that a drain passes over because it is locked is deleted by the next drain,
/// which starts at the start, though the first drain's batches went on past it.
#[tokio::test]
async fn a_done_job_locked_during_a_drain_is_purged_by_the_next() {
    let test = TestStore::new("q_purge_locked", 4).await;
    let queue = support::queue(&test).await;
    let table = done_jobs(&test, 3000).await;
    let holder = support::lock_row(&test, &table, "done:10").await;
    assert_eq!(
        queue.purge_all_done(Duration::ZERO, 700).await.unwrap(),
        2999
    );
    holder.rollback().await.unwrap();
    assert_eq!(queue.purge_all_done(Duration::ZERO, 700).await.unwrap(), 1);
    assert_eq!(queue.stats().await.unwrap().done, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_skips_a_done_effect_when_a_job_is_retried() {
    use idem_core::journal::{Effect, Journal};

    let test = TestStore::new("q_journal", 20).await;
    let queue = support::queue(&test).await;
    let _ = queue
        .enqueue(job("order:7", json!({"cents": 900})))
        .await
        .unwrap();
    let charges = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (handler_charges, handler_seen) = (charges.clone(), seen.clone());
    let workers = queue
        .worker(move |job: Job| {
            let (charges, seen) = (handler_charges.clone(), handler_seen.clone());
            async move {
                // A provider with no idempotency key, journaled under the job's call.
                let charge = Journal::new()
                    .at_least_once("charge", async {
                        charges.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, std::io::Error>(format!("ch_{}", job.payload()["cents"]))
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                seen.lock().unwrap().push(match &charge {
                    Effect::Ran(id) => format!("ran {id}"),
                    Effect::Skipped(id) => format!("skipped {id}"),
                    Effect::Unknown => "unknown".to_owned(),
                });
                if job.attempt() == 1 {
                    return Err("the receipt API timed out".to_owned());
                }
                Ok(())
            }
        })
        .backoff(Backoff::new(
            Duration::from_millis(20),
            Duration::from_secs(1),
        ))
        .poll_interval(Duration::from_millis(10))
        .start();
    eventually("the job is done", Duration::from_secs(20), || async {
        state(&queue, "order:7").await == Some(JobState::Done)
    })
    .await;
    workers.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        charges.load(Ordering::SeqCst),
        1,
        "charged once across two attempts"
    );
    assert_eq!(*seen.lock().unwrap(), ["ran ch_900", "skipped ch_900"]);
}

/// What jsonb cannot store, or cannot store as sent, is refused before anything is stored, with
/// a message that says where (regression: a NUL character was a 503 from the database, and a
/// huge integer was silently rounded).
#[test]
fn payloads_that_cannot_be_stored_exactly_are_refused() {
    let refused = |payload: serde_json::Value| match NewJob::new("k", &payload) {
        Err(EnqueueError::Payload(e)) => e.to_string(),
        other => panic!("expected a payload error for {payload}, got {other:?}"),
    };
    assert!(refused(json!({"a": ["x", "b\u{0}"]})).contains("$.a[1]"));
    assert!(refused(json!({"k\u{0}": 1})).contains("NUL"));
    let huge: serde_json::Value =
        serde_json::from_str(r#"{"n": 123456789012345678901234567890}"#).unwrap();
    assert!(refused(huge).contains("$.n"));
    // Exact values are kept: 64-bit integers, ordinary floats, text.
    for fine in [
        json!({"n": u64::MAX, "m": i64::MIN}),
        json!({"x": 0.1, "y": -2.5e15}),
        json!("plain"),
    ] {
        assert!(NewJob::new("k", &fine).is_ok(), "{fine}");
    }
}

/// Regression: a queue job `welcome:1` showed done though its body never ran, because a
/// handler had completed a call keyed `welcome:1`. Jobs' records are in the queue's own scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_and_a_job_with_one_key_both_run() {
    let test = TestStore::new("q_scope", 20).await;
    let handler = idem_core::Call::new(&test.store, "welcome:1")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(handler.is_executed());
    let queue = support::queue(&test).await;
    let _ = queue.enqueue(job("welcome:1", json!(1))).await.unwrap();
    let runs = Runs::default();
    let workers = recording(&queue, &runs, Duration::ZERO)
        .poll_interval(Duration::from_millis(20))
        .start();
    eventually("the job ran", Duration::from_secs(20), || async {
        state(&queue, "welcome:1").await == Some(JobState::Done)
    })
    .await;
    workers.shutdown(Duration::from_secs(5)).await;
    assert_eq!(runs.count("welcome:1"), 1, "the job's body ran");
}

/// A handler's `JobError` says how the job goes on: `permanent` dead-letters it at once with
/// attempts left, `retry_after` retries it after the given delay instead of the backoff (an
/// hour-long backoff here, so only the asked-for delay lets it run again in time). Every
/// ended attempt is in the job's log with its start, end, outcome and error, and the one that
/// completed closes it.
#[tokio::test]
async fn job_errors_dead_letter_at_once_or_retry_after_the_delay_asked_for_and_are_logged() {
    use idem_queue::JobError;
    let test = TestStore::new("q_outcomes", 20).await;
    let queue = support::queue(&test).await;
    let _ = queue
        .enqueue(job("refused", json!({})).max_attempts(5))
        .await
        .unwrap();
    let _ = queue
        .enqueue(job("limited", json!({})).max_attempts(5))
        .await
        .unwrap();
    let runs = Runs::default();
    let seen = runs.clone();
    let workers = queue
        .worker(move |job: Job| {
            let seen = seen.clone();
            async move {
                let n = seen.record(job.key());
                match (job.key(), n) {
                    ("refused", _) => Err(JobError::permanent("422 from the provider")),
                    ("limited", 1) => Err(JobError::retry_after(
                        Duration::from_millis(100),
                        "429, Retry-After: 0.1",
                    )),
                    _ => Ok(()),
                }
            }
        })
        .backoff(Backoff::new(
            Duration::from_secs(3600),
            Duration::from_secs(3600),
        ))
        .start();
    eventually("both jobs settled", Duration::from_secs(30), || async {
        state(&queue, "refused").await == Some(JobState::Dead)
            && state(&queue, "limited").await == Some(JobState::Done)
    })
    .await;
    workers.shutdown(Duration::from_secs(5)).await;
    assert_eq!(runs.count("refused"), 1, "dead at once, 4 attempts left");
    let refused = queue.status("refused").await.unwrap().unwrap();
    assert_eq!(refused.last_error.as_deref(), Some("422 from the provider"));
    let outcomes = |log: &[idem_queue::Attempt]| {
        log.iter()
            .map(|a| (a.attempt, a.outcome.clone(), a.error.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        outcomes(&refused.attempt_log),
        [(
            1,
            "dead".to_owned(),
            Some("422 from the provider".to_owned())
        )]
    );
    let limited = queue.status("limited").await.unwrap().unwrap();
    assert_eq!(
        outcomes(&limited.attempt_log),
        [
            (
                1,
                "retried".to_owned(),
                Some("429, Retry-After: 0.1".to_owned())
            ),
            (2, "done".to_owned(), None),
        ]
    );
    for attempt in &limited.attempt_log {
        let (start, end) = (attempt.started_at.unwrap(), attempt.ended_at.unwrap());
        assert!(start <= end, "{attempt:?}");
    }
    assert!(limited.attempt_log[1].started_at.unwrap() >= limited.attempt_log[0].ended_at.unwrap());
}
