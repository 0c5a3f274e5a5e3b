#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(key = "job:{}", store = store)]
async fn empty(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id:?}", store = store)]
async fn format_spec(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id + 1}", store = store)]
async fn expression(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
