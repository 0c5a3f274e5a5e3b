//! An error in the attribute is the only error: the function is still emitted with the
//! signature callers expect (`async`, returning `Idempotent<T, E>`), so callers that `.await`
//! it and match on its `Outcome` compile as they will once the attribute is fixed.
use idem_core::{idempotent, Idempotent, MemoryStore, Outcome};

#[idempotent(key = "job:{id}", store = store, ttl = "1h")]
async fn job(store: &MemoryStore, id: u32) -> Result<u32, std::io::Error> {
    Ok(id)
}

#[idempotent(store = store)]
fn not_async(store: &MemoryStore, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

async fn caller(store: &MemoryStore) -> Result<(), idem_core::Error<std::io::Error>> {
    if let Outcome::Executed(n) = job(store, 1).await? {
        assert_eq!(n, 1);
    }
    let _: Idempotent<(), std::io::Error> = not_async(store, 2).await;
    Ok(())
}

fn main() {
    let _ = caller;
}
