//! Schedules: how many ticks a scheduler sustains, and what a tick's enqueue costs against a
//! plain `INSERT` of the same row, side by side in one run.
//!
//! ```text
//! cargo run --release -p idem-bench --bin schedules -- [--schedules 1000] [--seconds 20]
//!     [--rounds 3] [--database-url URL]
//! ```
//!
//! `--schedules` one-second schedules on one database; the scheduler makes its passes on a
//! manual clock one second apart, as fast as it can, so every pass has one tick per schedule
//! to enqueue: ticks per second of wall time is the rate the scheduler sustains (each tick a
//! read of its schedule's row, an idempotent enqueue, and the row's compare-and-set). Then the
//! same number of rows is inserted into a table shaped like the queue's with one plain
//! `INSERT` each, from one task: the cost floor of writing a tick. Without `--database-url` it
//! starts a throwaway PostgreSQL.

use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use idem_bench::spread::{median_by, Spread};
use idem_queue::{Queue, Schedule};
use idem_store_postgres::sqlx;
use idem_store_postgres::PgStore;

#[derive(Debug, Parser)]
#[command(about = "The scheduler's ticks per second, and a tick's enqueue against an INSERT")]
struct Args {
    /// How many one-second schedules.
    #[arg(long, default_value_t = 1000)]
    schedules: usize,
    /// How many passes (seconds of schedule time) per round.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Rounds; a row is the median round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The database; a throwaway one is started without it.
    #[arg(long)]
    database_url: Option<String>,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let server = idem_bench::server(args.database_url.as_deref(), &[]).await;
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        let schema = format!("bench_sched_{round}");
        sqlx::raw_sql(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};
             CREATE TABLE {schema}.plain (key text PRIMARY KEY, payload jsonb NOT NULL,
                 available_at timestamptz NOT NULL, max_attempts int NOT NULL)"
        ))
        .execute(&server.pool)
        .await
        .unwrap();
        let store = PgStore::builder(server.pool.clone())
            .schema(schema.clone())
            .build()
            .unwrap();
        let queue = Queue::new(&store);
        queue.migrate().await.unwrap();
        let schedules: Vec<Schedule> = (0..args.schedules)
            .map(|i| Schedule::every(format!("s{i}"), Duration::from_secs(1)).unwrap())
            .collect();
        let scheduler = queue.scheduler(schedules).unwrap();
        let secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        scheduler.declare_at(t0).await.unwrap();
        let started = Instant::now();
        let mut ticks = 0;
        for n in 1..=args.seconds {
            for pass in scheduler
                .pass_at(t0 + Duration::from_secs(n))
                .await
                .unwrap()
            {
                ticks += pass.enqueued;
            }
        }
        let tick_rate = ticks as f64 / started.elapsed().as_secs_f64();
        assert_eq!(ticks as u64, args.schedules as u64 * args.seconds);

        let started = Instant::now();
        for i in 0..ticks {
            sqlx::query(&format!(
                "INSERT INTO {schema}.plain (key, payload, available_at, max_attempts)
                 VALUES ($1, 'null', now(), 25)"
            ))
            .bind(format!("schedule:s{i}:tick"))
            .execute(&server.pool)
            .await
            .unwrap();
        }
        let insert_rate = ticks as f64 / started.elapsed().as_secs_f64();
        println!(
            "round {}: {tick_rate:.0} ticks/s, plain INSERT {insert_rate:.0} rows/s, ratio {:.2}",
            round + 1,
            tick_rate / insert_rate
        );
        rounds.push((tick_rate, insert_rate));
        let _ = sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&server.pool)
            .await;
    }
    let ratios: Vec<f64> = rounds.iter().map(|(t, i)| t / i).collect();
    let spread = Spread::of(ratios).expect("at least one round");
    let (tick, insert) = median_by(rounds, |(t, i)| t / i).expect("at least one round");
    println!(
        "{} one-second schedules: {tick:.0} ticks/s against {insert:.0} plain INSERTs/s, \
         {:.2} (rounds {:.2}-{:.2})",
        args.schedules,
        tick / insert,
        spread.low,
        spread.high
    );
}
