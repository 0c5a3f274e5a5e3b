#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(key = "job:{id}", store = store, lease = "30 seconds")]
async fn words(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id}", store = store, keep = "1.5h")]
async fn fraction(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id}", store = store, wait = 10)]
async fn not_a_string(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id}", store = store, lease = "0s")]
async fn zero(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
