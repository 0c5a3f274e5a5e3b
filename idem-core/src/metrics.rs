//! Metrics, through the [`metrics`](https://docs.rs/metrics) crate's facade: idem records them,
//! the application picks the exporter (Prometheus, StatsD, ...) by installing a recorder. With
//! no recorder installed they cost next to nothing.
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `idem_calls_total` | counter | `handler`, `outcome` | calls, by how they ended: `executed`, `duplicate`, `in_progress`, `handler_error`, `store_error`, `invalid_key`, `key_reused`, `lost_claim`, `codec_error`, `panicked`, `dropped` (the caller went away) |
//! | `idem_store_errors_total` | counter | `handler`, `operation` | store failures that ended a call (`claim`, `complete`, ...) |
//! | `idem_lost_claims_total` | counter | `handler` | runs whose completion was refused because a newer run took the key over |
//! | `idem_claim_seconds` | histogram | `handler` | the claim's round trip to the store, each attempt |
//! | `idem_body_seconds` | histogram | `handler` | how long the handler body ran |
//!
//! `handler` is the call's name: under `#[idempotent]` the function's module path and name
//! (`billing::invoice_run`),
//! [`Call::name`](crate::Call::name) otherwise (`idem::call` by default). The PostgreSQL work
//! queue adds its own (`idem_queue_*`, see `idem_store_postgres::queue`).

use std::time::Duration;

use crate::error::{Error, Operation};
use crate::outcome::Outcome;

/// Counter: calls by handler and outcome.
pub const CALLS: &str = "idem_calls_total";
/// Counter: store errors that ended a call, by handler and operation.
pub const STORE_ERRORS: &str = "idem_store_errors_total";
/// Counter: lost claims, by handler.
pub const LOST_CLAIMS: &str = "idem_lost_claims_total";
/// Histogram (seconds): the claim's round trip, by handler.
pub const CLAIM_SECONDS: &str = "idem_claim_seconds";
/// Histogram (seconds): the body's duration, by handler.
pub const BODY_SECONDS: &str = "idem_body_seconds";

pub(crate) fn claim_took(handler: &'static str, took: Duration) {
    metrics::histogram!(CLAIM_SECONDS, "handler" => handler).record(took.as_secs_f64());
}

pub(crate) fn body_took(handler: &'static str, took: Duration) {
    metrics::histogram!(BODY_SECONDS, "handler" => handler).record(took.as_secs_f64());
}

fn operation_name(operation: Option<Operation>) -> &'static str {
    match operation {
        Some(Operation::Claim) => "claim",
        Some(Operation::Complete) => "complete",
        Some(Operation::Release) => "release",
        Some(Operation::Renew) => "renew",
        Some(Operation::JournalRead) => "journal_read",
        Some(Operation::JournalWrite) => "journal_write",
        Some(_) | None => "other",
    }
}

/// Counts one call when it ends: with its result, or (dropped without one) as `panicked` while
/// unwinding, `dropped` otherwise.
pub(crate) struct CallMeter {
    handler: &'static str,
    done: bool,
}

impl CallMeter {
    pub fn start(handler: &'static str) -> CallMeter {
        CallMeter {
            handler,
            done: false,
        }
    }

    /// Records how the call ended, and hands the result back.
    pub fn finish<T, E>(
        mut self,
        result: Result<Outcome<T>, Error<E>>,
    ) -> Result<Outcome<T>, Error<E>> {
        self.done = true;
        let handler = self.handler;
        let outcome = match &result {
            Ok(outcome) => outcome.kind(),
            Err(Error::Handler(_)) => "handler_error",
            Err(Error::InvalidKey(_)) => "invalid_key",
            Err(Error::Store(e)) => {
                metrics::counter!(
                    STORE_ERRORS,
                    "handler" => handler,
                    "operation" => operation_name(e.operation())
                )
                .increment(1);
                "store_error"
            }
            Err(Error::KeyReused { .. }) => "key_reused",
            Err(Error::LostClaim { .. }) => {
                metrics::counter!(LOST_CLAIMS, "handler" => handler).increment(1);
                "lost_claim"
            }
            Err(Error::Codec(_)) => "codec_error",
        };
        metrics::counter!(CALLS, "handler" => handler, "outcome" => outcome).increment(1);
        result
    }
}

impl Drop for CallMeter {
    fn drop(&mut self) {
        if !self.done {
            let outcome = if std::thread::panicking() {
                "panicked"
            } else {
                "dropped"
            };
            metrics::counter!(CALLS, "handler" => self.handler, "outcome" => outcome).increment(1);
        }
    }
}
