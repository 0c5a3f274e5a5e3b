#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(key = "charge:{order}", store = store, fingerprint(amount, curency))]
async fn typo(store: &MemoryStore, order: u32, amount: u64, currency: &str) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "charge:{order}", store = store, fingerprint(amount, amount))]
async fn twice(store: &MemoryStore, order: u32, amount: u64) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "charge:{order}", store = store, fingerprint())]
async fn empty(store: &MemoryStore, order: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "charge:{order}", store = store, fingerprint = amount)]
async fn no_parens(store: &MemoryStore, order: u32, amount: u64) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
