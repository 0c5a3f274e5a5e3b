//! Outage: the database is stopped mid-run and started again. While it is down, calls fail
//! with `Error::Store` and no body starts; once it is back, retries complete every key.
//!
//! This test starts a PostgreSQL cluster of its own (it has to stop it), from the server
//! binaries on PATH or under /usr/lib/postgresql/*/bin, whatever `DATABASE_URL` says.

use idem_core::{idempotent, Error, Operation, Outcome};
use idem_store_postgres::sqlx::postgres::PgPoolOptions;
use idem_store_postgres::sqlx::{self, Row};
use idem_store_postgres::PgStore;
use idem_testdb::Cluster;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEYS: u32 = 300;
const TASKS: usize = 4;

struct App {
    store: PgStore,
    /// When each body started, relative to `epoch`.
    body_starts: Mutex<Vec<Duration>>,
    epoch: Instant,
    claim_errors: AtomicU64,
    completed: AtomicU64,
}

#[idempotent(key = "outage:{k}", store = app.store, lease = "1s")]
async fn job(app: &App, k: u32) -> Result<(), sqlx::Error> {
    app.body_starts.lock().unwrap().push(app.epoch.elapsed());
    tokio::time::sleep(Duration::from_millis(10)).await;
    sqlx::query("INSERT INTO executions (key) VALUES ($1)")
        .bind(format!("outage:{k}"))
        .execute(app.store.pool())
        .await?;
    Ok(())
}

/// Delivers `k` until done, retrying every failure like a scheduler with short backoff.
async fn deliver(app: &App, k: u32) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        match job(app, k).await {
            Ok(Outcome::Executed(())) | Ok(Outcome::Duplicate { .. }) => {
                app.completed.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Err(Error::Store(e)) if e.operation() == Some(Operation::Claim) => {
                app.claim_errors.fetch_add(1, Ordering::SeqCst);
            }
            Ok(Outcome::InProgress { .. }) | Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("outage:{k} never completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_closed_while_the_database_is_down_and_nothing_is_lost() {
    outage(None).await;
}

/// The same with the store's statements on dedicated connections, which must notice that their
/// idle connections died with the server and open new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedicated_connections_recover_from_an_outage() {
    outage(Some(4)).await;
}

async fn outage(dedicated: Option<usize>) {
    let cluster = Cluster::start().expect("a throwaway PostgreSQL for the outage test");
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&cluster.url())
        .await
        .unwrap();
    let mut builder = PgStore::builder(pool.clone());
    if let Some(n) = dedicated {
        builder = builder.dedicated_connections(n);
    }
    let store = builder.build().unwrap();
    store.migrate().await.unwrap();
    sqlx::raw_sql("CREATE TABLE executions (key text NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let app = Arc::new(App {
        store,
        body_starts: Mutex::new(Vec::new()),
        epoch: Instant::now(),
        claim_errors: AtomicU64::new(0),
        completed: AtomicU64::new(0),
    });
    let next = Arc::new(AtomicU64::new(0));
    let runners: Vec<_> = (0..TASKS)
        .map(|_| {
            let (app, next) = (app.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let k = next.fetch_add(1, Ordering::SeqCst);
                    if k >= u64::from(KEYS) {
                        return;
                    }
                    deliver(&app, k as u32).await;
                }
            })
        })
        .collect();

    while app.completed.load(Ordering::SeqCst) < u64::from(KEYS) / 3 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Stop the server, keep it down 3s, start it again. `restarting_at` is taken before the
    // start begins: from then on the server may accept claims again.
    let epoch = app.epoch;
    let (stopped_at, restarting_at, cluster) = tokio::task::spawn_blocking(move || {
        cluster.stop().expect("stop");
        let stopped_at = epoch.elapsed();
        std::thread::sleep(Duration::from_secs(3));
        let restarting_at = epoch.elapsed();
        cluster.start_again().expect("restart");
        (stopped_at, restarting_at, cluster)
    })
    .await
    .unwrap();
    let errors_while_down = app.claim_errors.load(Ordering::SeqCst);

    for runner in runners {
        runner.await.unwrap();
    }

    // No body started while the database was down (allowing 200ms for a claim that committed
    // just before the stop).
    let grace = Duration::from_millis(200);
    let during: Vec<Duration> = app
        .body_starts
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|t| *t > stopped_at + grace && *t < restarting_at)
        .collect();
    assert!(
        during.is_empty(),
        "bodies started while the database was down: {during:?}"
    );
    assert!(
        errors_while_down > 0,
        "calls failed with Error::Store while it was down"
    );

    // Nothing lost: every key completed, recorded, and its body's write is there.
    let pool = app.store.pool();
    let completed: i64 =
        sqlx::query("SELECT count(*) FROM idem_records WHERE completed_at IS NOT NULL")
            .fetch_one(pool)
            .await
            .unwrap()
            .get(0);
    assert_eq!(completed, i64::from(KEYS));
    let written: i64 = sqlx::query("SELECT count(DISTINCT key) FROM executions")
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(written, i64::from(KEYS));
    // Only bodies in flight at the stop can repeat (their completion could not be recorded).
    let repeated: i64 = sqlx::query(
        "SELECT count(*) FROM (SELECT key FROM executions GROUP BY key HAVING count(*) > 1) r",
    )
    .fetch_one(pool)
    .await
    .unwrap()
    .get(0);
    assert!(
        repeated <= TASKS as i64,
        "{repeated} repeats; at most {TASKS} were in flight"
    );
    eprintln!(
        "outage: down {:?}; {errors_while_down} claims refused meanwhile; {KEYS} keys completed, \
         {repeated} bodies repeated (bound {TASKS})",
        restarting_at - stopped_at
    );
    pool.close().await;
    drop(cluster);
}
