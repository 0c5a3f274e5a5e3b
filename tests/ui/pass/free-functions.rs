//! Free functions: reference and owned parameters, nested fields, escaped braces, every option.
use idem_core::{idempotent, Idempotent, MemoryStore, Outcome};

pub struct Invoice {
    pub customer: Customer,
    pub period: (u16, u8),
}

pub struct Customer {
    pub id: u64,
}

#[idempotent(key = "invoice:{invoice.customer.id}:{invoice.period.0}-{invoice.period.1}", store = store)]
async fn by_ref(store: &MemoryStore, invoice: &Invoice) -> Result<u64, std::io::Error> {
    Ok(invoice.customer.id)
}

#[idempotent(key = "owned:{name}:{{literal}}", store = store)]
async fn owned(store: &MemoryStore, name: String, mut count: u32) -> Result<String, std::io::Error> {
    count += 1;
    Ok(format!("{name}{count}"))
}

#[idempotent(
    key = "charge:{order}",
    store = store,
    lease = "45s",
    keep = "7d",
    fingerprint(amount, currency),
    replay,
    wait = "500ms",
)]
pub async fn every_option(
    store: &MemoryStore,
    order: u64,
    amount: u64,
    currency: &str,
) -> Result<Option<u64>, std::io::Error> {
    if amount == 0 {
        return Ok(None);
    }
    let doubled = u64::checked_mul(amount, 2).ok_or_else(|| std::io::Error::other("overflow"))?;
    Ok(Some(doubled))
}

#[idempotent(key = "constant-job", store = store)]
async fn constant_key(store: &MemoryStore) -> Result<(), std::io::Error> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let store = MemoryStore::new();
    let invoice = Invoice { customer: Customer { id: 7 }, period: (2026, 11) };
    let _: Idempotent<u64, std::io::Error> = by_ref(&store, &invoice).await;
    let _ = owned(&store, "a".to_owned(), 1).await;
    let outcome: Outcome<Option<u64>> = every_option(&store, 1, 2, "EUR").await.unwrap();
    assert!(outcome.is_executed());
    let _ = constant_key(&store).await;
}
