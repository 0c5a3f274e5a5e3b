#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore, Store};
use std::borrow::Cow;
use std::sync::Arc;

struct App {
    store: MemoryStore,
}

#[idempotent(key = "reminder:{user_id}", store = app.store, detach)]
async fn borrowed_app(app: &App, user_id: u64) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "reminder:{job_key}", store = store, detach)]
async fn borrowed_key(store: Arc<MemoryStore>, job_key: &str) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "batch:{id}", store = store, detach)]
async fn borrowed_slice(store: Arc<MemoryStore>, id: u32, ids: &[u32]) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "counter:{id}", store = store, detach)]
async fn borrowed_mut(store: Arc<MemoryStore>, id: u32, runs: &mut u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "note:{note}", store = store, detach)]
async fn with_a_lifetime<'a>(
    store: Arc<MemoryStore>,
    note: Cow<'a, str>,
) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "dynamic:{id}", store = store, detach)]
async fn borrowed_store(store: &dyn Store, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

struct Mailer {
    store: MemoryStore,
}

impl Mailer {
    #[idempotent(key = "mail:{to}", store = self.store, detach)]
    async fn send(&self, to: String) -> Result<(), std::io::Error> {
        Ok(())
    }

    #[idempotent(key = "mail:{to}", store = self.store, detach)]
    async fn send_mut(&mut self, to: String) -> Result<(), std::io::Error> {
        Ok(())
    }

    #[idempotent(key = "mail:{to}", store = self.store, detach)]
    async fn send_arc_ref(self: &Arc<Self>, to: String) -> Result<(), std::io::Error> {
        Ok(())
    }
}

fn main() {}
