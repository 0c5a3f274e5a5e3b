//! Crashes: worker processes running slow handlers are killed with SIGKILL at random moments,
//! and some are paused (SIGSTOP) past their lease and resumed (SIGCONT). New workers retry.
//! Every key ends completed, none stays stuck past one lease, resumed runs are fenced out, and
//! only runs cut by a kill or a pause ever repeat.

mod pg_support;

use pg_support::{signal, spawn_keyed_worker, spawn_worker, summary, xorshift, Schema};
use std::collections::HashSet;
use std::process::Child;
use std::time::{Duration, Instant};

const KEYS: u32 = 400;
const TASKS: usize = 8;
const WORKERS: usize = 3;
const KILLS: usize = 6;
/// Keys for the last worker, which is killed right before the sweep.
const LAST_KEYS: u32 = 40;
const PAUSES: usize = 2;
/// The handlers' lease (`lease = "1s"` in the worker).
const LEASE: Duration = Duration::from_secs(1);

fn crash_worker(schema: &str, seed: u64) -> Child {
    crash_worker_on(schema, seed, 0, KEYS)
}

fn crash_worker_on(schema: &str, seed: u64, first: u32, keys: u32) -> Child {
    spawn_keyed_worker("crash", schema, seed, (first, keys), TASKS, 300)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_and_paused_workers_lose_nothing_and_are_fenced_out() {
    let schema = Schema::new("crash").await;
    let mut seed = 17u64;
    let mut live: Vec<Child> = (0..WORKERS)
        .map(|_| {
            seed += 1;
            crash_worker(&schema.name, seed)
        })
        .collect();
    let mut cut_pids: HashSet<i32> = HashSet::new();
    let mut finished: Vec<Child> = Vec::new();
    let mut random = xorshift(0x2545_F491_4F6C_DD1Du64);

    for round in 0..KILLS + PAUSES {
        tokio::time::sleep(Duration::from_millis(300 + random(500))).await;
        let victim = live.remove(random(live.len() as u64) as usize);
        cut_pids.insert(victim.id() as i32);
        if round % 4 == 3 {
            // Pause it past its lease: other workers take its keys over; when it resumes, its
            // late completions must be refused.
            signal(&victim, "STOP");
            tokio::time::sleep(LEASE * 5 / 2).await;
            signal(&victim, "CONT");
            finished.push(victim);
        } else {
            let mut victim = victim;
            victim.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix
            victim.wait().unwrap();
        }
        seed += 1;
        live.push(crash_worker(&schema.name, seed));
    }
    let mut lost_reported = 0;
    for worker in live.into_iter().chain(finished) {
        let counts = tokio::task::spawn_blocking(move || summary(worker))
            .await
            .unwrap();
        lost_reported += counts[4];
    }

    // One last worker takes fresh keys and is killed mid-run, leaving live-looking claims.
    let mut last = crash_worker_on(&schema.name, seed + 1, KEYS, LAST_KEYS);
    tokio::time::sleep(Duration::from_millis(400)).await;
    cut_pids.insert(last.id() as i32);
    last.kill().expect("SIGKILL");
    last.wait().unwrap();

    // A sweeper delivers every key once more, waiting up to 4s (four leases) on a key in
    // progress. The dead worker's claims lapse within one lease and are taken over; a key that
    // stayed stuck would come back `in_progress` here.
    let started = Instant::now();
    let sweep = spawn_worker(
        "sweep",
        &schema.name,
        &[
            ("keys", (KEYS + LAST_KEYS).to_string()),
            ("tasks", "16".into()),
        ],
    );
    let [sweep_executed, _, stuck, errors, _] = tokio::task::spawn_blocking(move || summary(sweep))
        .await
        .unwrap();
    assert_eq!(stuck, 0, "no key stayed in progress past its lease");
    assert!(
        sweep_executed > 0,
        "the sweep took over the killed worker's keys"
    );
    assert_eq!(errors, 0);
    eprintln!(
        "crash: the sweep ran {sweep_executed} keys left by the last killed worker in {:?}",
        started.elapsed()
    );

    let completed = schema
        .scalar("SELECT count(*) FROM {schema}.idem_records WHERE completed_at IS NOT NULL")
        .await;
    assert_eq!(
        completed,
        i64::from(KEYS + LAST_KEYS),
        "every key ends completed"
    );

    // Which runs repeated, and who ran them.
    let runs = schema
        .rows("SELECT key, pid FROM {schema}.executions ORDER BY key, at")
        .await;
    let mut repeats = 0usize;
    let mut previous: Option<&(String, i32)> = None;
    for run in &runs {
        if let Some(earlier) = previous.filter(|p| p.0 == run.0) {
            repeats += 1;
            assert!(
                cut_pids.contains(&earlier.1),
                "{} ran again after a run by pid {} that was never killed or paused",
                run.0,
                earlier.1
            );
        }
        previous = Some(run);
    }
    // Each cut worker had at most TASKS bodies in flight when it was cut.
    let bound = (KILLS + PAUSES + 1) * TASKS;
    eprintln!(
        "crash: {} bodies for {} keys; {repeats} repeats (bound {bound}: {} kills and \
         {PAUSES} pauses of workers running {TASKS} bodies each); {lost_reported} completions \
         fenced out",
        runs.len(),
        KEYS + LAST_KEYS,
        KILLS + 1
    );
    assert!(
        repeats <= bound,
        "{repeats} repeats exceed the bound {bound}"
    );

    // Resumed runs were fenced out: each refused completion was by a paused worker, and the key
    // was completed by another run.
    let lost = schema
        .rows("SELECT key, pid FROM {schema}.lost_claims")
        .await;
    assert_eq!(lost.len() as u64, lost_reported);
    assert!(
        !lost.is_empty(),
        "a paused worker resumed mid-run and was fenced out"
    );
    for (key, pid) in &lost {
        assert!(
            cut_pids.contains(pid),
            "{key}: lost claim by a worker never paused"
        );
        let others = runs.iter().filter(|(k, p)| k == key && p != pid).count();
        assert!(others >= 1, "{key}: completed by a newer run");
    }
    schema.drop_schema().await;
}
