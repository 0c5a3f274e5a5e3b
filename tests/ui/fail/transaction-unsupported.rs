#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore, Store};

#[idempotent(key = "credit:{order}", store = store, transaction = tx)]
async fn memory(store: &MemoryStore, order: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "credit:{order}", store = store, transaction = tx)]
async fn dynamic(store: &dyn Store, order: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "credit:{tx}", store = store, transaction = tx)]
async fn shadowed(store: &MemoryStore, tx: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "credit:{order}", store = store, transaction = "tx")]
async fn quoted(store: &MemoryStore, order: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
