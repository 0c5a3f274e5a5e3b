//! Control over the queue against a real PostgreSQL: named queues and their priorities, global
//! limits and serial keys across independent workers (each on a pool and store of its own, as
//! separate processes are), handler outcomes (snooze, cancel), cancellation of queued and
//! running jobs, and job results.

mod support;

use idem_queue::{Cancel, EnqueueError, Job, JobError, JobResult, JobState, NewJob, Queue};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{another, TestStore};

fn job(key: &str) -> NewJob {
    NewJob::new(key, &json!({ "key": key })).unwrap()
}

async fn state(queue: &Queue, key: &str) -> JobState {
    queue.status(key).await.unwrap().expect("the job").state
}

/// The advisory lock of [`claim_gate`].
const CLAIM_GATE: i64 = 73_310_001;

/// A gate for the claim of job `key`: a trigger makes the statement that claims it (moves it
/// from queued to running) wait, inside the statement, on an advisory lock the returned
/// transaction holds until the test ends it.
async fn claim_gate(
    test: &TestStore,
    key: &str,
) -> idem_store_postgres::sqlx::Transaction<'static, idem_store_postgres::sqlx::Postgres> {
    use idem_store_postgres::sqlx;
    let (schema, pool) = (&test.schema, test.store.pool());
    sqlx::raw_sql(&format!(
        r#"CREATE FUNCTION "{schema}".gate() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
               IF NEW.key = '{key}' AND NEW.state = 'running' AND OLD.state = 'queued' THEN
                   PERFORM pg_advisory_xact_lock_shared({CLAIM_GATE});
               END IF;
               RETURN NEW;
           END $$;
           CREATE TRIGGER gate BEFORE UPDATE ON "{schema}".idem_records_queue
               FOR EACH ROW EXECUTE FUNCTION "{schema}".gate();"#
    ))
    .execute(pool)
    .await
    .unwrap();
    let mut gate = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(CLAIM_GATE)
        .execute(&mut *gate)
        .await
        .unwrap();
    gate
}

/// The outcomes in `key`'s attempt log, oldest first.
async fn outcomes(queue: &Queue, key: &str) -> Vec<String> {
    let status = queue.status(key).await.unwrap().expect("the job");
    status.attempt_log.into_iter().map(|a| a.outcome).collect()
}

/// What a worker that died a second into the first attempt of the jobs `which` (an SQL
/// condition) leaves: running, on a lease that lapsed. An update announces nothing to idle
/// workers.
async fn lapse(test: &TestStore, which: &str) {
    idem_store_postgres::sqlx::query(&format!(
        "UPDATE {}.idem_records_queue SET state = 'running', attempts = 1, worker = 'vm:gone',
             finished_at = NULL, attempted_at = now() - interval '2 seconds',
             available_at = now() - interval '1 second'
         WHERE {which}",
        test.schema
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
}

/// The order jobs started in, and how many ran at once at most.
#[derive(Clone, Default)]
struct Log {
    started: Arc<Mutex<Vec<String>>>,
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    /// Per key, (start, end) indices in one sequence of events.
    spans: Arc<Mutex<Vec<(String, usize, usize)>>>,
    events: Arc<AtomicUsize>,
}

impl Log {
    /// Runs `work` as `job`'s handler body, logging it.
    async fn run(&self, job: &Job, work: Duration) {
        let start = self.events.fetch_add(1, Ordering::SeqCst);
        self.started.lock().unwrap().push(job.key().to_owned());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(work).await; // the job's work, not a synchronisation
        self.running.fetch_sub(1, Ordering::SeqCst);
        let end = self.events.fetch_add(1, Ordering::SeqCst);
        self.spans
            .lock()
            .unwrap()
            .push((job.key().to_owned(), start, end));
    }

    fn started(&self) -> Vec<String> {
        self.started.lock().unwrap().clone()
    }
}

/// Workers on `queue` that log each job, taking `work`.
fn logging(queue: &Queue, log: &Log, work: Duration) -> idem_queue::WorkerBuilder {
    let log = log.clone();
    queue
        .worker(move |job: Job| {
            let log = log.clone();
            async move {
                log.run(&job, work).await;
                Ok::<_, std::io::Error>(())
            }
        })
        .poll_interval(Duration::from_millis(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_queues_run_where_served_and_priorities_order_each_queue() {
    let test = TestStore::new("qc_named", 20).await;
    let queue = support::queue(&test).await;
    for (key, named, priority) in [
        ("low", "mail", -1),
        ("normal-1", "mail", 0),
        ("urgent", "mail", 5),
        ("normal-2", "mail", 0),
        ("report", "reports", 9),
        ("default", "default", 0),
    ] {
        let new = job(key).queue(named).priority(priority);
        let _ = queue.enqueue(new).await.unwrap();
    }
    let log = Log::default();
    let workers = logging(&queue, &log, Duration::ZERO)
        .queue("mail", 1)
        .start();
    workers.wait_idle().await;
    assert_eq!(
        log.started(),
        ["urgent", "normal-1", "normal-2", "low"],
        "the mail queue by priority, then in order"
    );
    assert_eq!(state(&queue, "report").await, JobState::Queued);
    assert_eq!(state(&queue, "default").await, JobState::Queued);
    let info = queue.job("urgent").await.unwrap().unwrap();
    assert_eq!((info.queue.as_str(), info.priority), ("mail", 5));
    workers.shutdown(Duration::from_secs(5)).await;

    // Workers that name two queues serve both, each with its slots.
    let log = Log::default();
    let workers = logging(&queue, &log, Duration::ZERO)
        .queue("reports", 1)
        .queue("default", 1)
        .start();
    workers.wait_idle().await;
    let mut started = log.started();
    started.sort();
    assert_eq!(started, ["default", "report"]);
    workers.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_bad_queue_name_or_serial_key_stores_nothing() {
    let test = TestStore::new("qc_names", 4).await;
    let queue = support::queue(&test).await;
    for new in [
        job("a").queue(""),
        job("a").queue("x".repeat(101)),
        job("a").queue("tab\there"),
        job("a").serial_key(""),
        job("a").traceparent("00-not-a-trace"),
    ] {
        let refused = queue.enqueue(new).await;
        assert!(
            matches!(refused, Err(EnqueueError::Invalid(_))),
            "{refused:?}"
        );
    }
    assert_eq!(queue.status("a").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_limit_holds_across_independent_workers() {
    let test = TestStore::new("qc_global", 20).await;
    let queue = support::queue(&test).await;
    for i in 0..24 {
        let _ = queue
            .enqueue(job(&format!("limited:{i}")).queue("limited"))
            .await
            .unwrap();
    }
    let log = Log::default();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let queue = another(&test).await;
        workers.push(
            logging(&queue, &log, Duration::from_millis(40))
                .queue("limited", 4)
                .global_limit("limited", 2)
                .start(),
        );
    }
    for w in &workers {
        w.wait_idle().await;
    }
    assert_eq!(log.started().len(), 24, "every job ran once");
    let most = log.most.load(Ordering::SeqCst);
    assert_eq!(most, 2, "at most two ran at once across 12 slots");
    for w in workers {
        w.shutdown(Duration::from_secs(5)).await;
    }
}

/// A process whose claims the global limit cuts short claims again as its own jobs end (their
/// places are free), rather than at its next poll, an hour away here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_queue_claims_again_as_its_jobs_end() {
    let test = TestStore::new("qc_global_refill", 8).await;
    let queue = support::queue(&test).await;
    for i in 0..8 {
        let _ = queue
            .enqueue(job(&format!("limited:{i}")).queue("limited"))
            .await
            .unwrap();
    }
    let log = Log::default();
    let workers = logging(&queue, &log, Duration::from_millis(10))
        .queue("limited", 4)
        .global_limit("limited", 2)
        .poll_interval(Duration::from_secs(3600))
        .start();
    for i in 0..8 {
        let done = queue
            .wait_result(&format!("limited:{i}"), Duration::from_secs(20))
            .await
            .unwrap();
        assert_eq!(done, Some(JobResult::Done(None)), "limited:{i}");
    }
    assert_eq!(log.most.load(Ordering::SeqCst), 2);
    workers.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_keys_run_one_at_a_time_in_enqueue_order_across_workers() {
    let test = TestStore::new("qc_serial", 20).await;
    let queue = support::queue(&test).await;
    let mut expected = Vec::new();
    for i in 0..8 {
        let key = format!("customer-7:{i}");
        // Later jobs first in priority: the serial key's order still wins.
        let new = job(&key).serial_key("customer-7").priority(i);
        let _ = queue.enqueue(new).await.unwrap();
        expected.push(key);
    }
    for i in 0..8 {
        let _ = queue.enqueue(job(&format!("free:{i}"))).await.unwrap();
    }
    let log = Log::default();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let queue = another(&test).await;
        workers.push(
            logging(&queue, &log, Duration::from_millis(20))
                .concurrency(4)
                .start(),
        );
    }
    // Every worker idle at once, after the last job: the serial jobs each wait for the one
    // before, so one look may find nothing while another worker runs the key's job.
    let all_ended = async {
        loop {
            for w in &workers {
                w.wait_idle().await;
            }
            if log.spans.lock().unwrap().len() == 16 {
                break;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all_ended)
        .await
        .expect("every job ended");
    let spans = log.spans.lock().unwrap().clone();
    let serial: Vec<&(String, usize, usize)> = spans
        .iter()
        .filter(|(key, _, _)| key.starts_with("customer-7"))
        .collect();
    let mut by_start = serial.clone();
    by_start.sort_by_key(|(_, start, _)| *start);
    let order: Vec<&str> = by_start.iter().map(|(key, _, _)| key.as_str()).collect();
    assert_eq!(order, expected, "in enqueue order");
    for pair in by_start.windows(2) {
        assert!(
            pair[0].2 < pair[1].1,
            "{} started before {} ended",
            pair[1].0,
            pair[0].0
        );
    }
    assert!(
        log.most.load(Ordering::SeqCst) > 1,
        "jobs without the key ran beside them"
    );
    for w in workers {
        w.shutdown(Duration::from_secs(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snooze_uses_no_attempt_and_a_handler_can_cancel_its_job() {
    let test = TestStore::new("qc_outcomes", 20).await;
    let queue = support::queue(&test).await;
    let _ = queue.enqueue(job("snoozy").max_attempts(1)).await.unwrap();
    let _ = queue.enqueue(job("gone")).await.unwrap();
    let snoozes = Arc::new(AtomicUsize::new(0));
    let counted = snoozes.clone();
    let workers = queue
        .worker(move |job: Job| {
            let snoozes = counted.clone();
            async move {
                match job.key() {
                    // Snoozed twice on its one attempt, then done.
                    "snoozy" if snoozes.fetch_add(1, Ordering::SeqCst) < 2 => Err(
                        JobError::snooze(Duration::from_millis(10), "the upstream is locked"),
                    ),
                    "snoozy" => Ok(()),
                    _ => Err(JobError::cancel("the order was deleted")),
                }
            }
        })
        .poll_interval(Duration::from_millis(10))
        .start();
    let done = queue
        .wait_result("snoozy", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done, Some(JobResult::Done(None)));
    assert_eq!(
        outcomes(&queue, "snoozy").await,
        ["snoozed", "snoozed", "done"]
    );
    let status = queue.status("snoozy").await.unwrap().unwrap();
    assert_eq!(status.attempts, 1, "snoozes used no attempt");
    let gone = queue
        .wait_result("gone", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        gone,
        Some(JobResult::Cancelled(Some("the order was deleted".into())))
    );
    workers.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_cancelled_never_runs() {
    let test = TestStore::new("qc_cancel_queued", 20).await;
    let queue = support::queue(&test).await;
    let _ = queue.enqueue(job("later")).await.unwrap();
    assert_eq!(
        queue.cancel("later", "not needed").await.unwrap(),
        Cancel::Cancelled
    );
    assert_eq!(
        queue.cancel("later", "again").await.unwrap(),
        Cancel::Finished(JobState::Cancelled)
    );
    assert_eq!(queue.cancel("nobody", "x").await.unwrap(), Cancel::NotFound);
    let log = Log::default();
    let workers = logging(&queue, &log, Duration::ZERO).start();
    workers.wait_idle().await;
    assert!(log.started().is_empty(), "the cancelled job did not run");
    assert_eq!(
        queue.result("later").await.unwrap(),
        Some(JobResult::Cancelled(Some("not needed".into())))
    );
    // The key stays taken: enqueueing it again is a duplicate, not a second run.
    assert_eq!(
        queue.enqueue(job("later")).await.unwrap(),
        idem_queue::Enqueued::Duplicate
    );
    workers.shutdown(Duration::from_secs(5)).await;
}

/// A running job is told of its cancellation at a lease renewal: one that listens hears it,
/// stops and ends cancelled; one that ignores it is cut a lease later and ends cancelled too.
/// Either way the operator's reason is the job's result, and the attempt log says how the
/// handler ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_cancelled_is_told_and_one_that_ignores_it_is_cut() {
    let test = TestStore::new("qc_cancel_running", 20).await;
    let queue = support::queue(&test).await;
    let _ = queue.enqueue(job("listens")).await.unwrap();
    let _ = queue.enqueue(job("ignores")).await.unwrap();
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<String>();
    let heard = Arc::new(AtomicUsize::new(0));
    let heard_by_handler = heard.clone();
    let workers = queue
        .worker(move |job: Job| {
            let (started, heard) = (started_tx.clone(), heard_by_handler.clone());
            async move {
                let _ = started.send(job.key().to_owned());
                if job.key() == "listens" {
                    job.cancelled().await;
                    heard.fetch_add(1, Ordering::SeqCst);
                    return Err(JobError::retry("stopped as asked"));
                }
                std::future::pending::<Result<(), JobError>>().await
            }
        })
        .lease(Duration::from_millis(300))
        .start();
    for _ in 0..2 {
        started.recv().await.unwrap();
    }
    for key in ["listens", "ignores"] {
        assert_eq!(
            queue.cancel(key, "the customer asked").await.unwrap(),
            Cancel::Requested
        );
        let info = queue.job(key).await.unwrap().unwrap();
        assert!(info.cancel_requested_at.is_some());
    }
    for key in ["listens", "ignores"] {
        let ended = queue
            .wait_result(key, Duration::from_secs(20))
            .await
            .unwrap();
        assert_eq!(
            ended,
            Some(JobResult::Cancelled(Some("the customer asked".into()))),
            "{key}: the operator's reason"
        );
    }
    assert_eq!(
        heard.load(Ordering::SeqCst),
        1,
        "the listening handler heard"
    );
    let listened = queue.status("listens").await.unwrap().unwrap();
    let last = listened.attempt_log.last().unwrap();
    assert_eq!(last.outcome, "cancelled");
    assert_eq!(
        last.error.as_deref(),
        Some(
            "the customer asked (cancelled while running; the handler ended with: stopped as \
             asked)"
        ),
        "how the handler ended"
    );
    let ignored = queue.status("ignores").await.unwrap().unwrap();
    assert!(
        ignored
            .attempt_log
            .last()
            .unwrap()
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with(
                "the customer asked (cancelled while running; the handler did not stop"
            )),
        "{:?}",
        ignored.attempt_log
    );
    workers.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_ok_value_is_its_result() {
    let test = TestStore::new("qc_results", 20).await;
    let queue = support::queue(&test).await;
    let _ = queue.enqueue(job("sum")).await.unwrap();
    let _ = queue.enqueue(job("huge")).await.unwrap();
    assert_eq!(queue.result("sum").await.unwrap(), Some(JobResult::Pending));
    let workers = queue
        .worker(|job: Job| async move {
            Ok::<_, std::io::Error>(match job.key() {
                "sum" => json!({ "total": 42, "key": job.payload()["key"] }),
                _ => json!("x".repeat(idem_queue::MAX_RESULT_BYTES + 1)),
            })
        })
        .start();
    let result = queue
        .wait_result("sum", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        result,
        Some(JobResult::Done(Some(json!({ "total": 42, "key": "sum" }))))
    );
    let huge = queue
        .wait_result("huge", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(huge, Some(JobResult::Done(None)), "too large to keep; done");
    assert_eq!(queue.result("nobody").await.unwrap(), None);
    workers.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn batch_enqueue_answers_each_job_and_stores_each_key_once() {
    let test = TestStore::new("qc_batch", 4).await;
    let queue = support::queue(&test).await;
    let _ = queue.enqueue(job("old")).await.unwrap();
    let _ = queue
        .enqueue(NewJob::new("taken", &json!("other")).unwrap())
        .await
        .unwrap();
    let answers = queue
        .enqueue_many(vec![
            job("new-1").queue("mail").priority(3),
            job("old"),
            job("taken"),
            job("bad").queue(""),
            job("new-2"),
            job("new-1").queue("mail").priority(3),
            NewJob::new("new-2", &json!("changed")).unwrap(),
        ])
        .await
        .unwrap();
    let said: Vec<String> = answers
        .iter()
        .map(|answer| match answer {
            Ok(enqueued) => enqueued.as_str().to_owned(),
            Err(EnqueueError::KeyReused { .. }) => "key reused".to_owned(),
            Err(EnqueueError::Invalid(_)) => "invalid".to_owned(),
            Err(e) => e.to_string(),
        })
        .collect();
    assert_eq!(
        said,
        [
            "queued",
            "duplicate",
            "key reused",
            "invalid",
            "queued",
            "duplicate",
            "key reused"
        ]
    );
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.queued, 4, "old, taken, new-1, new-2");
    let stored = queue.job("new-1").await.unwrap().unwrap();
    assert_eq!((stored.queue.as_str(), stored.priority), ("mail", 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_debounces_a_waiting_job_and_leaves_a_running_one() {
    let test = TestStore::new("qc_replace", 20).await;
    let queue = support::queue(&test).await;
    let later = std::time::SystemTime::now() + Duration::from_secs(3600);
    let first = NewJob::new("digest:7", &json!({"events": 1}))
        .unwrap()
        .run_at(later);
    assert_eq!(
        queue.enqueue(first).await.unwrap(),
        idem_queue::Enqueued::Queued
    );
    // Without `replace`, another payload is refused; with it, the waiting job takes it.
    let second = || NewJob::new("digest:7", &json!({"events": 2})).unwrap();
    assert!(matches!(
        queue.enqueue(second()).await,
        Err(EnqueueError::KeyReused { .. })
    ));
    assert_eq!(
        queue.enqueue(second().replace()).await.unwrap(),
        idem_queue::Enqueued::Replaced
    );
    let stored = queue.job("digest:7").await.unwrap().unwrap();
    assert_eq!(stored.payload, json!({"events": 2}));
    assert!(
        stored.available_at < later,
        "the replacement's run time (now) replaced the hour's wait"
    );
    // Once running, a replacement is refused as without the option.
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (release_tx, release) = tokio::sync::watch::channel(false);
    let workers = queue
        .worker(move |_job: Job| {
            let started = started_tx.clone();
            let mut release = release.clone();
            async move {
                let _ = started.send(());
                let _ = release.wait_for(|go| *go).await;
                Ok::<_, std::io::Error>(())
            }
        })
        .start();
    started.recv().await.unwrap();
    let third = NewJob::new("digest:7", &json!({"events": 3}))
        .unwrap()
        .replace();
    assert!(matches!(
        queue.enqueue(third).await,
        Err(EnqueueError::KeyReused { .. })
    ));
    let _ = release_tx.send(true);
    workers.wait_idle().await;
    let done = queue.job("digest:7").await.unwrap().unwrap();
    assert_eq!(done.payload, json!({"events": 2}));
    workers.shutdown(Duration::from_secs(5)).await;
}

/// A job whose worker died mid-attempt keeps that attempt in its log, as `lapsed`, when the
/// next claim takes it over; and it is taken before waiting jobs, whatever their priority (it
/// was started first, and its worker's death should not send it to the back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_whose_worker_died_is_logged_as_lapsed_and_taken_first() {
    let test = TestStore::new("qc_lapsed", 8).await;
    let queue = support::queue(&test).await;
    let _ = queue.enqueue(job("orphan")).await.unwrap();
    lapse(&test, "key = 'orphan'").await;
    let _ = queue.enqueue(job("urgent").priority(9)).await.unwrap();
    let log = Log::default();
    let workers = logging(&queue, &log, Duration::ZERO).concurrency(1).start();
    let done = queue
        .wait_result("orphan", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done, Some(JobResult::Done(None)));
    workers.wait_idle().await;
    assert_eq!(log.started(), ["orphan", "urgent"]);
    let status = queue.status("orphan").await.unwrap().unwrap();
    let attempts: Vec<(u32, &str)> = status
        .attempt_log
        .iter()
        .map(|a| (a.attempt, a.outcome.as_str()))
        .collect();
    assert_eq!(attempts, [(1, "lapsed"), (2, "done")]);
    workers.shutdown(Duration::from_secs(5)).await;
}

/// A dead worker's jobs come back before waiting ones, one after another as the slot frees up:
/// each claim that takes back as many lapsed jobs as it can looks for more, rather than waiting
/// for the next periodic look while waiting jobs go first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_jobs_all_come_back_before_waiting_ones() {
    let test = TestStore::new("qc_orphans", 8).await;
    let queue = support::queue(&test).await;
    for i in 0..6 {
        let _ = queue.enqueue(job(&format!("orphan:{i}"))).await.unwrap();
    }
    // A worker died running these six.
    lapse(&test, "key LIKE 'orphan:%'").await;
    for i in 0..4 {
        let waiting = job(&format!("waiting:{i}")).priority(9);
        let _ = queue.enqueue(waiting).await.unwrap();
    }
    let log = Log::default();
    let workers = logging(&queue, &log, Duration::ZERO).concurrency(1).start();
    workers.wait_idle().await;
    let started = log.started();
    assert_eq!(started.len(), 10, "{started:?}");
    assert!(
        started[..6].iter().all(|key| key.starts_with("orphan:")),
        "{started:?}"
    );
    workers.shutdown(Duration::from_secs(5)).await;
}

/// Workers already running, and idle, take back a job whose lease lapses later (its worker
/// died after they last looked), and only call themselves idle again once it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_workers_take_back_a_job_that_lapses_later() {
    let test = TestStore::new("qc_lapses_later", 8).await;
    let queue = support::queue(&test).await;
    let log = Log::default();
    let workers = logging(&queue, &log, Duration::ZERO).start();
    workers.wait_idle().await;
    // Claimed by a worker elsewhere that then died: running, its lease lapsed.
    idem_store_postgres::sqlx::query(&format!(
        "INSERT INTO {}.idem_records_queue
             (key, payload, max_attempts, state, attempts, worker, attempted_at, available_at)
         VALUES ('orphan', '{{}}', 5, 'running', 1, 'vm:gone', now() - interval '2 seconds',
                 now() - interval '1 second')",
        test.schema
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    let done = queue
        .wait_result("orphan", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done, Some(JobResult::Done(None)));
    assert_eq!(outcomes(&queue, "orphan").await, ["lapsed", "done"]);
    workers.wait_idle().await;
    workers.shutdown(Duration::from_secs(5)).await;
}

/// Workers call themselves idle only once a claim looked for lapsed jobs: a job that lapsed
/// while another ran is taken back before `wait_idle` returns, though their next poll is an
/// hour away and nothing announces a lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_are_idle_only_once_they_looked_for_lapsed_jobs() {
    let test = TestStore::new("qc_idle_look", 8).await;
    let queue = support::queue(&test).await;
    let (open, gate) = tokio::sync::watch::channel(false);
    let (started, mut slow_started) = tokio::sync::watch::channel(false);
    let workers = queue
        .worker(move |job: Job| {
            let (mut gate, started) = (gate.clone(), started.clone());
            async move {
                if job.key() == "slow" {
                    started.send_replace(true);
                    let _ = gate.wait_for(|open| *open).await;
                }
                Ok::<_, std::io::Error>(())
            }
        })
        .concurrency(2)
        .poll_interval(Duration::from_secs(3600))
        .start();
    let _ = queue.enqueue(job("orphan")).await.unwrap();
    let first = queue.wait_result("orphan", Duration::from_secs(20)).await;
    assert_eq!(first.unwrap(), Some(JobResult::Done(None)));
    let _ = queue.enqueue(job("slow")).await.unwrap();
    slow_started.wait_for(|started| *started).await.unwrap();
    // While `slow` runs, `orphan` becomes a job whose worker died.
    lapse(&test, "key = 'orphan'").await;
    open.send_replace(true);
    workers.wait_idle().await;
    assert_eq!(state(&queue, "orphan").await, JobState::Done);
    workers.shutdown(Duration::from_secs(5)).await;
}

/// An earlier job of a serial key retried by an operator while a later one runs waits for it:
/// the key runs one job at a time whatever order its jobs come back in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_earlier_job_waits_while_its_keys_later_job_runs() {
    let test = TestStore::new("qc_serial_retry", 20).await;
    let queue = support::queue(&test).await;
    let _ = queue
        .enqueue(job("acct:1").serial_key("acct").max_attempts(1))
        .await
        .unwrap();
    let _ = queue
        .enqueue(job("acct:2").serial_key("acct"))
        .await
        .unwrap();
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (release_tx, release) = tokio::sync::watch::channel(false);
    let first = Arc::new(AtomicUsize::new(0));
    let workers = queue
        .worker(move |job: Job| {
            let started = started_tx.clone();
            let mut release = release.clone();
            let first = first.clone();
            async move {
                let _ = started.send(job.key().to_owned());
                if job.key() == "acct:1" && first.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(JobError::retry("the bank was down"));
                }
                if job.key() == "acct:2" {
                    let _ = release.wait_for(|go| *go).await;
                }
                Ok(())
            }
        })
        .start();
    assert_eq!(started.recv().await.unwrap(), "acct:1");
    assert_eq!(started.recv().await.unwrap(), "acct:2", "after acct:1 died");
    assert!(queue.retry_dead("acct:1").await.unwrap());
    // Another worker looks for work, and finds none it may run: acct:2 holds the key.
    let other = another(&test)
        .await
        .worker(|_job: Job| async { Ok::<_, std::io::Error>(()) })
        .start();
    other.wait_idle().await;
    assert_eq!(state(&queue, "acct:1").await, JobState::Queued);
    let _ = release_tx.send(true);
    let done = queue
        .wait_result("acct:1", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done, Some(JobResult::Done(None)));
    other.shutdown(Duration::from_secs(5)).await;
    workers.shutdown(Duration::from_secs(5)).await;
}

/// A job whose call was completed before (its worker finished and died before settling it)
/// is done with the result that run recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_found_done_keeps_the_result_its_earlier_run_recorded() {
    let test = TestStore::new("qc_dup_result", 8).await;
    let queue = support::queue(&test).await;
    let _ = queue.enqueue(job("invoice:3")).await.unwrap();
    let earlier = idem_core::Call::new(&test.store, "invoice:3")
        .scope(idem_queue::QUEUE_SCOPE)
        .run_replay(async { Ok::<_, std::io::Error>(json!({"invoice": 3})) })
        .await
        .unwrap();
    assert!(earlier.is_executed());
    let log = Log::default();
    let workers = logging(&queue, &log, Duration::ZERO).start();
    let done = queue
        .wait_result("invoice:3", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done, Some(JobResult::Done(Some(json!({"invoice": 3})))));
    assert!(log.started().is_empty(), "not run again");
    workers.shutdown(Duration::from_secs(5)).await;
}

/// Polls the server until `condition` (an SQL boolean) holds: a statement's wait seen from
/// outside it.
async fn until_server(test: &TestStore, what: &str, condition: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !idem_store_postgres::sqlx::query_scalar::<_, bool>(&format!("SELECT {condition}"))
        .bind(&test.schema)
        .fetch_one(test.store.pool())
        .await
        .unwrap()
    {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A serial key's job whose enqueue committed late (its transaction began before a later job of
/// the key was enqueued) never runs beside that job, even when the claim that takes it read
/// the queue before the later job's claim committed. The later job's claim is held inside its
/// statement by a trigger gate (an advisory lock the test holds), after it locked the job; the
/// late job then commits and another worker, serving another named queue, claims: on its
/// snapshot the later job still waits and the late one is the key's first. It must take
/// nothing while the key's row is held, and nothing once the later job runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_committed_serial_job_never_runs_beside_the_claimed_one() {
    let test = TestStore::new("qc_serial_late", 20).await;
    let queue = support::queue(&test).await;
    let pool = test.store.pool();
    let gate = claim_gate(&test, "acct:later").await;

    let mut late = pool.begin().await.unwrap();
    let _ = queue
        .enqueue_in(
            &mut *late,
            job("acct:late").serial_key("acct").queue("first"),
        )
        .await
        .unwrap();
    let _ = queue
        .enqueue(job("acct:later").serial_key("acct").queue("second"))
        .await
        .unwrap();

    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (release_tx, release) = tokio::sync::watch::channel(false);
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handler = {
        let (running, most) = (running.clone(), most.clone());
        move |job: Job| {
            let (started, mut release) = (started_tx.clone(), release.clone());
            let (running, most) = (running.clone(), most.clone());
            async move {
                most.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                let _ = started.send(job.key().to_owned());
                let _ = release.wait_for(|go| *go).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(())
            }
        }
    };
    let second = another(&test)
        .await
        .worker(handler.clone())
        .queue("second", 1)
        .start();
    until_server(
        &test,
        "the later job's claim reaches the gate",
        &format!(
            "EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 0
                     AND objid = {CLAIM_GATE} AND objsubid = 1 AND NOT granted) AND $1 IS NOT NULL"
        ),
    )
    .await;
    late.commit().await.unwrap();

    let first = another(&test)
        .await
        .worker(handler)
        .queue("first", 1)
        .start();
    // The late job's claim either waits on the key's row (held by the later job's claim), or
    // (without that row) takes the job. A claim waits on no other lock: it skips locked jobs.
    // (The server shows a statement's first kilobyte only: the schema is in it.)
    let claim_waits = until_server(
        &test,
        "the late job's claim waits on its key",
        "EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'
                 AND wait_event <> 'advisory' AND query LIKE '%' || $1 || '%')",
    );
    tokio::select! {
        () = claim_waits => {}
        key = started.recv() => panic!("{key:?} started while acct:later's claim was under way"),
    }
    gate.commit().await.unwrap();
    assert_eq!(started.recv().await.unwrap(), "acct:later");
    tokio::select! {
        () = first.wait_idle() => {}
        key = started.recv() => panic!("{key:?} started beside acct:later"),
    }
    assert_eq!(
        state(&queue, "acct:late").await,
        JobState::Queued,
        "the late job waits while the key's later job runs"
    );
    let _ = release_tx.send(true);
    assert_eq!(started.recv().await.unwrap(), "acct:late", "then it runs");
    let done = queue
        .wait_result("acct:late", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done, Some(JobResult::Done(None)));
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "one of the key's jobs at a time"
    );
    first.shutdown(Duration::from_secs(5)).await;
    second.shutdown(Duration::from_secs(5)).await;
}

/// A key with a NUL character cannot be stored (enqueue refuses it), so looking one up finds
/// nothing without a round trip PostgreSQL would refuse; a cancel reason with one is refused
/// with a clear error, and cancels nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_key_finds_nothing_and_in_a_reason_is_refused() {
    let test = TestStore::new("qc_nul", 4).await;
    let queue = support::queue(&test).await;
    let key = "acct\0:1";
    assert!(queue.status(key).await.unwrap().is_none());
    assert!(queue.job(key).await.unwrap().is_none());
    assert!(queue.result(key).await.unwrap().is_none());
    assert!(!queue.retry_dead(key).await.unwrap());
    assert!(!queue.discard(key).await.unwrap());
    assert_eq!(queue.cancel(key, "why").await.unwrap(), Cancel::NotFound);
    assert!(queue.states_of(&[key.to_owned()]).await.unwrap().is_empty());

    let _ = queue.enqueue(job("acct:1")).await.unwrap();
    let refused = queue.cancel("acct:1", "bad\0reason").await.unwrap_err();
    assert!(refused.to_string().contains("NUL"), "{refused}");
    assert_eq!(
        state(&queue, "acct:1").await,
        JobState::Queued,
        "not cancelled"
    );
}

/// A serial key's job whose worker stalled (its lease lapsed, the worker still alive) keeps
/// the key until a claim takes it over: a job of the key ordered before it (its enqueue
/// committed late) does not run beside the stalled run. The takeover runs first, then the
/// other job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_serial_job_keeps_its_key_until_taken_over() {
    use idem_store_postgres::sqlx;
    let test = TestStore::new("qc_serial_stalled", 20).await;
    let queue = support::queue(&test).await;
    let pool = test.store.pool();
    let mut early = pool.begin().await.unwrap();
    let _ = queue
        .enqueue_in(&mut *early, job("acct:0-early").serial_key("acct"))
        .await
        .unwrap();
    let _ = queue
        .enqueue(job("acct:1-later").serial_key("acct"))
        .await
        .unwrap();

    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<(&str, String)>();
    let (release_tx, release) = tokio::sync::watch::channel(false);
    let gated = |name: &'static str| {
        let (started, release) = (started_tx.clone(), release.clone());
        move |job: Job| {
            let (started, mut release) = (started.clone(), release.clone());
            async move {
                let _ = started.send((name, job.key().to_owned()));
                let _ = release.wait_for(|go| *go).await;
                Ok::<_, std::io::Error>(())
            }
        }
    };
    let stalled = another(&test)
        .await
        .worker(gated("stalled"))
        .lease(Duration::from_secs(60))
        .concurrency(1)
        .start();
    assert_eq!(
        started.recv().await.unwrap(),
        ("stalled", "acct:1-later".into())
    );
    // The worker stalls: its lease lapses, and it renews nothing.
    sqlx::query(&format!(
        "UPDATE {}.idem_records_queue SET available_at = now() - interval '1 second'
         WHERE key = 'acct:1-later'",
        test.schema
    ))
    .execute(pool)
    .await
    .unwrap();
    early.commit().await.unwrap();

    let other = another(&test)
        .await
        .worker(gated("other"))
        .lease(Duration::from_secs(60))
        .start();
    assert_eq!(
        started.recv().await.unwrap(),
        ("other", "acct:1-later".into()),
        "the stalled job is taken over before the key's other job runs"
    );
    let looker = another(&test)
        .await
        .worker(gated("looker"))
        .concurrency(1)
        .start();
    looker.wait_idle().await;
    assert_eq!(
        state(&queue, "acct:0-early").await,
        JobState::Queued,
        "it waits"
    );
    let _ = release_tx.send(true);
    let (_, next) = started.recv().await.unwrap();
    assert_eq!(next, "acct:0-early", "then the other job runs");
    let done = queue
        .wait_result("acct:0-early", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done, Some(JobResult::Done(None)));
    for workers in [looker, other, stalled] {
        workers.shutdown(Duration::from_secs(5)).await;
    }
}

/// A claim whose answer comes back after half the job's lease does not start the job: by then
/// the claim may have lapsed and the job been taken over, even finished, by another worker (a
/// slow network holding the answer up, say), and starting it would run it again after it was
/// done. The job goes back to the queue without its attempt counted, and runs once, from a
/// later claim. Here a trigger gate (an advisory lock the test holds) keeps the claim inside
/// its statement past half the lease; a worker that started the job on the late answer would
/// give no claim back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_answered_after_half_its_lease_does_not_start_its_job() {
    use idem_store_postgres::sqlx;
    use idem_store_postgres::testing::until_lock_waits;
    let test = TestStore::new("qc_late_answer", 8).await;
    let queue = support::queue(&test).await;
    let (schema, pool) = (&test.schema, test.store.pool());
    let gate = claim_gate(&test, "slow:1").await;
    let _ = queue.enqueue(job("slow:1")).await.unwrap();

    let lease = Duration::from_secs(1);
    let (ran_tx, mut ran) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let workers = queue
        .worker(move |job: Job| {
            let ran = ran_tx.clone();
            async move {
                let _ = ran.send(job.attempt());
                Ok::<_, std::io::Error>(())
            }
        })
        .lease(lease)
        .concurrency(1)
        .start();
    // The claim waits at the gate, inside its statement.
    until_lock_waits(&test, 1).await;
    // The fault itself: the answer is held past half the lease.
    tokio::time::sleep(lease / 2 + Duration::from_millis(200)).await;
    gate.rollback().await.unwrap();

    let attempt = tokio::time::timeout(Duration::from_secs(20), ran.recv())
        .await
        .expect("the job ran from a later claim")
        .unwrap();
    let done = queue
        .wait_result("slow:1", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done, Some(JobResult::Done(None)), "the job is done");
    workers.shutdown(Duration::from_secs(5)).await;
    assert!(ran.try_recv().is_err(), "the job ran once");
    assert_eq!(attempt, 1, "the claim given back is not counted");
    let (attempts, unrun): (i32, i32) = sqlx::query_as(&format!(
        "SELECT attempts, unrun FROM \"{schema}\".idem_records_queue WHERE key = 'slow:1'"
    ))
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        (attempts, unrun),
        (2, 1),
        "the late claim was given back, and a second claim ran the job"
    );
}
