//! A reminder endpoint as an HTTP server: `POST /jobs/send-reminder` sends one reminder per
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
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use idem_core::{idempotent, Error, Outcome, Store};
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

/// How long a delivery waits for a concurrent one of the same key (the attribute's `wait`).
const WAIT: Duration = Duration::from_secs(3);

/// The handler. Concurrent deliveries of one key wait for the first and answer "duplicate". The
/// key says which work this is; `fingerprint(user_id)` checks what the key does not say, so a
/// key reused for another user is refused instead of answered as a duplicate (that user would
/// never get the email).
///
/// `detach`: when the scheduler's timeout cuts the request (it closes the connection and the
/// server drops the handler), the send goes on to its end and is recorded, so the reminder
/// still goes out once and the scheduler's retry is a duplicate. Without it the send would stop
/// wherever it was, unrecorded, and the retry would send again. The body outlives the request,
/// so it owns its inputs: an `Arc<App>` and the key as a `String`.
#[idempotent(
    key = "{job_key}",
    store = app.store,
    wait = "3s",
    fingerprint(user_id),
    detach
)]
async fn send_reminder(app: Arc<App>, job_key: String, user_id: u64) -> Result<(), MailError> {
    tokio::time::sleep(Duration::from_millis(50)).await; // the email API call, to `user_id`
    app.emails_sent.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

fn answer(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

async fn send_reminder_endpoint(
    State(app): State<Arc<App>>,
    job: Result<Json<Job>, JsonRejection>,
) -> Response {
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
    match send_reminder(app, job.job_key.clone(), job.user_id).await {
        Ok(Outcome::Executed(())) => answer(StatusCode::OK, json!({ "status": "sent" })),
        // A 2xx for duplicates, or the caller retries again.
        Ok(Outcome::Duplicate { .. }) => {
            answer(StatusCode::OK, json!({ "status": "duplicate, skipped" }))
        }
        // Still running elsewhere after waiting: not done, so not a 2xx; say when to retry.
        Ok(Outcome::InProgress { lease_expires_at }) => {
            let retry_after = lease_expires_at
                .duration_since(std::time::SystemTime::now())
                .map_or(1, |left| left.as_secs().max(1));
            let body = json!({
                "error": format!(
                    "job_key {:?} is still being worked on by another delivery after waiting \
                     {WAIT:?}; retry after {retry_after} s",
                    job.job_key
                ),
                "retry_after_seconds": retry_after,
            });
            (
                StatusCode::CONFLICT,
                [(header::RETRY_AFTER, retry_after.to_string())],
                Json(body),
            )
                .into_response()
        }
        Err(Error::KeyReused { key }) => answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({
                "error": format!(
                    "job_key {key:?} was already used with another user_id; nothing was sent. \
                     A job_key names one piece of work: use a new one for new work"
                )
            }),
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

/// The embedded store, or the one a URL names (PostgreSQL, or `sqlite://PATH`); an unreachable
/// one exits at once, naming the address: never a silent fallback to the embedded store.
async fn store(database_url: Option<&str>) -> (Arc<dyn Store>, &'static str) {
    idem_examples::store(database_url, "public").await
}

/// The reminder endpoint. Unknown flags and missing values exit with status 2 and the usage.
#[derive(Debug, clap::Parser)]
#[command(about = "A reminder endpoint: POST /jobs/send-reminder, idempotent on job_key")]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:5000")]
    addr: String,
    /// Keep the keys in PostgreSQL (shared by every server on it) or in a SQLite file
    /// (`sqlite://PATH`, shared by the processes of this machine); without it, in the embedded
    /// store of this process.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
}

#[tokio::main]
async fn main() {
    let Args { addr, database_url } = clap::Parser::parse();
    let (store, kind) = store(database_url.as_deref()).await;
    let app = Arc::new(App {
        store,
        emails_sent: AtomicU64::new(0),
    });
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .expect("bind --addr");
    println!(
        "send_reminder listening on http://{addr} ({} store)",
        match kind {
            "postgres" => "PostgreSQL",
            "sqlite" => "SQLite",
            _ => "embedded",
        }
    );
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    idem_examples::serve(listener, router(app), stop, Duration::from_secs(5))
        .await
        .expect("serve");
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::MemoryStore;

    async fn start(store: Arc<dyn Store>) -> (String, Arc<App>) {
        let app = Arc::new(App {
            store,
            emails_sent: AtomicU64::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = idem_examples::serve(
            listener,
            router(app.clone()),
            std::future::pending(),
            Duration::ZERO,
        );
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

    /// Two parallel `curl`s of one key, with 20 deliveries instead of 2.
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
        let url = idem_store_postgres::testing::database_url();
        parallel_deliveries_send_once(store(Some(&url)).await.0).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn parallel_deliveries_send_once_on_sqlite() {
        let dir = std::env::temp_dir().join(format!("idem-reminder-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("idem.db").display());
        let (store, kind) = store(Some(&url)).await;
        assert_eq!(kind, "sqlite");
        parallel_deliveries_send_once(store).await;
        let _ = std::fs::remove_dir_all(dir);
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

    /// Regression: `{"job_key":"reuse-1","user_id":7}` after user 42 was sent under that key
    /// answered "duplicate, skipped", and user 7 never got the email. The key is fingerprinted
    /// with `user_id`: reused for another user, it is refused with a 422 that says why.
    #[tokio::test]
    async fn a_key_reused_for_another_user_is_refused() {
        let (base, _) = start(Arc::new(MemoryStore::new())).await;
        let first = json!({ "job_key": "reuse-1", "user_id": 42 }).to_string();
        assert_eq!(post(&base, first.clone()).await.0, 200);
        let (code, answer) = post(&base, first).await;
        assert_eq!(
            (code, answer["status"].as_str()),
            (200, Some("duplicate, skipped"))
        );
        let other = json!({ "job_key": "reuse-1", "user_id": 7 }).to_string();
        let (code, answer) = post(&base, other).await;
        assert_eq!(code, 422, "{answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("user_id"),
            "{answer}"
        );
        assert_eq!(emails_sent(&base).await, 1);
    }

    /// A key another delivery still holds after the wait is not done: 409, with `Retry-After`
    /// and a JSON body, never a 2xx (which would tell the caller it was sent).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn still_in_progress_after_waiting_is_a_409_with_retry_after() {
        let store = Arc::new(MemoryStore::new());
        // Held by another delivery of the handler: its key, in the handler's scope.
        let key = idem_core::Key::new("held-1")
            .unwrap()
            .with_scope("send_reminder")
            .unwrap();
        let held = store
            .claim(idem_core::ClaimRequest {
                key: &key,
                fingerprint: None,
                lease: Duration::from_secs(60),
                token: None,
            })
            .await
            .unwrap();
        assert!(matches!(held, idem_core::Claim::Acquired { .. }));
        let (base, _) = start(store).await;
        let response = reqwest::Client::new()
            .post(format!("{base}/jobs/send-reminder"))
            .header("content-type", "application/json")
            .body(json!({ "job_key": "held-1", "user_id": 1 }).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 409);
        let retry_after: u64 = response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
        let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        assert_eq!(body["retry_after_seconds"].as_u64(), Some(retry_after));
        assert!(body["error"].as_str().unwrap().contains("held-1"), "{body}");
        assert_eq!(emails_sent(&base).await, 0);
    }

    /// Slow or idle clients are cut off (regression: a client that sent half its headers held
    /// the connection for 75 s and more): no headers within the header timeout, and the server
    /// closes the connection.
    #[tokio::test]
    async fn a_client_that_never_finishes_its_headers_is_disconnected() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (base, _) = start(Arc::new(MemoryStore::new())).await;
        let mut stream = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
            .await
            .unwrap();
        stream
            .write_all(b"POST /jobs/send-reminder HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(
            idem_examples::HEADER_READ_TIMEOUT * 4,
            stream.read_to_end(&mut rest),
        )
        .await;
        assert!(closed.is_ok(), "the half-open connection was still held");
    }

    /// A body that never arrives fails the request with a 4xx instead of holding it open.
    #[tokio::test]
    async fn a_client_that_never_sends_its_body_gets_an_error() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (base, _) = start(Arc::new(MemoryStore::new())).await;
        let mut stream = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
            .await
            .unwrap();
        stream
            .write_all(
                b"POST /jobs/send-reminder HTTP/1.1\r\nhost: x\r\n\
                  content-type: application/json\r\ncontent-length: 100\r\n\r\n{\"job_key\"",
            )
            .await
            .unwrap();
        let mut answer = vec![0u8; 1024];
        let read = tokio::time::timeout(
            idem_examples::BODY_READ_TIMEOUT * 3,
            stream.read(&mut answer),
        )
        .await
        .expect("answered before the guard ran out")
        .unwrap();
        let head = String::from_utf8_lossy(&answer[..read]);
        assert!(head.starts_with("HTTP/1.1 4"), "{head}");
    }

    /// Flags fail closed (regression: `--database-url=URL`, a misspelled flag or a flag without
    /// its value silently ran the embedded store, so two servers each sent the same email).
    #[test]
    fn flags_are_parsed_strictly() {
        use clap::Parser;
        let parsed = Args::try_parse_from(["send_reminder", "--database-url=postgres://h/db"]);
        assert_eq!(
            parsed.unwrap().database_url.as_deref(),
            Some("postgres://h/db")
        );
        for wrong in [
            &["send_reminder", "--databse-url", "postgres://h/db"][..],
            &["send_reminder", "--database-url"][..],
            &["send_reminder", "--addr"][..],
        ] {
            let error = Args::try_parse_from(wrong).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{wrong:?}");
        }
    }
}
