//! What the layer does when things go wrong: the inner service panics, the store is down (fail
//! closed: 503, nothing runs), or the store fails after the inner service answered (the client
//! still gets its answer). A client that goes away mid-request: `client_leaves.rs`.

mod support;

use async_trait::async_trait;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idem_core::{
    Claim, ClaimRequest, Completion, Fence, Fenced, Key, MemoryStore, Record, Store, StoreError,
};
use idem_http::IdempotencyLayer;
use std::sync::Arc;
use std::time::Duration;
use support::{backends, send, serve, try_send, Runs};

async fn slow_first(State(runs): State<Arc<Runs>>) -> (StatusCode, String) {
    let n = runs.next();
    if n == 1 {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    (StatusCode::CREATED, format!("run {n}"))
}

async fn panics_first(State(runs): State<Arc<Runs>>) -> (StatusCode, String) {
    let n = runs.next();
    if n == 1 {
        panic!("the inner service panicked (on purpose)");
    }
    (StatusCode::CREATED, format!("run {n}"))
}

fn app(layer: IdempotencyLayer, runs: Arc<Runs>) -> Router {
    Router::new()
        .route("/slow", post(slow_first))
        .route("/panic", post(panics_first))
        .layer(layer)
        .with_state(runs)
}

#[tokio::test]
async fn a_panic_in_the_inner_service_frees_its_key() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let base = serve(app(
            IdempotencyLayer::new(backend.store.clone()),
            runs.clone(),
        ))
        .await;
        let url = format!("{base}/panic");
        let first = try_send("POST", &url, Some("p"), "", &[], Duration::from_secs(30)).await;
        assert!(first.is_none(), "the connection died with the panic");
        let retry = send("POST", &url, Some("p"), "").await;
        assert_eq!(
            (retry.status, retry.body.as_str()),
            (201, "run 2"),
            "{}",
            backend.name
        );
        assert!(send("POST", &url, Some("p"), "").await.replayed());
    }
}

#[tokio::test]
async fn a_store_that_is_down_gets_503_and_nothing_runs() {
    // A PostgreSQL store whose server is not there (nothing listens on port 1).
    let pool = idem_store_postgres::sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .unwrap();
    let store = idem_store_postgres::PgStore::new(pool);
    let runs = Arc::new(Runs::default());
    let layer = IdempotencyLayer::new(store).problem_base("https://docs.test/idempotency");
    let base = serve(app(layer, runs.clone())).await;
    let answer = send("POST", &format!("{base}/slow"), Some("down"), "").await;
    assert_eq!(answer.status, 503);
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert_eq!(
        answer.header("content-type"),
        Some("application/problem+json")
    );
    assert!(
        answer
            .body
            .contains("\"https://docs.test/idempotency#idempotency-store-unavailable\""),
        "{}",
        answer.body
    );
    assert_eq!(runs.get(), 0, "fail closed: the service never ran");
}

/// A `MemoryStore` whose completions fail, as a store that went down while the service ran.
#[derive(Debug, Clone)]
struct CompletionsFail(MemoryStore);

#[async_trait]
impl Store for CompletionsFail {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.0.claim(request).await
    }
    async fn complete(&self, _: &Key, _: Fence, _: Completion<'_>) -> Result<Fenced, StoreError> {
        Err(StoreError::msg("the store went away"))
    }
    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        self.0.release(key, fence).await
    }
    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        self.0.renew(key, fence, lease).await
    }
    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        self.0.get(key).await
    }
    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }
}

#[tokio::test]
async fn an_answer_whose_record_failed_still_reaches_its_client_and_the_key_stays_held() {
    let runs = Arc::new(Runs::default());
    runs.set(1); // no slow first run
                 // A secret of its own: the store that fails completions could not keep one.
    let layer = IdempotencyLayer::new(CompletionsFail(MemoryStore::new())).secret([1u8; 32]);
    let base = serve(app(layer, runs.clone())).await;
    let url = format!("{base}/slow");
    let answer = send("POST", &url, Some("lost"), "").await;
    assert_eq!((answer.status, answer.body.as_str()), (201, "run 2"));
    // The claim was not completed nor released: a retry is told to wait, not run again, until
    // the lease lapses.
    let retry = send("POST", &url, Some("lost"), "").await;
    assert_eq!(retry.status, 409);
    assert_eq!(runs.get(), 2);
}
