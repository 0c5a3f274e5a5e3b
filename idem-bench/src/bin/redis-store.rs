//! `RedisStore` under load, against Redis's own limit on the same script, in one run:
//! `cargo run --release -p idem-bench --bin redis-store -- [--calls 50000] [--callers 16]
//! [--redis-url URL]` (without a URL it starts a throwaway `redis-server`).
//!
//! Rows: fresh keys, 90% duplicates, only duplicates, each with the commands the server ran
//! per call (from `INFO commandstats`: every command is one round trip); and the limit:
//! `redis-benchmark` (16 clients, pipelining off) sending the store's claim script with
//! `EVALSHA` on random keys, one call per round trip.

use idem_core::{Call, Outcome};
use idem_store_redis::redis;
use idem_store_redis::RedisStore;
use std::convert::Infallible;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// RedisStore against redis-benchmark on its claim script. Unknown flags exit with status 2.
#[derive(Debug, clap::Parser)]
struct Args {
    /// Calls per row.
    #[arg(long, default_value_t = 50_000)]
    calls: u64,
    /// Concurrent callers (tasks).
    #[arg(long, default_value_t = 16)]
    callers: u64,
    /// A server to use; without it a throwaway one is started.
    #[arg(long)]
    redis_url: Option<String>,
}

/// Round trips the server has answered so far: the script calls (`EVALSHA`, and `EVAL` and
/// `SCRIPT` should a script need loading), from `INFO commandstats`. (The store sends nothing
/// else on a call's path; the commands a script runs inside are counted apart, and are not
/// round trips.)
async fn commands(url: &str) -> u64 {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .filter(|l| {
            ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_script:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn run(store: &RedisStore, calls: u64, callers: u64, distinct: u64) -> (f64, u64, Vec<u64>) {
    let next = Arc::new(AtomicU64::new(0));
    let executed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (store, next, executed) = (store.clone(), next.clone(), executed.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls {
                        return latencies;
                    }
                    let t0 = Instant::now();
                    let outcome = Call::new(&store, format!("bench:{}", i % distinct))
                        .run(async { Ok::<_, Infallible>(()) })
                        .await
                        .expect("call");
                    latencies.push(t0.elapsed().as_micros() as u64);
                    if let Outcome::Executed(()) = outcome {
                        executed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    latencies.sort_unstable();
    let rate = calls as f64 / started.elapsed().as_secs_f64();
    (rate, executed.load(Ordering::Relaxed), latencies)
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    let server;
    let url = match &args.redis_url {
        Some(url) => url.clone(),
        None => {
            server = idem_testdb::RedisServer::start().expect("a throwaway redis-server");
            server.url()
        }
    };
    let port = url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    println!(
        "### RedisStore ({} calls per row, {} concurrent callers, one connection: the redis crate's multiplexed connection manager)\n",
        args.calls, args.callers
    );
    println!("| workload | calls/s | round trips per call | p50 ms | p99 ms |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let mut rates = Vec::new();
    for (i, (label, distinct)) in [
        ("fresh keys", args.calls),
        ("90% duplicates", args.calls / 10),
        ("only duplicates", 1),
    ]
    .into_iter()
    .enumerate()
    {
        let store = RedisStore::connect(&url)
            .await
            .unwrap()
            .prefix(&format!("bench{i}-{}", std::process::id()));
        if distinct == 1 {
            let _ = run(&store, 1, 1, 1).await;
        }
        let before = commands(&url).await;
        let (rate, executed, latencies) = run(&store, args.calls, args.callers, distinct).await;
        let trips = (commands(&url).await - before) as f64 / args.calls as f64;
        let expected = if distinct == 1 { 0 } else { distinct };
        assert_eq!(executed, expected, "{label}: each key's body ran once");
        let p = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
        println!(
            "| {label} | {rate:.0} | {trips:.2} | {:.3} | {:.3} |",
            p(0.5),
            p(0.99)
        );
        rates.push(rate);
    }

    // The limit: redis-benchmark running the claim script, 16 clients, random keys.
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(idem_store_redis::claim_script_source())
        .query_async(&mut conn)
        .await
        .unwrap();
    let output = Command::new("redis-benchmark")
        .args([
            "-p",
            &port,
            "-c",
            &args.callers.to_string(),
            "-n",
            "200000",
            "-r",
            "100000000",
        ])
        .args([
            "--csv",
            "EVALSHA",
            &sha,
            "1",
            "rb:__rand_int__",
            "",
            "",
            "30000000",
            "600000",
            "bench",
        ])
        .output()
        .expect("redis-benchmark (Debian: redis-tools)");
    let csv = String::from_utf8_lossy(&output.stdout);
    let limit: f64 = csv
        .lines()
        .last()
        .and_then(|l| l.split(',').nth(1))
        .and_then(|v| v.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("redis-benchmark printed: {csv}"));
    println!(
        "| limit: `redis-benchmark` sending the claim script (`EVALSHA`, 16 clients, random keys) | {limit:.0} claims/s | 1 | | |"
    );
    println!(
        "\n- fresh calls (a claim and a completion: 2 round trips) / the claim script's limit: **{:.2}**\n- only duplicates (1 round trip) / the claim script's limit: **{:.2}**\n\n(idem's 16 callers share one multiplexed connection, so their scripts are pipelined; redis-benchmark's 16 clients each wait for their answer.)",
        rates[0] / limit,
        rates[2] / limit
    );
}
