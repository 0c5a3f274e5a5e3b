#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

struct Mailer;

#[idempotent(key = "job:{id}", store = store, clients(mailr))]
async fn typo(store: &MemoryStore, id: u32, mailer: &Mailer) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id}", store = store, clients(mailer))]
async fn not_keyed(store: &MemoryStore, id: u32, mailer: &Mailer) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id}", store = store, clients())]
async fn empty(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
