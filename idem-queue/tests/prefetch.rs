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
/// idle only once every job is done. While the first jobs hold every slot (at a gate), the
/// workers hold claims on more jobs than they have slots: they prefetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetching_workers_run_every_job_once() {
    const JOBS: usize = 300;
    let test = TestStore::new("qp_once", 8).await;
    let queue = support::queue(&test).await;
    enqueue(&queue, (0..JOBS).map(|i| format!("job:{i}"))).await;
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let counted = runs.clone();
    let (open, gate) = tokio::sync::watch::channel(false);
    let workers = queue
        .worker(move |job: Job| {
            *counted
                .lock()
                .unwrap()
                .entry(job.key().to_owned())
                .or_default() += 1;
            let mut gate = gate.clone();
            async move {
                let _ = gate.wait_for(|open| *open).await;
                Ok::<_, std::io::Error>(())
            }
        })
        .concurrency(4)
        .prefetch(64)
        .start();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let claimed = queue.stats().await.unwrap().running;
        if claimed > 4 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the workers never held more claims than slots: {claimed}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await; // polls the queue's counts
    }
    assert_eq!(
        runs.lock().unwrap().len(),
        4,
        "the prefetched jobs wait for a slot"
    );
    open.send_replace(true);
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

/// A shutdown gives the jobs a worker prefetched back at once, while the running job is
/// still finishing: not run, no attempt counted, nothing logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_gives_prefetched_jobs_back_at_once_uncounted() {
    let test = TestStore::new("qp_shutdown", 8).await;
    let queue = support::queue(&test).await;
    enqueue(&queue, (0..5).map(|i| format!("job:{i}"))).await;
    let (started, mut running) = tokio::sync::watch::channel(None::<String>);
    let (open, gate) = tokio::sync::watch::channel(false);
    let workers = queue
        .worker(move |job: Job| {
            started.send_replace(Some(job.key().to_owned()));
            let mut gate = gate.clone();
            async move {
                let _ = gate.wait_for(|open| *open).await;
                Ok::<_, std::io::Error>(())
            }
        })
        .concurrency(1)
        .prefetch(8)
        .start();
    running.wait_for(Option::is_some).await.unwrap();
    let first = running.borrow().clone().unwrap();
    assert_eq!(
        queue.stats().await.unwrap().running,
        5,
        "one running, four held"
    );
    let stopping = tokio::spawn(workers.shutdown(Duration::from_secs(60)));
    // The held jobs come back while the running one still waits at its gate.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while queue.stats().await.unwrap().queued < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the held jobs came back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        queue.status(&first).await.unwrap().unwrap().state,
        JobState::Running
    );
    open.send_replace(true);
    let report = stopping.await.unwrap();
    assert_eq!((report.finished, report.released), (1, 4));
    for i in 0..5 {
        let key = format!("job:{i}");
        let status = queue.status(&key).await.unwrap().unwrap();
        if key == first {
            assert_eq!((status.state, status.attempts), (JobState::Done, 1));
            continue;
        }
        assert_eq!(status.state, JobState::Queued);
        assert_eq!(status.attempts, 0, "{key}: no attempt counted");
        assert!(status.attempt_log.is_empty(), "{key}: nothing logged");
    }
}

/// A job cut at the shutdown's deadline goes back with its attempt logged as released, not
/// counted; the jobs held behind it go back with nothing logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_past_its_deadline_logs_only_the_started_job() {
    let test = TestStore::new("qp_cut", 8).await;
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
    assert_eq!((report.finished, report.released), (0, 5));
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

/// On the defaults, workers prefetch under a backlog and stop once it is gone. Of a backlog of
/// 218 jobs, the first 200 run through and the rest wait at a gate: while two of them hold
/// both slots, the workers hold claims on the other 16 (they prefetched). Once the queue is
/// idle, a job arriving while another runs is claimed for the free slot only, the rest left
/// queued for whoever is free first: prefetching turned itself off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_workers_prefetch_under_a_backlog_and_not_when_idle() {
    const QUICK: usize = 200;
    const HELD: usize = 18;
    let test = TestStore::new("qp_adaptive", 8).await;
    let queue = support::queue(&test).await;
    enqueue(&queue, (0..QUICK + HELD).map(|i| format!("backlog:{i}"))).await;
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let counted = runs.clone();
    let (open, gate) = tokio::sync::watch::channel(false);
    // Jobs started so far; from the `QUICK`th on, each waits at the gate.
    let (started, mut at_gate) = tokio::sync::watch::channel(0usize);
    let workers = queue
        .worker(move |job: Job| {
            *counted
                .lock()
                .unwrap()
                .entry(job.key().to_owned())
                .or_default() += 1;
            let mut nth = 0;
            started.send_modify(|n| {
                nth = *n;
                *n += 1;
            });
            let mut gate = gate.clone();
            async move {
                if nth >= QUICK {
                    let _ = gate.wait_for(|open| *open).await;
                }
                Ok::<_, std::io::Error>(())
            }
        })
        .concurrency(2)
        .start();
    at_gate.wait_for(|n| *n == QUICK + 2).await.unwrap();
    // The quick jobs' outcomes are written behind their handlers.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut stats = queue.stats().await.unwrap();
    while stats.done < QUICK as u64 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await; // polls the queue's counts
        stats = queue.stats().await.unwrap();
    }
    assert_eq!(
        (stats.done, stats.running, stats.queued),
        (QUICK as u64, HELD as u64, 0),
        "under the backlog the workers prefetched every job left"
    );
    open.send_replace(true);
    workers.wait_idle().await;
    open.send_replace(false);
    enqueue(&queue, std::iter::once("solo:0".to_owned())).await;
    at_gate.wait_for(|n| *n == QUICK + HELD + 1).await.unwrap();
    enqueue(&queue, (1..6).map(|i| format!("solo:{i}"))).await;
    at_gate.wait_for(|n| *n == QUICK + HELD + 2).await.unwrap();
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.running, stats.queued),
        (2, 4),
        "on an idle queue the workers claim for their free slot only"
    );
    open.send_replace(true);
    workers.wait_idle().await;
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), QUICK + HELD + 6, "every job ran");
    assert!(runs.values().all(|&n| n == 1), "no job ran twice");
    workers.shutdown(Duration::from_secs(5)).await;
}

/// On the defaults, a switch from prefetching back to claiming for free slots never runs more
/// handlers than the concurrency. A backlog is prefetched and drained but for one job `G`,
/// held at a gate; the workers then claim for free slots again (seen: of three new jobs,
/// gated too, they claim one for their one free slot; should a last prefetching claim still
/// have been on its way and taken all three, the round does not count). When `G` ends, its
/// slot was given back as its handler ended (it was prefetched): its completion must claim no
/// job for it, or that job would run in no slot while the workers, prefetching again, fill
/// the free one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_jobs_completion_claims_no_job_for_a_slot_it_gave_back() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const QUICK: usize = 40;
    const ROUNDS: usize = 12;
    // Rounds that reach the moment: each is a chance for a wrong claim to show.
    const PLAY: usize = 3;
    let test = TestStore::new("qp_giveback", 8).await;
    let queue = support::queue(&test).await;
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let quick_done = Arc::new(AtomicUsize::new(0));
    let (open_g, gate_g) = tokio::sync::watch::channel(false);
    let (open_p, gate_p) = tokio::sync::watch::channel(false);
    let (started, mut probes) = tokio::sync::watch::channel(0usize);
    let (r, m, q) = (running.clone(), most.clone(), quick_done.clone());
    let workers = queue
        .worker(move |job: Job| {
            let (running, most, quick_done) = (r.clone(), m.clone(), q.clone());
            let key = job.key().to_owned();
            let mut gate = if key.starts_with("gated:") {
                Some(gate_g.clone())
            } else if key.starts_with("probe:") {
                started.send_modify(|n| *n += 1);
                Some(gate_p.clone())
            } else {
                None
            };
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                if let Some(gate) = gate.as_mut() {
                    let _ = gate.wait_for(|open| *open).await;
                } else {
                    quick_done.fetch_add(1, Ordering::SeqCst);
                }
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(())
            }
        })
        .concurrency(2)
        .start();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut played = 0;
    for round in 0..ROUNDS {
        let (done_before, probes_before) = (queue.stats().await.unwrap().done, *probes.borrow());
        open_g.send_replace(false);
        open_p.send_replace(false);
        // All at once, `G` last (by priority): the workers prefetch it with the backlog.
        let mut backlog: Vec<NewJob> = (0..QUICK)
            .map(|i| job(&format!("quick:{round}:{i:03}")))
            .collect();
        backlog.push(job(&format!("gated:{round}")).priority(-1));
        queue.enqueue_many(backlog).await.unwrap();
        // The backlog drained but for `G`, its outcomes written.
        loop {
            let stats = queue.stats().await.unwrap();
            if quick_done.load(Ordering::SeqCst) == (round + 1) * QUICK
                && stats.done == done_before + QUICK as u64
            {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the backlog drained");
            tokio::time::sleep(Duration::from_millis(5)).await; // polls the queue's counts
        }
        enqueue(&queue, (0..3).map(|i| format!("probe:{round}:{i}"))).await;
        probes.wait_for(|n| *n == probes_before + 1).await.unwrap();
        let stats = queue.stats().await.unwrap();
        if (stats.running, stats.queued) != (2, 2) {
            // Still prefetching when the probes came: not the moment this test is after.
            open_g.send_replace(true);
            open_p.send_replace(true);
            workers.wait_idle().await;
            continue;
        }
        open_g.send_replace(true);
        // `G` settles; then the workers claim for the slot it freed: one probe more, no other.
        loop {
            let stats = queue.stats().await.unwrap();
            if stats.done == done_before + QUICK as u64 + 1 && *probes.borrow() >= probes_before + 2
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "G settled and a probe took its slot"
            );
            tokio::time::sleep(Duration::from_millis(5)).await; // polls the queue's counts
        }
        let stats = queue.stats().await.unwrap();
        assert_eq!(
            (
                stats.running,
                stats.queued,
                *probes.borrow() - probes_before
            ),
            (2, 1, 2),
            "two probes hold the two slots; the third waits"
        );
        open_p.send_replace(true);
        workers.wait_idle().await;
        played += 1;
        if played == PLAY {
            break;
        }
    }
    assert_eq!(
        played, PLAY,
        "in {ROUNDS} rounds the workers claimed for free slots again only {played} times"
    );
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "no more handlers than slots"
    );
    workers.shutdown(Duration::from_secs(5)).await;
}
