//! An HTTP API whose clients retry: `POST /charges` with an `Idempotency-Key` charges once per
//! key and caller, and every retry gets the first answer back (idem-http's `IdempotencyLayer`).
//!
//! ```text
//! cargo run --example http_api -- --addr 127.0.0.1:5001            # embedded MemoryStore
//! cargo run --example http_api -- --addr 127.0.0.1:5001 \
//!     --database-url postgres://postgres@127.0.0.1:5432/test       # PgStore: servers share keys
//! cargo run --example http_api -- --database-url sqlite://idem.db # SqliteStore: one machine
//!
//! curl -si localhost:5001/charges -H 'authorization: Bearer tok_1' \
//!     -H 'idempotency-key: 8e03978e' -d '{"customer":"c1","amount":100}'
//! # HTTP/1.1 201 Created, location: /charges/ch_..., {"id":"ch_...","customer":"c1","amount":100}
//! # the same again: the same answer, byte for byte, plus idempotent-replayed: true
//! curl -s localhost:5001/charges/stats    # {"charges":1}
//! ```
//!
//! A client that gives up early is still charged, once: the layer runs each request to its end
//! when its client goes away (`IdempotencyLayer::finish_when_client_leaves`, on by default), so
//! the retry gets 409 while the charge runs and then its answer, never a second charge.
//!
//! ```text
//! curl -s --max-time 1 localhost:5001/charges -H 'authorization: Bearer tok_1' \
//!     -H 'idempotency-key: k-slow' -d '{"customer":"c1","amount":100,"delay_ms":3000}'
//! # curl: (28) Operation timed out; the charge goes on. The same again at once: 409; after
//! # 3 s: 201, idempotent-replayed: true, and /charges/stats says {"charges":1}
//! ```
//!
//! The body may add `"delay_ms": N` (the provider takes N ms) and `"fail_times": N` (the
//! provider answers 503 to the first N attempts for this key, which release the key). Other
//! flags: `--schema S` (PostgreSQL, default `public`), `--lease-ms MS` (default 30000),
//! `--wait-ms MS` (wait for an in-flight first request instead of answering 409).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use idem_core::{context, Store};
use idem_http::{scope, IdempotencyLayer};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long requests in flight get to finish at shutdown.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Provider {
    /// Charges made by this process.
    charges: AtomicU64,
    /// Attempts per idempotency key, for `fail_times`.
    attempts: Mutex<HashMap<String, u64>>,
}

/// A 400 in the shape of the layer's own answers (RFC 9457). It is a final answer, so the
/// layer records it and replays it to retries, as the draft allows.
fn invalid(detail: &str) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": "Invalid charge",
        "status": 400,
        "detail": detail,
    });
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, idem_http::PROBLEM_JSON)],
        body.to_string(),
    )
        .into_response()
}

/// `POST /charges`: runs once per (caller, key); the layer answers retries.
async fn charge(State(provider): State<Arc<Provider>>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return invalid("the body must be a JSON object");
    };
    let Some(customer) = request["customer"].as_str() else {
        return invalid("`customer` must be a string");
    };
    let amount = match request["amount"].as_u64() {
        Some(amount) if amount > 0 => amount,
        _ => return invalid("`amount` must be a positive integer"),
    };
    let delay = request["delay_ms"].as_u64().unwrap_or(0);
    let fail_times = request["fail_times"].as_u64().unwrap_or(0);

    // The request's idem call: its key is what a real provider gets as its idempotency key.
    let call = context::current().expect("the layer runs this handler inside a call");
    let provider_key = format!("{}/{}", call.key().scope(), call.key().as_str());
    let attempt = {
        let mut attempts = provider.attempts.lock().unwrap();
        let n = attempts.entry(provider_key).or_insert(0);
        *n += 1;
        *n
    };
    tokio::time::sleep(Duration::from_millis(delay)).await;
    if attempt <= fail_times {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": "the provider is unavailable; retry" })),
        )
            .into_response();
    }
    provider.charges.fetch_add(1, Ordering::SeqCst);
    let id = format!("ch_{:016x}", random_u64());
    let mut headers = HeaderMap::new();
    headers.insert(header::LOCATION, format!("/charges/{id}").parse().unwrap());
    let body = json!({ "id": id, "customer": customer, "amount": amount });
    (StatusCode::CREATED, headers, Json(body)).into_response()
}

/// `GET /charges/stats`: how many times this process charged.
async fn stats(State(provider): State<Arc<Provider>>) -> Json<Value> {
    Json(json!({ "charges": provider.charges.load(Ordering::SeqCst) }))
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

fn router(store: Arc<dyn Store>, args: &Args) -> Router {
    let mut layer = IdempotencyLayer::new(store)
        .scope(scope::bearer_token)
        .lease(Duration::from_millis(args.lease_ms));
    if let Some(wait) = args.wait_ms {
        layer = layer.wait(Duration::from_millis(wait));
    }
    Router::new()
        .route("/charges", post(charge))
        .route("/charges/stats", get(stats))
        .layer(layer)
        .with_state(Arc::new(Provider::default()))
}

/// POST /charges charges once per Idempotency-Key and caller. Unknown flags and missing values
/// exit with status 2 and the usage.
#[derive(Debug, clap::Parser)]
#[command(about = "POST /charges with an Idempotency-Key charges once; retries replay")]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:5001")]
    addr: String,
    /// Where to keep the keys: a PostgreSQL URL (shared by every server on it) or
    /// `sqlite://PATH` (a file, shared by the processes of this machine). Without it, keys live
    /// in this process's memory.
    #[arg(long)]
    database_url: Option<String>,
    /// The schema of the store's table (PostgreSQL only).
    #[arg(long, default_value = "public")]
    schema: String,
    /// How long a claim holds without renewal; a retry after a crash waits this long.
    #[arg(long, default_value_t = 30_000)]
    lease_ms: u64,
    /// Wait up to this long for an in-flight first request instead of answering 409.
    #[arg(long)]
    wait_ms: Option<u64>,
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    let (store, which) = idem_examples::store(args.database_url.as_deref(), &args.schema).await;
    let listener = tokio::net::TcpListener::bind(&args.addr)
        .await
        .expect("bind --addr");
    // Tests read this line for the bound address (with --addr 127.0.0.1:0).
    println!(
        "LISTENING http://{} (store: {which})",
        listener.local_addr().expect("local address")
    );
    idem_examples::serve(
        listener,
        router(store, &args),
        idem_examples::shutdown_signal(),
        SHUTDOWN_DEADLINE,
    )
    .await
    .expect("serve");
}
