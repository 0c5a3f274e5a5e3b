//! What the layer's tests share: the stores every test runs on (the embedded one and
//! PostgreSQL), a real server on a real port, and a real HTTP client.

#![allow(dead_code)]

use axum::Router;
use idem_core::{MemoryStore, Store};
use idem_store_postgres::testing::TestStore;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A store under test, and what keeps it alive (a PostgreSQL schema of its own).
pub struct Backend {
    pub name: &'static str,
    pub store: Arc<dyn Store>,
    _schema: Option<TestStore>,
}

/// Every store the layer is tested on: `MemoryStore` and `PgStore` (which needs PostgreSQL:
/// `DATABASE_URL`, or the throwaway server `scripts/test` starts; without one this fails).
pub async fn backends() -> Vec<Backend> {
    let pg = TestStore::new("idem_t_http", 8).await;
    vec![
        Backend {
            name: "memory",
            store: Arc::new(MemoryStore::new()),
            _schema: None,
        },
        Backend {
            name: "postgres",
            store: Arc::new(pg.store.clone()),
            _schema: Some(pg),
        },
    ]
}

/// Serves `router` on 127.0.0.1 on a port of its own, until the test ends; returns its base URL.
pub async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    base
}

/// What came back.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }
}

/// The credentials a test's requests carry unless it says otherwise.
pub const CALLER: &str = "Bearer test-caller";

/// A request to `url` with `method`, key and body, as a client would send it (as [`CALLER`]).
pub async fn send(method: &str, url: &str, key: Option<&str>, body: &str) -> Answer {
    try_send(method, url, key, body, &[], Duration::from_secs(30))
        .await
        .expect("an answer")
}

/// [`send`] with extra headers and a timeout; `None` when no answer came in time (or the
/// connection broke). An `authorization` header replaces [`CALLER`]'s; an empty value sends
/// none.
pub async fn try_send(
    method: &str,
    url: &str,
    key: Option<&str>,
    body: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Option<Answer> {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = reqwest::Client::new()
        .request(method, url)
        .body(body.to_owned())
        .timeout(timeout);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    // The layer refuses requests that name no caller: unless the test sends credentials (or
    // none, with an empty `authorization`), it calls as one caller.
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("authorization"))
    {
        request = request.header("authorization", CALLER);
    }
    for (name, value) in headers {
        if !value.is_empty() {
            request = request.header(*name, *value);
        }
    }
    let response = request.send().await.ok()?;
    Some(Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().await.ok()?,
    })
}

/// Counts the runs of an inner service.
#[derive(Default)]
pub struct Runs(AtomicU64);

impl Runs {
    /// Counts one more run and returns its number (from 1).
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Runs so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Counts as if `n` runs had happened.
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::SeqCst);
    }
}

/// Waits until the inner service has run `n` times (the first request is inside it).
pub async fn wait_for_runs(runs: &Runs, n: u64) {
    for _ in 0..1000 {
        if runs.get() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the inner service never ran {n} times");
}

/// [`send`]s a POST with `key` on a task of its own, to answer while the test goes on.
pub fn in_background(url: &str, key: &'static str) -> tokio::task::JoinHandle<Answer> {
    let url = url.to_owned();
    tokio::spawn(async move { send("POST", &url, Some(key), "").await })
}
