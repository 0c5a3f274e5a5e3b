#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

struct UserId(u64);

#[idempotent(key = "user:{user}", store = store)]
async fn job(store: &MemoryStore, user: UserId) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
