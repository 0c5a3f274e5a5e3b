//! A local Lambda Runtime API, for running a function binary (`lambda_runtime::run`, the real
//! runtime loop) outside Lambda: it hands the function events as Lambda does
//! (`GET /2018-06-01/runtime/invocation/next`, with the request id, deadline and function ARN
//! headers) and takes its answers (`POST .../{id}/response` and `.../{id}/error`, answered
//! `202`). The examples run on it when started outside Lambda, and the end-to-end tests run
//! function processes against it.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};

/// What the function answered to one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// It returned: the response's body.
    Response(String),
    /// It failed: the error document the runtime posted (`errorType`, `errorMessage`).
    Error(String),
}

impl Answer {
    /// The response as JSON; panics on an error answer, with the error.
    pub fn json(&self) -> serde_json::Value {
        match self {
            Answer::Response(body) => serde_json::from_str(body).expect("a JSON response"),
            Answer::Error(error) => panic!("the function failed: {error}"),
        }
    }
}

struct Pending {
    id: String,
    body: String,
    deadline_ms: u64,
    answer: oneshot::Sender<Answer>,
}

#[derive(Clone)]
struct Shared {
    next: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Pending>>>,
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Answer>>>>,
}

/// A Runtime API on a port of its own on 127.0.0.1; it stops when dropped.
pub struct RuntimeApi {
    address: SocketAddr,
    send: mpsc::UnboundedSender<Pending>,
    ids: AtomicU64,
    server: tokio::task::JoinHandle<()>,
}

impl RuntimeApi {
    /// Starts one, on the current Tokio runtime.
    pub async fn start() -> RuntimeApi {
        let (send, receive) = mpsc::unbounded_channel();
        let shared = Shared {
            next: Arc::new(tokio::sync::Mutex::new(receive)),
            waiting: Arc::default(),
        };
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a port for the Runtime API");
        let address = listener.local_addr().expect("its address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RuntimeApi {
            address,
            send,
            ids: AtomicU64::new(1),
            server,
        }
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// The environment Lambda gives a function named `function_name`, pointing at this API.
    pub fn function_env(&self, function_name: &str) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_LAMBDA_RUNTIME_API", self.address()),
            ("AWS_LAMBDA_FUNCTION_NAME", function_name.to_owned()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128".to_owned()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ]
    }

    /// Invokes the function with `event`, its deadline `timeout` from now, and waits for its
    /// answer: an [`Answer::Error`] if none came within the deadline and a minute more (the
    /// function died, or never asked for the event).
    pub async fn invoke(&self, event: &serde_json::Value, timeout: Duration) -> Answer {
        let id = format!("request-{}", self.ids.fetch_add(1, Ordering::Relaxed));
        let deadline = SystemTime::now() + timeout;
        let deadline_ms = deadline
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let (answer, answered) = oneshot::channel();
        self.send
            .send(Pending {
                id,
                body: event.to_string(),
                deadline_ms,
                answer,
            })
            .expect("the Runtime API is running");
        match tokio::time::timeout(timeout + Duration::from_secs(60), answered).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) | Err(_) => Answer::Error(format!(
                "no answer within the deadline ({timeout:?}) and a minute more"
            )),
        }
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn next(State(shared): State<Shared>) -> impl IntoResponse {
    let pending = shared.next.lock().await.recv().await;
    let Some(pending) = pending else {
        return (StatusCode::GONE, HeaderMap::new(), String::new());
    };
    shared
        .waiting
        .lock()
        .unwrap()
        .insert(pending.id.clone(), pending.answer);
    let mut headers = HeaderMap::new();
    let header = |value: &str| value.parse().expect("a header value");
    headers.insert("lambda-runtime-aws-request-id", header(&pending.id));
    headers.insert(
        "lambda-runtime-deadline-ms",
        header(&pending.deadline_ms.to_string()),
    );
    headers.insert(
        "lambda-runtime-invoked-function-arn",
        header("arn:aws:lambda:us-east-1:000000000000:function:local"),
    );
    headers.insert("content-type", header("application/json"));
    (StatusCode::OK, headers, pending.body)
}

fn answer(shared: &Shared, id: &str, answer: Answer) -> StatusCode {
    match shared.waiting.lock().unwrap().remove(id) {
        Some(waiting) => {
            let _ = waiting.send(answer);
            StatusCode::ACCEPTED
        }
        None => StatusCode::BAD_REQUEST,
    }
}

async fn response(State(shared): State<Shared>, Path(id): Path<String>, body: Bytes) -> StatusCode {
    answer(
        &shared,
        &id,
        Answer::Response(String::from_utf8_lossy(&body).into_owned()),
    )
}

async fn error(State(shared): State<Shared>, Path(id): Path<String>, body: Bytes) -> StatusCode {
    answer(
        &shared,
        &id,
        Answer::Error(String::from_utf8_lossy(&body).into_owned()),
    )
}

async fn init_error(body: Bytes) -> StatusCode {
    eprintln!(
        "the function failed to start: {}",
        String::from_utf8_lossy(&body)
    );
    StatusCode::ACCEPTED
}
