//! Lease renewal, written once for everything that holds a claim: `#[idempotent]` calls,
//! [`Call`](crate::Call)s, and the PostgreSQL queue's jobs (which run as calls, on a store whose
//! `renew` extends the job's queue row in the same statement).
//!
//! **The policy:** a claim held for `lease` is renewed every third of a lease
//! ([`renew_every`]) for as long as its work runs. A live run therefore survives two failed
//! renewals in a row before its lease can lapse; a crashed run stops renewing and its key is
//! taken over at most one lease later.

use std::convert::Infallible;
use std::time::Duration;

use crate::key::Key;
use crate::store::{Fence, Fenced, Store};

/// How many renewals fit in one lease: a claim is renewed every `lease / RENEWALS_PER_LEASE`.
pub const RENEWALS_PER_LEASE: u32 = 3;

/// The interval between renewals of a claim held for `lease` (a third of it, at least 1 ms).
pub fn renew_every(lease: Duration) -> Duration {
    (lease / RENEWALS_PER_LEASE).max(Duration::from_millis(1))
}

/// A held claim, renewed on the [policy](self) for as long as [`keep_renewed`](Self::keep_renewed)
/// is polled.
#[derive(Debug)]
pub(crate) struct Lease<'a, S: ?Sized> {
    pub store: &'a S,
    pub key: &'a Key,
    pub fence: Fence,
    pub lease: Duration,
}

impl<S: Store + ?Sized> Lease<'_, S> {
    /// Renews the claim every [`renew_every`] until dropped. When a newer run took the key over
    /// it stops renewing (the run's completion will be refused); store errors are logged and the
    /// next renewal tries again.
    pub async fn keep_renewed(&self) -> Infallible {
        let every = renew_every(self.lease);
        loop {
            tokio::time::sleep(every).await;
            match self.store.renew(self.key, self.fence, self.lease).await {
                Ok(Fenced::Applied) => tracing::trace!("lease renewed"),
                Ok(Fenced::Lost) => {
                    tracing::warn!(
                        "claim lost while the handler runs (a newer run took the key over); \
                         its completion will be refused"
                    );
                    return std::future::pending().await;
                }
                Err(e) => tracing::warn!(error = %e, "lease renewal failed; will retry"),
            }
        }
    }
}
