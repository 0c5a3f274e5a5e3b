#![allow(unused_variables)]

use idem_core::idempotent;
use idem_store_postgres::PgStore;
use std::sync::Arc;

#[idempotent(key = "credit:{order}", store = store, transaction = tx, detach)]
async fn credit(store: Arc<PgStore>, order: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
