//! A stored item read back: the attributes idem decides on, from items idem wrote and from
//! records Powertools for AWS Lambda wrote (which carry no fence and no millisecond times).

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use idem_core::{Fence, Fingerprint, RecordState};
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::layout::{own, TableLayout};

/// The status of a claimed record, as Powertools writes it.
pub(crate) const INPROGRESS: &str = "INPROGRESS";
/// The status of a completed record, as Powertools writes it.
pub(crate) const COMPLETED: &str = "COMPLETED";
/// The status of a released claim: a tombstone that keeps the key's last fence, so the next
/// claim's fence is greater even on a clock that reads the same time (DynamoDB keeps no time
/// of its own). It counts as no record; its TTL deletes it.
pub(crate) const RELEASED: &str = "RELEASED";
/// A journal entry's states.
pub(crate) const STARTED: &str = "STARTED";
pub(crate) const DONE: &str = "DONE";

/// An item as a map of attributes.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// The attributes of a stored item that idem decides on.
#[derive(Debug)]
pub(crate) struct Stored {
    pub fence: u64,
    pub status: String,
    /// When the item stops counting, in epoch milliseconds: live while `until > now`.
    pub until: u64,
    pub completed: Option<u64>,
    pub output: Option<Vec<u8>>,
    pub fingerprint: Option<String>,
    pub token: Option<u64>,
}

pub(crate) fn number(item: &Item, name: &str) -> Option<u64> {
    match item.get(name)? {
        AttributeValue::N(n) => n
            .parse::<u64>()
            .ok()
            .or_else(|| n.parse::<f64>().ok().map(|f| f.max(0.0) as u64)),
        _ => None,
    }
}

pub(crate) fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name)? {
        AttributeValue::S(s) => Some(s),
        _ => None,
    }
}

/// An output as stored: text when it is UTF-8 (as Powertools stores its JSON answers), bytes
/// otherwise.
pub(crate) fn output_value(output: &[u8]) -> AttributeValue {
    match std::str::from_utf8(output) {
        Ok(text) => AttributeValue::S(text.to_owned()),
        Err(_) => AttributeValue::B(Blob::new(output)),
    }
}

fn output(item: &Item, name: &str) -> Option<Vec<u8>> {
    match item.get(name)? {
        AttributeValue::S(s) => Some(s.clone().into_bytes()),
        AttributeValue::B(b) => Some(b.as_ref().to_vec()),
        _ => None,
    }
}

impl Stored {
    /// Reads `item`. `None` for an item that is not a record or journal entry (no status).
    pub(crate) fn read(item: &Item, layout: &TableLayout) -> Option<Stored> {
        let status = text(item, &layout.status)?.to_owned();
        let until = match number(item, own::UNTIL) {
            Some(until) => until,
            // A record Powertools wrote: it expires once `expiration` (seconds) is in the past,
            // and an in-progress one also once `in_progress_expiration` (ms) is. These are the
            // first milliseconds at which its own condition sees it expired.
            // Without a numeric `expiration` it never expires, as DynamoDB's comparison with a
            // missing attribute is false in the claim's condition.
            None => {
                let expiration = number(item, &layout.expiration)
                    .map_or(u64::MAX, |s| s.saturating_add(1).saturating_mul(1000));
                match number(item, &layout.in_progress_expiration) {
                    Some(ms) if status == INPROGRESS => expiration.min(ms.saturating_add(1)),
                    _ => expiration,
                }
            }
        };
        Some(Stored {
            fence: number(item, own::FENCE).unwrap_or(0),
            until,
            completed: number(item, own::COMPLETED),
            output: output(item, &layout.data),
            fingerprint: text(item, &layout.validation)
                .filter(|fp| !fp.is_empty())
                .map(str::to_owned),
            token: number(item, own::TOKEN),
            status,
        })
    }

    /// Whether the item still counts at `now` (ms): not a tombstone, and not expired.
    pub(crate) fn live(&self, now: u64) -> bool {
        self.status != RELEASED && self.until > now
    }

    pub(crate) fn completed(&self) -> bool {
        self.status == COMPLETED
    }

    /// When it completed: the time idem wrote, or for a record Powertools wrote (which keeps
    /// none) the end of its retention.
    pub(crate) fn completed_at(&self) -> SystemTime {
        at(self.completed.unwrap_or(self.until))
    }

    /// The record's state, as [`idem_core::Store::get`] reports it.
    pub(crate) fn state(&self) -> RecordState {
        RecordState::from_stored(
            self.completed().then(|| self.completed_at()),
            at(self.until),
            if self.completed() {
                self.output.clone()
            } else {
                None
            },
        )
    }

    pub(crate) fn fence(&self) -> Fence {
        Fence(self.fence)
    }

    pub(crate) fn fingerprint(&self) -> Option<Fingerprint> {
        self.fingerprint.clone().map(Fingerprint::from_stored)
    }
}

/// Epoch milliseconds as a time.
pub(crate) fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// A time as epoch milliseconds.
pub(crate) fn millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 4))
}

/// A duration in milliseconds, rounded up (a lease never ends early).
pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX / 4)
}

pub(crate) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

pub(crate) fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}
