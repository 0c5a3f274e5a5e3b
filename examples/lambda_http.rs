//! An HTTP API on Lambda (API Gateway or a function URL) whose POSTs honour `Idempotency-Key`:
//! `lambda_http` runs any tower service, so `idem-http`'s `IdempotencyLayer` wraps the axum
//! router exactly as on a server of its own. A client that retries a charge after a timeout
//! gets the first answer back (`Idempotent-Replayed: true`); the card is charged once.
//!
//! ```text
//! cargo run --example lambda_http     # a local DynamoDB server and Lambda Runtime API
//! ```
//!
//! Run as above, the example plays API Gateway: it starts a local DynamoDB server (or uses
//! `DYNAMODB_URL`) and a local Runtime API, starts itself as the function (the real
//! `lambda_http` loop, in a process of its own) and sends one charge twice, then another.
//! Started by Lambda (`AWS_LAMBDA_RUNTIME_API` set) it is the function, on the table
//! `IDEM_TABLE`; on AWS build its client with `aws_config::load_from_env()` instead.

#[path = "support/local_dynamodb.rs"]
mod local_dynamodb;
#[path = "support/local_lambda.rs"]
mod local_lambda;

use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idem_http::IdempotencyLayer;
use idem_store_dynamodb::testing::local_client;
use idem_store_dynamodb::{create_table, DynamoDbStore, TableLayout};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use local_lambda::{Error, LocalFunction};

/// The function: what Lambda runs.
async fn function() -> Result<(), Error> {
    let url = std::env::var("DYNAMODB_URL").map_err(|_| "DYNAMODB_URL is not set")?;
    let store = DynamoDbStore::new(local_client(&url), std::env::var("IDEM_TABLE")?);
    let charges = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route(
            "/charges",
            post(move || {
                let charges = charges.clone();
                async move {
                    let n = charges.fetch_add(1, Ordering::SeqCst) + 1;
                    (StatusCode::CREATED, format!("charge {n} in this process"))
                }
            }),
        )
        // Callers are named by their `Authorization` (the layer's default), so one caller's
        // key never answers another's request.
        .layer(IdempotencyLayer::new(store));
    lambda_http::run(app).await
}

/// An API Gateway HTTP API (payload 2.0) event: POST /charges.
pub fn charge_event(key: &str, token: &str) -> serde_json::Value {
    json!({
        "version": "2.0",
        "routeKey": "POST /charges",
        "rawPath": "/charges",
        "rawQueryString": "",
        "headers": {
            "authorization": format!("Bearer {token}"),
            "idempotency-key": key,
            "content-type": "application/json",
            "host": "api.example.com"
        },
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "api",
            "domainName": "api.example.com",
            "domainPrefix": "api",
            "http": {
                "method": "POST",
                "path": "/charges",
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "example"
            },
            "requestId": "request",
            "routeKey": "POST /charges",
            "stage": "$default",
            "time": "07/Dec/2026:00:00:00 +0000",
            "timeEpoch": 0
        },
        "body": "{\"cents\": 1250}",
        "isBase64Encoded": false
    })
}

/// Plays API Gateway for the function, locally.
async fn demo() -> Result<(), Error> {
    let (url, _server) = local_dynamodb::local_dynamodb()?;
    let client = local_client(&url);
    let table = format!("idem-http-{}", std::process::id());
    create_table(&client, &table, &TableLayout::default()).await?;
    let api = idem_lambda::testing::RuntimeApi::start().await;
    let _function = LocalFunction::start(
        &api,
        "charges",
        &[("DYNAMODB_URL", url.as_str()), ("IDEM_TABLE", &table)],
    )?;
    for (what, key) in [("charge", "k-1"), ("retry", "k-1"), ("new charge", "k-2")] {
        let answer = api
            .invoke(&charge_event(key, "user-7"), Duration::from_secs(30))
            .await
            .json();
        let replayed = answer["headers"]["idempotent-replayed"]
            .as_str()
            .unwrap_or("false");
        println!(
            "{what} ({key}): {} {} (replayed: {replayed})",
            answer["statusCode"], answer["body"]
        );
    }
    Ok(())
}

fn main() -> Result<(), Error> {
    local_lambda::function_or_demo(function, demo)
}
