//! Trait implementations, with the trait declaring the rewritten return type.
use idem_core::{idempotent, Idempotent, MemoryStore};

trait Job {
    async fn run(&self, id: u64) -> Idempotent<u64, std::io::Error>;
}

struct Cleanup {
    store: MemoryStore,
}

impl Job for Cleanup {
    #[idempotent(key = "cleanup:{id}", store = self.store)]
    async fn run(&self, id: u64) -> Result<u64, std::io::Error> {
        Ok(id)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let job = Cleanup { store: MemoryStore::new() };
    assert!(job.run(1).await.unwrap().is_executed());
}
