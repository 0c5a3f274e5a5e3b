#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(key = "job:{id}", store = store, key = "other:{id}")]
async fn twice(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id}", store = store, replay, replay)]
async fn flag_twice(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id}", store = store, detach, detach)]
async fn detached_twice(store: std::sync::Arc<MemoryStore>, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
