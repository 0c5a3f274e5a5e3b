//! `DynamoDbStore`: idempotency in a DynamoDB table that every instance of a service (or every
//! Lambda invocation) shares. A payment webhook is delivered eight times at once (a provider's
//! retries racing); the customer is credited once, and a later redelivery is a duplicate with
//! the stored answer.
//!
//! ```text
//! cargo run --example dynamodb      # DYNAMODB_URL, or a local server (pip install 'moto[server]' waitress)
//! ```
//!
//! On AWS, build the client with `aws_config::load_from_env().await` and
//! `aws_sdk_dynamodb::Client::new(&config)`, and create the table once (`create_table`, or the
//! CloudFormation in `idem-store-dynamodb`'s guide).

#[path = "support/local_dynamodb.rs"]
mod local_dynamodb;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use idem_core::{idempotent, Outcome};
use idem_store_dynamodb::testing::local_client;
use idem_store_dynamodb::{create_table, DynamoDbStore, TableLayout};

struct App {
    store: DynamoDbStore,
    credited: AtomicU64,
}

/// Credits the payment's amount to the customer, once per payment.
#[idempotent(key = "payment-webhook:{payment_id}", store = app.store, wait = "5s", replay)]
async fn on_payment(app: &App, payment_id: &str, amount: u64) -> Result<u64, std::io::Error> {
    tokio::time::sleep(std::time::Duration::from_millis(50)).await; // the ledger write
    Ok(app.credited.fetch_add(amount, Ordering::SeqCst) + amount)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = local_dynamodb::local_dynamodb()?;
    let client = local_client(&url);
    let table = "idem-example";
    create_table(&client, table, &TableLayout::default()).await?;
    let app = Arc::new(App {
        store: DynamoDbStore::new(client, table),
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
        match outcome? {
            Outcome::Executed(balance) => println!("delivery {n}: credited, balance {balance}"),
            Outcome::Duplicate { value, .. } => {
                println!(
                    "delivery {n}: duplicate, balance {}",
                    value.unwrap_or_default()
                )
            }
            Outcome::InProgress { .. } => println!("delivery {n}: still in progress"),
        }
    }
    let later = on_payment(&app, &payment, 100).await?;
    println!("a later redelivery: duplicate = {}", later.is_duplicate());
    println!("credited in all: {}", app.credited.load(Ordering::SeqCst));
    Ok(())
}
