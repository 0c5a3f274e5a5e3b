//! The one conformance suite that every idem store runs.
//!
//! A backend crate calls [`store_conformance!`] once in a test file, with an async function
//! that builds a fresh [`Harness`] (an isolated store, and a way to let time pass for it):
//!
//! ```text
//! async fn harness() -> impl idem_conformance::Harness { .. }
//! idem_conformance::store_conformance!(harness);
//! ```
//!
//! A store with transactions also calls [`transactional_conformance!`] with a
//! [`TransactionalHarness`].
//!
//! Each rule becomes one `#[tokio::test]`, named for the behaviour it proves, so a failing rule
//! is reported by name. Each rule is declared once, in [`cases`] or [`transactional`], by
//! [`declare_cases!`], which also writes the list the macros expand: a case cannot be written
//! and then left out of the run. The suite is written once here and never copied into a
//! backend, so backends cannot drift apart.

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Purge, TransactionalStore};

/// Declares conformance cases once. Each `pub async fn name(h: &impl Trait) { .. }` becomes a
/// public function, and the block also defines the exported macro `$list!`, which hands every
/// case's name to a callback (the test generator): the list cannot leave a case out.
#[doc(hidden)]
#[macro_export]
macro_rules! declare_cases {
    ($d:tt $list:ident: $(
        $(#[$meta:meta])*
        pub async fn $name:ident($h:ident: &impl $harness:ident) $body:block
    )*) => {
        $(
            $(#[$meta])*
            pub async fn $name($h: &impl $harness) $body
        )*

        #[doc(hidden)]
        #[macro_export]
        macro_rules! $list {
            ($d callback:path; $d module:ident; $d make:path) => {
                $d callback!($d module; $d make; $($name),*);
            };
        }
    };
}

pub mod cases;
pub mod inspect;
pub mod transactional;

#[doc(hidden)]
pub use tokio as __tokio;

/// Polls `future` until it finishes or until its `polls`-th poll has returned pending, then
/// drops it there. The runtime polls it again only when woken, so each poll past the first is
/// a point where it waited for something (a connection, an answer, a lock) and got it. Stores'
/// own cancellation tests use it too, to drop a call at each point in turn.
pub async fn drop_at_poll<F: std::future::Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut polled = 0;
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(cx) {
            return std::task::Poll::Ready(Some(out));
        }
        polled += 1;
        if polled >= polls {
            std::task::Poll::Ready(None)
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

/// What the suite needs from a backend.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The store under test, isolated from every other test's.
    fn store(&self) -> Arc<dyn Purge>;

    /// A lease that [`advance`](Harness::advance) can outlast: short for stores that keep real
    /// time (their tests sleep), anything for stores on a manual clock.
    fn short_lease(&self) -> Duration;

    /// Lets `by` pass on the store's clock: advance a manual clock, or sleep.
    async fn advance(&self, by: Duration);
}

/// What the [`inspect`] cases need: the store under test as its operator sees it (the same
/// store as [`Harness::store`]).
pub trait InspectHarness: Harness {
    /// The store under test, through [`idem_core::Inspect`].
    fn inspector(&self) -> Arc<dyn idem_core::Inspect>;

    /// Whether a page stops reading at its filter's `scan` (the SQL stores); a store that reads
    /// every record for any page anyway (Redis) says `false`.
    fn pages_stop_at_their_scan(&self) -> bool {
        true
    }
}

/// What the transactional cases need from a backend with transactions.
pub trait TransactionalHarness: Send + Sync + 'static {
    /// The store under test.
    type Store: TransactionalStore + Clone + 'static;

    /// The store under test, isolated from every other test's.
    fn store(&self) -> Self::Store;
}

/// Generates one `#[tokio::test]` per rule of [`cases`], each on a fresh harness from `$make`
/// (an async fn returning a [`Harness`]).
#[macro_export]
macro_rules! store_conformance {
    ($make:path) => {
        $crate::__store_cases!($crate::__conformance_tests; cases; $make);
    };
}

/// Generates one `#[tokio::test]` per rule of [`inspect`], each on a fresh harness from `$make`
/// (an async fn returning an [`InspectHarness`]).
#[macro_export]
macro_rules! inspect_conformance {
    ($make:path) => {
        $crate::__inspect_cases!($crate::__conformance_tests; inspect; $make);
    };
}

/// Generates one `#[tokio::test]` per rule of [`transactional`], each on a fresh harness from
/// `$make` (an async fn returning a [`TransactionalHarness`]).
#[macro_export]
macro_rules! transactional_conformance {
    ($make:path) => {
        $crate::__transactional_cases!($crate::__conformance_tests; transactional; $make);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($module:ident; $make:path; $($case:ident),* $(,)?) => {
        $(
            #[$crate::__tokio::test(flavor = "multi_thread", worker_threads = 4, crate = "::idem_conformance::__tokio")]
            async fn $case() {
                let harness = $make().await;
                $crate::$module::$case(&harness).await;
            }
        )*
    };
}
