//! Generic functions: generic parameters in the key and the store, `impl Trait` arguments.
use idem_core::{idempotent, Store};
use std::fmt::Display;

#[idempotent(key = "generic:{id}", store = store)]
async fn generic<S: Store, I: Display + Send + Sync>(store: &S, id: I) -> Result<String, std::io::Error> {
    Ok(id.to_string())
}

#[idempotent(key = "impl:{id}", store = store)]
async fn impl_trait(store: &impl Store, id: impl Display) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "where:{id}", store = store)]
async fn with_where<'a, T>(store: &'a dyn Store, id: &'a T) -> Result<&'a T, std::io::Error>
where
    T: Display + ?Sized,
{
    Ok(id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let store = idem_core::MemoryStore::new();
    let _ = generic(&store, 1u8).await;
    let _ = impl_trait(&store, "x").await;
    let _ = with_where(&store, "y").await;
}
