//! What the queue's control costs, side by side in one run: draining jobs spread over four
//! named queues with priorities against the same jobs in one queue, and a batch enqueue
//! against single enqueues and against one multi-row `INSERT` of the same rows.
//!
//! ```text
//! cargo run --release -p idem-bench --bin queue-control -- [--jobs 20000] [--concurrency 16]
//!     [--batch 10000] [--rounds 3] [--database-url URL]
//! ```
//!
//! The drain: `--jobs` jobs of a handler that does nothing, all enqueued before the clock
//! starts, drained by one process at `--concurrency`: once from the default queue, once from
//! four named queues (a quarter each, priorities 0 to 9) served with a quarter of the slots
//! each. The enqueue: `--batch` jobs through `enqueue` one at a time from one task, through
//! one `enqueue_many`, and as one `INSERT .. SELECT FROM unnest(..)` of the same rows into a
//! table shaped like the queue's. Rounds alternate the variants; a row is the median round.
//! Without `--database-url` it starts a throwaway PostgreSQL.

use std::time::{Duration, Instant};

use clap::Parser;
use idem_bench::spread::{median_by, Spread};
use idem_queue::{Job, NewJob, Queue};
use idem_store_postgres::sqlx;
use idem_store_postgres::PgStore;

#[derive(Debug, Parser)]
#[command(about = "The cost of named queues and priorities, and of batch enqueue")]
struct Args {
    /// Jobs per drain.
    #[arg(long, default_value_t = 20_000)]
    jobs: u32,
    /// Jobs running at once in the draining process.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Jobs per enqueue comparison.
    #[arg(long, default_value_t = 10_000)]
    batch: u32,
    /// Rounds; a row is the median round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The database; a throwaway one is started without it.
    #[arg(long)]
    database_url: Option<String>,
}

/// A fresh queue in `schema`.
async fn fresh(pool: &sqlx::PgPool, schema: &str) -> Queue {
    sqlx::raw_sql(&format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};
         CREATE TABLE {schema}.plain (key text PRIMARY KEY, payload jsonb NOT NULL,
             available_at timestamptz NOT NULL, max_attempts int NOT NULL,
             queue text NOT NULL, priority smallint NOT NULL)"
    ))
    .execute(pool)
    .await
    .unwrap();
    let store = PgStore::builder(pool.clone())
        .schema(schema.to_owned())
        .build()
        .unwrap();
    let queue = Queue::new(&store);
    queue.migrate().await.unwrap();
    queue
}

/// The `i`th job: in one queue, or in one of four named queues with a priority.
fn job(i: u32, named: bool) -> NewJob {
    let job = NewJob::new(format!("job:{i}"), &i).unwrap();
    if named {
        job.queue(format!("q{}", i % 4)).priority((i % 10) as i16)
    } else {
        job
    }
}

/// Jobs per second draining `jobs` jobs, in four named queues or one.
async fn drain(
    pool: &sqlx::PgPool,
    schema: &str,
    jobs: u32,
    concurrency: usize,
    named: bool,
) -> f64 {
    let queue = fresh(pool, schema).await;
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(5_000) {
        let batch = chunk.iter().map(|&i| job(i, named)).collect();
        for answer in queue.enqueue_many(batch).await.unwrap() {
            let _ = answer.unwrap();
        }
    }
    sqlx::raw_sql(&format!("VACUUM ANALYZE {schema}.idem_records_queue"))
        .execute(pool)
        .await
        .unwrap();
    let mut workers = queue.worker(|_job: Job| async { Ok::<_, std::io::Error>(()) });
    workers = if named {
        (0..4).fold(workers, |w, q| w.queue(format!("q{q}"), concurrency / 4))
    } else {
        workers.concurrency(concurrency)
    };
    let started = Instant::now();
    let workers = workers.start();
    loop {
        workers.wait_idle().await;
        let stats = queue.stats().await.unwrap();
        if stats.done == u64::from(jobs) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = f64::from(jobs) / started.elapsed().as_secs_f64();
    workers.shutdown(Duration::from_secs(5)).await;
    rate
}

/// Jobs per second enqueued: one at a time, in one `enqueue_many`, and as one `INSERT`.
async fn enqueue(pool: &sqlx::PgPool, schema: &str, batch: u32) -> (f64, f64, f64) {
    let queue = fresh(pool, schema).await;
    let started = Instant::now();
    for i in 0..batch {
        let _ = queue.enqueue(job(i, true)).await.unwrap();
    }
    let single = f64::from(batch) / started.elapsed().as_secs_f64();
    let jobs: Vec<NewJob> = (batch..2 * batch).map(|i| job(i, true)).collect();
    let started = Instant::now();
    let answers = queue.enqueue_many(jobs).await.unwrap();
    let many = f64::from(batch) / started.elapsed().as_secs_f64();
    assert!(answers.iter().all(Result::is_ok));
    let keys: Vec<String> = (0..batch).map(|i| format!("plain:{i}")).collect();
    let payloads: Vec<String> = (0..batch).map(|i| i.to_string()).collect();
    let queues: Vec<String> = (0..batch).map(|i| format!("q{}", i % 4)).collect();
    let priorities: Vec<i16> = (0..batch).map(|i| (i % 10) as i16).collect();
    let started = Instant::now();
    sqlx::query(&format!(
        "INSERT INTO {schema}.plain (key, payload, available_at, max_attempts, queue, priority)
         SELECT key, payload::jsonb, now(), 20, queue, priority
         FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[])
              AS t(key, payload, queue, priority)"
    ))
    .bind(&keys)
    .bind(&payloads)
    .bind(&queues)
    .bind(&priorities)
    .execute(pool)
    .await
    .unwrap();
    let insert = f64::from(batch) / started.elapsed().as_secs_f64();
    (single, many, insert)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let server = idem_bench::server(args.database_url.as_deref(), &[]).await;
    let pool = &server.pool;
    let mut drains = Vec::new();
    let mut enqueues = Vec::new();
    for round in 0..args.rounds {
        // One queue, then four, then the other way round, so neither always goes first.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut rates = [0.0; 2];
        for named in order {
            let rate = drain(pool, "bench_control", args.jobs, args.concurrency, named).await;
            rates[usize::from(named)] = rate;
        }
        println!(
            "round {}: one queue {:.0} jobs/s, four named queues with priorities {:.0}, ratio {:.2}",
            round + 1,
            rates[0],
            rates[1],
            rates[1] / rates[0]
        );
        drains.push((rates[0], rates[1]));
        let (single, many, insert) = enqueue(pool, "bench_control", args.batch).await;
        println!(
            "round {}: enqueue {single:.0} jobs/s one at a time, {many:.0} in one enqueue_many, \
             {insert:.0} in one INSERT",
            round + 1
        );
        enqueues.push((single, many, insert));
    }
    let _ = sqlx::raw_sql("DROP SCHEMA bench_control CASCADE")
        .execute(pool)
        .await;
    let spread = Spread::of(
        drains
            .iter()
            .map(|(one, four)| four / one)
            .collect::<Vec<f64>>(),
    )
    .expect("at least one round");
    let (one, four) = median_by(drains, |(one, four)| four / one).expect("a round");
    println!(
        "drain of {} jobs at concurrency {}: one queue {one:.0} jobs/s, four named queues with \
         priorities {four:.0}, ratio {:.2} (rounds {:.2}-{:.2})",
        args.jobs,
        args.concurrency,
        four / one,
        spread.low,
        spread.high
    );
    let (single, many, insert) =
        median_by(enqueues, |(_, many, insert)| many / insert).expect("a round");
    println!(
        "enqueue of {} jobs: one at a time {single:.0} jobs/s, enqueue_many {many:.0} ({:.1}x), \
         one multi-row INSERT {insert:.0} (enqueue_many {:.2} of it)",
        args.batch,
        many / single,
        many / insert
    );
}
