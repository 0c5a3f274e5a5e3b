//! Fences only grow, against a really stalled process: a worker process claims a job and is
//! stopped (SIGSTOP) past its lease; another takes the job over and dead-letters it; the
//! operator retries it and a third runs it. When the stalled process resumes (SIGCONT), before
//! or after the new run finishes, its renewal and completion are refused and the job's result
//! is the new run's.

mod pg_support;

use idem_queue::{Job, JobError, JobResult, JobState, NewJob, Queue};
use pg_support::{database_url, lines, signal, Schema};
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use tokio::sync::Notify;

/// The stalled worker's lease and its handler's work: the work outlasts the lease.
const LEASE_MS: u64 = 900;
const WORK_MS: u64 = 1_500;

/// A queue worker process whose stderr the test reads, a line at a time.
fn stalling_worker(schema: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem-queue-worker"))
        .args([
            "--schema",
            schema,
            "--concurrency",
            "1",
            "--until-done",
            "1000000",
        ])
        .args([
            "--lease-ms",
            &LEASE_MS.to_string(),
            "--work-ms",
            &WORK_MS.to_string(),
        ])
        .args(["--fixed-work", "true"])
        .env("DATABASE_URL", database_url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn idem-queue-worker");
    let stderr = lines(child.stderr.take().unwrap());
    (child, stderr)
}

/// Waits until the server says `condition` (an SQL boolean over `{schema}`).
async fn until(schema: &Schema, what: &str, condition: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while schema
        .scalar(&format!("SELECT ({condition})::int::bigint"))
        .await
        == 0
    {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A worker of this process whose handler says it started, waits at `gate` and answers
/// `{"by": "C"}`.
fn gated(
    queue: &Queue,
    gate: Arc<Notify>,
) -> (
    idem_queue::Workers,
    tokio::sync::mpsc::UnboundedReceiver<u32>,
) {
    let (started, starts) = tokio::sync::mpsc::unbounded_channel();
    let workers = queue
        .worker(move |job: Job| {
            let (started, gate) = (started.clone(), gate.clone());
            async move {
                let _ = started.send(job.attempt());
                gate.notified().await;
                Ok::<_, std::io::Error>(json!({ "by": "C" }))
            }
        })
        .lease(Duration::from_secs(60))
        .concurrency(1)
        .start();
    (workers, starts)
}

/// Runs the scenario; `resume_after_done` resumes the stalled worker once the new run is done
/// rather than while it runs.
async fn stalled_worker_resumes(prefix: &str, resume_after_done: bool) {
    let schema = Schema::new(prefix).await;
    let queue = Queue::new(&schema.store);
    let key = "charge:1";
    let _ = queue
        .enqueue(NewJob::new(key, &json!({})).unwrap().max_attempts(2))
        .await
        .unwrap();

    let (mut stalled, stderr) = stalling_worker(&schema.name);
    let pid = stalled.id();
    until(
        &schema,
        "the worker process runs the job",
        &format!(
            "EXISTS (SELECT 1 FROM {{schema}}.executions WHERE key = '{key}' AND pid = {pid})"
        ),
    )
    .await;
    signal(&stalled, "STOP");
    until(
        &schema,
        "its lease lapses",
        &format!(
            "(SELECT available_at <= now() FROM {{schema}}.idem_records_queue WHERE key = '{key}')"
        ),
    )
    .await;

    let takeover = queue
        .worker(|_job: Job| async { Err::<(), _>(JobError::permanent("card declined")) })
        .start();
    let dead = queue
        .wait_result(key, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(dead, Some(JobResult::Dead { .. })), "{dead:?}");
    takeover.shutdown(Duration::from_secs(10)).await;

    assert!(queue.retry_dead(key).await.unwrap());
    let gate = Arc::new(Notify::new());
    let (new_run, mut starts) = gated(&queue, gate.clone());
    assert_eq!(
        starts.recv().await,
        Some(1),
        "the retried run's first attempt"
    );
    if resume_after_done {
        gate.notify_one();
        let done = queue
            .wait_result(key, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(done, Some(JobResult::Done(Some(json!({ "by": "C" })))));
    }
    let finished_before = schema
        .scalar(&format!(
            "SELECT coalesce((extract(epoch FROM finished_at) * 1e6)::bigint, 0)
             FROM {{schema}}.idem_records_queue WHERE key = '{key}'"
        ))
        .await;

    // The stalled handler's work is over by the clock: resumed, it returns at once, and its
    // renewal and completion go out.
    until(
        &schema,
        "the stalled handler's work is due",
        &format!(
            "(SELECT at + interval '{WORK_MS} milliseconds' < clock_timestamp()
              FROM {{schema}}.executions WHERE key = '{key}' AND pid = {pid})"
        ),
    )
    .await;
    signal(&stalled, "CONT");
    let refused = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while let Ok(line) =
            stderr.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        {
            if line.contains("a newer run took it over") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap();
    signal(&stalled, "TERM");
    assert!(stalled.wait().unwrap().success());
    assert!(
        refused,
        "the stalled worker's renewal or completion was refused"
    );

    let after = schema
        .scalar(&format!(
            "SELECT coalesce((extract(epoch FROM finished_at) * 1e6)::bigint, 0)
             FROM {{schema}}.idem_records_queue WHERE key = '{key}'"
        ))
        .await;
    assert_eq!(after, finished_before, "the stalled worker settled nothing");
    if resume_after_done {
        assert_eq!(
            queue.status(key).await.unwrap().unwrap().state,
            JobState::Done
        );
    } else {
        assert_eq!(
            queue.status(key).await.unwrap().unwrap().state,
            JobState::Running,
            "the new run still holds the job"
        );
        gate.notify_one();
    }
    let done = queue
        .wait_result(key, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        done,
        Some(JobResult::Done(Some(json!({ "by": "C" })))),
        "the new run's result"
    );
    new_run.shutdown(Duration::from_secs(10)).await;
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_process_resumed_while_the_retried_run_goes_on_settles_nothing() {
    stalled_worker_resumes("fence_during", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_process_resumed_after_the_retried_run_finished_settles_nothing() {
    stalled_worker_resumes("fence_after", true).await;
}
