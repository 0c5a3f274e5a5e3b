//! How long each dashboard page takes on a big store: a million records and a million jobs by
//! default, in a fresh schema, served as `idem ui` serves it (its statement timeout, its two
//! connections), each page asked for `--rounds` times by a logged-in client.
//!
//! ```text
//! ui-pages [--database-url URL] [--records 1000000] [--jobs 1000000] [--rounds 3]
//! ```
//!
//! Prints a row a page: the slowest and the median answer in milliseconds, and exits 1 if a
//! page ever took a second or more (or failed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_queue::Queue;
use idem_store_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use idem_store_postgres::sqlx::{self};
use idem_store_postgres::PgStore;

/// The schema the data is in.
const SCHEMA: &str = "idem_bench_ui";
/// The token of the dashboard under test.
const TOKEN: &str = "ui-pages-benchmark-token";

/// Dashboard pages on a big store. Unknown flags exit with status 2.
#[derive(Debug, clap::Parser)]
#[command(about = "How long each dashboard page takes on a big store")]
struct Args {
    /// The database; a throwaway one is started without it.
    #[arg(long)]
    database_url: Option<String>,
    /// Records to fill the store with.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Jobs to fill the queue with.
    #[arg(long, default_value_t = 1_000_000)]
    jobs: u64,
    /// Times each page is asked for.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[tokio::main]
async fn main() {
    let args = <Args as clap::Parser>::parse();
    let server = idem_bench::server(args.database_url.as_deref(), &[]).await;
    fill(&server.pool, &args).await;
    // As `idem ui` connects: two connections, each statement stopped after 5 s.
    let options: PgConnectOptions = server.url.parse().unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options.options([("statement_timeout", "5000")]))
        .await
        .unwrap();
    let store = PgStore::builder(pool)
        .schema(SCHEMA.to_owned())
        .build()
        .unwrap();
    let dashboard = idem_ui::Dashboard::new(Arc::new(store.clone()))
        .queue(Queue::new(&store))
        .token(TOKEN.to_owned());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(dashboard.serve(listener, std::future::pending()));
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = client
        .post(format!("{base}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let middle = format!("{:08}", args.records / 2);
    let pages = [
        "/".to_owned(),
        "/records".to_owned(),
        "/records?state=stale".to_owned(),
        "/records?state=claimed".to_owned(),
        "/records?state=expired".to_owned(),
        "/records?scope=scope-7".to_owned(),
        "/records?scope=no-such-scope".to_owned(),
        "/records?prefix=zzz".to_owned(),
        format!("/records?after_key=call:{middle}&after_scope=scope-3"),
        format!(
            "/record?key=call:{middle}&scope=scope-{}",
            (args.records / 2) % 10
        ),
        "/jobs".to_owned(),
        "/jobs?state=dead".to_owned(),
        "/jobs?state=running".to_owned(),
        "/jobs?state=queued".to_owned(),
        "/jobs?state=done".to_owned(),
        "/jobs?queue=queue-5".to_owned(),
        "/jobs?queue=no-such-queue".to_owned(),
        "/jobs?prefix=zzz".to_owned(),
        format!("/job?key=job:{:08}", args.jobs / 2),
        "/schedules".to_owned(),
    ];
    let mut slow = false;
    println!("| page | slowest (ms) | median (ms) | status |");
    println!("| --- | ---: | ---: | --- |");
    for page in &pages {
        let mut times = Vec::new();
        let mut status = 0;
        for _ in 0..args.rounds {
            let started = Instant::now();
            let response = client
                .get(format!("{base}{page}"))
                .header("cookie", &cookie)
                .send()
                .await
                .unwrap();
            status = response.status().as_u16();
            response.bytes().await.unwrap();
            times.push(started.elapsed());
        }
        times.sort();
        let worst = times[times.len() - 1];
        let median = times[times.len() / 2];
        slow |= worst >= Duration::from_secs(1) || status != 200;
        println!(
            "| `{page}` | {:.0} | {:.0} | {status} |",
            worst.as_secs_f64() * 1e3,
            median.as_secs_f64() * 1e3
        );
    }
    if slow {
        eprintln!("ui-pages: a page took a second or more, or failed");
        std::process::exit(1);
    }
}

/// A fresh schema with `args.records` records (ten scopes; mostly completed, some in progress,
/// some stale, some expired) and `args.jobs` jobs (eight queues; mostly done, some dead,
/// queued and running), analyzed.
async fn fill(admin: &sqlx::PgPool, args: &Args) {
    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        .execute(admin)
        .await
        .unwrap();
    let store = PgStore::builder(admin.clone())
        .schema(SCHEMA.to_owned())
        .build()
        .unwrap();
    store.migrate().await.unwrap();
    Queue::new(&store).migrate().await.unwrap();
    let started = Instant::now();
    sqlx::raw_sql(&format!(
        "INSERT INTO {t} (key, scope, fence, completed_at, expires_at, purge_at, holder, output)
             SELECT 'call:' || lpad(i::text, 8, '0'), 'scope-' || (i % 10), i,
                    CASE WHEN i % 100 < 97 THEN at END,
                    CASE WHEN i % 100 < 90 THEN at + interval '1 day'
                         WHEN i % 100 < 97 THEN at - interval '1 day'
                         WHEN i % 100 < 99 THEN now() + interval '30 seconds'
                         ELSE now() - interval '1 minute' END,
                    at + interval '1 day',
                    CASE WHEN i % 100 >= 97 THEN 'host-' || (i % 7) || ':4242' END,
                    CASE WHEN i % 3 = 0 THEN '\\x7b7d'::bytea END
             FROM generate_series(1, {records}) i,
                  LATERAL (SELECT now() - (i % 20000) * interval '1 second') AS w(at);
         INSERT INTO {q} (key, payload, max_attempts, state, attempts, queue, created_at,
                          available_at, finished_at, last_error)
             SELECT 'job:' || lpad(i::text, 8, '0'), '{{\"n\": 1}}', 5,
                    CASE WHEN i % 1000 < 950 THEN 'done' WHEN i % 1000 < 960 THEN 'dead'
                         WHEN i % 1000 < 990 THEN 'queued' ELSE 'running' END,
                    1, 'queue-' || (i % 8), at,
                    CASE WHEN i % 1000 >= 990 THEN now() + interval '30 seconds' ELSE at END,
                    CASE WHEN i % 1000 < 960 THEN at END,
                    CASE WHEN i % 1000 BETWEEN 950 AND 959 THEN 'smtp: 550 no such user' END
             FROM generate_series(1, {jobs}) i,
                  LATERAL (SELECT now() - (i % 20000) * interval '1 second') AS w(at);
         ANALYZE {t}; ANALYZE {q};",
        t = store.table(),
        q = format!("\"{SCHEMA}\".idem_records_queue"),
        records = args.records,
        jobs = args.jobs,
    ))
    .execute(admin)
    .await
    .unwrap();
    eprintln!(
        "ui-pages: {} records and {} jobs written in {:.1} s",
        args.records,
        args.jobs,
        started.elapsed().as_secs_f64()
    );
}
