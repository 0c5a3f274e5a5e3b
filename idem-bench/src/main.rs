//! idem's PostgreSQL load benchmark: idem (lease and transactional mode), the hand-written
//! technique written by hand, and pgbench running the very same statements, side by side in one
//! run; then claim latency against table size, purge throughput, and a throughput plot.
//!
//! ```text
//! cargo run --release -p idem-bench -- [--concurrency 16] [--calls 20000]
//!     [--sweep 1,2,4,8,16,32,64,128,256] [--sweep-calls 4000] [--large-rows 10000000]
//!     [--purge-rows 1000000] [--plot BENCHMARKS-throughput.png] [--database-url URL]
//!     [--main-only] [--rounds 1]
//! ```
//!
//! `--rounds N` runs the main tables N times, every mode once per round, in turn: each row is
//! the mode's median round, each ratio the median of the ratios taken within a round.
//!
//! Without `--database-url` it starts a throwaway PostgreSQL with `pg_stat_statements`, so it
//! can count statements per call; with one, statement counts need that extension loaded there.
//! Where the server runs on this machine, each row also says what a call cost the server's CPU
//! and how many cores the row kept busy, left idle, and lost to the host (`cpu.rs`).

mod pgbench;
mod plot;
mod workload;

use idem_bench::cpu;
use idem_bench::spread::{median_by, Spread};
use idem_store_postgres::sqlx::{self, PgPool, Row};
use idem_store_postgres::PgStore;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use workload::{Measured, Mode, EXISTING_KEYS};

/// The PostgreSQL load benchmark. Unknown flags exit with status 2 and the usage.
#[derive(Debug, clap::Parser)]
#[command(about = "idem on PostgreSQL against pgbench, the concurrency sweep, and purge")]
struct Args {
    /// Concurrent callers of the main table.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Calls per row of the main table.
    #[arg(long, default_value_t = 20_000)]
    calls: u64,
    /// Caller counts of the concurrency sweep.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8,16,32,64,128,256"
    )]
    sweep: Vec<u32>,
    /// Calls per point of the sweep (at least 50 per caller).
    #[arg(long, default_value_t = 4_000)]
    sweep_calls: u64,
    /// Rows of the large table for the claim-latency row.
    #[arg(long, default_value_t = 10_000_000)]
    large_rows: u64,
    /// Expired rows to purge.
    #[arg(long, default_value_t = 1_000_000)]
    purge_rows: u64,
    /// Where to draw the plot.
    #[arg(long, default_value = "BENCHMARKS-throughput.png")]
    plot: PathBuf,
    /// A server to use (with `pg_stat_statements`); without it a throwaway one is started.
    #[arg(long)]
    database_url: Option<String>,
    /// Connections of the tuned store's own.
    #[arg(long, default_value_t = 2)]
    tuned_connections: usize,
    /// Batches of each kind the tuned store keeps on the wire.
    #[arg(long, default_value_t = 1)]
    tuned_in_flight: usize,
    /// Only the main table.
    #[arg(long = "main-only")]
    quick: bool,
    /// Rounds of the main tables: every mode once per round, in turn. A table shows each
    /// mode's median round, and each ratio its median over the rounds, with their range.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
}

/// A schema with an idem table holding `EXISTING_KEYS` completed keys, and the hand-written
/// technique's table holding the same keys.
async fn fresh_schema(pool: &PgPool, name: &str) -> (PgStore, String) {
    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
        .execute(pool)
        .await
        .unwrap();
    let store = PgStore::builder(pool.clone()).schema(name).build().unwrap();
    store.migrate().await.unwrap();
    let table = store.table().to_owned();
    let hand = format!("{name}.processed_jobs");
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (key, fence, completed_at, expires_at)
           SELECT 'dup:' || i, i, now(), now() + interval '1 day'
           FROM generate_series(0, {}) i;
         CREATE TABLE {hand} (key text PRIMARY KEY, processed_at timestamptz DEFAULT now());
         INSERT INTO {hand} (key) SELECT 'dup:' || i FROM generate_series(0, {}) i;
         ANALYZE {table};
         ANALYZE {hand};",
        EXISTING_KEYS - 1,
        EXISTING_KEYS - 1
    ))
    .execute(pool)
    .await
    .unwrap();
    (store, hand)
}

/// The tuned store: `connections` of its own and `in_flight` batches of each kind on the wire
/// (`--tuned-connections`, `--tuned-in-flight`).
fn tuned_store(pool: &PgPool, schema: &str, (connections, in_flight): (usize, usize)) -> PgStore {
    PgStore::builder(pool.clone())
        .schema(schema)
        .dedicated_connections(connections)
        .max_batches_in_flight(in_flight)
        .build()
        .unwrap()
}

/// SQL statements the server ran (`pg_stat_statements`), leaving out BEGIN/COMMIT/ROLLBACK:
/// pgbench's prepared transaction control is not tracked there, so counting it would make the
/// two clients incomparable.
async fn server_statements(pool: &PgPool, has_pss: bool) -> i64 {
    if !has_pss {
        return 0;
    }
    sqlx::query(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
         WHERE query !~* '^\\s*(begin|commit|rollback)'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
    .get::<i64, _>(0)
}

struct Row_ {
    label: String,
    measured: Measured,
    statements_per_call: Option<f64>,
    /// Client CPU per call, in microseconds (this process, or the pgbench child).
    client_cpu_us: f64,
    /// The server's CPU per call, in microseconds, where the server runs on this machine.
    server_cpu_us: Option<f64>,
    /// Cores the whole machine left idle, and cores its host withheld (steal), on average over
    /// the measurement.
    idle_and_stolen: (f64, f64),
}

/// The CPU and idle-time counters at one instant.
struct Reading {
    /// This process's CPU seconds, and its waited-for children's (pgbench).
    client: (f64, f64),
    /// The server's CPU seconds, where it runs on this machine.
    server: Option<f64>,
    /// The machine's idle and stolen seconds.
    idle_and_stolen: (f64, f64),
    at: Instant,
}

/// What a run spent between two readings.
struct Spent {
    client: (f64, f64),
    server: Option<f64>,
    idle: f64,
    stolen: f64,
    /// Seconds of wall time.
    wall: f64,
}

impl Reading {
    fn take(server: Option<&cpu::Server>) -> Reading {
        Reading {
            client: cpu::client_seconds(),
            server: server.map(cpu::Server::seconds),
            idle_and_stolen: cpu::machine_idle_and_stolen(),
            at: Instant::now(),
        }
    }

    /// What was spent since this reading: the machine's idle time over the run alone, read at
    /// once; CPU time after a pause, so that the server's backends have finished their share
    /// (and those that exit have been counted).
    async fn until_settled(self, server: Option<&cpu::Server>) -> Spent {
        let (idle, stolen) = cpu::machine_idle_and_stolen();
        let wall = self.at.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let client = cpu::client_seconds();
        Spent {
            client: (client.0 - self.client.0, client.1 - self.client.1),
            server: self
                .server
                .zip(server.map(cpu::Server::seconds))
                .map(|(s0, s1)| s1 - s0),
            idle: idle - self.idle_and_stolen.0,
            stolen: stolen - self.idle_and_stolen.1,
            wall,
        }
    }
}

impl Spent {
    /// This run's spending less `other`'s (a run of the same set-up and fewer calls).
    fn less(&self, other: &Spent) -> Spent {
        Spent {
            client: (
                self.client.0 - other.client.0,
                self.client.1 - other.client.1,
            ),
            server: self.server.zip(other.server).map(|(a, b)| a - b),
            idle: self.idle - other.idle,
            stolen: self.stolen - other.stolen,
            wall: (self.wall - other.wall).max(f64::EPSILON),
        }
    }
}

enum Runner {
    Idem(Mode),
    Pgbench(pgbench::Script),
}

impl Runner {
    fn label(&self) -> &'static str {
        match self {
            Runner::Idem(m) => m.label(),
            Runner::Pgbench(s) => s.label(),
        }
    }
}

struct Bench {
    pool: PgPool,
    url: String,
    has_pss: bool,
    dir: PathBuf,
    run_id: u64,
    tuned: (usize, usize),
    /// The server's processes, when it runs on this machine.
    server: Option<cpu::Server>,
}

impl Bench {
    async fn measure(
        &mut self,
        runner: &Runner,
        concurrency: usize,
        calls: u64,
        dup_ratio: f64,
    ) -> Row_ {
        self.run_id += 1;
        let schema = format!("bench_{}", self.run_id);
        let (mut store, hand) = fresh_schema(&self.pool, &schema).await;
        match runner {
            Runner::Idem(Mode::LeaseTuned) => store = tuned_store(&self.pool, &schema, self.tuned),
            Runner::Idem(Mode::LeaseThroughPool) => {
                store = PgStore::builder(self.pool.clone())
                    .schema(schema.as_str())
                    .through_pool()
                    .build()
                    .unwrap()
            }
            Runner::Idem(Mode::TransactionalWithBegin) => {
                store = PgStore::builder(self.pool.clone())
                    .schema(schema.as_str())
                    .claim_with_begin(true)
                    .build()
                    .unwrap()
            }
            _ => {}
        }
        // Stats views lag by up to a statistics flush: each branch waits out the set-up's
        // statements before it reads the count.
        let (s0, measured, spent, calls_spent) = match runner {
            Runner::Idem(mode) => {
                tokio::time::sleep(Duration::from_millis(600)).await;
                let s0 = server_statements(&self.pool, self.has_pss).await;
                let before = Reading::take(self.server.as_ref());
                let measured = workload::run(
                    *mode,
                    &self.url,
                    &store,
                    &hand,
                    concurrency,
                    calls,
                    dup_ratio,
                    self.run_id,
                )
                .await;
                let spent = before.until_settled(self.server.as_ref()).await;
                let calls_spent = measured.calls;
                (s0, measured, spent, calls_spent)
            }
            Runner::Pgbench(script) => {
                let sql = pgbench::Statements {
                    claim: store.claim_sql(),
                    claim_completed: store.claim_completed_sql(),
                    complete: store.complete_sql(),
                };
                let text = pgbench::script(*script, &sql, &hand, (dup_ratio * 1000.0) as u64);
                // pgbench's tps leaves out the time it takes to open its connections (a backend
                // forked for each), but its CPU and the machine's idle time over its run do
                // not. A run of one call per client, read the same way, is taken off, so that
                // the row covers the calls alone. (Its settling wait is the one above.)
                let (_, set_up) = self.pgbench(&text, concurrency, concurrency as u64).await;
                let s0 = server_statements(&self.pool, self.has_pss).await;
                let (measured, spent) = self.pgbench(&text, concurrency, calls).await;
                let calls_spent = measured.calls.saturating_sub(concurrency as u64).max(1);
                (s0, measured, spent.less(&set_up), calls_spent)
            }
        };
        if matches!(
            runner,
            Runner::Idem(
                Mode::Lease
                    | Mode::LeaseTuned
                    | Mode::LeaseThroughPool
                    | Mode::Transactional
                    | Mode::TransactionalWithBegin
            )
        ) && dup_ratio == 0.0
        {
            assert_eq!(
                measured.executed, measured.calls,
                "every fresh call ran its body"
            );
        }
        let s1 = server_statements(&self.pool, self.has_pss).await;
        let per_call = |d: i64| d as f64 / measured.calls as f64;
        // The first counting query is itself counted in the second reading.
        let statements_per_call = self.has_pss.then(|| per_call(s1 - s0 - 1));
        let cpu = match runner {
            Runner::Idem(_) => spent.client.0,
            Runner::Pgbench(_) => spent.client.1,
        };
        let client_cpu_us = cpu * 1e6 / calls_spent as f64;
        let server_cpu_us = spent.server.map(|s| s * 1e6 / calls_spent as f64);
        // A difference of two runs' readings (ticks of 10 ms) can come out a little below zero.
        let idle_and_stolen = (
            (spent.idle / spent.wall).max(0.0),
            (spent.stolen / spent.wall).max(0.0),
        );
        sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&self.pool)
            .await
            .unwrap();
        Row_ {
            label: runner.label().to_owned(),
            measured,
            statements_per_call,
            client_cpu_us,
            server_cpu_us,
            idle_and_stolen,
        }
    }

    /// Runs `text` in pgbench with `clients` clients for about `calls` calls, and reads what
    /// the run spent.
    async fn pgbench(&self, text: &str, clients: usize, calls: u64) -> (Measured, Spent) {
        let before = Reading::take(self.server.as_ref());
        let (url, dir, text) = (self.url.clone(), self.dir.clone(), text.to_owned());
        let measured =
            tokio::task::spawn_blocking(move || pgbench::run(&url, &text, clients, calls, &dir))
                .await
                .unwrap();
        (measured, before.until_settled(self.server.as_ref()).await)
    }

    /// `rounds` rounds of `runners`, each round every runner once, in turn.
    async fn rounds(
        &mut self,
        runners: &[Runner],
        title: &str,
        rounds: u32,
        concurrency: usize,
        calls: u64,
        dup_ratio: f64,
    ) -> Vec<Vec<Row_>> {
        let mut all = Vec::new();
        for round in 1..=rounds {
            let mut rows = Vec::new();
            for runner in runners {
                eprintln!(
                    "{title}: {} (round {round} of {rounds}) ...",
                    runner.label()
                );
                rows.push(self.measure(runner, concurrency, calls, dup_ratio).await);
            }
            all.push(rows);
        }
        all
    }
}

/// The tables' title suffix for `rounds` rounds.
fn rounds_note(rounds: u32) -> String {
    match rounds {
        1 => String::new(),
        n => format!(", median of {n} rounds"),
    }
}

/// Prints a table of `rounds` (every mode once per round, in turn): each mode's row is its median
/// round by calls per second (the slower of the middle two, for an even count), and each ratio
/// the median of the ratios within the rounds, with their range when there are several (the
/// host's speed drifts between rounds, so a ratio is taken within one).
fn print_table(title: &str, rounds: &[Vec<Row_>]) {
    println!("\n### {title}\n");
    println!(
        "| mode | calls/s | p50 ms | p99 ms | SQL statements/call | client CPU µs/call \
         | server CPU µs/call | cores busy / idle / stolen |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let rate = |round: &[Row_], label: &str| {
        round
            .iter()
            .find(|r| r.label == label)
            .map(|r| r.measured.rate())
    };
    for row in &rounds[0] {
        let same = rounds
            .iter()
            .filter_map(|round| round.iter().find(|r| r.label == row.label));
        let row = median_by(same.collect(), |r| r.measured.rate()).expect("its own round");
        let statements = row
            .statements_per_call
            .map_or("n/a".to_owned(), |s| format!("{s:.2}"));
        let (server, busy) = row.server_cpu_us.map_or(("n/a".into(), "n/a".into()), |s| {
            let busy = (row.client_cpu_us + s) * row.measured.rate() / 1e6;
            (format!("{s:.0}"), format!("{busy:.2}"))
        });
        let (idle, stolen) = row.idle_and_stolen;
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {} | {:.0} | {server} | {busy} / {idle:.2} / {stolen:.2} |",
            row.label,
            row.measured.rate(),
            row.measured.percentile(0.50),
            row.measured.percentile(0.99),
            statements,
            row.client_cpu_us
        );
    }
    let ratio = |a: &str, b: &str| {
        let ratios = rounds
            .iter()
            .filter_map(|round| Some(rate(round, a)? / rate(round, b)?));
        match Spread::of(ratios) {
            None => "n/a".to_owned(),
            Some(s) if rounds.len() == 1 => format!("**{:.2}**", s.median),
            Some(Spread { median, low, high }) => format!(
                "**{median:.2}** ({low:.2}-{high:.2} over {} rounds)",
                rounds.len()
            ),
        }
    };
    println!();
    // Lines whose two modes were not both run say "n/a" and are left out.
    let println = |line: String| {
        if !line.contains("n/a") {
            println!("{line}");
        }
    };
    println(format!(
        "- idem lease / pgbench (same statements): {}",
        ratio(Mode::Lease.label(), pgbench::Script::Lease.label())
    ));
    println(format!(
        "- idem lease tuned / pgbench (same statements): {}",
        ratio(Mode::LeaseTuned.label(), pgbench::Script::Lease.label())
    ));
    println(format!(
        "- idem lease through the pool / pgbench (same statements): {}",
        ratio(
            Mode::LeaseThroughPool.label(),
            pgbench::Script::Lease.label()
        )
    ));
    println(format!(
        "- idem lease (default) / pgbench running the hand-written INSERT: {}",
        ratio(Mode::Lease.label(), pgbench::Script::Article.label())
    ));
    println(format!(
        "- idem transactional / pgbench (BEGIN, claim, completion, COMMIT, one round trip each): {}",
        ratio(
            Mode::Transactional.label(),
            pgbench::Script::Transactional.label()
        )
    ));
    println(format!(
        "- idem transactional / pgbench (its own statements: BEGIN, the claim written completed, COMMIT): {}",
        ratio(
            Mode::Transactional.label(),
            pgbench::Script::TransactionalWritten.label()
        )
    ));
    println(format!(
        "- idem transactional, claim with BEGIN / pgbench (BEGIN, claim, completion, COMMIT): {}; / pgbench (BEGIN, the claim written completed, COMMIT): {}; / idem transactional: {}",
        ratio(
            Mode::TransactionalWithBegin.label(),
            pgbench::Script::Transactional.label()
        ),
        ratio(
            Mode::TransactionalWithBegin.label(),
            pgbench::Script::TransactionalWritten.label()
        ),
        ratio(
            Mode::TransactionalWithBegin.label(),
            Mode::Transactional.label()
        )
    ));
    println(format!(
        "- idem lease / hand-written: {}",
        ratio(Mode::Lease.label(), Mode::HandWritten.label())
    ));
    println(format!(
        "- hand-written / pgbench (same statement): {}",
        ratio(Mode::HandWritten.label(), pgbench::Script::Article.label())
    ));
    println(format!(
        "- idem lease / sqlx sending the same statements (idem's own cost): {}",
        ratio(Mode::Lease.label(), Mode::SqlxSameStatements.label())
    ));
    println(format!(
        "- hand-written with sqlx's pool / without it: {}",
        ratio(Mode::HandWritten.label(), Mode::HandWrittenNoPool.label())
    ));
}

/// Single-caller claim latency on a table of `rows` records.
async fn claim_latency(pool: &PgPool, rows: u64) -> (f64, f64, f64, f64) {
    let schema = format!("bench_size_{rows}");
    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(pool)
        .await
        .unwrap();
    let store = PgStore::builder(pool.clone())
        .schema(schema.as_str())
        .build()
        .unwrap();
    store.migrate().await.unwrap();
    let table = store.table().to_owned();
    let started = Instant::now();
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (key, fence, completed_at, expires_at)
           SELECT 'dup:' || i, i, now(), now() + interval '1 day' FROM generate_series(0, {}) i;
         ANALYZE {table};",
        rows - 1
    ))
    .execute(pool)
    .await
    .unwrap();
    eprintln!("  filled {rows} rows in {:?}", started.elapsed());
    let mut rng = workload::Rng::new(rows);
    let mut dup = Vec::new();
    let mut fresh = Vec::new();
    for i in 0..3000u64 {
        let key = format!("dup:{}", rng.below(rows));
        let t0 = Instant::now();
        let _ = idem_core::Call::new(&store, key)
            .run(async { Ok::<_, std::convert::Infallible>(()) })
            .await
            .unwrap();
        dup.push(t0.elapsed().as_micros() as u64);
        let t0 = Instant::now();
        let _ = idem_core::Call::new(&store, format!("new:{i}"))
            .run(async { Ok::<_, std::convert::Infallible>(()) })
            .await
            .unwrap();
        fresh.push(t0.elapsed().as_micros() as u64);
    }
    dup.sort_unstable();
    fresh.sort_unstable();
    let pct = |v: &[u64], p: f64| v[((v.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(pool)
        .await
        .unwrap();
    (
        pct(&dup, 0.5),
        pct(&dup, 0.99),
        pct(&fresh, 0.5),
        pct(&fresh, 0.99),
    )
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    // Kept until the end: a throwaway server stops when it is dropped.
    let server = idem_bench::server(
        args.database_url.as_deref(),
        &[
            "-c shared_preload_libraries=pg_stat_statements",
            "-c pg_stat_statements.track=all",
        ],
    )
    .await;
    let (url, pool) = (server.url.clone(), server.pool.clone());
    let has_pss = sqlx::raw_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(&pool)
        .await
        .is_ok()
        && sqlx::query("SELECT 1 FROM pg_stat_statements LIMIT 1")
            .fetch_optional(&pool)
            .await
            .is_ok();
    let version: String = sqlx::query("SHOW server_version")
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    let dir = std::env::temp_dir().join(format!("idem-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut bench = Bench {
        pool: pool.clone(),
        url,
        has_pss,
        dir: dir.clone(),
        run_id: 0,
        tuned: (args.tuned_connections, args.tuned_in_flight),
        server: cpu::Server::find(&pool).await,
    };
    println!(
        "## Run of {} (PostgreSQL {version}, {} cores; pg_stat_statements: {has_pss})",
        std::process::Command::new("date")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // Warm up: open the pool's connections (a new PostgreSQL backend costs milliseconds) and the
    // server's caches, so no measured run pays for them.
    for runner in [
        Runner::Idem(Mode::Lease),
        Runner::Idem(Mode::Transactional),
        Runner::Idem(Mode::HandWritten),
    ] {
        let _ = bench.measure(&runner, 64, 3_000, 0.5).await;
    }

    let runners = [
        Runner::Idem(Mode::Lease),
        Runner::Idem(Mode::LeaseTuned),
        Runner::Idem(Mode::LeaseThroughPool),
        Runner::Pgbench(pgbench::Script::Lease),
        Runner::Idem(Mode::Transactional),
        Runner::Idem(Mode::TransactionalWithBegin),
        Runner::Pgbench(pgbench::Script::Transactional),
        Runner::Pgbench(pgbench::Script::TransactionalWritten),
        Runner::Idem(Mode::HandWritten),
        Runner::Pgbench(pgbench::Script::Article),
        Runner::Idem(Mode::SqlxSameStatements),
        Runner::Idem(Mode::HandWrittenNoPool),
    ];
    // The fresh-keys table's median rate of each mode: the sweep's point at the table's
    // concurrency, so that the plot and the table show the same measurement.
    let mut fresh_rates: std::collections::HashMap<String, f64> = Default::default();
    for (title, dup_ratio) in [
        ("fresh keys (0% duplicates)", 0.0),
        ("duplicate-heavy (90% duplicates)", 0.9),
    ] {
        let rounds = bench
            .rounds(
                &runners,
                title,
                args.rounds,
                args.concurrency,
                args.calls,
                dup_ratio,
            )
            .await;
        if dup_ratio == 0.0 {
            for row in &rounds[0] {
                let same = rounds
                    .iter()
                    .filter_map(|round| round.iter().find(|r| r.label == row.label));
                if let Some(median) = median_by(same.collect(), |r| r.measured.rate()) {
                    fresh_rates.insert(row.label.clone(), median.measured.rate());
                }
            }
        }
        print_table(
            &format!(
                "{title}, {} concurrent callers, {} calls each{}",
                args.concurrency,
                args.calls,
                rounds_note(args.rounds)
            ),
            &rounds,
        );
    }

    // Duplicates against the floor: every call an existing key.
    let runners = [
        Runner::Idem(Mode::Lease),
        Runner::Idem(Mode::LeaseTuned),
        Runner::Idem(Mode::LeaseThroughPool),
        Runner::Pgbench(pgbench::Script::Lease),
        Runner::Pgbench(pgbench::Script::Article),
    ];
    let rounds = bench
        .rounds(
            &runners,
            "all duplicates",
            args.rounds,
            args.concurrency,
            args.calls,
            1.0,
        )
        .await;
    print_table(
        &format!(
            "only duplicates (100%), {} concurrent callers{}",
            args.concurrency,
            rounds_note(args.rounds)
        ),
        &rounds,
    );

    if args.quick {
        return;
    }

    // Throughput against concurrency, fresh keys.
    let mut series: Vec<(String, Vec<(u32, f64)>)> = Vec::new();
    for runner in [
        Runner::Idem(Mode::Lease),
        Runner::Idem(Mode::LeaseTuned),
        Runner::Idem(Mode::LeaseThroughPool),
        Runner::Idem(Mode::Transactional),
        Runner::Idem(Mode::TransactionalWithBegin),
        Runner::Idem(Mode::HandWritten),
        Runner::Pgbench(pgbench::Script::Lease),
        Runner::Pgbench(pgbench::Script::Article),
    ] {
        let mut points = Vec::new();
        for &c in &args.sweep {
            let table = fresh_rates.get(runner.label()).copied();
            let rate = match table {
                Some(rate) if c as usize == args.concurrency => rate,
                _ => {
                    eprintln!("sweep: {} at {c} ...", runner.label());
                    bench
                        .measure(
                            &runner,
                            c as usize,
                            args.sweep_calls.max(u64::from(c) * 50),
                            0.0,
                        )
                        .await
                        .measured
                        .rate()
                }
            };
            points.push((c, rate));
        }
        series.push((runner.label().to_owned(), points));
    }
    println!("\n### Throughput against concurrency (fresh keys, calls/s)\n");
    print!("| mode |");
    for c in &args.sweep {
        print!(" {c} |");
    }
    println!();
    println!("| --- |{}", " ---: |".repeat(args.sweep.len()));
    for (label, points) in &series {
        print!("| {label} |");
        for (_, rate) in points {
            print!(" {rate:.0} |");
        }
        println!();
    }
    match plot::draw(
        &args.plot,
        "idem on PostgreSQL: fresh calls per second",
        &series,
    ) {
        Ok(()) => println!(
            "\n![throughput against concurrency]({})",
            args.plot.display()
        ),
        Err(e) => eprintln!("plot not drawn: {e}"),
    }

    // Claim latency against table size.
    println!("\n### Claim latency against table size (one caller)\n");
    println!(
        "| rows | duplicate p50 ms | duplicate p99 ms | fresh call p50 ms | fresh call p99 ms |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for rows in [10_000, args.large_rows] {
        eprintln!("table size {rows} ...");
        let (dp50, dp99, fp50, fp99) = claim_latency(&pool, rows).await;
        println!("| {rows} | {dp50:.3} | {dp99:.3} | {fp50:.3} | {fp99:.3} |");
    }

    // Purge: batch by batch, each from the start of the index (as `idem purge` runs it), then
    // one drain whose batches each start where the one before ended (`purge_all_expired`, as
    // `spawn_purger` runs it), on the same backlog. Expired records claimed a microsecond apart.
    let store = PgStore::builder(pool.clone())
        .schema("bench_purge")
        .build()
        .unwrap();
    let fill = |store: PgStore| async move {
        sqlx::raw_sql(&format!(
            "INSERT INTO {} (key, fence, expires_at, purge_at)
               SELECT 'old:' || i, i, now() - interval '1 hour',
                      now() - interval '1 hour' + i * interval '1 microsecond'
               FROM generate_series(1, {}) i",
            store.table(),
            args.purge_rows,
        ))
        .execute(store.pool())
        .await
        .unwrap();
        // Its own statement: VACUUM cannot run in the implicit transaction of several.
        sqlx::raw_sql(&format!("VACUUM ANALYZE {}", store.table()))
            .execute(store.pool())
            .await
            .unwrap();
    };
    sqlx::raw_sql("DROP SCHEMA IF EXISTS bench_purge CASCADE")
        .execute(&pool)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    eprintln!(
        "purge of {} expired rows, batch by batch ...",
        args.purge_rows
    );
    fill(store.clone()).await;
    let mut longest = Duration::ZERO;
    let started = Instant::now();
    let mut purged = 0;
    loop {
        let t0 = Instant::now();
        let n = idem_core::Purge::purge_expired(&store, 10_000)
            .await
            .unwrap();
        longest = longest.max(t0.elapsed());
        purged += n;
        if n < 10_000 {
            break;
        }
    }
    let took = started.elapsed();
    eprintln!("purge of {} expired rows, one drain ...", args.purge_rows);
    fill(store.clone()).await;
    let started = Instant::now();
    let drained = idem_core::Purge::purge_all_expired(&store, 10_000)
        .await
        .unwrap();
    let drain_took = started.elapsed();
    println!(
        "\n### Purge\n\n{purged} expired records purged in {:.1} s ({:.0} rows/s) in batches of \
         10,000, each from the start of the index (`purge_expired`, as `idem purge` runs it); the \
         longest batch (and so the longest any row lock was held) took {:.0} ms. As one drain \
         whose batches each start where the one before ended (`purge_all_expired`, as \
         `spawn_purger` runs it): {drained} in {:.1} s ({:.0} rows/s).",
        took.as_secs_f64(),
        purged as f64 / took.as_secs_f64(),
        longest.as_secs_f64() * 1000.0,
        drain_took.as_secs_f64(),
        drained as f64 / drain_took.as_secs_f64(),
    );
    let _ = std::fs::remove_dir_all(dir);
}
