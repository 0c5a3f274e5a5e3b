//! A reminder endpoint over HTTP, side by side in one run: `POST /jobs/send-reminder` served by
//! axum on a real port, loaded by a client in this process over 16 keep-alive connections, every
//! job key delivered twice at the same moment (a parallel duplicate test, as load).
//! The "email" is a line appended to a file, so every row also checks that each key was sent
//! exactly once.
//!
//! ```text
//! cargo run --release -p idem-bench --bin http-endpoint -- [--keys 20000] [--connections 16]
//!     [--database-url URL]
//! ```
//!
//! Rows: HTTP alone (no database, no deduplication: the ceiling), the hand-written
//! `INSERT .. ON CONFLICT DO NOTHING` on sqlx's pool, idem on `PgStore::new(pool)`'s defaults,
//! idem tuned (two connections of its own, `dedicated_connections(2)`), and idem-http's
//! `IdempotencyLayer` around the bare endpoint (on `MemoryStore`, and on `PgStore::new(pool)`):
//! its overhead against the bare service. Without `--database-url` it starts a throwaway
//! PostgreSQL.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use idem_core::{Call, MemoryStore, Outcome};
use idem_http::IdempotencyLayer;
use idem_store_postgres::sqlx::{self, PgPool};
use idem_store_postgres::PgStore;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "../plot.rs"]
mod plot;

/// The reminder endpoint under load. Unknown flags exit with status 2 and the usage.
#[derive(Debug, clap::Parser)]
#[command(about = "A reminder endpoint over HTTP: hand-written against idem")]
struct Args {
    /// Distinct job keys per row; each is delivered twice, concurrently.
    #[arg(long, default_value_t = 20_000)]
    keys: u64,
    /// Concurrent client connections (requests in flight).
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Deliveries of each key, sent at the same moment (1 or 2).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=2))]
    deliveries: u64,
    /// Connections of the tuned store's own.
    #[arg(long, default_value_t = 2)]
    tuned_connections: usize,
    /// Batches of each kind the tuned store keeps on the wire.
    #[arg(long, default_value_t = 1)]
    tuned_in_flight: usize,
    /// Whether the tuned store batches.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    tuned_batching: bool,
    /// A server to use; without it a throwaway one is started.
    #[arg(long)]
    database_url: Option<String>,
    /// After the table, the endpoints on PostgreSQL at each of these connection counts (keys
    /// per point: `--sweep-keys`), drawn to `--plot`. Empty: no sweep.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128")]
    sweep: Vec<usize>,
    /// Distinct keys per point of the sweep.
    #[arg(long, default_value_t = 5_000)]
    sweep_keys: u64,
    /// Where the sweep's plot goes.
    #[arg(long, default_value = "BENCHMARKS-http.png")]
    plot: PathBuf,
}

#[derive(Clone, Copy, Debug)]
enum Variant {
    HttpAlone,
    HandWritten,
    IdemDefault,
    IdemTuned,
    LayerMemory,
    LayerPostgres,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::HttpAlone => "HTTP alone (no database, no deduplication)",
            Variant::HandWritten => "hand-written (INSERT .. ON CONFLICT on sqlx's pool)",
            Variant::IdemDefault => "idem, `PgStore::new(pool)` defaults",
            Variant::IdemTuned => "idem, tuned (`dedicated_connections(2)`)",
            Variant::LayerMemory => "idem-http `IdempotencyLayer`, `MemoryStore`",
            Variant::LayerPostgres => "idem-http `IdempotencyLayer`, `PgStore::new(pool)`",
        }
    }
}

struct App {
    variant: Variant,
    pool: PgPool,
    store: PgStore,
    hand_sql: String,
    emails: Mutex<std::fs::File>,
    sent: AtomicU64,
}

impl App {
    /// The side effect: one line per email, appended to a file.
    fn send_email(&self, user_id: u64) {
        let mut file = self.emails.lock().unwrap();
        writeln!(file, "email to {user_id}").unwrap();
        self.sent.fetch_add(1, Ordering::Relaxed);
    }
}

async fn send_reminder(State(app): State<Arc<App>>, Json(payload): Json<Value>) -> Json<Value> {
    let key = payload["job_key"].as_str().unwrap_or_default().to_owned();
    let user_id = payload["user_id"].as_u64().unwrap_or_default();
    let sent = match app.variant {
        // The layer around the router deduplicates; the handler just sends.
        Variant::HttpAlone | Variant::LayerMemory | Variant::LayerPostgres => {
            app.send_email(user_id);
            true
        }
        Variant::HandWritten => {
            let inserted = sqlx::query(&app.hand_sql)
                .bind(&key)
                .execute(&app.pool)
                .await
                .expect("insert")
                .rows_affected();
            if inserted == 1 {
                app.send_email(user_id);
            }
            inserted == 1
        }
        Variant::IdemDefault | Variant::IdemTuned => {
            let outcome = Call::new(&app.store, key)
                .name("send_reminder")
                .run(async {
                    app.send_email(user_id);
                    Ok::<_, Infallible>(())
                })
                .await
                .expect("idem call");
            matches!(outcome, Outcome::Executed(()))
        }
    };
    Json(json!({"status": if sent { "sent" } else { "duplicate, skipped" }}))
}

struct Measured {
    requests: u64,
    elapsed: Duration,
    latencies_us: Vec<u64>,
}

impl Measured {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    fn percentile(&self, p: f64) -> f64 {
        let i = ((self.latencies_us.len() - 1) as f64 * p).round() as usize;
        self.latencies_us[i] as f64 / 1000.0
    }
}

/// Sends every key twice at once, `connections` requests in flight.
async fn load(
    base: &str,
    prefix: &str,
    keys: u64,
    connections: usize,
    deliveries: u64,
) -> Measured {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .build()
        .unwrap();
    let next = Arc::new(AtomicU64::new(0));
    let url = format!("{base}/jobs/send-reminder");
    let started = Instant::now();
    let pairs: Vec<_> = (0..connections.div_ceil(deliveries as usize))
        .map(|_| {
            let (client, next, url) = (client.clone(), next.clone(), url.clone());
            let prefix = prefix.to_owned();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= keys {
                        return latencies;
                    }
                    let body =
                        json!({"job_key": format!("{prefix}:{i}"), "user_id": i}).to_string();
                    let key = format!("{prefix}:{i}");
                    let send = || {
                        // The headers are what the layer reads (the key, and the caller it
                        // scopes by); the other endpoints ignore them.
                        let request = client
                            .post(&url)
                            .header("content-type", "application/json")
                            .header("authorization", "Bearer bench-caller")
                            .header("idempotency-key", key.as_str())
                            .body(body.clone());
                        async move {
                            let t0 = Instant::now();
                            let response = request.send().await.expect("request");
                            // The layer answers a duplicate still in flight with 409.
                            let status = response.status();
                            assert!(status.is_success() || status == 409, "{status}");
                            response.bytes().await.expect("body");
                            t0.elapsed().as_micros() as u64
                        }
                    };
                    if deliveries == 2 {
                        let (a, b) = tokio::join!(send(), send());
                        latencies.extend([a, b]);
                    } else {
                        latencies.push(send().await);
                    }
                }
            })
        })
        .collect();
    let mut latencies_us = Vec::new();
    for pair in pairs {
        latencies_us.extend(pair.await.unwrap());
    }
    let elapsed = started.elapsed();
    latencies_us.sort_unstable();
    Measured {
        requests: keys * deliveries,
        elapsed,
        latencies_us,
    }
}

/// One row: `keys` keys over `connections` connections on a fresh schema.
async fn measure(
    variant: Variant,
    pool: &PgPool,
    run: usize,
    (keys, connections): (u64, usize),
    args: &Args,
    dir: &std::path::Path,
) -> Measured {
    let schema = format!("http_bench_{run}");
    sqlx::raw_sql(&format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};
         CREATE TABLE {schema}.processed_jobs (key text PRIMARY KEY, processed_at timestamptz DEFAULT now());"
    ))
    .execute(pool)
    .await
    .unwrap();
    let builder = PgStore::builder(pool.clone()).schema(schema.as_str());
    let store = match variant {
        Variant::IdemTuned => builder
            .dedicated_connections(args.tuned_connections)
            .max_batches_in_flight(args.tuned_in_flight)
            .batching(args.tuned_batching)
            .build()
            .unwrap(),
        _ => builder.build().unwrap(),
    };
    store.migrate().await.unwrap();
    let emails_path: PathBuf = dir.join(format!("emails-{run}.txt"));
    let app = Arc::new(App {
        variant,
        pool: pool.clone(),
        store,
        hand_sql: format!(
            "INSERT INTO {schema}.processed_jobs (key) VALUES ($1) ON CONFLICT DO NOTHING"
        ),
        emails: Mutex::new(std::fs::File::create(&emails_path).unwrap()),
        sent: AtomicU64::new(0),
    });
    let mut router = Router::new().route("/jobs/send-reminder", post(send_reminder));
    match variant {
        Variant::LayerMemory => router = router.layer(IdempotencyLayer::new(MemoryStore::new())),
        Variant::LayerPostgres => router = router.layer(IdempotencyLayer::new(app.store.clone())),
        _ => {}
    }
    let router = router.with_state(app.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    // Warm up: connections, prepared statements, caches.
    let _ = load(&base, "warm", 500, connections, args.deliveries).await;
    let sent_before = app.sent.load(Ordering::Relaxed);
    let measured = load(&base, "job", keys, connections, args.deliveries).await;
    let sent = app.sent.load(Ordering::Relaxed) - sent_before;
    let expected = match variant {
        Variant::HttpAlone => keys * args.deliveries,
        _ => keys,
    };
    assert_eq!(sent, expected, "{}: emails sent", variant.label());
    server.abort();
    let _ = std::fs::remove_file(emails_path);
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(pool)
        .await
        .unwrap();
    measured
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    // Kept until the end: a throwaway server stops when it is dropped.
    let server = idem_bench::server(args.database_url.as_deref(), &[]).await;
    let pool = server.pool.clone();
    let dir = std::env::temp_dir().join(format!("idem-http-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "### The reminder endpoint over HTTP ({} keys, each delivered twice concurrently, {} connections)\n",
        args.keys, args.connections
    );
    println!("| endpoint | requests/s | p50 ms | p99 ms |");
    println!("| --- | ---: | ---: | ---: |");
    let mut rates = Vec::new();
    for (run, variant) in [
        Variant::HttpAlone,
        Variant::HandWritten,
        Variant::IdemDefault,
        Variant::IdemTuned,
        Variant::LayerMemory,
        Variant::LayerPostgres,
    ]
    .into_iter()
    .enumerate()
    {
        eprintln!("http endpoint: {} ...", variant.label());
        let shape = (args.keys, args.connections);
        let measured = measure(variant, &pool, run, shape, &args, &dir).await;
        println!(
            "| {} | {:.0} | {:.2} | {:.2} |",
            variant.label(),
            measured.rate(),
            measured.percentile(0.5),
            measured.percentile(0.99)
        );
        rates.push(measured.rate());
    }
    println!(
        "\n- idem default / hand-written: **{:.2}**\n- idem tuned / hand-written: **{:.2}**\n- idem default / HTTP alone: **{:.2}**",
        rates[2] / rates[1],
        rates[3] / rates[1],
        rates[2] / rates[0]
    );
    println!(
        "- the layer on `MemoryStore` / HTTP alone (the bare service): **{:.2}**\n- the layer on `PgStore` / HTTP alone: **{:.2}**\n- the layer on `PgStore` / idem default called in the handler: **{:.2}**",
        rates[4] / rates[0],
        rates[5] / rates[0],
        rates[5] / rates[2]
    );
    if !args.sweep.is_empty() {
        sweep(&pool, &args, &dir).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The endpoints on PostgreSQL against connections (requests in flight), as a table and a plot.
async fn sweep(pool: &PgPool, args: &Args, dir: &std::path::Path) {
    let variants = [
        Variant::HandWritten,
        Variant::IdemDefault,
        Variant::LayerPostgres,
    ];
    println!(
        "\n### The reminder endpoint against connections ({} keys per point, each delivered twice concurrently; requests/s)\n",
        args.sweep_keys
    );
    let header: Vec<String> = args.sweep.iter().map(|c| c.to_string()).collect();
    println!("| endpoint | {} |", header.join(" | "));
    println!("| --- |{}", " ---: |".repeat(args.sweep.len()));
    let mut series = Vec::new();
    for (i, variant) in variants.into_iter().enumerate() {
        let mut points = Vec::new();
        for (j, &connections) in args.sweep.iter().enumerate() {
            eprintln!("http sweep: {} at {connections} ...", variant.label());
            let run = 100 + i * 100 + j;
            let shape = (args.sweep_keys, connections);
            let measured = measure(variant, pool, run, shape, args, dir).await;
            points.push((connections as u32, measured.rate()));
        }
        let cells: Vec<String> = points.iter().map(|(_, r)| format!("{r:.0}")).collect();
        println!("| {} | {} |", variant.label(), cells.join(" | "));
        series.push((variant.label().replace('`', ""), points));
    }
    let axes = (
        "connections, each key sent twice at once (log scale)",
        "requests per second",
    );
    match plot::draw_with_axes(&args.plot, "A reminder endpoint over HTTP", axes, &series) {
        Ok(()) => println!(
            "\n![the endpoint against connections]({})",
            args.plot.display()
        ),
        Err(e) => eprintln!("no plot: {e}"),
    }
}
