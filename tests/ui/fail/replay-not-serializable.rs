#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

struct Receipt {
    id: u64,
}

#[idempotent(key = "receipt:{order}", store = store, replay)]
async fn receipt(store: &MemoryStore, order: u64) -> Result<Receipt, std::io::Error> {
    Ok(Receipt { id: order })
}

fn main() {}
