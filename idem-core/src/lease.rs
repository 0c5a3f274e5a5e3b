//! Lease renewal, written once for everything that holds a claim: `#[idempotent]` calls,
//! [`Call`](crate::Call)s, and the PostgreSQL queue's jobs (which run as calls, on a store whose
//! `renew` extends the job's queue row in the same statement).
//!
//! **The policy:** a claim held for `lease` is renewed every third of a lease
//! ([`renew_every`]) for as long as its work runs. A live run therefore survives two failed
//! renewals in a row before its lease can lapse; a crashed run stops renewing and its key is
//! taken over at most one lease later.
//!
//! **Where it runs:** on a task of its own, not in the task that runs the body, so a body that
//! blocks its thread (`std::thread::sleep`, a synchronous client, a long computation) does not
//! stop its renewal: on a multi-thread runtime another worker renews. What still stops it: a
//! runtime with no free worker (a `current_thread` runtime whose one thread the body blocks,
//! or every worker of a multi-thread runtime blocked at once), a stalled process (a GC pause, a
//! frozen VM), or a store that cannot be reached for a whole lease. Then the lease lapses and the
//! run is taken over; its completion is refused ([`Error::LostClaim`](crate::Error::LostClaim)).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::key::Key;
use crate::store::{Fence, Fenced, Store};

/// How many renewals fit in one lease: a claim is renewed every `lease / RENEWALS_PER_LEASE`.
pub const RENEWALS_PER_LEASE: u32 = 3;

/// The interval between renewals of a claim held for `lease` (a third of it, at least 1 ms).
pub fn renew_every(lease: Duration) -> Duration {
    (lease / RENEWALS_PER_LEASE).max(Duration::from_millis(1))
}

/// A held claim, renewed on the [policy](self) by [`renew_in_background`](Self::renew_in_background).
#[derive(Debug)]
pub(crate) struct Lease<'a, S: ?Sized> {
    pub store: &'a S,
    pub key: &'a Key,
    pub fence: Fence,
    pub lease: Duration,
}

impl<S: Store + ?Sized> Lease<'_, S> {
    /// Starts renewing the claim on a task of its own, through `shared` (the same store, as a
    /// handle the task can keep), until the returned guard is dropped. Yields once, so the
    /// renewal task is scheduled before the caller goes on to run the body.
    pub async fn renew_in_background(&self, shared: Arc<dyn Store>) -> Renewal {
        let (key, fence, lease) = (self.key.clone(), self.fence, self.lease);
        let task = tokio::spawn(async move {
            let never = keep_renewed(&*shared, &key, fence, lease).await;
            match never {}
        });
        // A task spawned from a worker thread waits in that worker's own slot, which no other
        // worker takes from; yielding lets it start (and arm its timer) before the body can
        // block this thread. Its later wake-ups run on any free worker.
        tokio::task::yield_now().await;
        Renewal(task)
    }
}

/// Renewal running in the background; stops when dropped.
#[derive(Debug)]
pub(crate) struct Renewal(JoinHandle<()>);

impl Drop for Renewal {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews the claim every [`renew_every`] for as long as it is polled. When a newer run took
/// the key over it stops renewing (the run's completion will be refused); store errors are
/// logged and the next renewal tries again.
async fn keep_renewed(store: &dyn Store, key: &Key, fence: Fence, lease: Duration) -> Infallible {
    let every = renew_every(lease);
    loop {
        tokio::time::sleep(every).await;
        match store.renew(key, fence, lease).await {
            Ok(Fenced::Applied) => tracing::trace!(%key, "lease renewed"),
            Ok(Fenced::Lost) => {
                tracing::warn!(
                    %key,
                    "claim lost while the handler runs (a newer run took the key over); its \
                     completion will be refused"
                );
                return std::future::pending().await;
            }
            Err(e) => tracing::warn!(%key, error = %e, "lease renewal failed; will retry"),
        }
    }
}
