//! What happens when a client gives up mid-request (hyper drops the request's future), in both
//! settings of `finish_when_client_leaves`: by default the request runs to its end and the
//! retry gets its answer; with it off the run is cut where it was and the retry runs again.
//!
//! Every test synchronises by gates: the handler says it started, the test's client gives up,
//! the server says it dropped the request, and only then does the test let the handler answer.

mod support;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use idem_http::IdempotencyLayer;
use std::sync::Arc;
use std::time::Duration;
use support::{backends, send, serve, try_send, Answer, Runs};
use tokio::sync::Notify;

/// The gates between a test and its server.
#[derive(Default)]
struct Gates {
    /// Runs of the handler that started.
    runs: Runs,
    /// Runs of the handler that reached their end.
    finished: Runs,
    /// The handler has started a run.
    started: Notify,
    /// The test lets a run of the handler answer.
    answer: Notify,
    /// The server dropped a request's future before it answered: its client went away.
    dropped: Notify,
}

/// Counts a run, says it started, and answers 201 once the test lets it.
async fn gated(State(gates): State<Arc<Gates>>) -> (StatusCode, String) {
    let n = gates.runs.next();
    gates.started.notify_one();
    gates.answer.notified().await;
    gates.finished.next();
    (StatusCode::CREATED, format!("run {n}"))
}

/// The task a connection's requests start on, as the server polls them.
#[derive(Clone, Copy, PartialEq, Eq)]
struct ConnectionTask(Option<tokio::task::Id>);

/// Answers whether the handler runs on the connection's task or on a task of its own.
async fn which_task(Extension(connection): Extension<ConnectionTask>) -> Response {
    let on_connection = ConnectionTask(tokio::task::try_id()) == connection;
    let answer = if on_connection { "inline" } else { "spawned" };
    (StatusCode::CREATED, answer).into_response()
}

/// Outside the layer: notes the connection's task, and signals `dropped` when the server drops
/// the request's future before it answered.
async fn watch(State(gates): State<Arc<Gates>>, mut request: Request, next: Next) -> Response {
    /// Signals `dropped` when dropped while it still holds the gates.
    struct Unanswered(Option<Arc<Gates>>);
    impl Drop for Unanswered {
        fn drop(&mut self) {
            if let Some(gates) = self.0.take() {
                gates.dropped.notify_one();
            }
        }
    }
    let mut unanswered = Unanswered(Some(gates));
    request
        .extensions_mut()
        .insert(ConnectionTask(tokio::task::try_id()));
    let response = next.run(request).await;
    unanswered.0 = None;
    response
}

fn app(layer: IdempotencyLayer, gates: Arc<Gates>) -> Router {
    Router::new()
        .route("/charges", post(gated))
        .route("/task", get(which_task).post(which_task))
        .layer(layer)
        .layer(from_fn_with_state(gates.clone(), watch))
        .with_state(gates)
}

/// Sends a POST with `key` and gives up (drops the request) once the handler has started a run;
/// returns once the server has dropped the request's future.
async fn give_up_mid_run(url: &str, key: &str, gates: &Gates) {
    tokio::select! {
        answer = send("POST", url, Some(key), "") => panic!("answered before the handler was let: {answer:?}"),
        () = gates.started.notified() => {}
    }
    // The request's future is dropped here: its connection closes, and the server notices.
    tokio::time::timeout(Duration::from_secs(10), gates.dropped.notified())
        .await
        .expect("the server never dropped the request of the client that went away");
}

/// Retries `key` until the answer is not 409 (the first run still in progress), within a
/// deadline.
async fn retry_until_not_in_progress(url: &str, key: &str) -> Answer {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = send("POST", url, Some(key), "").await;
        if answer.status != 409 {
            return answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still in progress after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_run_of_a_client_that_gave_up_finishes_and_its_retry_gets_the_answer() {
    for backend in backends().await {
        let gates = Arc::new(Gates::default());
        let base = serve(app(
            IdempotencyLayer::new(backend.store.clone()),
            gates.clone(),
        ))
        .await;
        let url = format!("{base}/charges");
        give_up_mid_run(&url, "gone", &gates).await;
        // The client is gone and the server dropped its request: the run goes on.
        gates.answer.notify_one();
        let retry = retry_until_not_in_progress(&url, "gone").await;
        assert_eq!(
            (retry.status, retry.body.as_str()),
            (201, "run 1"),
            "{}: the first run's answer",
            backend.name
        );
        assert!(retry.replayed(), "{}", backend.name);
        assert_eq!(
            gates.runs.get(),
            1,
            "{}: the work happened once",
            backend.name
        );
        assert_eq!(gates.finished.get(), 1, "{}", backend.name);
    }
}

#[tokio::test]
async fn a_retry_while_the_abandoned_run_goes_on_gets_409() {
    for backend in backends().await {
        let gates = Arc::new(Gates::default());
        let base = serve(app(
            IdempotencyLayer::new(backend.store.clone()),
            gates.clone(),
        ))
        .await;
        let url = format!("{base}/charges");
        give_up_mid_run(&url, "early", &gates).await;
        // Answered at once; a retry that ran the handler again would wait on the closed gate.
        let early = try_send(
            "POST",
            &url,
            Some("early"),
            "",
            &[],
            Duration::from_secs(10),
        )
        .await
        .expect("the retry was answered at once, not run again");
        assert_eq!(
            early.status, 409,
            "{}: the first run still holds the key",
            backend.name
        );
        assert_eq!(early.header("retry-after"), Some("1"));
        gates.answer.notify_one();
        let later = retry_until_not_in_progress(&url, "early").await;
        assert_eq!((later.status, later.body.as_str()), (201, "run 1"));
        assert!(later.replayed(), "{}", backend.name);
        assert_eq!(gates.runs.get(), 1, "{}", backend.name);
    }
}

/// With the option off, the run of a client that gives up is cut where it was (it never reaches
/// its end), its claim is abandoned and the key freed at once (long before the 30 s lease), and
/// the retry runs the handler again: what the cut run did before, the retry does again.
#[tokio::test]
async fn without_finish_when_client_leaves_the_cut_run_frees_its_key_and_the_retry_runs_again() {
    for backend in backends().await {
        let gates = Arc::new(Gates::default());
        let layer = IdempotencyLayer::new(backend.store.clone()).finish_when_client_leaves(false);
        let base = serve(app(layer, gates.clone())).await;
        let url = format!("{base}/charges");
        give_up_mid_run(&url, "cut", &gates).await;
        assert_eq!(
            gates.finished.get(),
            0,
            "{}: the cut run never reached its end",
            backend.name
        );
        // Lets the retry's run answer (the cut run is gone: nothing else waits on the gate).
        gates.answer.notify_one();
        let retry = retry_until_not_in_progress(&url, "cut").await;
        assert_eq!(
            (retry.status, retry.body.as_str()),
            (201, "run 2"),
            "{}: the retry ran again",
            backend.name
        );
        assert!(!retry.replayed());
        assert_eq!(gates.runs.get(), 2, "{}", backend.name);
        assert_eq!(
            gates.finished.get(),
            1,
            "{}: only the retry finished",
            backend.name
        );
    }
}

#[tokio::test]
async fn only_requests_the_layer_handles_run_on_a_task_of_their_own() {
    let store = idem_core::MemoryStore::new();
    let gates = Arc::new(Gates::default());
    let layer = IdempotencyLayer::new(store.clone()).require_key(false);
    let base = serve(app(layer, gates.clone())).await;
    let url = format!("{base}/task");
    assert_eq!(send("POST", &url, Some("k"), "").await.body, "spawned");
    assert_eq!(send("GET", &url, Some("k2"), "").await.body, "inline");
    assert_eq!(send("POST", &url, None, "").await.body, "inline");

    let layer = IdempotencyLayer::new(store)
        .require_key(false)
        .finish_when_client_leaves(false);
    let base = serve(app(layer, gates)).await;
    let url = format!("{base}/task");
    assert_eq!(send("POST", &url, Some("k3"), "").await.body, "inline");
}
