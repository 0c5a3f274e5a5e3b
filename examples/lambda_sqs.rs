//! An SQS-triggered Lambda function that charges each order once. SQS delivers at least once:
//! a batch comes back after a failure or a visibility timeout, with the messages that already
//! succeeded in it. `Idempotency::sqs` runs each order once (keyed by the order id in the
//! message body), acknowledges the duplicates, and reports the failed message in
//! `batchItemFailures` so SQS delivers only that one again.
//!
//! ```text
//! cargo run --example lambda_sqs      # a local DynamoDB server and Lambda Runtime API
//! ```
//!
//! Run as above, the example plays Lambda: it starts a local DynamoDB server (or uses
//! `DYNAMODB_URL`) and a local Runtime API, starts itself as the function (the real
//! `lambda_runtime` loop, in a process of its own), and delivers one batch twice. Started by
//! Lambda (`AWS_LAMBDA_RUNTIME_API` set) it is the function, on the tables `IDEM_TABLE` and
//! `LEDGER_TABLE` (`CHARGE_DELAY_MS` makes each charge that slow); on AWS build its client with `aws_config::load_from_env()` instead of the
//! local one.

#[path = "support/local_dynamodb.rs"]
mod local_dynamodb;
#[path = "support/local_lambda.rs"]
mod local_lambda;

use aws_lambda_events::sqs::SqsMessage;
use idem_lambda::{EventKey, Idempotency};
use idem_store_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use idem_store_dynamodb::aws_sdk_dynamodb::Client;
use idem_store_dynamodb::testing::local_client;
use idem_store_dynamodb::{create_table, DynamoDbStore, TableLayout};
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

use local_lambda::{Error, LocalFunction};

#[derive(Deserialize)]
struct Order {
    order_id: String,
    cents: u64,
    #[serde(default)]
    declined: bool,
}

/// Charges the order: one more charge on its row of the ledger.
async fn charge(client: &Client, ledger: &str, message: &SqsMessage) -> Result<(), Error> {
    let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or("{}"))?;
    if order.declined {
        return Err(format!("the card for {} was declined", order.order_id).into());
    }
    if let Some(ms) = std::env::var("CHARGE_DELAY_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    {
        // A slow payment provider (the tests use it for a charge that outlives its invocation).
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    client
        .update_item()
        .table_name(ledger)
        .key("id", AttributeValue::S(order.order_id))
        .update_expression("ADD charges :one, cents :cents")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .expression_attribute_values(":cents", AttributeValue::N(order.cents.to_string()))
        .send()
        .await?;
    Ok(())
}

/// The function: what Lambda runs.
async fn function() -> Result<(), Error> {
    let url = std::env::var("DYNAMODB_URL").map_err(|_| "DYNAMODB_URL is not set")?;
    let client = local_client(&url);
    let store = DynamoDbStore::new(client.clone(), std::env::var("IDEM_TABLE")?);
    let ledger = std::env::var("LEDGER_TABLE")?;
    let handler = Idempotency::new(store).sqs(
        EventKey::path("powertools_json(body).order_id")?,
        move |message, _context| {
            let (client, ledger) = (client.clone(), ledger.clone());
            async move { charge(&client, &ledger, &message).await }
        },
    );
    lambda_runtime::run(handler).await
}

fn message(id: &str, body: serde_json::Value) -> serde_json::Value {
    json!({
        "messageId": id,
        "body": body.to_string(),
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:orders",
        "attributes": {},
        "messageAttributes": {}
    })
}

/// Plays Lambda and SQS for the function, locally.
async fn demo() -> Result<(), Error> {
    let (url, _server) = local_dynamodb::local_dynamodb()?;
    let client = local_client(&url);
    let run = std::process::id();
    let (table, ledger) = (format!("idem-{run}"), format!("ledger-{run}"));
    create_table(&client, &table, &TableLayout::default()).await?;
    create_table(&client, &ledger, &TableLayout::default()).await?;
    let api = idem_lambda::testing::RuntimeApi::start().await;
    let _function = LocalFunction::start(
        &api,
        "orders",
        &[
            ("DYNAMODB_URL", url.as_str()),
            ("IDEM_TABLE", &table),
            ("LEDGER_TABLE", &ledger),
        ],
    )?;
    let batch = json!({"Records": [
        message("m-1", json!({"order_id": "o-1", "cents": 1250})),
        message("m-2", json!({"order_id": "o-2", "cents": 900, "declined": true})),
        message("m-3", json!({"order_id": "o-3", "cents": 310})),
    ]});
    for delivery in 1..=2 {
        let answer = api.invoke(&batch, Duration::from_secs(30)).await.json();
        println!(
            "delivery {delivery}: batchItemFailures = {}",
            answer["batchItemFailures"]
        );
    }
    for order in ["o-1", "o-2", "o-3"] {
        let row = client
            .get_item()
            .table_name(&ledger)
            .key("id", AttributeValue::S(order.into()))
            .send()
            .await?;
        let charges = match row.item().and_then(|item| item.get("charges")) {
            Some(AttributeValue::N(n)) => n.clone(),
            _ => "0".into(),
        };
        println!("{order} charged {charges} time(s)");
    }
    Ok(())
}

fn main() -> Result<(), Error> {
    local_lambda::function_or_demo(function, demo)
}
