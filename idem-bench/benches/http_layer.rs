//! What `IdempotencyLayer` adds to one request in process (no sockets: the router is called as
//! a tower service), on the embedded store, side by side with the bare router:
//! `cargo bench -p idem-bench --bench http_layer`. Over HTTP and on PostgreSQL, see the
//! `http-endpoint` binary.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::Router;
use criterion::{criterion_group, criterion_main, Criterion};
use idem_core::MemoryStore;
use idem_http::IdempotencyLayer;
use std::hint::black_box;
use std::time::{Duration, Instant};
use tower::ServiceExt;

fn router() -> Router {
    Router::new().route(
        "/charges",
        post(|body: String| async move { (StatusCode::CREATED, body) }),
    )
}

fn request(key: u64) -> Request<Body> {
    Request::post("/charges")
        .header("authorization", "Bearer tok_bench")
        .header("idempotency-key", format!("bench-{key}"))
        .header("content-type", "application/json")
        .body(Body::from(r#"{"customer":"c1","amount":100}"#))
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `iters` requests through `app` (a fresh key each unless `same_key`).
async fn drive(app: &Router, iters: u64, same_key: bool) -> Duration {
    let start = Instant::now();
    for i in 0..iters {
        let key = if same_key { 0 } else { i };
        let response = app.clone().oneshot(request(key)).await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        black_box(response);
    }
    start.elapsed()
}

fn layer(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("http_layer");
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("bare_router", |b| {
        let app = router();
        b.iter_custom(|iters| rt.block_on(drive(&app, iters, false)))
    });
    group.bench_function("layer_fresh_key", |b| {
        b.iter_custom(|iters| {
            // A new store per sample, so the map's size matches what one sample adds.
            let app = router().layer(IdempotencyLayer::new(MemoryStore::new()));
            rt.block_on(drive(&app, iters, false))
        })
    });
    group.bench_function("layer_replay", |b| {
        let app = router().layer(IdempotencyLayer::new(MemoryStore::new()));
        rt.block_on(drive(&app, 1, true));
        b.iter_custom(|iters| rt.block_on(drive(&app, iters, true)))
    });
    group.finish();
}

criterion_group!(benches, layer);
criterion_main!(benches);
