//! `transaction = tx` on a PostgreSQL store: the body gets the open transaction as `tx`.
use idem_core::idempotent;
use idem_store_postgres::sqlx;
use idem_store_postgres::PgStore;
use std::sync::Arc;

#[idempotent(key = "credit:{order}", store = store, transaction = tx, fingerprint(amount))]
async fn credit(store: &PgStore, order: i64, amount: i64) -> Result<u64, sqlx::Error> {
    let done = sqlx::query("UPDATE accounts SET credits = credits + $1 WHERE id = $2")
        .bind(amount)
        .bind(order)
        .execute(&mut **tx)
        .await?;
    Ok(done.rows_affected())
}

#[idempotent(key = "receipt:{order}", store = store, transaction = conn, replay)]
async fn replayed(store: Arc<PgStore>, order: i64) -> Result<Vec<String>, sqlx::Error> {
    let _ = &mut **conn;
    Ok(vec![])
}

fn assert_send<T: Send>(_: &T) {}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let pool = sqlx::postgres::PgPoolOptions::new().connect_lazy("postgres://localhost/none").unwrap();
    let store = PgStore::new(pool);
    let future = credit(&store, 1, 100);
    assert_send(&future);
    drop(future);
    let _ = replayed(Arc::new(store), 1);
}
