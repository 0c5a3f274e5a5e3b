//! One job that charges customers through a payment provider that honours `Idempotency-Key`,
//! then sends a receipt through an API that has no such key (a journaled effect). Cut the job off
//! mid-run and run it again: every customer is charged once.
//!
//! ```text
//! cargo run --example payments     # provider and job in one process, with a crash in the middle
//! ```
//!
//! `payments provider` runs only the provider (it prints `PROVIDER <url>`), and
//! `payments job --provider URL --database-url URL --schema S [--pause-after N]` only the job,
//! against PostgreSQL: `tests/payments_example.rs` kills the job with SIGKILL after the Nth
//! charge and runs it again.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use idem_core::journal::{Effect, Journal};
use idem_core::{idempotent, MemoryStore, Outcome, Store};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CUSTOMERS: [&str; 3] = ["cust_1", "cust_2", "cust_3"];

/// The payment and email provider stand-in.
#[derive(Default)]
struct Provider {
    /// Charges by idempotency key: a repeated key gets the first charge back.
    charges: Mutex<HashMap<String, String>>,
    charge_requests: Mutex<u64>,
    receipts: Mutex<u64>,
}

async fn charge(
    State(p): State<Arc<Provider>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    *p.charge_requests.lock().unwrap() += 1;
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("none-{}", *p.charge_requests.lock().unwrap()));
    let mut charges = p.charges.lock().unwrap();
    let replayed = charges.contains_key(&key);
    let id = charges
        .entry(key)
        .or_insert_with(|| {
            format!(
                "ch_{}_{}",
                body["customer"].as_str().unwrap_or("?"),
                body["amount"]
            )
        })
        .clone();
    Json(json!({ "id": id, "replayed": replayed }))
}

async fn receipt(State(p): State<Arc<Provider>>) -> Json<Value> {
    *p.receipts.lock().unwrap() += 1;
    Json(json!({ "sent": true }))
}

async fn stats(State(p): State<Arc<Provider>>) -> Json<Value> {
    Json(json!({
        "charges": p.charges.lock().unwrap().len(),
        "charge_requests": *p.charge_requests.lock().unwrap(),
        "receipts": *p.receipts.lock().unwrap(),
    }))
}

/// Starts the provider on a free port; returns its base URL.
async fn start_provider() -> (String, Arc<Provider>) {
    let provider = Arc::new(Provider::default());
    let app = Router::new()
        .route("/charges", post(charge))
        .route("/receipts", post(receipt))
        .route("/stats", get(stats))
        .with_state(provider.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = axum::serve(listener, app);
    tokio::spawn(async move { server.await.expect("provider") });
    (base, provider)
}

/// The job: charge every customer (keyed), then send one receipt (journaled). `pause_after`
/// stops after that many charges, so the process can be killed there.
#[idempotent(key = "invoice-run:{period}", store = store, clients(http), wait = "10s", lease = "1s")]
async fn invoice_run(
    store: &dyn Store,
    period: &str,
    http: &reqwest::Client,
    provider: &str,
    pause_after: Option<usize>,
) -> Result<Vec<String>, String> {
    let mut ids = Vec::new();
    for (i, customer) in CUSTOMERS.iter().enumerate() {
        let response = http
            .post(format!("{provider}/charges"), &format!("charge:{customer}"))
            .header("content-type", "application/json")
            .body(json!({ "customer": customer, "amount": 100 }).to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let answer: Value =
            serde_json::from_str(&response.text().await.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        println!("charged {customer}: {answer}");
        ids.push(answer["id"].as_str().unwrap_or_default().to_owned());
        if pause_after == Some(i + 1) {
            println!("PAUSED");
            std::io::stdout().flush().ok();
            tokio::time::sleep(Duration::from_secs(600)).await;
        }
    }
    let receipt = Journal::new()
        .at_least_once("send-receipt", async {
            http.post(format!("{provider}/receipts"), "receipt")
                .send()
                .await
                .map(|_| "receipt sent".to_owned())
        })
        .await
        .map_err(|e| e.to_string())?;
    match receipt {
        Effect::Ran(_) => println!("receipt sent"),
        Effect::Skipped(_) => println!("receipt was sent by an earlier run; skipped"),
        Effect::Unknown => println!("receipt unknown"),
    }
    Ok(ids)
}

async fn provider_stats(base: &str) -> Value {
    let text = reqwest::get(format!("{base}/stats"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The demo: the first run is cut off after two charges (its future dropped, as a crash or a
/// caller timeout would), the second completes.
async fn demo() -> Value {
    let (base, _provider) = start_provider().await;
    let store = MemoryStore::new();
    let http = reqwest::Client::new();
    println!("run 1 (cut off after two charges):");
    let cut = tokio::time::timeout(
        Duration::from_secs(2),
        invoice_run(&store, "2026-11", &http, &base, Some(2)),
    )
    .await;
    assert!(cut.is_err());
    println!("run 2:");
    match invoice_run(&store, "2026-11", &http, &base, None).await {
        Ok(Outcome::Executed(ids)) => println!("charges: {ids:?}"),
        other => println!("run 2: {other:?}"),
    }
    let stats = provider_stats(&base).await;
    println!("provider: {stats} (3 customers charged once each, 1 receipt)");
    stats
}

/// `payments job ...`: only the job, against PostgreSQL, for the kill test.
async fn job(args: JobArgs) {
    let JobArgs {
        provider,
        database_url,
        schema,
        pause_after,
    } = args;
    let pool = idem_examples::connect(&database_url, 4).await;
    let store = idem_store_postgres::PgStore::builder(pool)
        .schema(schema)
        .build()
        .expect("store");
    store.migrate().await.expect("migrate");
    let http = reqwest::Client::new();
    match invoice_run(&store, "2026-11", &http, &provider, pause_after).await {
        Ok(outcome) => println!("DONE {}", outcome.kind()),
        Err(e) => {
            println!("FAILED {e}");
            std::process::exit(1);
        }
    }
}

/// The demo (no command), or one of its parts as a process of its own.
#[derive(Debug, clap::Parser)]
#[command(about = "Keys to providers and a journaled receipt")]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Only the job, against PostgreSQL (for the kill test).
    Job(JobArgs),
    /// Only the fake payment provider; prints `PROVIDER <url>`.
    Provider,
}

#[derive(Debug, clap::Args)]
struct JobArgs {
    /// The provider's base URL.
    #[arg(long)]
    provider: String,
    /// The PostgreSQL database that keeps the keys and the journal.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// The schema of idem's tables.
    #[arg(long, default_value = "public")]
    schema: String,
    /// Stop (hang) after this many charges, to be killed mid-run.
    #[arg(long)]
    pause_after: Option<usize>,
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    match args.command {
        Some(Command::Job(job_args)) => job(job_args).await,
        Some(Command::Provider) => {
            let (base, _provider) = start_provider().await;
            println!("PROVIDER {base}");
            std::io::stdout().flush().ok();
            std::future::pending::<()>().await;
        }
        None => {
            demo().await;
        }
    }
}
