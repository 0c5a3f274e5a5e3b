#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(key = "", store = store)]
async fn job(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
