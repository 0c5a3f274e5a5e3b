//! For tests: a client of a local DynamoDB-compatible server, and a table of a test's own.

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::Client;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::{create_table, TableLayout};

/// The local server's address: `DYNAMODB_URL`, which `scripts/test` sets (starting a
/// throwaway server when it was unset). A DynamoDB test without a server fails, loudly, with
/// this message.
pub fn dynamodb_url() -> String {
    std::env::var("DYNAMODB_URL").unwrap_or_else(|_| {
        panic!(
            "DYNAMODB_URL is not set. DynamoDB tests need a server that speaks its API: run them \
             with `scripts/test`, which starts a local one, or start it yourself with \
             `python3 scripts/dynamodb-local.py` (after `pip install 'moto[server]' waitress`) and set \
             DYNAMODB_URL to the address it prints"
        )
    })
}

/// A client of the server at `url`, over plain HTTP, with static test credentials (a local
/// server accepts any).
pub fn local_client(url: &str) -> Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "idem-testing"))
        .endpoint_url(url)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(config)
}

/// A fresh table, `prefix-PID-N`, for `layout`, on the server at [`dynamodb_url`].
pub async fn fresh_table(client: &Client, prefix: &str, layout: &TableLayout) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let table = format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    create_table(client, &table, layout)
        .await
        .unwrap_or_else(|e| panic!("create table {table}: {e}"));
    table
}
