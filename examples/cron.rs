//! Cron without a leader: a schedule and a worker in one process. Run it on any number of
//! servers (or twice on one): every tick runs once across them, a restart catches up the ticks
//! it missed within `--catch-up`, and older ones are counted as missed.
//!
//! ```text
//! cargo run --example cron        # PostgreSQL at DATABASE_URL, else localhost's
//! # ran tick 2026-12-05T10:00:01Z pid=4242
//! # ran tick 2026-12-05T10:00:02Z pid=4242
//! cargo run -p idem-cli -- --database-url postgres://postgres@localhost:5432/postgres schedules list
//! ```
//!
//! Flags: `--schedule EXPR` (a 5- or 6-field cron expression, default every second),
//! `--name NAME` (default `tick`), `--catch-up DUR` (`30s`, `5m`; default 1 h), `--work-ms N`
//! (each run's simulated work, announced by a `start` line), `--lease DUR` (default 30 s),
//! `--schema S`, `--database-url URL` (default `DATABASE_URL`, else a local server's `postgres`
//! database). SIGTERM or Ctrl-C stops the scheduler and gives running jobs 10 s to finish.

use std::io::Write;
use std::time::Duration;

use clap::Parser;
use idem_queue::{Job, Queue, Schedule};
use idem_store_postgres::PgStore;

#[derive(Parser)]
struct Args {
    /// The PostgreSQL database every replica shares.
    #[arg(long, env = "DATABASE_URL", default_value = idem_examples::DEFAULT_DATABASE_URL)]
    database_url: String,
    /// The schema of idem's tables.
    #[arg(long, default_value = "public")]
    schema: String,
    /// When the schedule fires: a 5- or 6-field (seconds first) cron expression, in UTC.
    #[arg(long, default_value = "* * * * * *")]
    schedule: String,
    /// The schedule's name.
    #[arg(long, default_value = "tick")]
    name: String,
    /// How far back a replica that comes back enqueues the ticks it missed.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
    catch_up: Duration,
    /// How long a job's claim holds unrenewed: a killed replica's running jobs come back to
    /// the others after it.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    lease: Duration,
    /// How long each run's simulated work takes, in milliseconds.
    #[arg(long, default_value_t = 0)]
    work_ms: u64,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let schedule = match Schedule::cron(args.name.as_str(), &args.schedule) {
        Ok(schedule) => schedule.catch_up(args.catch_up),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let pool = idem_examples::connect(&args.database_url, 8).await;
    // The store and its queue, their tables created or upgraded on start.
    let store = PgStore::builder(pool)
        .schema(args.schema)
        .build()
        .unwrap_or_else(|e| {
            eprintln!("error: {e}");
            std::process::exit(2);
        });
    let queue = Queue::new(&store);
    queue.migrate().await.expect("migrate");

    let scheduler = queue
        .scheduler(vec![schedule])
        .expect("one schedule")
        .start()
        .await
        .expect("start the scheduler");
    let work = Duration::from_millis(args.work_ms);
    let workers = queue
        .worker(move |job: Job| async move {
            let Some(tick) = job.tick() else {
                return Ok(()); // not a tick: another program's job on the same queue
            };
            let time = &job.key()["schedule:".len() + tick.schedule.len() + 1..];
            if !work.is_zero() {
                println!("start {} {time} pid={}", tick.schedule, std::process::id());
                tokio::time::sleep(work).await;
            }
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "ran {} {time} pid={}",
                tick.schedule,
                std::process::id()
            )?;
            out.flush()
        })
        .concurrency(4)
        .lease(args.lease)
        .start();
    println!("scheduling; pid={}", std::process::id());
    idem_examples::shutdown_signal().await;
    scheduler.shutdown().await;
    workers.shutdown(Duration::from_secs(10)).await;
}
