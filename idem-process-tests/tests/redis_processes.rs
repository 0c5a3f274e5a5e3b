//! `RedisStore` across processes on one Redis server (`REDIS_URL`) and on a 3-master Redis
//! Cluster (`REDIS_CLUSTER_URLS`): a duplicate storm (4 processes x 16 tasks x 2,000 keys, 8
//! deliveries per key) runs every body once; workers
//! killed with SIGKILL mid-run lose nothing and repeat only the bodies they had in flight; and
//! a Redis server restarted in the middle of a run: calls fail closed while it is down, no body
//! runs without a claim, and every key completes after it is back.
//!
//! Bodies append `key pid` to a file (see `idem-pg-worker`), so a body that ran twice shows up
//! twice.

mod logged_runs;
mod pg_support;

use idem_core::{Call, Error, Outcome};
use idem_store_redis::RedisStore;
use std::collections::HashSet;
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

async fn storm(run: &Run) {
    let store = run.store().await;
    logged_runs::storm(
        &|mode, args| run.worker(mode, args),
        &run.log().with_extension("executions"),
        &store,
    )
    .await;
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
    let run = Run::new("crash", vec![idem_testdb::redis_url()]);
    let store = run.store().await;
    let log = run.log().with_extension("executions");
    let repeats =
        logged_runs::killed_workers(&|mode, args| run.worker(mode, args), &log, &store).await;
    eprintln!("redis crash: 4 kills, {repeats} bodies repeated");
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
    // A body is stamped when its task runs after its claim's answer arrived, which on a loaded
    // machine can be a little after the server answered and stopped: allow 200 ms for a claim
    // the server answered just before the stop (as pg_outage.rs does).
    let grace = Duration::from_millis(200);
    let while_down: Vec<Duration> = bodies
        .iter()
        .filter(|(_, at)| *at > down_from + grace && *at < down_until)
        .map(|(_, at)| *at - down_from)
        .collect();
    assert!(
        while_down.is_empty(),
        "no body ran while the server was down (no claim was possible); these ran this long \
         after it stopped: {while_down:?}"
    );
    assert!(
        *failures.lock().unwrap() > 0,
        "calls failed while it was down"
    );
}
