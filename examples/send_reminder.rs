//! The article's endpoint as an HTTP server: `POST /jobs/send-reminder` sends one reminder per
//! `job_key`, however many times and however concurrently it is delivered.
//!
//! ```text
//! cargo run --example send_reminder -- --addr 127.0.0.1:5000                  # embedded store
//! cargo run --example send_reminder -- --addr 127.0.0.1:5000 --database-url postgres://..
//!
//! for i in 1 2; do
//!   curl -s -X POST localhost:5000/jobs/send-reminder \
//!     -H 'content-type: application/json' \
//!     -d '{"job_key":"test-1","user_id":42}' &
//! done; wait
//! # {"status":"sent"}{"status":"duplicate, skipped"}
//! curl -s localhost:5000/stats   # {"emails_sent":1}
//! ```

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use idem_core::{idempotent, Error, MemoryStore, Outcome, Store};
use idem_store_postgres::PgStore;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Request bodies larger than this are refused with 413.
const BODY_LIMIT: usize = 16 * 1024;

struct App {
    store: Arc<dyn Store>,
    emails_sent: AtomicU64,
}

#[derive(Deserialize)]
struct Job {
    job_key: String,
    user_id: u64,
}

#[derive(Debug)]
struct MailError;

impl std::fmt::Display for MailError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the email API failed")
    }
}

/// The handler. Concurrent deliveries of one key wait for the first and answer "duplicate".
#[idempotent(key = "{job_key}", store = app.store, wait = "10s")]
async fn send_reminder(app: &App, job_key: &str, user_id: u64) -> Result<(), MailError> {
    tokio::time::sleep(Duration::from_millis(50)).await; // the email API call
    app.emails_sent.fetch_add(1, Ordering::SeqCst);
    let _ = user_id;
    Ok(())
}

fn answer(status: StatusCode, body: Value) -> (StatusCode, Json<Value>) {
    (status, Json(body))
}

async fn send_reminder_endpoint(
    State(app): State<Arc<App>>,
    job: Result<Json<Job>, JsonRejection>,
) -> (StatusCode, Json<Value>) {
    let job = match job {
        Ok(Json(job)) => job,
        // Malformed JSON (400), a missing field or a wrong type (422), a wrong content type
        // (415): nothing is claimed.
        Err(rejection) => {
            return answer(
                rejection.status(),
                json!({ "error": rejection.body_text() }),
            )
        }
    };
    if job.job_key.trim().is_empty() {
        return answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({ "error": "`job_key` must not be empty: it names the work, e.g. \"reminder:user42:2026-11-01\"" }),
        );
    }
    match send_reminder(&app, &job.job_key, job.user_id).await {
        Ok(Outcome::Executed(())) => answer(StatusCode::OK, json!({ "status": "sent" })),
        // A 2xx for duplicates, or the caller retries again.
        Ok(Outcome::Duplicate { .. }) => {
            answer(StatusCode::OK, json!({ "status": "duplicate, skipped" }))
        }
        Ok(Outcome::InProgress { .. }) => answer(
            StatusCode::CONFLICT,
            json!({ "status": "in progress elsewhere; retry later" }),
        ),
        Err(Error::InvalidKey(e)) => answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({ "error": e.to_string() }),
        ),
        Err(Error::Handler(e)) => {
            answer(StatusCode::BAD_GATEWAY, json!({ "error": e.to_string() }))
        }
        Err(e @ Error::Store(_)) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": e.to_string() }),
        ),
        Err(e) => answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": e.to_string() }),
        ),
    }
}

async fn stats(State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({ "emails_sent": app.emails_sent.load(Ordering::SeqCst) }))
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/jobs/send-reminder", post(send_reminder_endpoint))
        .route("/stats", get(stats))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(app)
}

/// The embedded store, or PostgreSQL when a URL is given (an unreachable one exits at once,
/// naming the address: never a silent fallback to the embedded store).
async fn store(database_url: Option<&str>) -> Arc<dyn Store> {
    match database_url {
        None => Arc::new(MemoryStore::new()),
        Some(url) => {
            let pool = idem_examples::connect(url, 16).await;
            let store = PgStore::builder(pool)
                .dedicated_connections(8)
                .build()
                .expect("store");
            store.migrate().await.expect("migrate");
            Arc::new(store)
        }
    }
}

/// The article's endpoint. Unknown flags and missing values exit with status 2 and the usage.
#[derive(Debug, clap::Parser)]
#[command(about = "The article's endpoint: POST /jobs/send-reminder, idempotent on job_key")]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:5000")]
    addr: String,
    /// Keep the keys in PostgreSQL (shared by every server on it); without it, in the embedded
    /// store of this process.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
}

#[tokio::main]
async fn main() {
    let Args { addr, database_url } = clap::Parser::parse();
    let app = Arc::new(App {
        store: store(database_url.as_deref()).await,
        emails_sent: AtomicU64::new(0),
    });
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .expect("bind --addr");
    println!(
        "send_reminder listening on http://{addr} ({} store)",
        if database_url.is_some() {
            "PostgreSQL"
        } else {
            "embedded"
        }
    );
    axum::serve(listener, router(app)).await.expect("serve");
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn start(store: Arc<dyn Store>) -> (String, Arc<App>) {
        let app = Arc::new(App {
            store,
            emails_sent: AtomicU64::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = axum::serve(listener, router(app.clone()));
        tokio::spawn(async move { server.await.expect("serve") });
        (base, app)
    }

    async fn post(base: &str, body: impl Into<String>) -> (u16, Value) {
        let response = reqwest::Client::new()
            .post(format!("{base}/jobs/send-reminder"))
            .header("content-type", "application/json")
            .body(body.into())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(json!({ "raw": text })),
        )
    }

    async fn emails_sent(base: &str) -> u64 {
        let text = reqwest::get(format!("{base}/stats"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        serde_json::from_str::<Value>(&text).unwrap()["emails_sent"]
            .as_u64()
            .unwrap()
    }

    /// The article's parallel `curl` test, with 20 deliveries instead of 2.
    async fn parallel_deliveries_send_once(store: Arc<dyn Store>) {
        let (base, _) = start(store).await;
        let key = format!("test-{}", std::process::id());
        let body = json!({ "job_key": key, "user_id": 42 }).to_string();
        let deliveries: Vec<_> = (0..20)
            .map(|_| {
                let (base, body) = (base.clone(), body.clone());
                tokio::spawn(async move { post(&base, body).await })
            })
            .collect();
        let mut statuses = Vec::new();
        for delivery in deliveries {
            let (code, answer) = delivery.await.unwrap();
            assert_eq!(code, 200, "{answer}");
            statuses.push(answer["status"].as_str().unwrap().to_owned());
        }
        assert_eq!(
            statuses.iter().filter(|s| *s == "sent").count(),
            1,
            "{statuses:?}"
        );
        assert_eq!(
            statuses
                .iter()
                .filter(|s| *s == "duplicate, skipped")
                .count(),
            19,
            "{statuses:?}"
        );
        assert_eq!(emails_sent(&base).await, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn parallel_deliveries_send_once_on_the_embedded_store() {
        parallel_deliveries_send_once(Arc::new(MemoryStore::new())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn parallel_deliveries_send_once_on_postgres() {
        let url = idem_testdb::database_url();
        parallel_deliveries_send_once(store(Some(&url)).await).await;
    }

    /// Bad input gets a 4xx JSON error that names the problem, and changes nothing.
    #[tokio::test]
    async fn bad_input_is_refused_with_a_clear_error() {
        let (base, _) = start(Arc::new(MemoryStore::new())).await;
        let long_key = "k".repeat(600);
        let huge = json!({ "job_key": "x".repeat(BODY_LIMIT * 2), "user_id": 1 }).to_string();
        let cases: Vec<(String, u16, &str)> = vec![
            ("{not json".into(), 400, "JSON"),
            (json!({ "user_id": 42 }).to_string(), 422, "job_key"),
            (
                json!({ "job_key": "", "user_id": 42 }).to_string(),
                422,
                "job_key",
            ),
            (
                json!({ "job_key": "a", "user_id": "x" }).to_string(),
                422,
                "user_id",
            ),
            (
                json!({ "job_key": long_key, "user_id": 42 }).to_string(),
                422,
                "512",
            ),
            (huge, 413, ""),
        ];
        for (body, status, mentions) in cases {
            let (code, answer) = post(&base, body).await;
            assert_eq!(code, status, "{answer}");
            let text = answer.to_string();
            assert!(
                text.contains(mentions),
                "{status}: {text} should mention {mentions}"
            );
        }
        assert_eq!(emails_sent(&base).await, 0, "nothing was sent");
    }
}
