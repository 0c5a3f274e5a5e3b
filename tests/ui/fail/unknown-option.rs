#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(key = "job:{id}", store = store, ttl = "1h")]
async fn ttl(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id}", store = store, replay = true)]
async fn replay_value(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id}", store = store, 42)]
async fn not_an_option(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
