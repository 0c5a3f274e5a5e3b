//! Creating the table: what `idem migrate` is for the SQL stores.

use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;
use idem_core::{Operation, StoreError};
use std::time::Duration;

use crate::layout::TableLayout;
use crate::store::failed;

/// How long [`create_table`] waits for a new table to become active.
const TABLE_ACTIVE_WITHIN: Duration = Duration::from_secs(300);

fn invalid(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::new(
        "the DynamoDB store could not build its table's definition",
        e,
    )
    .during(Operation::Setup)
}

/// Whether [`create_table`] made the table or found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The table was created, with its TTL on the layout's expiration attribute.
    Created,
    /// A table of that name existed already; it was left as it is.
    Existed,
}

/// Creates `table` for `layout`, on demand (pay per request), and turns its TTL on for the
/// layout's expiration attribute; leaves an existing table as it is. For infrastructure as
/// code, the crate's guide has the same table in CloudFormation and the CDK.
pub async fn create_table(
    client: &Client,
    table: &str,
    layout: &TableLayout,
) -> Result<Created, StoreError> {
    let mut create = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest);
    let mut keys = vec![(layout.partition_key.as_str(), KeyType::Hash)];
    if let Some((sort, _)) = &layout.sort_key {
        keys.push((sort.as_str(), KeyType::Range));
    }
    for (name, kind) in keys {
        create = create
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(name)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(invalid)?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(name)
                    .key_type(kind)
                    .build()
                    .map_err(invalid)?,
            );
    }
    match create.send().await {
        Ok(_) => {}
        Err(SdkError::ServiceError(e))
            if matches!(e.err(), CreateTableError::ResourceInUseException(_)) =>
        {
            return Ok(Created::Existed)
        }
        Err(e) => return Err(failed(e, Operation::Setup)),
    }
    // DynamoDB creates a table in the background; its TTL can be set once it is active.
    client
        .wait_until_table_exists()
        .table_name(table)
        .wait(TABLE_ACTIVE_WITHIN)
        .await
        .map_err(|e| {
            StoreError::new(format!("the table {table:?} did not become active"), e)
                .during(Operation::Setup)
        })?;
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(&layout.expiration)
                .build()
                .map_err(invalid)?,
        )
        .send()
        .await
        .map_err(|e| failed(e, Operation::Setup))?;
    Ok(Created::Created)
}
