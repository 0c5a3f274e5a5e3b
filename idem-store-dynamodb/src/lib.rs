//! # idem-store-dynamodb: idem on DynamoDB
//!
//! [`DynamoDbStore`] keeps idem's records in one DynamoDB table, through the official AWS SDK
//! for Rust. Each step of a call is **one request**:
//!
//! | step | request | its condition |
//! | --- | --- | --- |
//! | claim | `PutItem`, returning the old item either way | no item, or one that stopped counting and holds a smaller fence |
//! | complete | `UpdateItem` | the record holds the run's fence and is not released |
//! | release, renew | `UpdateItem` | the record holds the run's fence and is in progress |
//! | journal write | `TransactWriteItems` | the record holds the fence; the entry is not done |
//!
//! A fresh call makes **two requests** (claim, complete), a duplicate **one** (the refused
//! claim's answer carries the record and its stored answer), as Powertools for AWS Lambda does.
//! Unlike Powertools, every write after the claim is fenced: a run whose claim lapsed and was
//! taken over cannot overwrite the newer run's record.
//!
//! ## Setup
//!
//! ```
//! use idem_core::{Call, Outcome};
//! use idem_store_dynamodb::{create_table, DynamoDbStore, TableLayout};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let client = idem_store_dynamodb::testing::local_client(&idem_store_dynamodb::testing::dynamodb_url());
//! # let table = format!("guide-{}", std::process::id());
//! // In an application: `aws_config::load_from_env().await` and `Client::new(&config)`.
//! // let client = aws_sdk_dynamodb::Client::new(&config);
//! create_table(&client, &table, &TableLayout::default()).await?; // once, or in your IaC
//! let store = DynamoDbStore::new(client, &table);
//!
//! let first = Call::new(&store, "order-17").run_replay(async {
//!     Ok::<_, std::io::Error>("receipt-1".to_string())
//! }).await?;
//! assert_eq!(first, Outcome::Executed("receipt-1".to_string()));
//! let again = Call::new(&store, "order-17").run_replay(async {
//!     Ok::<_, std::io::Error>("a second receipt".to_string())
//! }).await?;
//! assert_eq!(again.into_value(), Some("receipt-1".to_string()), "replayed, not run");
//! # Ok(()) }
//! ```
//!
//! The store takes a ready [`aws_sdk_dynamodb::Client`], so the application configures it as
//! it configures any other (credentials, region, endpoint, retries). The crate builds the SDK
//! without an HTTP client of its own: the `aws-config` crate brings one.
//!
//! | option | default | what it does |
//! | --- | --- | --- |
//! | [`layout`](DynamoDbStoreBuilder::layout) | Powertools' names, partition key `id` | the key schema and attribute names ([`TableLayout`]) |
//! | [`grace`](DynamoDbStoreBuilder::grace) | [`DEFAULT_GRACE`], 10 minutes | how long a lapsed claim's item stays before its TTL may delete it, so the next claim is reported as a takeover |
//! | [`clock`](DynamoDbStoreBuilder::clock) | the system clock | where leases and `keep` read the time (tests use a manual one) |
//!
//! ## The table
//!
//! [`create_table`] makes it (on demand, TTL on `expiration`) and leaves an existing one alone.
//! In CloudFormation:
//!
//! ```yaml
//! IdempotencyTable:
//!   Type: AWS::DynamoDB::Table
//!   Properties:
//!     BillingMode: PAY_PER_REQUEST
//!     AttributeDefinitions: [{ AttributeName: id, AttributeType: S }]
//!     KeySchema: [{ AttributeName: id, KeyType: HASH }]
//!     TimeToLiveSpecification: { AttributeName: expiration, Enabled: true }
//! ```
//!
//! In the CDK (TypeScript):
//!
//! ```typescript
//! new dynamodb.Table(this, "IdempotencyTable", {
//!   partitionKey: { name: "id", type: dynamodb.AttributeType.STRING },
//!   timeToLiveAttribute: "expiration",
//!   billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
//! });
//! ```
//!
//! The function's role needs `dynamodb:PutItem`, `UpdateItem`, `GetItem` and, for the journal,
//! `ConditionCheckItem`; `Scan` and `DeleteItem` only for [`Purge`](idem_core::Purge).
//!
//! ### Sharing a table with Powertools
//!
//! The default [`TableLayout`] is Powertools' (`id`, `expiration`, `in_progress_expiration`,
//! `status`, `data`, `validation`), and a record's id in the default scope is its key alone. So
//! a function moved from Python to Rust keeps its table: give the Rust handler the key Powertools
//! computed (`"{function}.{module}.{handler}#" + md5 of the payload`, or your own), and a record
//! the Python function completed is a duplicate with its stored answer (`data`, JSON text, which
//! [`JsonReplay`](idem_core::JsonReplay) reads). Records idem writes carry the same attributes,
//! plus its own (`idem_fence`, `idem_until`, `idem_completed`, `idem_token`, `idem_holder`).
//! Fingerprints differ: Powertools' `validation` is its own hash, so a fingerprinted idem call on
//! a record Powertools validated reads as a mismatch. A sort-key layout
//! ([`TableLayout::sort_key`]) is Powertools' `sort_key_attr` with its static partition value.
//!
//! Share the table for a migration, not the same keys between both at once: Powertools writes
//! its completion and its release without a condition, so a Python run whose claim lapsed can
//! overwrite or delete the record of the idem run that took the key over (idem's own writes are
//! fenced). A Powertools record keeps no completion time: idem reports the end of its
//! retention instead. [`Purge`](idem_core::Purge) leaves Powertools' records to the TTL.
//!
//! ## Time, TTL and what DynamoDB does late
//!
//! DynamoDB has no clock a condition can read, so the store writes times from the host's clock
//! ([`DynamoDbStoreBuilder::clock`]), and hosts sharing a table must agree on the time to
//! within a small part of a lease. Fences come from the same clock, and a claim never takes a
//! fence smaller than the one it finds: a release leaves a tombstone (status `RELEASED`) that
//! keeps it until the TTL deletes it; after that, fences rest on the hosts' clocks alone.
//!
//! **Expired items are absent to idem, however late DynamoDB deletes them.** Its TTL deletes
//! expired items within days, not at once; every decision compares `idem_until` (milliseconds)
//! with the time, so an expired record that is still there counts as no record. `get` still
//! reads it, as every store's does. [`Purge`](idem_core::Purge) deletes expired items sooner,
//! by scanning the table: for tests and small tables; leave large ones to the TTL.
//!
//! **Throttling** (`ProvisionedThroughputExceededException`, `ThrottlingException`,
//! `RequestLimitExceeded`) and transient faults are retried by the SDK's retry strategy with
//! exponential backoff and jitter (standard mode: 3 attempts by default; raise it with
//! `aws_config::retry::RetryConfig`). The tests play throttling with a proxy in front of the
//! local server, which never throttles. A retried request is safe: a claim that was applied
//! before its answer was lost finds its own fence and is answered as acquired, a completion
//! applies again under the same fence. **Conditional-check failures are never retried
//! blindly**: they are answers (in progress, completed, lost fence). A claim sends again only
//! when the item it found no longer counts but holds a fence at least its own, and then with a
//! greater fence.
//!
//! ## Cancellation
//!
//! A claim's request runs on a task of its own: a caller dropped while the request is out (a
//! Lambda invocation's deadline, a client's timeout) cannot leave the claim applied and
//! unanswered; a claim acquired for a caller that left is released. A call dropped after its
//! claim is released at once ([`Store::abandon`](idem_core::Store::abandon)), and a call
//! dropped during its completion still completes (idem-core's runtime).
//!
//! ## Testing against a local server
//!
//! The tests run against moto's DynamoDB-compatible server, started by `scripts/test` (see
//! `testing`, with the `testing` feature). It reproduces conditions, `ReturnValues` and
//! transactions; it does not reproduce TTL deletion (it never deletes: the store treats expired
//! items as absent anyway), throttling, or eventual consistency (the store reads consistently).

#![warn(missing_docs)]

mod item;
mod journal;
mod layout;
mod purge;
mod store;
mod table;
#[cfg(feature = "testing")]
pub mod testing;

pub use aws_sdk_dynamodb;
pub use layout::{InvalidLayout, TableLayout};
pub use store::{DynamoDbStore, DynamoDbStoreBuilder, DEFAULT_GRACE, MAX_OUTPUT_BYTES};
pub use table::{create_table, Created};
