//! One process of a queue drain spread over several processes (`graphile/run.sh` with a
//! process count above 1): enqueue the jobs in a fresh schema, or drain them.
//!
//! ```text
//! queue-drain --database-url URL --enqueue 20000
//! queue-drain --database-url URL --drain [--workers 16] [--prefetch 0]
//! queue-drain --database-url URL --latency 500 [--workers 1] [--prefetch 0]
//! ```
//!
//! A drain starts its workers, waits until no job is left (looking every 5 ms, as the
//! graphile-worker side does), and prints when it started and when it saw the queue empty, in
//! microseconds since the epoch, so that the caller times every process from the first start
//! to the last end.
//!
//! `--latency N` measures, in a fresh schema, how long after its enqueue returns a job starts
//! on idle workers (which wait on notifications), N jobs one after another, and prints the
//! median and the 99th percentile in microseconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_queue::{Job, NewJob, Queue};
use idem_store_postgres::sqlx::postgres::PgPoolOptions;
use idem_store_postgres::sqlx::{self};
use idem_store_postgres::PgStore;

/// The schema the jobs are in.
const SCHEMA: &str = "idem_bench_drain";

/// One process of a multi-process drain. Unknown flags exit with status 2.
#[derive(Debug, clap::Parser)]
#[command(about = "One process of a work-queue drain spread over processes")]
struct Args {
    /// The server.
    #[arg(long)]
    database_url: String,
    /// Enqueue this many jobs in a fresh schema, then exit.
    #[arg(long)]
    enqueue: Option<u64>,
    /// Drain the queue with workers until no job is left, then print start and end.
    #[arg(long)]
    drain: bool,
    /// Time this many jobs from enqueue to start, one after another, on idle workers.
    #[arg(long)]
    latency: Option<usize>,
    /// Jobs at once in this process.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Jobs claimed past the free slots.
    /// Without it, the queue's defaults (adaptive prefetching).
    #[arg(long)]
    prefetch: Option<usize>,
}

fn micros_now() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros()
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    let pool = PgPoolOptions::new()
        .max_connections(32)
        .connect(&args.database_url)
        .await
        .expect("connect");
    if args.enqueue.is_some() || args.latency.is_some() {
        sqlx::raw_sql(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}"
        ))
        .execute(&pool)
        .await
        .expect("a fresh schema");
    }
    let store = PgStore::builder(pool.clone())
        .schema(SCHEMA)
        .build()
        .expect("the store");
    let queue = Queue::new(&store);
    if let Some(items) = args.enqueue {
        queue.migrate().await.expect("migrate");
        for first in (0..items).step_by(1000) {
            let chunk: Vec<NewJob> = (first..items.min(first + 1000))
                .map(|i| NewJob::new(format!("item:{i}"), &i).expect("a job"))
                .collect();
            queue.enqueue_many(chunk).await.expect("enqueue");
        }
        sqlx::raw_sql(&format!("VACUUM ANALYZE {SCHEMA}.idem_records_queue"))
            .execute(&pool)
            .await
            .expect("analyze");
        return;
    }
    if let Some(jobs) = args.latency {
        queue.migrate().await.expect("migrate");
        let (started, mut start) = tokio::sync::watch::channel(0u64);
        let workers = queue
            .worker(move |job: Job| {
                let n: u64 = job.payload_as().expect("a number");
                started.send_replace(n);
                async { Ok::<_, std::convert::Infallible>(()) }
            })
            .concurrency(args.workers);
        let workers = idem_bench::prefetch(workers, args.prefetch).start();
        workers.wait_idle().await;
        let mut waits = Vec::with_capacity(jobs);
        for n in 1..=jobs as u64 {
            let job = NewJob::new(format!("latency:{n}"), &n).expect("a job");
            let _ = queue.enqueue(job).await.expect("enqueue");
            let enqueued = std::time::Instant::now();
            start
                .wait_for(|started| *started == n)
                .await
                .expect("started");
            waits.push(enqueued.elapsed());
            workers.wait_idle().await;
        }
        workers.shutdown(Duration::from_secs(10)).await;
        waits.sort();
        let at = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize].as_micros();
        println!("{} {}", at(0.5), at(0.99));
        return;
    }
    if !args.drain {
        eprintln!("queue-drain: say --enqueue N or --drain");
        std::process::exit(2);
    }
    let started = micros_now();
    let workers = queue
        .worker(|_job: Job| async { Ok::<_, std::convert::Infallible>(()) })
        .concurrency(args.workers);
    let workers = idem_bench::prefetch(workers, args.prefetch)
        .poll_interval(Duration::from_millis(50))
        .start();
    let left = format!(
        "SELECT EXISTS (SELECT 1 FROM {SCHEMA}.idem_records_queue WHERE state = 'queued')
             OR EXISTS (SELECT 1 FROM {SCHEMA}.idem_records_queue WHERE state = 'running')"
    );
    loop {
        let any: bool = sqlx::query_scalar(&left)
            .fetch_one(&pool)
            .await
            .expect("jobs left");
        if !any {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ended = micros_now();
    workers.shutdown(Duration::from_secs(60)).await;
    println!("{started} {ended}");
}
