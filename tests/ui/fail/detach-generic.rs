#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};
use std::sync::Arc;

// A generic parameter the body uses moves to the call's task: it needs `T: Send + 'static`.
#[idempotent(key = "job:{id}", store = store, detach)]
async fn generic<T: std::fmt::Display>(store: Arc<MemoryStore>, id: T) -> Result<String, std::io::Error> {
    Ok(id.to_string())
}

fn main() {}
