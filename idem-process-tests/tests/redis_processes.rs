//! `RedisStore` across processes on one Redis server (`REDIS_URL`) and on a 3-master Redis
//! Cluster (`REDIS_CLUSTER_URLS`): a duplicate storm (4 processes x 16 tasks x 2,000 keys, 8
//! deliveries per key) runs every body once; workers
//! killed with SIGKILL mid-run lose nothing and repeat only the bodies they had in flight; and
//! a Redis server restarted in the middle of a run: calls fail closed while it is down, no body
//! runs without a claim, and every key completes after it is back.
//!
//! Bodies append `key pid` to a file (see `idem-pg-worker`), so a body that ran twice shows up
//! twice.

mod pg_support;

use idem_core::{Call, Error, Outcome, Store};
use idem_store_redis::RedisStore;
use pg_support::summary;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A key prefix and a log file of the test's own; the log is removed when dropped.
struct Run {
    prefix: String,
    dir: PathBuf,
    urls: Vec<String>,
}

impl Run {
    fn new(name: &str, urls: Vec<String>) -> Run {
        let prefix = format!("idem-proc-{name}-{}", std::process::id());
        let dir = std::env::temp_dir().join(&prefix);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Run { prefix, dir, urls }
    }

    fn log(&self) -> PathBuf {
        self.dir.join("runs")
    }

    /// Every body run, as (key, pid), in the order written.
    fn executions(&self) -> Vec<(String, u32)> {
        let Ok(text) = std::fs::read_to_string(self.log().with_extension("executions")) else {
            return Vec::new();
        };
        text.lines()
            .map(|line| {
                let (key, pid) = line.split_once(' ').expect(line);
                (key.to_owned(), pid.parse().expect(line))
            })
            .collect()
    }

    fn worker(&self, mode: &str, args: &[(&str, String)]) -> Child {
        let mut command = Command::new(env!("CARGO_BIN_EXE_idem-pg-worker"));
        command
            .arg(mode)
            .arg("--redis")
            .arg(self.urls.join(","))
            .arg("--log")
            .arg(self.log())
            .args(["--schema", &self.prefix]);
        for (name, value) in args {
            command.arg(format!("--{name}")).arg(value);
        }
        command
            .env_remove("DATABASE_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn idem-pg-worker")
    }

    async fn store(&self) -> RedisStore {
        let store = match self.urls.as_slice() {
            [one] => RedisStore::connect(one).await,
            nodes => {
                let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
                RedisStore::connect_cluster(&nodes).await
            }
        };
        store.unwrap().prefix(&self.prefix)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// 4 processes x 16 tasks deliver 2,000 keys twice each: every body runs once.
async fn storm(run: &Run) {
    const KEYS: u64 = 2_000;
    const PROCESSES: u64 = 4;
    const ROUNDS: u64 = 2;
    let workers: Vec<_> = (0..PROCESSES)
        .map(|i| {
            run.worker(
                "storm",
                &[
                    ("keys", KEYS.to_string()),
                    ("rounds", ROUNDS.to_string()),
                    ("tasks", "16".into()),
                    ("seed", (i * 7919 + 1).to_string()),
                ],
            )
        })
        .collect();
    let mut totals = [0u64; 5];
    for worker in workers {
        let counts = tokio::task::spawn_blocking(move || summary(worker))
            .await
            .unwrap();
        for (total, count) in totals.iter_mut().zip(counts) {
            *total += count;
        }
    }
    let [executed, duplicate, in_progress, errors, lost] = totals;
    assert_eq!(
        executed + duplicate + in_progress,
        KEYS * ROUNDS * PROCESSES
    );
    assert_eq!(executed, KEYS, "exactly one delivery per key executed");
    assert_eq!((errors, lost), (0, 0));
    let runs = run.executions();
    let distinct: HashSet<&str> = runs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(runs.len() as u64, KEYS, "bodies ran 2,000 times in all");
    assert_eq!(distinct.len() as u64, KEYS, "no body ran twice");
    let store = run.store().await;
    for k in 0..KEYS {
        let key = idem_core::Key::new(format!("storm:{k}"))
            .unwrap()
            .with_scope("storm_job")
            .unwrap();
        let record = store.get(&key).await.unwrap().expect("a record");
        assert!(matches!(
            record.state,
            idem_core::RecordState::Completed { .. }
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_deliver_two_thousand_keys_eight_times_and_run_each_once() {
    storm(&Run::new("storm", vec![idem_testdb::redis_url()])).await;
}

/// The same storm on a Redis Cluster of three masters (`REDIS_CLUSTER_URLS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storm_on_a_redis_cluster_runs_each_body_once() {
    storm(&Run::new(
        "cluster-storm",
        idem_testdb::redis_cluster_urls(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_mid_run_lose_nothing_and_repeat_only_what_they_had_in_flight() {
    const KEYS: u32 = 300;
    let run = Run::new("crash", vec![idem_testdb::redis_url()]);
    let crash = |seed: u64| {
        run.worker(
            "crash",
            &[
                ("keys", KEYS.to_string()),
                ("tasks", "8".into()),
                ("work-ms", "300".into()),
                ("seed", seed.to_string()),
            ],
        )
    };
    let mut live: Vec<Child> = (1..=3).map(crash).collect();
    let mut killed: HashSet<u32> = HashSet::new();
    for round in 0..4u64 {
        tokio::time::sleep(Duration::from_millis(300 + 150 * round)).await;
        let mut victim = live.remove((round % live.len() as u64) as usize);
        killed.insert(victim.id());
        victim.kill().expect("SIGKILL");
        victim.wait().unwrap();
        live.push(crash(10 + round));
    }
    for worker in live {
        tokio::task::spawn_blocking(move || summary(worker))
            .await
            .unwrap();
    }
    let sweep = run.worker(
        "sweep",
        &[("keys", KEYS.to_string()), ("tasks", "16".into())],
    );
    let [_, _, stuck, errors, _] = tokio::task::spawn_blocking(move || summary(sweep))
        .await
        .unwrap();
    assert_eq!(
        (stuck, errors),
        (0, 0),
        "no key stayed in progress, no delivery failed"
    );

    let runs = run.executions();
    let mut by_key: HashMap<&str, Vec<u32>> = HashMap::new();
    for (key, pid) in &runs {
        by_key.entry(key).or_default().push(*pid);
    }
    assert_eq!(by_key.len() as u32, KEYS, "every key's body ran");
    let mut repeats = 0;
    for (key, pids) in &by_key {
        for earlier in &pids[..pids.len() - 1] {
            repeats += 1;
            assert!(
                killed.contains(earlier),
                "{key} repeated after a run by {earlier}, which was not killed"
            );
        }
    }
    assert!(
        repeats <= killed.len() * 8,
        "at most the killed workers' in-flight bodies repeat"
    );
    let store = run.store().await;
    for k in 0..KEYS {
        let key = idem_core::Key::new(format!("crash:{k}"))
            .unwrap()
            .with_scope("crash_job")
            .unwrap();
        let record = store.get(&key).await.unwrap().expect("a record");
        assert!(
            matches!(record.state, idem_core::RecordState::Completed { .. }),
            "crash:{k} ends completed"
        );
    }
    eprintln!(
        "redis crash: {} kills, {repeats} bodies repeated",
        killed.len()
    );
}

/// A server of the test's own is stopped while 16 tasks deliver 400 keys, and started again:
/// while it is down every call fails with `Error::Store` and no body runs; after, every key
/// completes (each delivered until it is executed or a duplicate).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restart_mid_run_fails_calls_closed_and_every_key_completes_after() {
    const KEYS: usize = 400;
    let server = idem_testdb::RedisServer::start().expect("a throwaway redis-server");
    let store = RedisStore::connect(&server.url())
        .await
        .unwrap()
        .prefix("restart");
    // When each body ran, and when the server was down.
    let bodies: Arc<Mutex<Vec<(usize, Instant)>>> = Arc::default();
    let pending: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new((0..KEYS).rev().collect()));
    let failures = Arc::new(Mutex::new(0usize));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (store, bodies, pending, failures) = (
                store.clone(),
                bodies.clone(),
                pending.clone(),
                failures.clone(),
            );
            tokio::spawn(async move {
                let started = Instant::now();
                loop {
                    let Some(k) = pending.lock().unwrap().pop() else {
                        return;
                    };
                    let bodies = bodies.clone();
                    let call = Call::new(&store, format!("restart:{k}")).run(async move {
                        bodies.lock().unwrap().push((k, Instant::now()));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok::<_, std::io::Error>(())
                    });
                    match call.await {
                        Ok(Outcome::Executed(())) | Ok(Outcome::Duplicate { .. }) => {}
                        Ok(Outcome::InProgress { .. }) | Err(_) => {
                            *failures.lock().unwrap() += 1;
                            pending.lock().unwrap().insert(0, k);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(120),
                        "the run never finished"
                    );
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.stop().unwrap();
    let down_from = Instant::now();
    // While it is down, a call fails closed.
    let refused = Call::new(&store, "restart:while-down")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await;
    assert!(matches!(refused, Err(Error::Store(_))), "got {refused:?}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let down_until = Instant::now();
    server.start_again().unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let bodies = bodies.lock().unwrap();
    let ran: HashSet<usize> = bodies.iter().map(|(k, _)| *k).collect();
    assert_eq!(ran.len(), KEYS, "every key ran");
    let while_down = bodies
        .iter()
        .filter(|(_, at)| *at > down_from && *at < down_until)
        .count();
    assert_eq!(
        while_down, 0,
        "no body ran while the server was down (no claim was possible)"
    );
    assert!(
        *failures.lock().unwrap() > 0,
        "calls failed while it was down"
    );
}
