//! The work queue across processes, on a real PostgreSQL: worker processes drain 20,000 jobs
//! without running any twice; workers killed with SIGKILL mid-batch lose nothing (their jobs
//! return when the lease lapses), nor does one stalled past its lease (SIGSTOP); a worker stopped
//! with SIGTERM mid-batch gives its jobs back.
//!
//! Every handler run inserts a row into `executions` (no unique constraint), so a job that ran
//! twice shows up twice.

mod pg_support;

use idem_queue::{NewJob, Queue};
use pg_support::{signal, spawn_queue_worker, summary, Schema};
use std::collections::HashSet;
use std::process::Child;
use std::time::Duration;

/// The tests of this file take turns: together their worker processes (12 connections each, up
/// to five at once in a test) open more connections than a stock PostgreSQL allows
/// (`max_connections = 100`). Run side by side against such a server, connections were refused,
/// handlers' inserts and completions failed, and jobs ran again after their lease: the
/// at-least-once rule working as documented, but not what these tests are about.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Enqueues `jobs` jobs `job:0..` from 8 concurrent tasks, through the public API.
async fn enqueue(schema: &Schema, jobs: u32) -> Queue {
    let queue = Queue::new(&idem_store_postgres::testing::pg_store(&schema.name, 8, None).await);
    enqueue_range(&queue, 0, jobs).await;
    queue
}

/// Enqueues jobs `job:from..job:to` on `queue` from 8 concurrent tasks.
async fn enqueue_range(queue: &Queue, from: u32, to: u32) {
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let queue = queue.clone();
            tokio::spawn(async move {
                for i in (from + t..to).step_by(8) {
                    let job =
                        NewJob::new(format!("job:{i}"), &serde_json::json!({"i": i})).unwrap();
                    let _ = queue.enqueue(job).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

fn worker(schema: &Schema, total: u32, extra: &[(&str, String)]) -> Child {
    let mut args = vec![
        ("concurrency", "8".to_owned()),
        ("until-done", total.to_string()),
    ];
    args.extend(extra.iter().cloned());
    spawn_queue_worker(&schema.name, &args)
}

/// Every job is done, none dead or left; returns (runs, distinct jobs run).
async fn all_done(schema: &Schema, queue: &Queue, total: u32) -> (i64, i64) {
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.done, stats.queued, stats.running, stats.dead),
        (u64::from(total), 0, 0, 0),
        "every job done, none left behind"
    );
    let runs = schema
        .scalar("SELECT count(*) FROM {schema}.executions")
        .await;
    let distinct = schema
        .scalar("SELECT count(DISTINCT key) FROM {schema}.executions")
        .await;
    assert_eq!(distinct, i64::from(total), "every job ran");
    (runs, distinct)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_drain_20000_jobs_running_each_once() {
    let _turn = TURN.lock().await;
    const JOBS: u32 = 20_000;
    let schema = Schema::new("q_drain").await;
    // Two processes start before the work exists (they are woken by notifications), two while
    // it is being enqueued (half of it is there; the other half, which takes longer to enqueue
    // than a process takes to start, comes after them).
    let mut workers = vec![worker(&schema, JOBS, &[]), worker(&schema, JOBS, &[])];
    let queue = enqueue(&schema, JOBS / 2).await;
    workers.push(worker(&schema, JOBS, &[]));
    workers.push(worker(&schema, JOBS, &[]));
    enqueue_range(&queue, JOBS / 2, JOBS).await;
    let per_process: Vec<u64> = workers.into_iter().map(|w| summary(w)[0]).collect();
    let (runs, _) = all_done(&schema, &queue, JOBS).await;
    assert_eq!(runs, i64::from(JOBS), "no job ran twice: {per_process:?}");
    assert_eq!(per_process.iter().sum::<u64>(), u64::from(JOBS));
    assert!(
        per_process.iter().all(|&n| n > 0),
        "all four processes took part: {per_process:?}"
    );
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_or_stalled_mid_batch_lose_nothing() {
    let _turn = TURN.lock().await;
    const JOBS: u32 = 5_000;
    const KILLS: usize = 5;
    const CONCURRENCY: i64 = 8;
    const LEASE: Duration = Duration::from_millis(1000);
    let schema = Schema::new("q_kill").await;
    let queue = enqueue(&schema, JOBS).await;
    let slow = [
        ("work-ms", "40".to_owned()),
        ("lease-ms", LEASE.as_millis().to_string()),
    ];
    let mut live: Vec<Child> = (0..4).map(|_| worker(&schema, JOBS, &slow)).collect();
    // Processes whose jobs may run again: killed ones, and one stalled past its lease.
    let mut cut: HashSet<i32> = HashSet::new();
    for round in 0..=KILLS {
        tokio::time::sleep(Duration::from_millis(300 + 100 * round as u64)).await;
        if round == 2 {
            // Stall one (SIGSTOP) past its lease: others take its jobs over, and when it resumes
            // its late completions are fenced out; it goes on working.
            let stalled = &live[0];
            cut.insert(stalled.id() as i32);
            signal(stalled, "STOP");
            tokio::time::sleep(LEASE * 5 / 2).await;
            signal(stalled, "CONT");
            continue;
        }
        let mut victim = live.remove(round % live.len());
        signal(&victim, "KILL");
        let _ = victim.wait();
        cut.insert(victim.id() as i32);
        live.push(worker(&schema, JOBS, &slow));
    }
    for child in live {
        summary(child);
    }
    let (runs, distinct) = all_done(&schema, &queue, JOBS).await;
    // Only jobs in flight in a killed or stalled process ran again: at most its concurrency per
    // cut, and every job that ran twice ran once in a process that was cut.
    let repeats = runs - distinct;
    assert!(repeats > 0, "the cuts hit jobs mid-run");
    let bound = (KILLS as i64 + 1) * CONCURRENCY;
    assert!(repeats <= bound, "{repeats} repeats, bound {bound}");
    let pids_of_repeats = schema
        .rows(
            "SELECT e.key, e.pid FROM {schema}.executions e
             WHERE e.key IN (SELECT key FROM {schema}.executions GROUP BY key HAVING count(*) > 1)",
        )
        .await;
    let mut keys_with_cut_run: HashSet<String> = HashSet::new();
    let mut repeated_keys: HashSet<String> = HashSet::new();
    for (key, pid) in pids_of_repeats {
        if cut.contains(&pid) {
            keys_with_cut_run.insert(key.clone());
        }
        repeated_keys.insert(key);
    }
    let unexplained: Vec<_> = repeated_keys.difference(&keys_with_cut_run).collect();
    assert!(
        unexplained.is_empty(),
        "jobs ran twice with no killed or stalled process involved: {unexplained:?}"
    );
    eprintln!("{KILLS} kills, 1 stall: {repeats} repeated runs of {distinct} jobs");
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_mid_batch_gives_its_jobs_back() {
    let _turn = TURN.lock().await;
    const JOBS: u32 = 400;
    let schema = Schema::new("q_term").await;
    let queue = enqueue(&schema, JOBS).await;
    // Slow jobs and a 50 ms shutdown deadline: SIGTERM cuts jobs off mid-run.
    let slow = [
        ("work-ms", "500".to_owned()),
        ("shutdown-ms", "50".to_owned()),
    ];
    let stopped = worker(&schema, JOBS, &slow);
    tokio::time::sleep(Duration::from_millis(700)).await;
    signal(&stopped, "TERM");
    let stopped_pid = stopped.id() as i32;
    let [stopped_runs, _, released, ..] = summary(stopped);
    assert!(stopped_runs > 0);
    assert!(
        released > 0,
        "SIGTERM came mid-batch, past the deadline of some jobs"
    );
    let rest = worker(&schema, JOBS, &[]);
    summary(rest);
    let (runs, distinct) = all_done(&schema, &queue, JOBS).await;
    // Only the jobs it gave back ran again (from the start, elsewhere).
    assert_eq!(runs - distinct, released as i64, "released {released}");
    let repeated_elsewhere = schema
        .scalar(&format!(
            "SELECT count(*) FROM (SELECT key FROM {{schema}}.executions GROUP BY key
             HAVING count(*) > 1 AND bool_or(pid = {stopped_pid})) r"
        ))
        .await;
    assert_eq!(repeated_elsewhere, released as i64);
    schema.drop_schema().await;
}
