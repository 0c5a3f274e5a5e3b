//! `detach`: owned parameters move into the call's task; the store expression may borrow from
//! one of them (`app.store`, `self.store`) or be `&'static`; it combines with `replay`,
//! `fingerprint(..)` and `wait`; the function's future is `Send + 'static`.
use idem_core::{idempotent, MemoryStore, Store};
use std::sync::{Arc, LazyLock};

struct App {
    store: Arc<dyn Store>,
}

#[idempotent(key = "reminder:{user_id}:{day}", store = app.store, detach)]
async fn send_reminder(app: Arc<App>, user_id: u64, day: String) -> Result<(), std::io::Error> {
    let _ = (&app.store, user_id, day.len());
    Ok(())
}

#[idempotent(
    key = "receipt:{order}",
    store = app.store,
    replay,
    fingerprint(amount),
    wait = "5s",
    detach
)]
async fn receipt(app: Arc<App>, order: u32, amount: u64) -> Result<String, std::io::Error> {
    Ok(format!("{order}:{amount}"))
}

static STORE: LazyLock<MemoryStore> = LazyLock::new(MemoryStore::new);

#[idempotent(key = "static:{id}", store = store, detach)]
async fn on_a_static_store(store: &'static MemoryStore, id: u32) -> Result<u32, std::io::Error> {
    Ok(id)
}

struct Mailer {
    id: u32,
    store: Arc<dyn Store>,
}

impl Mailer {
    #[idempotent(key = "mail:{self.id}:{to}", store = self.store, detach)]
    async fn send(self: Arc<Self>, to: String) -> Result<u32, std::io::Error> {
        Ok(self.id + to.len() as u32)
    }

    #[idempotent(key = "consume:{self.id}", store = self.store, detach)]
    async fn consume(self) -> Result<u32, std::io::Error> {
        Ok(self.id)
    }
}

fn assert_spawnable<F: std::future::Future + Send + 'static>(_: &F) {}

#[tokio::main]
async fn main() {
    let app = Arc::new(App { store: Arc::new(MemoryStore::new()) });
    let future = send_reminder(app.clone(), 42, "2026-11-01".to_owned());
    assert_spawnable(&future);
    let _ = tokio::spawn(future).await.unwrap().unwrap();
    let _ = receipt(app, 7, 100).await.unwrap();
    let _ = on_a_static_store(&STORE, 1).await.unwrap();
    let mailer = Arc::new(Mailer { id: 1, store: Arc::new(MemoryStore::new()) });
    let future = mailer.clone().send("a@example.com".to_owned());
    assert_spawnable(&future);
    let _ = future.await.unwrap();
    let _ = Arc::into_inner(mailer).unwrap().consume().await.unwrap();
}
