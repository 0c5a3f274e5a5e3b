//! Prefetching workers against a real PostgreSQL: claims past the free slots run every job
//! once, and a shutdown gives the jobs held but never started back without counting them.

mod support;

use idem_queue::{Job, JobState, NewJob, Queue};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::TestStore;

fn job(key: &str) -> NewJob {
    NewJob::new(key, &json!({ "key": key })).unwrap()
}

async fn enqueue(queue: &Queue, keys: impl Iterator<Item = String>) {
    for key in keys {
        let _ = queue.enqueue(job(&key)).await.unwrap();
    }
}

/// Workers that prefetch far past their slots run each job exactly once, and call themselves
/// idle only once every job is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetching_workers_run_every_job_once() {
    const JOBS: usize = 300;
    let test = TestStore::new("qp_once", 8).await;
    let queue = support::queue(&test).await;
    enqueue(&queue, (0..JOBS).map(|i| format!("job:{i}"))).await;
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let counted = runs.clone();
    let workers = queue
        .worker(move |job: Job| {
            *counted
                .lock()
                .unwrap()
                .entry(job.key().to_owned())
                .or_default() += 1;
            async { Ok::<_, std::io::Error>(()) }
        })
        .concurrency(4)
        .prefetch(64)
        .start();
    workers.wait_idle().await;
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), JOBS, "every job ran");
    assert!(runs.values().all(|&n| n == 1), "no job ran twice");
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.done, stats.queued, stats.running),
        (JOBS as u64, 0, 0)
    );
    for i in [0, JOBS / 2, JOBS - 1] {
        let status = queue.status(&format!("job:{i}")).await.unwrap().unwrap();
        assert_eq!(status.attempts, 1, "one attempt, counted when it ran");
    }
    workers.shutdown(Duration::from_secs(5)).await;
}

/// A shutdown gives the jobs a worker prefetched back at once: not run, no attempt counted,
/// nothing logged. The job cut at the deadline goes back too, its attempt not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_gives_prefetched_jobs_back_uncounted() {
    let test = TestStore::new("qp_shutdown", 8).await;
    let queue = support::queue(&test).await;
    enqueue(&queue, (0..5).map(|i| format!("job:{i}"))).await;
    let (started, mut running) = tokio::sync::watch::channel(None::<String>);
    let workers = queue
        .worker(move |job: Job| {
            started.send_replace(Some(job.key().to_owned()));
            std::future::pending::<Result<(), std::io::Error>>()
        })
        .concurrency(1)
        .prefetch(8)
        .start();
    running.wait_for(Option::is_some).await.unwrap();
    let cut = running.borrow().clone().unwrap();
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.running, 5, "one running, four prefetched");
    let report = workers.shutdown(Duration::ZERO).await;
    assert_eq!(report.finished, 0);
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.queued, stats.running), (5, 0), "every job back");
    for i in 0..5 {
        let key = format!("job:{i}");
        let status = queue.status(&key).await.unwrap().unwrap();
        assert_eq!(status.state, JobState::Queued);
        assert_eq!(status.attempts, 0, "{key}: no attempt counted");
        let outcomes: Vec<String> = status.attempt_log.into_iter().map(|a| a.outcome).collect();
        let expected: Vec<String> = if key == cut {
            vec!["released".to_owned()]
        } else {
            Vec::new()
        };
        assert_eq!(
            outcomes, expected,
            "{key}: only the started job's attempt is logged"
        );
    }
}
