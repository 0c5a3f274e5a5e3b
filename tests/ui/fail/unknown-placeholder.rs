#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(key = "reminder:{usr_id}:{day}", store = store)]
async fn typo(store: &MemoryStore, user_id: u64, day: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "reminder:{customer}", store = store)]
async fn unrelated(store: &MemoryStore, user_id: u64) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "reminder:{self.id}", store = STORE)]
async fn no_receiver(id: u64) -> Result<(), std::io::Error> {
    Ok(())
}

static STORE: std::sync::LazyLock<MemoryStore> = std::sync::LazyLock::new(MemoryStore::new);

fn main() {}
