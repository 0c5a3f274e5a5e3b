//! Respond fast, work later: `POST /work` stores the work under its key and answers 202 at
//! once; background workers process each item once, with retries and a dead-letter state.
//!
//! ```text
//! cargo run --example accept_then_work   # PostgreSQL at DATABASE_URL, else localhost's
//!
//! curl -s -X POST localhost:5001/work -H 'content-type: application/json' \
//!     -d '{"key":"welcome:42","payload":{"user":42}}'
//! # {"key":"welcome:42","status":"queued"}       (202, at once)
//! # ... the same request again: {"key":"welcome:42","status":"duplicate"}
//! curl -s localhost:5001/work/stats   # {"queued":0,"running":0,"done":1,"dead":0,"runs":1}
//! curl -s localhost:5001/work/welcome:42   # {"key":"welcome:42","state":"done","attempts":1,..}
//! ```
//!
//! Other flags: `--schema S` (default `public`), `--work-ms MS` (how long each item's simulated
//! work takes, default 200), `--max-attempts N` (default 5). A payload with `"fail_times": n`
//! fails its first n attempts, to watch retries and the dead-letter state. SIGTERM or Ctrl-C
//! stops claiming and gives running items 10 s to finish; the rest go back to the queue.

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use idem_queue::{EnqueueError, Job, NewJob, Queue};
use idem_store_postgres::PgStore;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Request bodies larger than this are refused with 413.
const BODY_LIMIT: usize = 64 * 1024;

/// How long running items get to finish at shutdown.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

struct App {
    queue: Queue,
    max_attempts: u32,
    /// Handler bodies this process ran.
    runs: AtomicU64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkRequest {
    key: String,
    payload: Value,
}

fn answer(status: StatusCode, body: Value) -> (StatusCode, Json<Value>) {
    (status, Json(body))
}

/// `POST /work`: stores the item (once per key) and answers 202 without waiting for it.
async fn accept(
    State(app): State<Arc<App>>,
    request: Result<Json<WorkRequest>, JsonRejection>,
) -> (StatusCode, Json<Value>) {
    let request = match request {
        Ok(Json(request)) => request,
        // Malformed JSON (400), a missing or unknown field (422), a wrong content type (415),
        // too large (413): nothing is stored.
        Err(rejection) => {
            return answer(
                rejection.status(),
                json!({ "error": rejection.body_text() }),
            )
        }
    };
    let job = NewJob::new(request.key.as_str(), &request.payload)
        .map(|job| job.max_attempts(app.max_attempts));
    let enqueued = match job {
        Ok(job) => app.queue.enqueue(job).await,
        Err(e) => Err(e),
    };
    match enqueued {
        Ok(enqueued) => answer(
            StatusCode::ACCEPTED,
            json!({ "key": request.key, "status": enqueued.as_str() }),
        ),
        Err(e @ (EnqueueError::InvalidKey(_) | EnqueueError::Payload(_))) => answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({ "error": e.to_string() }),
        ),
        Err(e @ EnqueueError::KeyReused { .. }) => {
            answer(StatusCode::CONFLICT, json!({ "error": e.to_string() }))
        }
        Err(e) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": e.to_string() }),
        ),
    }
}

/// `GET /work/stats`: the queue's counts from the database, and this process's handler runs.
async fn stats(State(app): State<Arc<App>>) -> (StatusCode, Json<Value>) {
    match app.queue.stats().await {
        Ok(s) => answer(
            StatusCode::OK,
            json!({
                "queued": s.queued,
                "running": s.running,
                "done": s.done,
                "dead": s.dead,
                "runs": app.runs.load(Ordering::SeqCst),
            }),
        ),
        Err(e) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": e.to_string() }),
        ),
    }
}

/// `GET /work/{key}`: one item's state.
async fn status(State(app): State<Arc<App>>, Path(key): Path<String>) -> (StatusCode, Json<Value>) {
    match app.queue.status(&key).await {
        Ok(Some(s)) => answer(
            StatusCode::OK,
            json!({
                "key": key,
                "state": s.state.as_str(),
                "attempts": s.attempts,
                "last_error": s.last_error,
            }),
        ),
        Ok(None) => answer(
            StatusCode::NOT_FOUND,
            json!({ "error": format!("no work stored under key {key:?}") }),
        ),
        Err(e) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": e.to_string() }),
        ),
    }
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/work", post(accept))
        .route("/work/stats", get(stats))
        .route("/work/{key}", get(status))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(app)
}

/// The work itself: runs once per key (inside an idempotent call keyed by it).
async fn work(app: Arc<App>, work_ms: u64, job: Job) -> Result<(), String> {
    app.runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(work_ms)).await;
    let fail_times = job.payload()["fail_times"].as_u64().unwrap_or(0);
    if u64::from(job.attempt()) <= fail_times {
        return Err(format!(
            "failing on purpose (attempt {} of {})",
            job.attempt(),
            job.max_attempts()
        ));
    }
    Ok(())
}

/// Respond fast, work later. Unknown flags and missing values exit with status 2 and the usage.
#[derive(Debug, clap::Parser)]
#[command(about = "POST /work answers 202 at once; workers run each item once")]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:5001")]
    addr: String,
    /// The PostgreSQL database that keeps the queue (there is no embedded queue).
    #[arg(long, env = "DATABASE_URL", default_value = idem_examples::DEFAULT_DATABASE_URL)]
    database_url: String,
    /// The schema of the queue's tables.
    #[arg(long, default_value = "public")]
    schema: String,
    /// Jobs run at once.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// How long each job's work takes (ms).
    #[arg(long, default_value_t = 200)]
    work_ms: u64,
    /// Attempts per job before it is dead-lettered.
    #[arg(long, default_value_t = 5)]
    max_attempts: u32,
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    let (addr, workers, work_ms) = (args.addr, args.workers, args.work_ms);
    let pool = idem_examples::connect(&args.database_url, workers as u32 + 8).await;
    // The defaults: the store holds up to half the pool for the workers' statements.
    let store = PgStore::builder(pool)
        .schema(args.schema)
        .build()
        .expect("--schema must be a plain lowercase name");
    let queue = Queue::new(&store);
    queue.migrate().await.expect("migrate");
    let app = Arc::new(App {
        queue,
        max_attempts: args.max_attempts,
        runs: AtomicU64::new(0),
    });

    let worker_app = app.clone();
    let running = app
        .queue
        .worker(move |job: Job| work(worker_app.clone(), work_ms, job))
        .concurrency(workers)
        .start();

    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .expect("bind --addr");
    // Tests read this line for the bound address (with --addr 127.0.0.1:0).
    println!(
        "LISTENING http://{} ({workers} workers)",
        listener.local_addr().expect("local address")
    );
    idem_examples::serve(
        listener,
        router(app),
        idem_examples::shutdown_signal(),
        SHUTDOWN_DEADLINE,
    )
    .await
    .expect("serve");
    let report = running.shutdown(SHUTDOWN_DEADLINE).await;
    println!(
        "STOPPED finished={} released={}",
        report.finished, report.released
    );
}
