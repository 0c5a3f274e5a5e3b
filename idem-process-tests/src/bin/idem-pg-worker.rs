//! A worker process for the multi-process tests of this crate, on PostgreSQL (`tests/pg_*.rs`)
//! or, with `--sqlite PATH`, on a SQLite database file (`tests/sqlite_*.rs`). Not part of
//! idem's API.
//!
//! ```text
//! DATABASE_URL=.. idem-pg-worker storm --schema S --keys N --rounds R --tasks T --seed X
//! DATABASE_URL=.. idem-pg-worker crash --schema S --keys N --tasks T --work-ms W --seed X
//! DATABASE_URL=.. idem-pg-worker sweep --schema S --keys N --tasks T
//! DATABASE_URL=.. idem-pg-worker tx-crash --schema S --keys N --tasks T --work-ms W --seed X
//! idem-pg-worker storm --sqlite PATH --schema S ..     (the same modes, on SQLite)
//! idem-pg-worker storm --redis URL[,URL..] --log BASE --schema PREFIX ..   (on Redis; several
//!     URLs: a Redis Cluster)
//! idem-pg-worker storm --dynamodb URL --log BASE --schema TABLE ..   (on a DynamoDB-compatible
//!     server, in table TABLE)
//! idem-pg-worker hold-lock --sqlite PATH --schema S --work-ms W
//! DATABASE_URL=.. idem-pg-worker drop-after-ok --schema S --keys N [--no-drain]
//! ```
//!
//! Keys are `first..first + keys` (`--first`, default 0).
//!
//! Every handler body inserts a row into `<schema>.executions` (no unique constraint, so a body
//! that runs twice shows up twice) before it returns; on SQLite it appends `key pid` to the file
//! `PATH.executions` instead (and lost claims to `PATH.lost`); on Redis to `BASE.executions` and
//! `BASE.lost`, with `--schema` as the store's key prefix (on DynamoDB, its table). `hold-lock` takes SQLite's write lock
//! (`BEGIN IMMEDIATE`), prints `LOCKED`, and holds it for `--work-ms`. `crash` bodies then sleep up
//! to `--work-ms`, so workers killed with SIGKILL die mid-body. `tx-crash` bodies run in
//! transactional mode: their row in `executions` is written in the call's transaction (so it
//! commits with the key, or not at all), then they sleep likewise. A run that loses its claim
//! writes a row to `<schema>.lost_claims`. Each mode prints one summary line:
//! `executed=N duplicate=N in_progress=N errors=N lost=N`.

use clap::{Parser, ValueEnum};
use idem_core::{idempotent, Error, Outcome, Store};
use idem_process_tests::{Random, WorkerFlags};
use idem_store_dynamodb::DynamoDbStore;
use idem_store_postgres::sqlx::{self, PgPool};
use idem_store_postgres::PgStore;
use idem_store_redis::RedisStore;
use idem_store_sqlite::SqliteStore;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Ctx {
    store: Arc<dyn Store>,
    /// The same store, concrete, for transactional mode (PostgreSQL only).
    pg: Option<PgStore>,
    sink: Sink,
    work_ms: u64,
    seed: Random,
}

/// Where bodies record that they ran (and runs that they lost their claim).
enum Sink {
    Postgres {
        pool: PgPool,
        schema: String,
    },
    Files {
        executions: Mutex<std::fs::File>,
        lost: Mutex<std::fs::File>,
    },
}

fn append(path: PathBuf) -> Mutex<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    Mutex::new(file)
}

impl Ctx {
    fn random(&self, below: u64) -> u64 {
        self.seed.below(below)
    }

    async fn record_execution(&self, key: &str) -> Result<(), sqlx::Error> {
        self.record("executions", key).await
    }

    async fn record(&self, table: &str, key: &str) -> Result<(), sqlx::Error> {
        match &self.sink {
            Sink::Postgres { pool, schema } => sqlx::query(&format!(
                "INSERT INTO \"{schema}\".{table} (key, pid) VALUES ($1, $2)"
            ))
            .bind(key)
            .bind(std::process::id() as i32)
            .execute(pool)
            .await
            .map(|_| ()),
            Sink::Files { executions, lost } => {
                let file = if table == "executions" {
                    executions
                } else {
                    lost
                };
                // One write per line, on a file opened for appending: lines of processes
                // writing at once never interleave, and a line written survives a SIGKILL.
                let line = format!("{key} {}\n", std::process::id());
                file.lock()
                    .unwrap()
                    .write_all(line.as_bytes())
                    .map_err(sqlx::Error::Io)
            }
        }
    }
}

#[idempotent(key = "storm:{k}", store = ctx.store)]
async fn storm_job(ctx: &Ctx, k: u32) -> Result<(), sqlx::Error> {
    ctx.record_execution(&format!("storm:{k}")).await
}

#[idempotent(key = "crash:{k}", store = ctx.store, lease = "1s")]
async fn crash_job(ctx: &Ctx, k: u32) -> Result<(), sqlx::Error> {
    ctx.record_execution(&format!("crash:{k}")).await?;
    tokio::time::sleep(Duration::from_millis(ctx.random(ctx.work_ms))).await;
    Ok(())
}

/// Transactional mode: the run's row commits with the key, or rolls back with it (a kill
/// mid-body closes the connection, and PostgreSQL rolls the transaction back).
#[idempotent(key = "tx:{k}", store = pg, transaction = tx)]
async fn tx_crash_job(pg: &PgStore, ctx: &Ctx, k: u32) -> Result<(), sqlx::Error> {
    let Sink::Postgres { schema, .. } = &ctx.sink else {
        unreachable!("tx-crash runs on PostgreSQL");
    };
    sqlx::query(&format!(
        "INSERT INTO \"{schema}\".executions (key, pid) VALUES ($1, $2)"
    ))
    .bind(format!("tx:{k}"))
    .bind(std::process::id() as i32)
    .execute(&mut **tx)
    .await?;
    tokio::time::sleep(Duration::from_millis(ctx.random(ctx.work_ms))).await;
    Ok(())
}

/// The same work as `crash_job` (its scope), delivered again after the crashes.
#[idempotent(key = "crash:{k}", store = ctx.store, lease = "1s", wait = "4s", scope = "crash_job")]
async fn sweep_job(ctx: &Ctx, k: u32) -> Result<(), sqlx::Error> {
    ctx.record_execution(&format!("crash:{k}")).await?;
    Ok(())
}

#[derive(Default)]
struct Tally {
    executed: AtomicU64,
    duplicate: AtomicU64,
    in_progress: AtomicU64,
    errors: AtomicU64,
    lost: AtomicU64,
}

/// What the deliveries run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Every key `rounds` times, concurrently: each body must run once.
    Storm,
    /// Bodies that sleep up to `--work-ms`, to be killed mid-run; a key in progress is retried.
    Crash,
    /// Deliveries that wait for (or take over) keys left by crashed workers.
    Sweep,
    /// `Crash` in transactional mode (PostgreSQL only).
    TxCrash,
    /// SQLite only: hold the database's write lock for `--work-ms`.
    HoldLock,
    /// Every key's call dropped right after its body returned `Ok`, then stopped by SIGTERM:
    /// the completions left to the background must be recorded before the process exits.
    DropAfterOk,
}

#[derive(Debug, Parser)]
#[command(about = "A worker process of idem's multi-process PostgreSQL tests")]
struct Args {
    #[arg(value_enum)]
    mode: Mode,
    #[command(flatten)]
    worker: WorkerFlags,
    /// Concurrent delivery tasks.
    #[arg(long, default_value_t = 1)]
    tasks: usize,
    /// How many keys.
    #[arg(long, default_value_t = 0)]
    keys: u32,
    /// Run on this SQLite database file instead of PostgreSQL.
    #[arg(long)]
    sqlite: Option<PathBuf>,
    /// Run on Redis instead of PostgreSQL: one URL, or several (comma-separated) for the nodes
    /// of a Redis Cluster.
    #[arg(long, value_delimiter = ',')]
    redis: Vec<String>,
    /// Run on a DynamoDB-compatible server at this URL instead of PostgreSQL, in the table
    /// named by `--schema`.
    #[arg(long)]
    dynamodb: Option<String>,
    /// Where bodies record their runs on Redis or DynamoDB: `BASE.executions`, `BASE.lost`.
    #[arg(long)]
    log: Option<PathBuf>,
    /// The first key.
    #[arg(long, default_value_t = 0)]
    first: u32,
    /// `drop-after-ok`: exit on SIGTERM without draining idem's background work (the broken
    /// variant its test is checked against).
    #[arg(long)]
    no_drain: bool,
    /// How many times each key is delivered.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// On PostgreSQL, build the store with `claim_with_begin`: a transactional call's claim of a
    /// fresh key goes out with its BEGIN.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    claim_with_begin: bool,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let (mode, tasks, keys, first) = (args.mode, args.tasks, args.keys, args.first);
    let mut pg = None;
    let (store, sink): (Arc<dyn Store>, Sink) = match &args.sqlite {
        Some(path) => {
            let store = SqliteStore::open(path)
                .await
                .expect("open the SQLite database");
            if mode == Mode::HoldLock {
                return hold_lock(&store, args.worker.work_ms).await;
            }
            let sink = Sink::Files {
                executions: append(path.with_extension("executions")),
                lost: append(path.with_extension("lost")),
            };
            (Arc::new(store), sink)
        }
        None if args.dynamodb.is_some() => {
            let url = args.dynamodb.as_deref().expect("checked");
            let client = idem_store_dynamodb::testing::local_client(url);
            let store = DynamoDbStore::new(client, &args.worker.schema);
            let log = args.log.clone().expect("--log BASE with --dynamodb");
            let sink = Sink::Files {
                executions: append(log.with_extension("executions")),
                lost: append(log.with_extension("lost")),
            };
            (Arc::new(store), sink)
        }
        None if !args.redis.is_empty() => {
            let store = match args.redis.as_slice() {
                [one] => RedisStore::connect(one).await,
                nodes => {
                    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
                    RedisStore::connect_cluster(&nodes).await
                }
            }
            .expect("connect to Redis")
            .prefix(&args.worker.schema);
            let log = args.log.clone().expect("--log BASE with --redis");
            let sink = Sink::Files {
                executions: append(log.with_extension("executions")),
                lost: append(log.with_extension("lost")),
            };
            (Arc::new(store), sink)
        }
        None => {
            // At most 18 connections a process: four processes and the test's own pool then
            // fit a stock PostgreSQL (`max_connections = 100`). With one connection per task,
            // the storm's four processes of 24 tasks opened 104, and connections were refused.
            let mut store = args.worker.store((tasks as u32 + 2).min(18)).await;
            if args.claim_with_begin {
                store = PgStore::builder(store.pool().clone())
                    .schema(args.worker.schema.clone())
                    .claim_with_begin(true)
                    .build()
                    .expect("the test's schema name is valid");
            }
            pg = Some(store.clone());
            let pool = store.pool().clone();
            let sink = Sink::Postgres {
                pool,
                schema: args.worker.schema.clone(),
            };
            (Arc::new(store), sink)
        }
    };
    let ctx = Arc::new(Ctx {
        store,
        pg,
        sink,
        work_ms: args.worker.work_ms,
        seed: Random::for_process(args.worker.seed),
    });
    if mode == Mode::DropAfterOk {
        return drop_after_ok(ctx, first..first + keys, !args.no_drain).await;
    }
    let tally = Arc::new(Tally::default());

    // The deliveries: every key, `rounds` times, shuffled; shared by the tasks.
    let rounds = args.rounds;
    let mut queue: Vec<u32> = (0..rounds).flat_map(|_| first..first + keys).collect();
    for i in (1..queue.len()).rev() {
        queue.swap(i, ctx.random(i as u64 + 1) as usize);
    }
    let queue = Arc::new(Mutex::new(queue));
    let next = Arc::new(AtomicUsize::new(0));

    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let (ctx, tally, queue, next) =
                (ctx.clone(), tally.clone(), queue.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let k = {
                        let queue = queue.lock().unwrap();
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        match queue.get(i) {
                            Some(k) => *k,
                            None => return,
                        }
                    };
                    deliver(&ctx, &tally, mode, k, &queue).await;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("worker task");
    }
    println!(
        "executed={} duplicate={} in_progress={} errors={} lost={}",
        tally.executed.load(Ordering::SeqCst),
        tally.duplicate.load(Ordering::SeqCst),
        tally.in_progress.load(Ordering::SeqCst),
        tally.errors.load(Ordering::SeqCst),
        tally.lost.load(Ordering::SeqCst),
    );
}

/// Delivers key `k` until it is executed or a duplicate. In `crash` mode a key found in
/// progress goes back on the queue, as a scheduler's retry would.
async fn deliver(ctx: &Ctx, tally: &Tally, mode: Mode, k: u32, queue: &Mutex<Vec<u32>>) {
    for attempt in 0..20u64 {
        let result = match mode {
            Mode::Storm => storm_job(ctx, k).await,
            Mode::Crash => crash_job(ctx, k).await,
            Mode::Sweep => sweep_job(ctx, k).await,
            Mode::TxCrash => {
                let pg = ctx.pg.as_ref().expect("tx-crash runs on PostgreSQL");
                tx_crash_job(pg, ctx, k).await
            }
            Mode::HoldLock | Mode::DropAfterOk => unreachable!("{mode:?} runs no deliveries"),
        };
        match result {
            Ok(Outcome::Executed(())) => {
                tally.executed.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Ok(Outcome::Duplicate { .. }) => {
                tally.duplicate.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Ok(Outcome::InProgress { .. }) => {
                tally.in_progress.fetch_add(1, Ordering::SeqCst);
                if mode == Mode::Crash {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    queue.lock().unwrap().push(k);
                }
                return;
            }
            Err(Error::LostClaim { key }) => {
                tally.lost.fetch_add(1, Ordering::SeqCst);
                let _ = ctx.record("lost_claims", &key).await;
                return;
            }
            Err(e) => {
                tally.errors.fetch_add(1, Ordering::SeqCst);
                eprintln!("delivery of {k} failed (attempt {attempt}): {e}");
                tokio::time::sleep(Duration::from_millis(20 << attempt.min(5))).await;
            }
        }
    }
    panic!("delivery of {k} kept failing");
}

/// Takes SQLite's write lock, says so, and holds it for `ms`: another process's claims must
/// wait for it (up to their busy timeout), then fail closed.
async fn hold_lock(store: &SqliteStore, ms: u64) {
    let mut conn = store.pool().acquire().await.expect("a connection");
    idem_store_sqlite::sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut *conn)
        .await
        .expect("take the write lock");
    println!("LOCKED");
    tokio::time::sleep(Duration::from_millis(ms)).await;
    idem_store_sqlite::sqlx::raw_sql("ROLLBACK")
        .execute(&mut *conn)
        .await
        .expect("let the lock go");
    println!("RELEASED");
}

#[idempotent(key = "drop:{k}", store = ctx.store)]
async fn drop_job(ctx: &Ctx, k: u32, go: Go, returned: Arc<AtomicBool>) -> Result<(), sqlx::Error> {
    let _ = ctx;
    if go.started.fetch_add(1, Ordering::SeqCst) + 1 == go.of {
        println!("STARTED");
    }
    let _ = go.gate.clone().wait_for(|go| *go).await;
    returned.store(true, Ordering::SeqCst);
    Ok(())
}

/// The bodies of `drop-after-ok`: they start, and return once SIGUSR1 comes.
#[derive(Clone)]
struct Go {
    gate: tokio::sync::watch::Receiver<bool>,
    started: Arc<AtomicUsize>,
    of: usize,
}

/// Runs a call for each key and drops it as soon as its body has returned `Ok` (its completion
/// then goes on in the background), prints `DROPPED`, and on SIGTERM prints `STOPPING` and
/// drains idem's background work (unless `drain` is false) before returning, as a server's main
/// does. Prints `drained=BOOL left=N`.
async fn drop_after_ok(ctx: Arc<Ctx>, keys: std::ops::Range<u32>, drain: bool) {
    use std::future::Future;
    use std::task::Poll;
    use tokio::signal::unix::{signal, SignalKind};

    let (mut go_signal, mut term) = (
        signal(SignalKind::user_defined1()).expect("SIGUSR1 handler"),
        signal(SignalKind::terminate()).expect("SIGTERM handler"),
    );
    let (open, gate) = tokio::sync::watch::channel(false);
    let go = Go {
        gate,
        started: Arc::new(AtomicUsize::new(0)),
        of: keys.len(),
    };
    let calls: Vec<_> = keys
        .map(|k| {
            let (ctx, go) = (ctx.clone(), go.clone());
            tokio::spawn(async move {
                let returned = Arc::new(AtomicBool::new(false));
                let mut call = Box::pin(drop_job(&ctx, k, go, returned.clone()));
                // Polled until the body has returned: the call is then writing its completion,
                // and is dropped there.
                let settled_inline = std::future::poll_fn(|cx| match call.as_mut().poll(cx) {
                    Poll::Ready(_) => Poll::Ready(true),
                    Poll::Pending if returned.load(Ordering::SeqCst) => Poll::Ready(false),
                    Poll::Pending => Poll::Pending,
                })
                .await;
                drop(call);
                settled_inline
            })
        })
        .collect();
    let _ = go_signal.recv().await;
    let _ = open.send(true);
    let mut inline = 0;
    for call in calls {
        inline += usize::from(call.await.expect("call task"));
    }
    println!("DROPPED inline={inline}");
    let _ = term.recv().await;
    println!("STOPPING");
    let outcome = if drain {
        idem_core::pending::drain(Duration::from_secs(30)).await
    } else {
        Ok(())
    };
    println!(
        "drained={} left={}",
        drain,
        outcome.err().map_or(0, |unfinished| unfinished.left)
    );
}
