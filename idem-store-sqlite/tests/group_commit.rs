//! Group commit, counted where it happens: SQLite's commit hook on every connection of the
//! store's pool counts the transactions that reach the disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use idem_core::{Call, Outcome};
use idem_store_sqlite::sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use idem_store_sqlite::SqliteStore;

/// A store on a fresh file whose pool counts every commit in `commits`.
async fn counted(name: &str, commits: Arc<AtomicU64>) -> (SqliteStore, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("idem-sqlite-gc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let options = SqliteConnectOptions::new()
        .filename(dir.join("idem.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(idem_store_sqlite::DEFAULT_BUSY_TIMEOUT);
    let pool = SqlitePoolOptions::new()
        .max_connections(idem_store_sqlite::DEFAULT_CONNECTIONS)
        .after_connect(move |conn, _| {
            let commits = Arc::clone(&commits);
            Box::pin(async move {
                conn.lock_handle().await?.set_commit_hook(move || {
                    commits.fetch_add(1, Ordering::SeqCst);
                    true
                });
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .unwrap();
    let store = SqliteStore::new(pool);
    store.migrate().await.unwrap();
    (store, dir)
}

/// Concurrent fresh calls share their transactions: 64 calls write 64 claims and 64
/// completions in far fewer commits (each waits for an fsync) than one per write, and each
/// call's body ran once, after its claim committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_commits() {
    const CALLS: u64 = 64;
    let commits = Arc::new(AtomicU64::new(0));
    let (store, dir) = counted("share", Arc::clone(&commits)).await;
    let before = commits.load(Ordering::SeqCst);
    let ran = Arc::new(AtomicU64::new(0));
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let (store, ran) = (store.clone(), Arc::clone(&ran));
            tokio::spawn(async move {
                Call::new(&store, format!("share:{i}"))
                    .run(async move {
                        ran.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, std::io::Error>(())
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap(), Outcome::Executed(()));
    }
    assert_eq!(ran.load(Ordering::SeqCst), CALLS, "each body ran once");
    let written = commits.load(Ordering::SeqCst) - before;
    assert!(
        written <= CALLS,
        "{written} commits for {CALLS} claims and {CALLS} completions: one per write would be {}",
        2 * CALLS
    );
    // Every call's record is completed on disk: read back as duplicates.
    for i in 0..CALLS {
        let again = Call::new(&store, format!("share:{i}"))
            .run(async { Ok::<_, std::io::Error>(()) })
            .await
            .unwrap();
        assert!(again.is_duplicate());
    }
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
}

/// A duplicate is answered from a read while another connection holds the file's write lock
/// (it would otherwise wait for the busy timeout and fail), and a fresh call sent meanwhile
/// runs once the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_never_wait_for_the_write_lock() {
    use idem_store_sqlite::sqlx::{Connection, SqliteConnection};
    let (store, dir) = counted("dup", Arc::default()).await;
    let call =
        |key: &'static str| Call::new(&store, key).run(async { Ok::<_, std::io::Error>(()) });
    assert_eq!(call("done").await.unwrap(), Outcome::Executed(()));
    let url = format!("sqlite://{}", dir.join("idem.db").display());
    let mut other = SqliteConnection::connect(&url).await.unwrap();
    idem_store_sqlite::sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    assert!(
        call("done").await.unwrap().is_duplicate(),
        "answered under the lock"
    );
    let fresh = tokio::spawn({
        let store = store.clone();
        async move {
            Call::new(&store, "fresh")
                .run(async { Ok::<_, std::io::Error>(()) })
                .await
        }
    });
    idem_store_sqlite::sqlx::raw_sql("COMMIT")
        .execute(&mut other)
        .await
        .unwrap();
    assert_eq!(fresh.await.unwrap().unwrap(), Outcome::Executed(()));
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
}

/// The writer belongs to no caller's runtime: a store whose first write came from a runtime
/// that is now idle (its thread blocked elsewhere) still writes for a caller on another one.
#[test]
fn the_writer_serves_callers_on_any_runtime() {
    let first = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (store, dir) = first.block_on(counted("runtimes", Arc::default()));
    assert_eq!(
        first.block_on(fresh(&store, "first")).unwrap(),
        Outcome::Executed(())
    );
    // `first` is idle from here on: nothing drives its tasks.
    let other = store.clone();
    let outcome = std::thread::spawn(move || {
        let second = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        second.block_on(async {
            // Bounded, so that a writer stuck on the idle runtime fails the test, not hangs it.
            tokio::time::timeout(std::time::Duration::from_secs(20), fresh(&other, "second")).await
        })
    })
    .join()
    .unwrap();
    assert_eq!(
        outcome.expect("written on the second runtime").unwrap(),
        Outcome::Executed(())
    );
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
}

/// A call of `key` with an empty body.
async fn fresh(
    store: &SqliteStore,
    key: &'static str,
) -> Result<Outcome<()>, idem_core::Error<std::io::Error>> {
    Call::new(store, key)
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
}
