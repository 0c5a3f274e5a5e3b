//! The layer's rules, each checked on every store (MemoryStore and PostgreSQL) through a real
//! server on a real port and a real client: what passes through, what is kept and replayed,
//! what releases the key, waiting, leases, keep.

mod support;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use axum::Router;
use idem_http::IdempotencyLayer;
use std::sync::Arc;
use std::time::Duration;
use support::{backends, in_background, send, serve, try_send, wait_for_runs, Runs};

async fn counted(State(runs): State<Arc<Runs>>) -> Response {
    let n = runs.next();
    (
        StatusCode::CREATED,
        [
            (header::SET_COOKIE, "session=s3cret"),
            (header::HeaderName::from_static("x-run"), "yes"),
        ],
        format!("run {n}"),
    )
        .into_response()
}

async fn with_status(State(runs): State<Arc<Runs>>, Path(code): Path<u16>) -> Response {
    runs.next();
    (StatusCode::from_u16(code).unwrap(), "answer").into_response()
}

async fn slow(State(runs): State<Arc<Runs>>, Path(ms): Path<u64>) -> Response {
    let n = runs.next();
    tokio::time::sleep(Duration::from_millis(ms)).await;
    (StatusCode::CREATED, format!("slow run {n}")).into_response()
}

async fn streaming(State(runs): State<Arc<Runs>>) -> Response {
    runs.next();
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::new(Streamed(Some("data: 1\n\ndata: 2\n\n".into()))))
        .unwrap()
}

/// A body that does not say how long it is, as a stream of events (SSE) or a chunked body.
struct Streamed(Option<axum::body::Bytes>);

impl http_body::Body for Streamed {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Ready(self.0.take().map(|data| Ok(http_body::Frame::data(data))))
    }
}

async fn big(State(runs): State<Arc<Runs>>) -> Response {
    runs.next();
    (StatusCode::OK, "x".repeat(4096)).into_response()
}

fn app(layer: IdempotencyLayer, runs: Arc<Runs>) -> Router {
    Router::new()
        .route("/count", any(counted))
        .route("/status/{code}", post(with_status))
        .route("/slow/{ms}", post(slow))
        .route("/stream", post(streaming))
        .route("/big", post(big))
        .layer(layer)
        .with_state(runs)
}

#[tokio::test]
async fn other_methods_pass_through_untouched_and_the_layers_methods_need_a_key() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let base = serve(app(
            IdempotencyLayer::new(backend.store.clone()),
            runs.clone(),
        ))
        .await;
        let url = format!("{base}/count");
        for method in ["GET", "PUT", "DELETE"] {
            let answer = send(method, &url, None, "").await;
            assert_eq!(answer.status, 201, "{}: {method}", backend.name);
            // Twice, with a key: not the layer's method, so it runs each time.
            let a = send(method, &url, Some("k"), "").await;
            assert!(!a.replayed());
        }
        assert_eq!(runs.get(), 6, "{}", backend.name);
        for method in ["POST", "PATCH"] {
            assert_eq!(send(method, &url, None, "").await.status, 400);
        }
        assert_eq!(runs.get(), 6, "{}: refused before running", backend.name);

        let only_put =
            IdempotencyLayer::new(backend.store.clone()).methods([axum::http::Method::PUT]);
        let base = serve(app(only_put, runs.clone())).await;
        let url = format!("{base}/count");
        assert_eq!(send("POST", &url, None, "").await.status, 201);
        assert_eq!(send("PUT", &url, Some("put-1"), "").await.body, "run 8");
        assert!(send("PUT", &url, Some("put-1"), "").await.replayed());
    }
}

#[tokio::test]
async fn without_require_key_a_request_without_one_passes_through() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let layer = IdempotencyLayer::new(backend.store.clone()).require_key(false);
        let base = serve(app(layer, runs.clone())).await;
        let url = format!("{base}/count");
        assert_eq!(send("POST", &url, None, "").await.body, "run 1");
        assert_eq!(send("POST", &url, None, "").await.body, "run 2");
        assert_eq!(send("POST", &url, Some("k"), "").await.body, "run 3");
        assert_eq!(send("POST", &url, Some("k"), "").await.body, "run 3");
        // A malformed key is still refused: the client meant to be protected.
        assert_eq!(send("POST", &url, Some("\"open"), "").await.status, 400);
        assert_eq!(runs.get(), 3, "{}", backend.name);
    }
}

#[tokio::test]
async fn one_key_names_one_record_per_endpoint_and_cookies_are_not_replayed() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let base = serve(app(
            IdempotencyLayer::new(backend.store.clone()),
            runs.clone(),
        ))
        .await;
        let first = send("POST", &format!("{base}/count"), Some("k"), "").await;
        assert_eq!(first.header("set-cookie"), Some("session=s3cret"));
        let again = send("POST", &format!("{base}/count"), Some("k"), "").await;
        assert!(again.replayed());
        assert_eq!((again.status, again.body.as_str()), (201, "run 1"));
        assert_eq!(again.header("x-run"), Some("yes"));
        assert_eq!(
            again.header("set-cookie"),
            None,
            "{}: a session is not replayed",
            backend.name
        );
        // The same key on another endpoint is another record.
        let other = send("POST", &format!("{base}/status/200"), Some("k"), "").await;
        assert!(!other.replayed());
        assert_eq!(runs.get(), 2);

        let cookies =
            IdempotencyLayer::new(backend.store.clone()).replay_header(header::SET_COOKIE);
        let base = serve(app(cookies, runs.clone())).await;
        send("POST", &format!("{base}/count"), Some("cookie"), "").await;
        let again = send("POST", &format!("{base}/count"), Some("cookie"), "").await;
        assert_eq!(
            again.header("set-cookie"),
            Some("session=s3cret"),
            "{}",
            backend.name
        );
    }
}

#[tokio::test]
async fn final_answers_are_kept_and_try_again_answers_release_the_key() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let base = serve(app(
            IdempotencyLayer::new(backend.store.clone()),
            runs.clone(),
        ))
        .await;
        for (code, kept) in [
            (200, true),
            (303, true),
            (404, true),
            (422, true),
            (408, false),
            (409, false),
            (425, false),
            (429, false),
            (500, false),
            (503, false),
        ] {
            let url = format!("{base}/status/{code}");
            let key = format!("k-{code}");
            let before = runs.get();
            let first = send("POST", &url, Some(&key), "").await;
            assert_eq!(first.status, code);
            let again = send("POST", &url, Some(&key), "").await;
            assert_eq!(again.status, code);
            assert_eq!(again.replayed(), kept, "{}: {code}", backend.name);
            let expected = if kept { 1 } else { 2 };
            assert_eq!(runs.get() - before, expected, "{}: {code}", backend.name);
        }

        // Configurable: keep 503s too.
        let layer = IdempotencyLayer::new(backend.store.clone()).records(|s| s.as_u16() != 404);
        let base = serve(app(layer, runs.clone())).await;
        send("POST", &format!("{base}/status/503"), Some("keep-503"), "").await;
        assert!(
            send("POST", &format!("{base}/status/503"), Some("keep-503"), "")
                .await
                .replayed()
        );
        send("POST", &format!("{base}/status/404"), Some("drop-404"), "").await;
        assert!(
            !send("POST", &format!("{base}/status/404"), Some("drop-404"), "")
                .await
                .replayed()
        );
    }
}

#[tokio::test]
async fn streaming_and_oversized_answers_are_sent_but_not_recorded() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let layer = IdempotencyLayer::new(backend.store.clone()).max_response_body(1024);
        let base = serve(app(layer, runs.clone())).await;
        let url = format!("{base}/stream");
        for _ in 0..2 {
            let answer = send("POST", &url, Some("s"), "").await;
            assert_eq!(answer.body, "data: 1\n\ndata: 2\n\n");
            assert!(!answer.replayed());
        }
        let url = format!("{base}/big");
        for _ in 0..2 {
            let answer = send("POST", &url, Some("b"), "").await;
            assert_eq!(answer.body.len(), 4096, "sent whole");
            assert!(!answer.replayed());
        }
        assert_eq!(
            runs.get(),
            4,
            "{}: released, so each retry ran",
            backend.name
        );
    }
}

#[tokio::test]
async fn a_request_in_flight_gets_409_or_with_wait_the_first_answer() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let base = serve(app(
            IdempotencyLayer::new(backend.store.clone()),
            runs.clone(),
        ))
        .await;
        let url = format!("{base}/slow/500");
        let first = in_background(&url, "w");
        wait_for_runs(&runs, 1).await;
        let second = send("POST", &url, Some("w"), "").await;
        assert_eq!(second.status, 409, "{}", backend.name);
        assert_eq!(second.header("retry-after"), Some("1"));
        assert_eq!(
            second.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(first.await.unwrap().status, 201);

        let waiting = IdempotencyLayer::new(backend.store.clone()).wait(Duration::from_secs(10));
        let base = serve(app(waiting, runs.clone())).await;
        let url = format!("{base}/slow/500");
        let first = in_background(&url, "w2");
        wait_for_runs(&runs, 2).await;
        let second = send("POST", &url, Some("w2"), "").await;
        let first = first.await.unwrap();
        assert_eq!(second.status, 201, "{}", backend.name);
        assert!(second.replayed());
        assert_eq!(second.body, first.body);
        assert_eq!(runs.get(), 2);
    }
}

#[tokio::test]
async fn the_lease_is_renewed_while_the_inner_service_runs() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let layer = IdempotencyLayer::new(backend.store.clone()).lease(Duration::from_millis(300));
        let base = serve(app(layer, runs.clone())).await;
        let url = format!("{base}/slow/1500");
        let first = in_background(&url, "long");
        wait_for_runs(&runs, 1).await;
        // Five leases later the first request still holds its key.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let second = send("POST", &url, Some("long"), "").await;
        assert_eq!(
            second.status, 409,
            "{}: a live run is never taken over",
            backend.name
        );
        assert_eq!(first.await.unwrap().status, 201);
        assert_eq!(runs.get(), 1);
    }
}

#[tokio::test]
async fn a_recorded_answer_is_replayed_for_keep_and_then_the_key_is_new() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let layer = IdempotencyLayer::new(backend.store.clone()).keep(Duration::from_millis(300));
        let base = serve(app(layer, runs.clone())).await;
        let url = format!("{base}/count");
        assert_eq!(send("POST", &url, Some("kept"), "").await.body, "run 1");
        assert!(send("POST", &url, Some("kept"), "").await.replayed());
        tokio::time::sleep(Duration::from_millis(500)).await;
        let later = send("POST", &url, Some("kept"), "").await;
        assert_eq!(later.body, "run 2", "{}", backend.name);
    }
}

#[tokio::test]
async fn named_headers_join_the_fingerprint() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let layer = IdempotencyLayer::new(backend.store.clone())
            .fingerprint_header(header::HeaderName::from_static("x-tenant"));
        let base = serve(app(layer, runs.clone())).await;
        let url = format!("{base}/count");
        let timeout = Duration::from_secs(30);
        let as_tenant = |t: &'static str| [("x-tenant", t)];
        let a = try_send("POST", &url, Some("f"), "", &as_tenant("a"), timeout)
            .await
            .unwrap();
        let b = try_send("POST", &url, Some("f"), "", &as_tenant("b"), timeout)
            .await
            .unwrap();
        assert_eq!((a.status, b.status), (201, 422), "{}", backend.name);
        let query = send("POST", &format!("{url}?page=2"), Some("f"), "").await;
        assert_eq!(
            query.status, 422,
            "{}: the query is part of it",
            backend.name
        );
        let body = try_send("POST", &url, Some("f"), "x", &as_tenant("a"), timeout)
            .await
            .unwrap();
        assert_eq!(body.status, 422, "{}: the body is part of it", backend.name);
        assert_eq!(runs.get(), 1);
    }
}
