//! # idem-lambda: AWS Lambda handlers made idempotent
//!
//! Lambda delivers at least once: an asynchronous invocation that failed or timed out is
//! retried with the same event, SQS hands a message out again after its visibility timeout,
//! EventBridge may deliver an event twice. [`Idempotency`] wraps a `lambda_runtime` handler so
//! that each event's work runs once, the way Powertools for AWS Lambda's idempotency utility
//! does in Python, TypeScript, Java and .NET:
//!
//! - the **key is taken from the event**, with a typed closure or a JMESPath expression
//!   ([`EventKey`]), Powertools' `event_key_jmespath` and its `powertools_json()` included;
//! - the **claim lasts until the invocation's deadline** (Powertools' `in_progress_expiration`)
//!   and is never renewed past it, so a retry after a timeout takes the event over at once,
//!   and a duplicate that arrives while the first runs fails with [`AlreadyInProgress`] and is
//!   retried;
//! - a **duplicate gets the stored answer** without running the handler;
//! - a **handler error releases the key**, so the retry runs it again;
//! - **SQS batches** run each record once and report failed ones in `batchItemFailures`
//!   ([`Idempotency::sqs`]), keeping FIFO groups in order;
//! - an event **without its key fails**: `null`, an empty string, or an empty or all-`null`
//!   selection is no key (hashed, each would be one key that every such event shares);
//! - **EventBridge** events, scheduled ones included, are keyed by their id
//!   ([`Idempotency::eventbridge`]).
//!
//! Records live in any idem store; on Lambda, `idem-store-dynamodb`, whose default table layout
//! is Powertools' own.
//!
//! ```
//! use idem_core::MemoryStore;
//! use idem_lambda::{EventKey, Idempotency};
//! use lambda_runtime::{Context, LambdaEvent, Service};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize, Serialize)]
//! struct Order { order_id: String, total_cents: u64 }
//!
//! #[derive(Deserialize, Serialize, Debug, PartialEq)]
//! struct Receipt { charged: u64 }
//!
//! async fn charge(event: LambdaEvent<Order>) -> Result<Receipt, lambda_runtime::Error> {
//!     Ok(Receipt { charged: event.payload.total_cents }) // charge the card once
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lambda_runtime::Error> {
//! let idempotency = Idempotency::new(MemoryStore::new()); // DynamoDbStore on Lambda
//! let mut handler = idempotency.handler(EventKey::path("order_id")?, charge);
//! // In the function's main: `lambda_runtime::run(handler).await`.
//!
//! let order = || Order { order_id: "o-17".into(), total_cents: 1250 };
//! let first = handler.call(LambdaEvent::new(order(), Context::default())).await?;
//! let retry = handler.call(LambdaEvent::new(order(), Context::default())).await?;
//! assert_eq!(first, Receipt { charged: 1250 });
//! assert_eq!(retry, first, "the retry got the stored receipt; the card was charged once");
//! # Ok(()) }
//! ```
//!
//! ## Coming from Powertools
//!
//! | Powertools (Python) | idem |
//! | --- | --- |
//! | `DynamoDBPersistenceLayer(table_name=...)` | `DynamoDbStore::new(client, table)` (`idem-store-dynamodb`), same table layout |
//! | `@idempotent` on the handler | [`Idempotency::handler`] |
//! | `IdempotencyConfig(event_key_jmespath="...")` | [`EventKey::path`] (or [`EventKey::from_fn`], typed) |
//! | `expires_after_seconds` (3600) | [`Idempotency::keep`] ([`DEFAULT_KEEP`], 1 hour) |
//! | `in_progress_expiration` from the context | the claim's lease ends at the invocation's deadline |
//! | `IdempotencyAlreadyInProgressError` | [`AlreadyInProgress`] |
//! | `BatchProcessor` + `@idempotent_function` per record | [`Idempotency::sqs`] |
//! | `raise_on_no_idempotency_key` (default off) | always on: an event without its key fails |
//! | `payload_validation_jmespath` | `Call::fingerprint` in `idem-core` |
//!
//! Differences worth knowing: every write after the claim is fenced (a run whose claim lapsed
//! cannot overwrite the newer run's record), and an event without its key fails instead of
//! running unprotected. Keys live in a scope named for the function (Powertools prefixes them
//! with the function's name); [`Idempotency::scope`] changes it.
//!
//! ## HTTP through `lambda_http`
//!
//! API Gateway and function URL events arrive through `lambda_http`, which runs any tower
//! service: wrap the application in `idem-http`'s `IdempotencyLayer` as on any server, and the
//! `Idempotency-Key` header works unchanged (the `lambda_http` example).
//!
//! ## Testing a function
//!
//! With the `testing` feature, `testing::RuntimeApi` is a local Lambda Runtime API: run the
//! function's binary with its `function_env`, and `invoke` it through the real runtime loop.

#![warn(missing_docs)]

mod deadline;
mod eventbridge;
mod handler;
mod idempotency;
mod key;
mod sqs;
#[cfg(feature = "testing")]
pub mod testing;

pub use idempotency::{AlreadyInProgress, Idempotency, DEFAULT_KEEP, MIN_LEASE};
pub use key::{EventKey, InvalidPath, KeyError};
