#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(store = store)]
async fn job(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent]
async fn no_arguments(store: &MemoryStore) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
