//! `SqliteStore` across processes on one database file: a duplicate storm (4 processes x 16
//! tasks x 2,000 keys, 8 deliveries per key) runs every body once; workers killed with SIGKILL
//! mid-run lose nothing and repeat only the bodies they had in flight; a database locked by
//! another process makes calls wait up to the busy timeout, then fail closed.
//!
//! Bodies append `key pid` to `<db>.executions` (see `idem-pg-worker`), so a body that ran
//! twice shows up twice.

mod logged_runs;
mod pg_support;

use idem_core::{Call, Error, Outcome};
use idem_store_sqlite::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use idem_store_sqlite::SqliteStore;
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

    /// The log the workers' bodies append to.
    fn log(&self) -> PathBuf {
        self.path.with_extension("executions")
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
    let db = Db::new("storm").await;
    let store = SqliteStore::open(&db.path).await.unwrap();
    logged_runs::storm(&|mode, args| worker(&db, mode, args), &db.log(), &store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_mid_run_lose_nothing_and_repeat_only_what_they_had_in_flight() {
    let db = Db::new("crash").await;
    let store = SqliteStore::open(&db.path).await.unwrap();
    let repeats =
        logged_runs::killed_workers(&|mode, args| worker(&db, mode, args), &db.log(), &store).await;
    eprintln!("sqlite crash: 4 kills, {repeats} bodies repeated");
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
