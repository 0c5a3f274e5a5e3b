//! A body that does not parse keeps syn's own error, pointing into the body.
use idem_core::{idempotent, MemoryStore};

#[idempotent(key = "job:{id}", store = store)]
async fn job(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    let x = ;
    Ok(())
}

fn main() {}
