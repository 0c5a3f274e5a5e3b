//! Lease-mode settings compared in turn: fresh calls per second of `#[idempotent]` lease mode
//! on `PgStore`'s defaults, with each `--in-flight` setting (batches of each kind on the wire),
//! the settings taking turns point by point, `--reps` times over. On a shared machine one run
//! of each says little (a setting's figure moves by half between runs); the medians of runs
//! that alternated say which setting is faster.
//!
//! ```text
//! cargo run --release -p idem-bench --bin interleaved -- [--in-flight 1,2]
//!     [--callers 1,4,8,16,64] [--calls 8000] [--reps 5] [--dedicated N] [--database-url URL]
//! ```
//!
//! Every body is empty and every key fresh. Without `--database-url` it starts a throwaway
//! PostgreSQL. A second table gives each point as a share of its run's best point: how much of
//! the store's best a number of callers keeps.

use idem_bench::spread::Spread;
use idem_store_postgres::sqlx;
use idem_store_postgres::PgStore;

/// Lease-mode settings in turn. Unknown flags exit with status 2.
#[derive(Debug, clap::Parser)]
#[command(about = "lease-mode settings compared in turn, medians of alternating runs")]
struct Args {
    /// The `max_batches_in_flight` settings to compare.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    in_flight: Vec<usize>,
    /// Concurrent callers of each point.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16,64")]
    callers: Vec<usize>,
    /// Calls per point.
    #[arg(long, default_value_t = 8_000)]
    calls: u64,
    /// How many times each setting runs each point.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    reps: u64,
    /// Run every store on this many connections of its own (`dedicated_connections`; the
    /// main benchmark's tuned store has 2) instead of connections held from the pool.
    #[arg(long)]
    dedicated: Option<usize>,
    /// A server to use; without it a throwaway one is started.
    #[arg(long)]
    database_url: Option<String>,
}

/// `calls` fresh calls on `store` from `callers` tasks; calls per second.
async fn point(store: &PgStore, callers: usize, calls: u64, tag: &str) -> f64 {
    let tag = tag.to_owned();
    let (rate, executed) =
        idem_bench::lease_calls(store, callers, calls, move |i| format!("fresh:{tag}:{i}")).await;
    assert_eq!(executed, calls, "every key is fresh");
    rate
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    let server = idem_bench::server(args.database_url.as_deref(), &[]).await;
    let mut stores = Vec::new();
    for &in_flight in &args.in_flight {
        let schema = format!("interleaved_{in_flight}");
        sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&server.pool)
            .await
            .unwrap();
        let mut builder = PgStore::builder(server.pool.clone())
            .schema(schema.as_str())
            .max_batches_in_flight(in_flight);
        if let Some(connections) = args.dedicated {
            builder = builder.dedicated_connections(connections);
        }
        let store = builder.build().unwrap();
        store.migrate().await.unwrap();
        // Open its connections and warm the server's caches before anything is measured.
        point(&store, 16, 2_000, "warm").await;
        stores.push((in_flight, store));
    }
    let mut rates = vec![vec![Vec::new(); args.callers.len()]; stores.len()];
    for rep in 0..args.reps {
        for (c, &callers) in args.callers.iter().enumerate() {
            for (s, (in_flight, store)) in stores.iter().enumerate() {
                let rate = point(store, callers, args.calls, &format!("{rep}:{callers}")).await;
                eprintln!("run {rep}: {in_flight} in flight, {callers} callers: {rate:.0}");
                rates[s][c].push(rate);
            }
        }
    }
    let connections = match args.dedicated {
        Some(n) => format!("{n} dedicated connections"),
        None => "connections held from the pool".to_owned(),
    };
    let header = |title: &str| {
        println!(
            "\n### Lease mode, {title}: medians of {} alternating runs ({connections})\n",
            args.reps
        );
        print!("| batches in flight |");
        for callers in &args.callers {
            print!(" {callers} |");
        }
        println!("\n| --- |{}", " ---: |".repeat(args.callers.len()));
    };
    header("fresh calls/s");
    let spread = |runs: &[f64]| Spread::of(runs.iter().copied()).expect("at least one rep");
    let first: Vec<Spread> = rates[0].iter().map(|runs| spread(runs)).collect();
    for ((in_flight, _), points) in stores.iter().zip(&rates) {
        print!("| {in_flight} |");
        for (runs, base) in points.iter().zip(&first) {
            let Spread { median, low, high } = spread(runs);
            print!(
                " {median:.0} ({:.2}; {low:.0}-{high:.0}) |",
                median / base.median
            );
        }
        println!();
    }
    header("each point as a share of its run's best point");
    for ((in_flight, _), points) in stores.iter().zip(&rates) {
        print!("| {in_flight} |");
        let runs = args.reps as usize;
        let best: Vec<f64> = (0..runs)
            .map(|run| points.iter().map(|p| p[run]).fold(0.0, f64::max))
            .collect();
        for point in points {
            let shares: Vec<f64> = point.iter().zip(&best).map(|(r, b)| r / b).collect();
            let Spread { median, low, high } = spread(&shares);
            print!(" {median:.2} ({low:.2}-{high:.2}) |");
        }
        println!();
    }
}
