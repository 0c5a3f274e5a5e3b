//! Work idem finishes in the background, and [`drain`], which waits for it before a process
//! exits.
//!
//! A call whose caller goes away after its body returned `Ok` records its completion on a task
//! of its own; a call dropped mid-run frees its key on one; a [detached](crate::Call::run_detached)
//! call and a request the HTTP layer runs go on after their callers leave. Those tasks live on
//! the Tokio runtime, and a runtime that shuts down (`#[tokio::main]` returning, a server
//! stopping) drops them unrun: a completion dropped so is lost, and the next delivery runs the
//! body again. A process that stops on purpose calls [`drain`] last, with a deadline of its
//! choosing:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # async fn serve() {}
//! #[tokio::main]
//! async fn main() {
//!     serve().await; // until the shutdown signal
//!     if let Err(unfinished) = idem_core::pending::drain(Duration::from_secs(10)).await {
//!         eprintln!("{unfinished}");
//!     }
//! }
//! ```
//!
//! `idem-queue`'s `Workers::shutdown` and `idem worker` drain within their own deadline. Work
//! still pending at the deadline is cut as before: a completion cut so runs its body again on
//! the next delivery, a key left held frees itself when its lease lapses.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Tasks of this process's background work not yet ended.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Told each time the count reaches zero.
static IDLE: Notify = Notify::const_new();

/// Counts one task of background work while it lives: ended, or dropped with its runtime.
struct Tracked(());

impl Tracked {
    fn new() -> Tracked {
        PENDING.fetch_add(1, Ordering::SeqCst);
        Tracked(())
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if PENDING.fetch_sub(1, Ordering::SeqCst) == 1 {
            IDLE.notify_waiters();
        }
    }
}

/// Spawns `work` on `runtime` as background work that [`drain`] waits for. For stores and
/// layers built on idem: a completion, a release or a run that must outlive its caller.
pub fn spawn<F>(runtime: &Handle, work: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let tracked = Tracked::new();
    runtime.spawn(async move {
        let _tracked = tracked;
        work.await
    })
}

/// How many tasks of background work are pending now.
pub fn count() -> usize {
    PENDING.load(Ordering::SeqCst)
}

/// Background work still pending when [`drain`]'s deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unfinished {
    /// Tasks still pending.
    pub left: usize,
}

impl std::fmt::Display for Unfinished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} task(s) of idem's background work were still pending at the drain's deadline: \
             a completion among them is lost (its body runs again on the next delivery), a \
             held key frees itself when its lease lapses",
            self.left
        )
    }
}

impl std::error::Error for Unfinished {}

/// Waits until no background work is pending (work spawned meanwhile included), or until
/// `within` has passed. Call it after the process stopped taking new work and before its
/// runtime shuts down.
pub async fn drain(within: Duration) -> Result<(), Unfinished> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let idle = IDLE.notified();
        tokio::pin!(idle);
        idle.as_mut().enable();
        if count() == 0 {
            return Ok(());
        }
        if tokio::time::timeout_at(deadline, idle).await.is_err() {
            return match count() {
                0 => Ok(()),
                left => Err(Unfinished { left }),
            };
        }
    }
}
