//! Fences only grow: a job's attempt number is the fence of its claim, and no path hands a
//! retried job a fence that a stalled holder may still hold. Against a real PostgreSQL, with
//! each worker on a pool and store of its own, as separate processes are.

mod support;

use idem_queue::{Job, JobError, JobResult, JobState, NewJob, Queue};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{another, TestStore};
use tokio::sync::{mpsc, Notify};

async fn state(queue: &Queue, key: &str) -> JobState {
    queue.status(key).await.unwrap().expect("the job").state
}

/// A worker whose handler says it started, waits at `gate`, and answers `{"by": name}`; long
/// leases, so that it renews nothing while the test runs.
async fn gated(
    test: &TestStore,
    name: &'static str,
    gate: Arc<Notify>,
) -> (idem_queue::Workers, mpsc::UnboundedReceiver<u32>) {
    let (started, starts) = mpsc::unbounded_channel();
    let workers = another(test)
        .await
        .worker(move |job: Job| {
            let (started, gate) = (started.clone(), gate.clone());
            async move {
                let _ = started.send(job.attempt());
                gate.notified().await;
                Ok::<_, std::io::Error>(json!({ "by": name }))
            }
        })
        .lease(Duration::from_secs(60))
        // One slot: a stalled worker claims nothing more.
        .concurrency(1)
        .start();
    (workers, starts)
}

/// Worker A claims attempt 1 and stalls past its lease (as a SIGSTOPped process does: its lease
/// end is moved into the past, and it renews nothing meanwhile). B takes the job over and
/// dead-letters it; the operator retries it; C runs it. When A resumes and finishes, its
/// completion is refused, and the job's result is C's. With attempt numbers starting again at
/// 1 after the retry, C's claim carried A's fence and A's completion settled C's run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_worker_cannot_settle_a_job_retried_after_it_was_dead_lettered() {
    let test = TestStore::new("qf_stalled", 8).await;
    let queue = support::queue(&test).await;
    let job = NewJob::new("charge:1", &json!({})).unwrap().max_attempts(2);
    let _ = queue.enqueue(job).await.unwrap();

    let a_gate = Arc::new(Notify::new());
    let (a, mut a_starts) = gated(&test, "A", a_gate.clone()).await;
    assert_eq!(a_starts.recv().await, Some(1));
    idem_store_postgres::sqlx::query(&format!(
        "UPDATE {}.idem_records_queue SET available_at = now() - interval '1 second'
         WHERE key = 'charge:1'",
        test.schema
    ))
    .execute(test.store.pool())
    .await
    .unwrap();

    let b = another(&test)
        .await
        .worker(|_job: Job| async { Err::<(), _>(JobError::permanent("card declined")) })
        .start();
    let dead = queue
        .wait_result("charge:1", Duration::from_secs(20))
        .await
        .unwrap();
    assert!(matches!(dead, Some(JobResult::Dead { .. })), "{dead:?}");
    b.shutdown(Duration::from_secs(10)).await;

    assert!(queue.retry_dead("charge:1").await.unwrap());
    let c_gate = Arc::new(Notify::new());
    let (c, mut c_starts) = gated(&test, "C", c_gate.clone()).await;
    assert_eq!(
        c_starts.recv().await,
        Some(1),
        "the retry starts counting again"
    );

    // A resumes and finishes: its completion finds the job held by C's claim, not its own.
    a_gate.notify_one();
    a.shutdown(Duration::from_secs(10)).await;
    assert_eq!(
        state(&queue, "charge:1").await,
        JobState::Running,
        "the stalled worker settled the retried run"
    );

    c_gate.notify_one();
    let done = queue
        .wait_result("charge:1", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done, Some(JobResult::Done(Some(json!({ "by": "C" })))));
    c.shutdown(Duration::from_secs(10)).await;
}
