#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(key = id, store = store)]
async fn from_ident(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = format!("job:{}", id), store = store)]
async fn from_macro(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
