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
//! Each rule of [`idem_core::Store`] becomes one `#[tokio::test]`, named for the behaviour it
//! proves, so a failing rule is reported by name. The suite is written once here and never
//! copied into a backend, so backends cannot drift apart.

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

use idem_core::Store;

pub mod cases;

#[doc(hidden)]
pub use tokio as __tokio;

/// What the suite needs from a backend.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The store under test, isolated from every other test's.
    fn store(&self) -> Arc<dyn Store>;

    /// A lease that [`advance`](Harness::advance) can outlast: short for stores that keep real
    /// time (their tests sleep), anything for stores on a manual clock.
    fn short_lease(&self) -> Duration;

    /// Lets `by` pass on the store's clock: advance a manual clock, or sleep.
    async fn advance(&self, by: Duration);
}

/// Generates one `#[tokio::test]` per rule, each on a fresh harness from `$make` (an async fn
/// returning a [`Harness`]).
#[macro_export]
macro_rules! store_conformance {
    ($make:path) => {
        $crate::__conformance_tests!(
            $make;
            first_claim_acquires,
            completed_key_is_a_duplicate_with_its_output,
            live_claim_is_in_progress,
            lapsed_lease_is_taken_over_with_a_higher_fence,
            stale_completion_is_fenced_out,
            stale_release_and_renew_are_fenced_out,
            release_frees_the_key_and_fences_keep_growing,
            release_of_a_completed_record_keeps_it,
            fingerprint_mismatch_is_reported,
            matching_or_absent_fingerprints_are_not_a_mismatch,
            lapsed_claim_is_taken_over_even_with_another_fingerprint,
            keep_expiry_frees_the_key,
            renew_extends_a_live_lease,
            renew_of_a_completed_record_is_refused,
            repeated_completion_with_the_same_fence_applies,
            outputs_round_trip_byte_for_byte,
            replay_round_trips_edge_values,
            get_reads_the_record,
            purge_removes_only_expired_records,
            purge_respects_its_limit,
            abandon_frees_the_key,
            concurrent_claims_acquire_exactly_once,
            effect_journal_records_intent_then_completion,
            a_done_effect_is_final,
            effect_records_are_fenced,
            effects_outlive_a_release,
            expired_effects_are_purged,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($make:path; $($case:ident),* $(,)?) => {
        $(
            #[$crate::__tokio::test(flavor = "multi_thread", worker_threads = 4, crate = "::idem_conformance::__tokio")]
            async fn $case() {
                let harness = $make().await;
                $crate::cases::$case(&harness).await;
            }
        )*
    };
}
