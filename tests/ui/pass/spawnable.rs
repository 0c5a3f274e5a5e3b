//! The generated future is `Send` when the body is, so handlers can be spawned.
use idem_core::{idempotent, MemoryStore};
use std::sync::Arc;

#[idempotent(key = "spawn:{id}", store = store, replay, fingerprint(id))]
async fn job(store: Arc<MemoryStore>, id: u32) -> Result<Vec<u32>, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(vec![id])
}

fn assert_send<T: Send>(_: &T) {}

#[tokio::main]
async fn main() {
    let store = Arc::new(MemoryStore::new());
    let future = job(store.clone(), 1);
    assert_send(&future);
    let _ = tokio::spawn(future).await.unwrap().unwrap();
}
