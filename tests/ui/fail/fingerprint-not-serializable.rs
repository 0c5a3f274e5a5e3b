#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

struct Card {
    number: String,
}

#[idempotent(key = "charge:{order}", store = store, fingerprint(card))]
async fn charge(store: &MemoryStore, order: u32, card: &Card) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
