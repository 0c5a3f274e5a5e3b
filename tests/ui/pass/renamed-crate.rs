//! `crate = "..."`: idem-core reached through another path, as when a facade crate re-exports it
//! or Cargo.toml renames the dependency.
mod facade {
    pub use idem_core::*;
}

use facade::{idempotent, MemoryStore};

#[idempotent(key = "job:{id}", store = store, crate = "facade")]
async fn job(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{id}", store = store, crate = "crate::facade")]
async fn absolute(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _ = job(&MemoryStore::new(), 1).await;
    let _ = absolute(&MemoryStore::new(), 2).await;
}
