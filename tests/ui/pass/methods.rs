//! Inherent methods (`&self`, `self`), `store = self.store`, and `{self.field}` placeholders.
use idem_core::{idempotent, MemoryStore, Store};
use std::sync::Arc;

#[derive(Clone)]
struct Mailer {
    id: u32,
    store: Arc<dyn Store>,
}

impl Mailer {
    #[idempotent(key = "mail:{self.id}:{to}", store = self.store)]
    async fn send(&self, to: &str) -> Result<(), std::io::Error> {
        let _ = to;
        Ok(())
    }

    #[idempotent(key = "consume:{self.id}", store = self.store)]
    async fn consume(self) -> Result<u32, std::io::Error> {
        Ok(self.id)
    }

    #[idempotent(key = "mutate:{self.id}", store = self.store)]
    async fn mutate(&mut self) -> Result<u32, std::io::Error> {
        self.id += 1;
        Ok(self.id)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut mailer = Mailer { id: 1, store: Arc::new(MemoryStore::new()) };
    let _ = mailer.send("a@example.com").await;
    let _ = mailer.mutate().await;
    let _ = mailer.clone().consume().await;
}
