//! `RedisStore`: idempotency on a Redis server (or a Redis Cluster) that several app servers
//! share. A payment webhook is delivered eight times at once (a provider's retries racing); the
//! customer is credited once, and a later redelivery is a duplicate.
//!
//! ```text
//! redis-server --port 6379 --daemonize yes
//! cargo run --example redis                                  # redis://127.0.0.1:6379
//! cargo run --example redis -- redis://10.0.0.5:6379         # or another server
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use clap::Parser;
use idem_core::{idempotent, Outcome};
use idem_store_redis::RedisStore;

struct App {
    store: RedisStore,
    credited: AtomicU64,
}

/// Credits the payment's amount to the customer, once per payment.
#[idempotent(key = "payment-webhook:{payment_id}", store = app.store, wait = "5s", replay)]
async fn on_payment(app: &App, payment_id: &str, amount: u64) -> Result<u64, std::io::Error> {
    tokio::time::sleep(std::time::Duration::from_millis(50)).await; // the ledger write
    Ok(app.credited.fetch_add(amount, Ordering::SeqCst) + amount)
}

#[derive(Parser)]
struct Args {
    /// The Redis server.
    #[arg(default_value = "redis://127.0.0.1:6379")]
    url: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = Args::parse().url;
    // The store: one multiplexed connection; each operation is one atomic script. For a
    // cluster: `RedisStore::connect_cluster(&["redis://node-1:6379", ..])`.
    let store = RedisStore::connect(&url)
        .await
        .map_err(|e| format!("cannot reach Redis at {url}: {e}"))?;
    let app = Arc::new(App {
        store,
        credited: AtomicU64::new(0),
    });
    // A payment id of this run's, so that running the example again is new work.
    let payment = format!("pay_{}", std::process::id());

    let mut deliveries = Vec::new();
    for n in 1..=8 {
        let (app, payment) = (app.clone(), payment.clone());
        deliveries.push(tokio::spawn(async move {
            (n, on_payment(&app, &payment, 100).await)
        }));
    }
    for delivery in deliveries {
        let (n, outcome) = delivery.await?;
        match outcome {
            Ok(Outcome::Executed(balance)) => println!("delivery {n}: credited, balance {balance}"),
            Ok(Outcome::Duplicate { value, .. }) => {
                println!("delivery {n}: duplicate, the first run's balance {value:?}")
            }
            Ok(other) => println!("delivery {n}: {other:?}"),
            Err(e) => println!("delivery {n}: failed: {e}"),
        }
    }
    let again = on_payment(&app, &payment, 100).await?;
    println!(
        "a redelivery an hour later: {}",
        if again.is_duplicate() {
            "duplicate"
        } else {
            "ran"
        }
    );
    println!("credited in total: {}", app.credited.load(Ordering::SeqCst));
    Ok(())
}
