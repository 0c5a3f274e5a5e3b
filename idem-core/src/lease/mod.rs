//! Lease renewal, written once for everything that holds a claim: `#[idempotent]` calls,
//! [`Call`](crate::Call)s, and the PostgreSQL queue's jobs (which run as calls, on a store whose
//! `renew` extends the job's queue row in the same statement).
//!
//! **The policy:** a claim held for `lease` is renewed every third of a lease
//! ([`renew_every`]) for as long as its work runs. A live run therefore survives two failed
//! renewals in a row before its lease can lapse; a crashed run stops renewing and its key is
//! taken over at most one lease later.
//!
//! **Where it runs:** not in the task that runs the body, so a body that blocks its thread
//! (`std::thread::sleep`, a synchronous client, a long computation) does not stop its renewal.
//! A running claim waits on the process's lease watch (a thread of its own, not a
//! runtime worker); if the body is still running when the first renewal falls due, the watch
//! spawns the renewal task on the call's runtime, where any free worker runs it. Most bodies
//! finish first, and their claims cost the watch a slot and no task. What still stops renewal: a
//! runtime with no free worker (a `current_thread` runtime whose one thread the body blocks,
//! or every worker of a multi-thread runtime blocked at once), a stalled process (a GC pause, a
//! frozen VM), or a store that cannot be reached for a whole lease. Then the lease lapses and the
//! run is taken over; its completion is refused ([`Error::LostClaim`](crate::Error::LostClaim)).
//!
//! The first renewal is timed by the system's monotonic clock (`std::time::Instant`), later ones
//! by Tokio's timer.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::context::CallContext;
use crate::key::Key;
use crate::store::{Fence, Store};

mod renew;
mod watch;

pub use renew::{renew_every, RENEWALS_PER_LEASE};

/// A held claim, renewed on the [policy](self) by
/// [`renew_in_background`](Self::renew_in_background).
#[derive(Debug)]
pub(crate) struct Lease<'a, S: ?Sized> {
    pub store: &'a S,
    pub key: &'a Key,
    pub fence: Fence,
    pub lease: Duration,
}

impl<S: Store + ?Sized> Lease<'_, S> {
    /// Keeps the claim, made at `claimed_at`, renewed through `context`'s store (the same store,
    /// as a handle another task can keep) until the returned guard is dropped.
    pub fn renew_in_background(&self, context: &CallContext, claimed_at: Instant) -> Renewal {
        Renewal {
            watched: watch::start(context, self.lease, claimed_at),
            lease: self.lease,
        }
    }
}

/// Renewal of a running claim. [`stop`](Renewal::stop) ends it once no renewal is on the
/// wire, as a claim must be before it is settled; dropped, it stops at once (a renewal on the
/// wire is cut on this side only).
#[derive(Debug)]
pub(crate) struct Renewal {
    watched: watch::Watched,
    /// The lease it renews: the longest a stop waits for a renewal on the wire.
    lease: Duration,
}

impl Renewal {
    /// Stops the renewal: takes the claim off the watch and, when its renewal task runs, waits
    /// until no renewal is on the wire. Returns `None` when there is nothing to wait for (the
    /// claim was never renewed: most are not), so the caller need not wait at all.
    pub fn stop(self) -> Option<impl Future<Output = ()> + Send + 'static> {
        let lease = self.lease;
        self.watched.take().map(|renewing| renewing.stop(lease))
    }
}
