//! When a batch is cut: how many requests a driver's next statement takes, and when a new
//! driver waits before taking its first.
//!
//! A lone call starts a driver too, rather than sending its statement from its own task:
//! requests that arrive together (the callers a batch answered at once) then share the
//! driver's first statement. Sent from its own task, a lone call would gain nothing, and two
//! concurrent calls would each wait for the other's statement instead of sharing one. A new
//! driver first steps to the back of its worker's run queue, behind the callers woken with the
//! one that started it, so that they queue in time for its first statement instead of waiting
//! for its second (`BackOfRunQueue`).
//!
//! The claims and the completions of lease mode are a pair of batchers
//! ([`Batcher::pair`](super::Batcher::pair)): a caller goes from one to the other and back.
//! Left alone they fall into step: every caller in one statement, then every caller in the
//! other's, while the first one's connection waits (on one Tokio worker, nearly all the callers
//! end up in each batch, and the worker idles meanwhile). So a new driver whose partner has no
//! statement running sends half of what is queued first, and the rest as its next statement:
//! the first half's callers then move on to the partner while the second half is on the wire,
//! and from there on the two statements run side by side, each carrying about half of the
//! callers. Only a driver's first batch is split; one that is already running takes whatever
//! queued. And only on a runtime with one worker thread, where the callers move in step: on
//! more they do not, and there the split only costs (where claim drivers start often while
//! completions idle, as at an HTTP endpoint whose keys arrive twice, every such start would
//! halve a batch for nothing).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The most requests one statement carries.
pub(crate) const MAX_BATCH: usize = 128;

/// The most requests the next batch takes: half of the `queued` (rounded up) when `may_split`
/// (a driver's first batch, on one worker thread) and the partner has no driver running
/// (`partner_idle`), else [`MAX_BATCH`].
pub(super) fn batch_limit(queued: usize, may_split: bool, partner_idle: bool) -> usize {
    if may_split && partner_idle {
        queued.div_ceil(2).min(MAX_BATCH)
    } else {
        MAX_BATCH
    }
}

/// Whether the calling task runs on a runtime with one worker thread, the only place where a
/// new driver splits its first batch (see the module's documentation).
pub(super) fn on_one_worker() -> bool {
    tokio::runtime::Handle::try_current().is_ok_and(|runtime| runtime.metrics().num_workers() == 1)
}

/// Reschedules the calling task once, at the back of its worker's run queue.
///
/// A driver is spawned by the call that found no driver running, from a runtime worker. Tokio
/// puts a task spawned from a worker in that worker's LIFO slot, so without this the driver
/// would run as soon as its caller awaited and take a queue of one, while the other callers the
/// last answers woke (already in the run queue) would wait a whole statement longer. A task
/// that wakes itself is rescheduled as a yield: behind the tasks already queued, not deferred
/// until the worker parks (as `tokio::task::yield_now` is), so it costs a lone call one
/// scheduler pass. Under load it makes far fewer statements that carry a single request.
pub(super) struct BackOfRunQueue {
    pub(super) yielded: bool,
}

impl Future for BackOfRunQueue {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_new_driver_may_split_on_one_worker_thread() {
        assert!(on_one_worker());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_new_driver_may_split_on_a_current_thread_runtime() {
        assert!(on_one_worker());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_driver_never_splits_on_two_worker_threads() {
        assert!(!on_one_worker());
    }

    #[test]
    fn a_new_driver_never_splits_outside_a_runtime() {
        assert!(!on_one_worker());
    }

    #[test]
    fn only_a_first_batch_beside_an_idle_partner_is_halved() {
        assert_eq!(batch_limit(21, true, true), 11, "half, rounded up");
        assert_eq!(
            batch_limit(21, true, false),
            MAX_BATCH,
            "the partner is busy"
        );
        assert_eq!(batch_limit(21, false, true), MAX_BATCH, "not a first batch");
        assert_eq!(batch_limit(1, true, true), 1, "a lone request goes at once");
        assert_eq!(batch_limit(3 * MAX_BATCH, true, true), MAX_BATCH);
    }
}
