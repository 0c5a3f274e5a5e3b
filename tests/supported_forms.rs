//! The forms the attribute accepts, run: methods with `store = self.store`, trait
//! implementations, generic functions, and backends swapped at run time behind `Arc<dyn Store>`.

use idem_core::{idempotent, Idempotent, MemoryStore, Outcome, Store};
use std::fmt::Display;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

struct Service {
    store: Arc<dyn Store>,
    runs: AtomicU32,
}

impl Service {
    #[idempotent(key = "svc:{user}", store = self.store)]
    async fn handle(&self, user: u64) -> Result<u64, std::io::Error> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(user)
    }
}

trait Job {
    async fn run(&self, id: u32) -> Idempotent<u32, std::io::Error>;
}

impl Job for Service {
    #[idempotent(key = "job:{id}", store = self.store, replay)]
    async fn run(&self, id: u32) -> Result<u32, std::io::Error> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(id * 2)
    }
}

#[idempotent(key = "generic:{id}", store = store)]
async fn generic<S: Store, I: Display + Sync>(
    store: &S,
    id: I,
    runs: &AtomicU32,
) -> Result<(), std::io::Error> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Each backend behind `Arc<dyn Store>` keeps its own records: swapping the store changes
/// where keys live, not the handler.
#[tokio::test]
async fn methods_and_swapped_backends() {
    for _ in 0..2 {
        let service = Service {
            store: Arc::new(MemoryStore::new()),
            runs: AtomicU32::new(0),
        };
        assert_eq!(service.handle(1).await.unwrap(), Outcome::Executed(1));
        assert!(service.handle(1).await.unwrap().is_duplicate());
        assert_eq!(service.runs.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn trait_implementations_replay() {
    let service = Service {
        store: Arc::new(MemoryStore::new()),
        runs: AtomicU32::new(0),
    };
    let job: &dyn Fn(u32) -> _ = &|id| service.run(id);
    assert_eq!(job(4).await.unwrap(), Outcome::Executed(8));
    assert_eq!(job(4).await.unwrap().into_value(), Some(8));
    assert_eq!(service.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn generic_functions() {
    let store = MemoryStore::new();
    let runs = AtomicU32::new(0);
    assert!(generic(&store, "a", &runs).await.unwrap().is_executed());
    assert!(
        generic(&store, 'a', &runs).await.unwrap().is_duplicate(),
        "same rendered key"
    );
    assert!(generic(&store, 1u8, &runs).await.unwrap().is_executed());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
