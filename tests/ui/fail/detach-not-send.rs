#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};
use std::rc::Rc;
use std::sync::Arc;

// The body holds an `Rc` across an `.await`: it cannot move to the call's task.
#[idempotent(key = "job:{id}", store = store, detach)]
async fn not_send(store: Arc<MemoryStore>, id: u32) -> Result<(), std::io::Error> {
    let local = Rc::new(id);
    tokio::task::yield_now().await;
    let _ = local;
    Ok(())
}

fn main() {}
