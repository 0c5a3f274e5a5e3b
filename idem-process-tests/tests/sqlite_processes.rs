//! `SqliteStore` across processes on one database file: a duplicate storm (4 processes x 16
//! tasks x 2,000 keys, 8 deliveries per key) runs every body once; workers killed with SIGKILL
//! mid-run lose nothing and repeat only the bodies they had in flight; a database locked by
//! another process makes calls wait up to the busy timeout, then fail closed.
//!
//! Bodies append `key pid` to `<db>.executions` (see `idem-pg-worker`), so a body that ran
//! twice shows up twice.

mod pg_support;

use idem_core::{Call, Error, Outcome, Store};
use idem_store_sqlite::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use idem_store_sqlite::SqliteStore;
use pg_support::summary;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A directory of the test's own with a migrated database file in it; removed when dropped.
struct Db {
    dir: PathBuf,
    path: PathBuf,
}

impl Db {
    async fn new(name: &str) -> Db {
        let dir = std::env::temp_dir().join(format!("idem-sqlite-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("idem.db");
        let store = SqliteStore::open(&path).await.unwrap();
        store.migrate().await.unwrap();
        store.pool().close().await;
        Db { dir, path }
    }

    /// Every body run, as (key, pid), in the order written.
    fn executions(&self) -> Vec<(String, u32)> {
        let Ok(text) = std::fs::read_to_string(self.path.with_extension("executions")) else {
            return Vec::new();
        };
        text.lines()
            .map(|line| {
                let (key, pid) = line.split_once(' ').expect(line);
                (key.to_owned(), pid.parse().expect(line))
            })
            .collect()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn worker(db: &Db, mode: &str, args: &[(&str, String)]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idem-pg-worker"));
    command
        .arg(mode)
        .arg("--sqlite")
        .arg(&db.path)
        .args(["--schema", "unused"]);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_deliver_two_thousand_keys_eight_times_and_run_each_once() {
    const KEYS: u64 = 2_000;
    const PROCESSES: u64 = 4;
    const ROUNDS: u64 = 2;
    let db = Db::new("storm").await;
    let workers: Vec<_> = (0..PROCESSES)
        .map(|i| {
            worker(
                &db,
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
    let runs = db.executions();
    let distinct: HashSet<&str> = runs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(runs.len() as u64, KEYS, "bodies ran 2,000 times in all");
    assert_eq!(distinct.len() as u64, KEYS, "no body ran twice");
    let store = SqliteStore::open(&db.path).await.unwrap();
    for k in [0, KEYS / 2, KEYS - 1] {
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
async fn workers_killed_mid_run_lose_nothing_and_repeat_only_what_they_had_in_flight() {
    const KEYS: u32 = 300;
    let db = Db::new("crash").await;
    let crash = |seed: u64| {
        worker(
            &db,
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
    // A sweep delivers every key once more, waiting up to four leases on a key in progress:
    // the killed workers' claims lapse within one lease and are taken over.
    let sweep = worker(
        &db,
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

    let runs = db.executions();
    let mut by_key: HashMap<&str, Vec<u32>> = HashMap::new();
    for (key, pid) in &runs {
        by_key.entry(key).or_default().push(*pid);
    }
    assert_eq!(by_key.len() as u32, KEYS, "every key's body ran");
    let mut repeats = 0;
    for (key, pids) in &by_key {
        // Every run but the last was cut short by a kill: only bodies in flight repeat.
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
    let store = SqliteStore::open(&db.path).await.unwrap();
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
        "sqlite crash: {} kills, {repeats} bodies repeated",
        killed.len()
    );
}

/// A store on `path` whose statements wait at most `busy` for another writer.
async fn store_with_busy_timeout(path: &Path, busy: Duration) -> SqliteStore {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(busy);
    SqliteStore::new(
        SqlitePoolOptions::new()
            .connect_with(options)
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_locked_by_another_process_makes_calls_wait_then_fail_closed() {
    let db = Db::new("locked").await;
    let mut holder = worker(&db, "hold-lock", &[("work-ms", "4000".into())]);
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "LOCKED");

    let ran = AtomicU32::new(0);
    let body = || async {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok::<_, std::io::Error>(())
    };
    // Waits its whole busy timeout (1 s) for the lock, then fails closed.
    let store = store_with_busy_timeout(&db.path, Duration::from_secs(1)).await;
    let started = Instant::now();
    let refused = Call::new(&store, "locked:1").run(body()).await;
    let waited = started.elapsed();
    match refused {
        Err(Error::Store(e)) => {
            assert_eq!(e.operation(), Some(idem_core::Operation::Claim));
            assert!(e.to_string().contains("locked"), "{e}");
        }
        other => panic!("expected a store error, got {other:?}"),
    }
    assert!(
        waited >= Duration::from_millis(900),
        "it waited for the lock: {waited:?}"
    );
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the body never ran without a claim"
    );

    // A call with a busy timeout longer than the lock waits for it, then runs.
    let patient = store_with_busy_timeout(&db.path, Duration::from_secs(30)).await;
    let outcome = Call::new(&patient, "locked:1").run(body()).await.unwrap();
    assert_eq!(outcome, Outcome::Executed(()));
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    out.read_line(&mut line).unwrap();
    assert!(line.contains("RELEASED"));
    holder.wait().unwrap();
}
