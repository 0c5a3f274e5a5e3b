#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(key = "job:{id}", store = store)]
async fn nothing(store: &MemoryStore, id: u32) {}

#[idempotent(key = "job:{id}", store = store)]
async fn option(store: &MemoryStore, id: u32) -> Option<u32> {
    Some(id)
}

#[idempotent(key = "job:{id}", store = store)]
async fn alias(store: &MemoryStore, id: u32) -> std::io::Result<u32> {
    Ok(id)
}

fn main() {}
