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
use tokio::sync::watch;

const KEYS: u32 = 300;
const TASKS: usize = 4;

struct App {
    store: PgStore,
    /// When each body started, relative to `epoch`.
    body_starts: Mutex<Vec<Duration>>,
    epoch: Instant,
    /// Claims refused with `Error::Store`, counted as they happen.
    claim_errors: watch::Sender<u64>,
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
                app.claim_errors.send_modify(|n| *n += 1);
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

/// Stops the server and keeps it down for 3 s and until `refused` resolves (at most 30 s),
/// then starts it again. Returns when it stopped and when its restart began (from then on it
/// may accept statements again), as time since `epoch`.
///
/// Waiting for `refused` keeps the outage long enough for callers to see it: on a loaded
/// machine a body blocked on the dying server and a claim's pool timeout can take the whole
/// 3 s, and a restart that came first would leave nothing refused to check.
async fn down_for_3s_and_until(
    cluster: Cluster,
    epoch: Instant,
    refused: impl std::future::Future<Output = ()>,
) -> (Duration, Duration, Cluster) {
    let (stopped_at, cluster) = tokio::task::spawn_blocking(move || {
        cluster.stop().expect("stop");
        (epoch.elapsed(), cluster)
    })
    .await
    .unwrap();
    let outage = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        refused.await;
    };
    tokio::time::timeout(Duration::from_secs(30), outage)
        .await
        .expect("calls failed with Error::Store while the database was down");
    let restarting_at = epoch.elapsed();
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.start_again().expect("restart");
        cluster
    })
    .await
    .unwrap();
    (stopped_at, restarting_at, cluster)
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
        claim_errors: watch::Sender::new(0),
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
    let epoch = app.epoch;
    // The server stays down until as many claims as there are tasks have been refused.
    let mut refusals = app.claim_errors.subscribe();
    let before = *refusals.borrow_and_update();
    let refused = async move {
        let _ = refusals.wait_for(|n| *n >= before + TASKS as u64).await;
    };
    let (stopped_at, restarting_at, cluster) = down_for_3s_and_until(cluster, epoch, refused).await;
    let errors_while_down = *app.claim_errors.borrow() - before;

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

/// The work queue across an outage: workers keep running while the server is down for 3 s.
/// No job starts while it is down, store failures do not use up attempts (jobs allow only 3),
/// and afterwards every job is done once, apart from the few in flight at the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_workers_ride_out_an_outage() {
    use idem_queue::{Job, NewJob, Queue};
    use std::collections::HashMap;

    const JOBS: u64 = 300;
    const CONCURRENCY: usize = 4;
    let cluster = Cluster::start().expect("a throwaway PostgreSQL for the outage test");
    let pool = PgPoolOptions::new()
        .max_connections(12)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&cluster.url())
        .await
        .unwrap();
    let store = PgStore::new(pool.clone());
    let queue = Queue::new(&store);
    queue.migrate().await.unwrap();
    for i in 0..JOBS {
        let job = NewJob::new(format!("q:{i}"), &i).unwrap().max_attempts(3);
        let _ = queue.enqueue(job).await.unwrap();
    }
    // Runs per key and when each started; kept in memory, so the handler never fails itself.
    let epoch = Instant::now();
    let runs: Arc<Mutex<HashMap<String, Vec<Duration>>>> = Arc::default();
    let handler_runs = runs.clone();
    let workers = queue
        .worker(move |job: Job| {
            let runs = handler_runs.clone();
            async move {
                let started = epoch.elapsed();
                runs.lock()
                    .unwrap()
                    .entry(job.key().to_owned())
                    .or_default()
                    .push(started);
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok::<_, std::convert::Infallible>(())
            }
        })
        .concurrency(CONCURRENCY)
        .lease(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(50))
        .start();
    while (runs.lock().unwrap().len() as u64) < JOBS / 3 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (stopped_at, restarting_at, cluster) =
        down_for_3s_and_until(cluster, epoch, std::future::ready(())).await;

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match queue.stats().await {
            Ok(stats) if stats.done + stats.dead == JOBS => break,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "the queue did not drain after the outage"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = workers.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.released, 0);
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.done, stats.dead),
        (JOBS, 0),
        "no job used up its attempts"
    );

    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len() as u64, JOBS, "every job ran");
    let grace = Duration::from_millis(200);
    let during: Vec<_> = runs
        .values()
        .flatten()
        .filter(|t| **t > stopped_at + grace && **t < restarting_at)
        .collect();
    assert!(
        during.is_empty(),
        "jobs started while the database was down: {during:?}"
    );
    let repeated = runs.values().filter(|r| r.len() > 1).count();
    assert!(
        repeated <= CONCURRENCY,
        "{repeated} jobs ran twice; at most {CONCURRENCY} were in flight at the stop"
    );
    eprintln!(
        "queue outage: down {:?}; {JOBS} jobs done, {repeated} ran twice (bound {CONCURRENCY})",
        restarting_at - stopped_at
    );
    pool.close().await;
    drop(cluster);
}
