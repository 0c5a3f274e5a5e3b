//! The work queue across processes, on a real PostgreSQL: worker processes drain 20,000 jobs
//! without running any twice; workers killed with SIGKILL mid-batch lose nothing (their jobs
//! return when the lease lapses), nor does one stalled past its lease (SIGSTOP); a worker stopped
//! with SIGTERM mid-batch gives its jobs back. Queue control across processes: a global limit
//! holds, a serial key's jobs run one at a time in order, a running job is cancelled.
//!
//! Every handler run inserts a row into `executions` (no unique constraint), so a job that ran
//! twice shows up twice.

mod pg_support;

use idem_queue::{Cancel, JobResult, NewJob, Queue};
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

/// Workers that prefetch (claim past their free slots) and are killed mid-batch lose nothing:
/// the jobs they held, started or not, return when their lease lapses. Each kill lands while
/// its victim holds jobs it claimed and never started (read from the queue and the ledger of
/// runs, not timed), and every such job is taken over with its lost claim counted in `unrun`,
/// not as an attempt. Only jobs the victim had started run again: no more repeats than jobs it
/// had started and not settled when it died, and no job's attempts exceed its runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetching_workers_killed_mid_batch_lose_nothing_and_count_only_started_jobs() {
    killed_while_prefetching("q_kill_prefetch", Some(64)).await;
}

/// The same on the queue's defaults, which prefetch under a backlog: the kills land once
/// each victim has turned prefetching on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_defaults_killed_while_prefetching_lose_nothing_and_count_only_started_jobs() {
    killed_while_prefetching("q_kill_adaptive", None).await;
}

/// Kills worker processes (`prefetch`: always that many past their slots, else the defaults)
/// while they hold jobs they claimed and did not start; see above.
async fn killed_while_prefetching(name: &str, prefetch: Option<i64>) {
    let _turn = TURN.lock().await;
    const JOBS: u32 = 5_000;
    const KILLS: usize = 4;
    const CONCURRENCY: i64 = 8;
    let schema = Schema::new(name).await;
    let queue = enqueue(&schema, JOBS).await;
    let mut prefetching = vec![
        ("work-ms", "40".to_owned()),
        ("lease-ms", "1000".to_owned()),
    ];
    prefetching.extend(prefetch.map(|n| ("prefetch", n.to_string())));
    let mut live: Vec<Child> = (0..3)
        .map(|_| worker(&schema, JOBS, &prefetching))
        .collect();
    let mut killed: HashSet<i32> = HashSet::new();
    // Per kill, the jobs its victim held unstarted, and how many it had started and not
    // settled (the most that can run again).
    let mut held_unstarted: Vec<String> = Vec::new();
    let mut cut = 0;
    let held_by = |pid: u32, started: bool| {
        format!(
            "FROM {{schema}}.idem_records_queue q
             WHERE q.worker LIKE '{pid}:%' AND q.state = 'running'
               AND {} EXISTS (SELECT 1 FROM {{schema}}.executions e
                              WHERE e.key = q.key AND e.pid = {pid})",
            if started {
                ""
            } else {
                "q.attempted_at IS NULL AND NOT"
            }
        )
    };
    for round in 0..KILLS {
        let pid = live[round % live.len()].id();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        // Killed once it holds jobs it has not started, beside the ones it runs.
        while schema
            .scalar(&format!("SELECT count(*) {}", held_by(pid, false)))
            .await
            == 0
        {
            assert!(
                std::time::Instant::now() < deadline,
                "worker {pid} never prefetched"
            );
            tokio::time::sleep(Duration::from_millis(5)).await; // polls the queue
        }
        let mut victim = live.remove(round % live.len());
        signal(&victim, "KILL");
        let _ = victim.wait();
        killed.insert(pid as i32);
        let held: Vec<String> = idem_store_postgres::sqlx::query_scalar(&format!(
            "SELECT q.key {}",
            held_by(pid, false).replace("{schema}", &format!("\"{}\"", schema.name))
        ))
        .fetch_all(&schema.pool)
        .await
        .unwrap();
        assert!(
            !held.is_empty(),
            "the kill of {pid} hit jobs it held unstarted"
        );
        held_unstarted.extend(held);
        cut += schema
            .scalar(&format!("SELECT count(*) {}", held_by(pid, true)))
            .await;
        live.push(worker(&schema, JOBS, &prefetching));
    }
    for child in live {
        summary(child);
    }
    let (runs, distinct) = all_done(&schema, &queue, JOBS).await;
    let repeats = runs - distinct;
    assert!(
        repeats <= cut,
        "{repeats} repeats, but the kills cut {cut} started jobs: only those run again"
    );
    // Every job a victim held unstarted came back with that claim counted as never run.
    let uncounted = schema
        .scalar(&format!(
            "SELECT count(*) FROM {{schema}}.idem_records_queue
             WHERE key = ANY('{{{}}}'::text[]) AND unrun = 0",
            held_unstarted.join(",")
        ))
        .await;
    assert_eq!(
        uncounted, 0,
        "a held job's lost claim was counted as an attempt: {held_unstarted:?}"
    );
    let repeated_elsewhere = schema
        .scalar(&format!(
            "SELECT count(*) FROM (
                 SELECT key FROM {{schema}}.executions GROUP BY key
                 HAVING count(*) > 1 AND NOT bool_or(pid = ANY('{{{}}}'::int[]))
             ) AS r",
            killed
                .iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ))
        .await;
    assert_eq!(
        repeated_elsewhere, 0,
        "jobs ran twice with no killed process involved"
    );
    // The kills left prefetched jobs unstarted, and their takeovers counted no attempt.
    let unrun = schema
        .scalar("SELECT coalesce(sum(unrun), 0) FROM {schema}.idem_records_queue")
        .await;
    assert!(
        unrun > 0,
        "the kills left prefetched jobs that never started"
    );
    // A job counts an attempt it did not run only where a kill fell between the noting of a
    // taken-over job's start (written before it runs, so that a job that kills its worker
    // is counted) and the handler's first statement: that attempt is logged as lapsed, and
    // each kill cuts at most its concurrency.
    let overcounted = |also: &str| {
        format!(
            "SELECT count(*) FROM {{schema}}.idem_records_queue q
             WHERE q.attempts - q.unrun
                   > (SELECT count(*) FROM {{schema}}.executions e WHERE e.key = q.key) {also}"
        )
    };
    let unlogged = schema
        .scalar(&overcounted(
            "AND NOT q.attempt_log @> '[{\"outcome\": \"lapsed\"}]'",
        ))
        .await;
    assert_eq!(unlogged, 0, "a job counted an attempt that never ran");
    let noted = schema.scalar(&overcounted("")).await;
    assert!(
        noted <= KILLS as i64 * CONCURRENCY,
        "{noted} jobs counted an attempt cut before its handler ran"
    );
    eprintln!("{KILLS} kills: {repeats} repeated runs, {unrun} unstarted claims not counted");
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
    // It gave back the jobs cut at the deadline (their attempt logged `released`) and, on
    // the defaults, jobs it had prefetched and never started (nothing logged).
    let cut = schema
        .scalar(
            r#"SELECT count(*) FROM {schema}.idem_records_queue
               WHERE attempt_log @> '[{"outcome": "released"}]'"#,
        )
        .await;
    assert!(
        cut > 0 && cut <= released as i64,
        "cut {cut}, released {released}"
    );
    // Only the jobs it cut ran again (from the start, elsewhere).
    assert_eq!(runs - distinct, cut, "released {released}");
    let repeated_elsewhere = schema
        .scalar(&format!(
            "SELECT count(*) FROM (SELECT key FROM {{schema}}.executions GROUP BY key
             HAVING count(*) > 1 AND bool_or(pid = {stopped_pid})) r"
        ))
        .await;
    assert_eq!(repeated_elsewhere, cut);
    schema.drop_schema().await;
}

/// The most handler runs that overlapped, from the `executions` rows' start and end times
/// (the database's clock, so every process's are comparable).
async fn most_at_once(schema: &Schema, keys: &str) -> i64 {
    schema
        .scalar(&format!(
            "SELECT max(c) FROM (
                 SELECT (SELECT count(*) FROM {{schema}}.executions o
                         WHERE o.key LIKE '{keys}' AND o.at <= e.at AND o.ended_at > e.at) AS c
                 FROM {{schema}}.executions e WHERE e.key LIKE '{keys}') m"
        ))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_limit_holds_across_worker_processes() {
    let _turn = TURN.lock().await;
    const JOBS: u32 = 30;
    let schema = Schema::new("q_global").await;
    let queue = Queue::new(&schema.store);
    for i in 0..JOBS {
        let job = NewJob::new(format!("limited:{i}"), &i)
            .unwrap()
            .queue("limited");
        let _ = queue.enqueue(job).await.unwrap();
    }
    let flags = [
        ("queue", "limited".to_owned()),
        ("global-limit", "2".to_owned()),
        ("concurrency", "4".to_owned()),
        ("work-ms", "60".to_owned()),
        ("fixed-work", "true".to_owned()),
        ("until-done", JOBS.to_string()),
    ];
    let workers: Vec<Child> = (0..3)
        .map(|_| spawn_queue_worker(&schema.name, &flags))
        .collect();
    for w in workers {
        summary(w);
    }
    let runs = schema
        .scalar("SELECT count(*) FROM {schema}.executions")
        .await;
    assert_eq!(runs, i64::from(JOBS), "each job ran once");
    assert_eq!(
        most_at_once(&schema, "limited:%").await,
        2,
        "never more than the limit at once across 12 slots, and the limit used"
    );
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serial_keys_jobs_run_one_at_a_time_in_order_across_processes() {
    let _turn = TURN.lock().await;
    const SERIAL: u32 = 12;
    const FREE: u32 = 24;
    let schema = Schema::new("q_serial").await;
    let queue = Queue::new(&schema.store);
    for i in 0..SERIAL {
        let job = NewJob::new(format!("customer:{i:02}"), &i)
            .unwrap()
            .serial_key("customer-7");
        let _ = queue.enqueue(job).await.unwrap();
        let free = NewJob::new(format!("free:{i}"), &i).unwrap();
        let _ = queue.enqueue(free).await.unwrap();
        let free = NewJob::new(format!("free:{}", i + SERIAL), &i).unwrap();
        let _ = queue.enqueue(free).await.unwrap();
    }
    let flags = [
        ("concurrency", "4".to_owned()),
        ("work-ms", "30".to_owned()),
        ("fixed-work", "true".to_owned()),
        ("until-done", (SERIAL + FREE).to_string()),
    ];
    let workers: Vec<Child> = (0..3)
        .map(|_| spawn_queue_worker(&schema.name, &flags))
        .collect();
    let per_process: Vec<u64> = workers.into_iter().map(|w| summary(w)[0]).collect();
    assert_eq!(
        most_at_once(&schema, "customer:%").await,
        1,
        "the key's jobs never overlapped"
    );
    let order = schema
        .rows("SELECT key, pid FROM {schema}.executions WHERE key LIKE 'customer:%' ORDER BY at")
        .await;
    let keys: Vec<String> = order.iter().map(|(key, _)| key.clone()).collect();
    let expected: Vec<String> = (0..SERIAL).map(|i| format!("customer:{i:02}")).collect();
    assert_eq!(keys, expected, "in enqueue order");
    let processes: HashSet<i32> = order.iter().map(|(_, pid)| *pid).collect();
    assert!(
        processes.len() > 1 || per_process.iter().filter(|&&n| n > 0).count() == 1,
        "the key's jobs moved between processes: {processes:?}, {per_process:?}"
    );
    assert!(
        most_at_once(&schema, "%").await > 1,
        "other jobs ran beside them"
    );
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_running_in_another_process_is_cancelled() {
    let _turn = TURN.lock().await;
    let schema = Schema::new("q_cancel").await;
    let queue = Queue::new(&schema.store);
    let job = NewJob::new("long", &0).unwrap();
    let _ = queue.enqueue(job).await.unwrap();
    // A job that would work ten minutes, on a 600 ms lease (renewed every 200 ms).
    let flags = [
        ("concurrency", "2".to_owned()),
        ("work-ms", "600000".to_owned()),
        ("fixed-work", "true".to_owned()),
        ("lease-ms", "600".to_owned()),
        ("until-done", "1".to_owned()),
    ];
    let worker = spawn_queue_worker(&schema.name, &flags);
    loop {
        let status = queue.status("long").await.unwrap().unwrap();
        if status.state == idem_queue::JobState::Running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        queue.cancel("long", "no longer wanted").await.unwrap(),
        Cancel::Requested
    );
    let ended = queue
        .wait_result("long", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(ended, Some(JobResult::Cancelled(_))), "{ended:?}");
    summary(worker);
    let stopped = schema
        .scalar(
            "SELECT count(*) FROM {schema}.executions WHERE key = 'long' AND ended_at IS NOT NULL",
        )
        .await;
    assert_eq!(stopped, 1, "the handler heard and stopped");
    schema.drop_schema().await;
}
