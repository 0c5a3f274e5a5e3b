//! Metrics, through the [`metrics`](https://docs.rs/metrics) crate's facade: idem records them,
//! the application picks the exporter (Prometheus, StatsD, ...) by installing a recorder. With
//! no recorder installed they cost next to nothing.
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `idem_calls_total` | counter | `handler`, `outcome` | calls, by how they ended: `executed`, `duplicate`, `in_progress`, `handler_error`, `store_error`, `invalid_key`, `invalid_option`, `key_reused`, `lost_claim`, `codec_error`, `panicked`, `dropped` (the caller went away) |
//! | `idem_store_errors_total` | counter | `handler`, `operation` | store failures that ended a call (`claim`, `complete`, ...) |
//! | `idem_lost_claims_total` | counter | `handler` | runs whose completion was refused because a newer run took the key over |
//! | `idem_claim_seconds` | histogram | `handler` | the claim's round trip to the store, each attempt |
//! | `idem_body_seconds` | histogram | `handler` | how long the handler body ran |
//!
//! `handler` is the call's name: under `#[idempotent]` the function's module path and name
//! (`billing::invoice_run`),
//! [`Call::name`](crate::Call::name) otherwise (`idem::call` by default). The PostgreSQL work
//! queue adds its own (`idem_queue_*`, see `idem_queue`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata};

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

/// Every value of `idem_calls_total`'s `outcome` label.
const OUTCOMES: [&str; 11] = [
    "executed",
    "duplicate",
    "in_progress",
    "handler_error",
    "store_error",
    "invalid_key",
    "key_reused",
    "lost_claim",
    "codec_error",
    "panicked",
    "dropped",
];

/// What the `metrics` macros would pass for a metric recorded in this module.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The keys of one handler's per-call metrics, made once per handler name for the life of the
/// process: recording a call then neither allocates labels nor hashes a key (the `metrics`
/// macros do both on every call). Bounded by the program's handler names.
struct HandlerKeys {
    claim: Key,
    body: Key,
    calls: [Key; OUTCOMES.len()],
}

/// Handler names are `&'static str`s: one set of keys per name (by address and length).
type ByName = HashMap<(usize, usize), &'static HandlerKeys, BuildHasherDefault<AddressHasher>>;

/// Hashes the addresses and lengths of `ByName`'s keys with one multiply each. They are the
/// program's own string constants, not input, so no keyed hash (SipHash costs more than the
/// rest of recording a call) is needed.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.write_u64(u64::from(*byte));
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

fn keys(handler: &'static str) -> &'static HandlerKeys {
    static ALL: Mutex<Option<ByName>> = Mutex::new(None);
    thread_local! {
        static SEEN: RefCell<ByName> = RefCell::new(ByName::default());
    }
    let name = (handler.as_ptr() as usize, handler.len());
    if let Some(keys) = SEEN.with(|seen| seen.borrow().get(&name).copied()) {
        return keys;
    }
    let keys = *ALL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(ByName::default)
        .entry(name)
        .or_insert_with(|| {
            let handler_label = || Label::new("handler", handler);
            Box::leak(Box::new(HandlerKeys {
                claim: Key::from_parts(CLAIM_SECONDS, vec![handler_label()]),
                body: Key::from_parts(BODY_SECONDS, vec![handler_label()]),
                calls: OUTCOMES.map(|outcome| {
                    Key::from_parts(CALLS, vec![handler_label(), Label::new("outcome", outcome)])
                }),
            }))
        });
    SEEN.with(|seen| seen.borrow_mut().insert(name, keys));
    keys
}

/// One handler's metrics: its name and keys, looked up once per call.
#[derive(Clone, Copy)]
pub(crate) struct Handler {
    name: &'static str,
    keys: &'static HandlerKeys,
}

impl Handler {
    pub fn new(name: &'static str) -> Handler {
        Handler {
            name,
            keys: keys(name),
        }
    }

    /// Records one claim attempt's round trip.
    pub fn claim_took(self, took: Duration) {
        record_seconds(&self.keys.claim, took);
    }

    /// Records how long the body ran.
    pub fn body_took(self, took: Duration) {
        record_seconds(&self.keys.body, took);
    }

    /// Counts one call that ended with `outcome` (one of [`OUTCOMES`]).
    fn count_call(self, outcome: &'static str) {
        match OUTCOMES.iter().position(|known| *known == outcome) {
            Some(at) => {
                let key = &self.keys.calls[at];
                metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(1));
            }
            None => {
                metrics::counter!(CALLS, "handler" => self.name, "outcome" => outcome).increment(1)
            }
        }
    }
}

fn record_seconds(key: &Key, took: Duration) {
    metrics::with_recorder(|r| {
        r.register_histogram(key, &METADATA)
            .record(took.as_secs_f64())
    });
}

fn operation_name(operation: Option<Operation>) -> &'static str {
    match operation {
        Some(Operation::Claim) => "claim",
        Some(Operation::Complete) => "complete",
        Some(Operation::Release) => "release",
        Some(Operation::Renew) => "renew",
        Some(Operation::JournalRead) => "journal_read",
        Some(Operation::JournalWrite) => "journal_write",
        Some(Operation::Cancel) => "cancel",
        Some(Operation::Schedule) => "schedule",
        Some(_) | None => "other",
    }
}

/// Counts one call when it ends: with its result, or (dropped without one) as `panicked` while
/// unwinding, `dropped` otherwise.
pub(crate) struct CallMeter {
    handler: Handler,
    done: bool,
}

impl CallMeter {
    pub fn start(handler: &'static str) -> CallMeter {
        CallMeter {
            handler: Handler::new(handler),
            done: false,
        }
    }

    /// The call's handler, for the claim and body timings.
    pub fn handler(&self) -> Handler {
        self.handler
    }

    /// Records how the call ended, and hands the result back.
    pub fn finish<T, E>(
        mut self,
        result: Result<Outcome<T>, Error<E>>,
    ) -> Result<Outcome<T>, Error<E>> {
        self.done = true;
        let handler = self.handler.name;
        let outcome = match &result {
            Ok(outcome) => outcome.kind(),
            Err(Error::Handler(_)) => "handler_error",
            Err(Error::InvalidKey(_)) => "invalid_key",
            Err(Error::InvalidOption { .. }) => "invalid_option",
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
        self.handler.count_call(outcome);
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
            self.handler.count_call(outcome);
        }
    }
}
