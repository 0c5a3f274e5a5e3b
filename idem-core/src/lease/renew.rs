//! The renewal itself: its interval, and the loop a running claim's renewal task runs.

use std::time::Duration;

use crate::context::CallContext;
use crate::store::Fenced;

/// How many renewals fit in one lease: a claim is renewed every `lease / RENEWALS_PER_LEASE`.
pub const RENEWALS_PER_LEASE: u32 = 3;

/// The interval between renewals of a claim held for `lease` (a third of it, at least 1 ms).
pub fn renew_every(lease: Duration) -> Duration {
    (lease / RENEWALS_PER_LEASE).max(Duration::from_millis(1))
}

/// Renews the claim at once, then every [`renew_every`], until a newer run took the key over
/// (its completion will then be refused) or `stopped` says so. Each renewal is sent holding
/// `stopped`'s lock, so a stop waits for it. Store errors are logged and the next renewal tries
/// again.
pub(super) async fn keep_renewed(
    context: &CallContext,
    lease: Duration,
    stopped: &tokio::sync::Mutex<bool>,
) {
    let every = renew_every(lease);
    let (store, key, fence) = (context.store(), context.key(), context.fence());
    loop {
        {
            let stopped = stopped.lock().await;
            if *stopped {
                return;
            }
            match store.renew(key, fence, lease).await {
                Ok(Fenced::Applied) => tracing::trace!(%key, "lease renewed"),
                Ok(Fenced::Lost) => {
                    tracing::warn!(
                        %key,
                        "claim lost while the handler runs (a newer run took the key over); \
                         its completion will be refused"
                    );
                    return;
                }
                Err(e) => tracing::warn!(%key, error = %e, "lease renewal failed; will retry"),
            }
        }
        tokio::time::sleep(every).await;
    }
}
