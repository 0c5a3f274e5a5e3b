//! The shared conformance suite, run against `MemoryStore` on a manual clock.

use async_trait::async_trait;
use idem_conformance::Harness;
use idem_core::clock::ManualClock;
use idem_core::{MemoryStore, Purge};
use std::sync::Arc;
use std::time::Duration;

struct MemoryHarness {
    clock: ManualClock,
    store: Arc<MemoryStore>,
}

#[async_trait]
impl Harness for MemoryHarness {
    fn store(&self) -> Arc<dyn Purge> {
        self.store.clone()
    }

    fn short_lease(&self) -> Duration {
        Duration::from_secs(30)
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
}

async fn memory_harness() -> MemoryHarness {
    let clock = ManualClock::new();
    MemoryHarness {
        store: Arc::new(MemoryStore::with_clock(clock.clone())),
        clock,
    }
}

idem_conformance::store_conformance!(memory_harness);

/// A key in the legacy scope (which operator tools use to free records written before scopes)
/// is refused by a call, before anything is claimed: no new work goes in that scope.
#[tokio::test]
async fn a_call_in_the_legacy_scope_is_refused_before_its_claim() {
    let store = MemoryStore::new();
    let key = idem_core::Key::new("old")
        .unwrap()
        .with_stored_scope(idem_core::LEGACY_SCOPE)
        .unwrap();
    assert_eq!(key.scope(), idem_core::LEGACY_SCOPE);
    let ran = std::sync::atomic::AtomicBool::new(false);
    let refused = idem_core::Call::new(&store, key)
        .run(async {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        })
        .await;
    assert!(
        matches!(refused, Err(idem_core::Error::InvalidKey(_))),
        "{refused:?}"
    );
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    let named = idem_core::Key::new("old")
        .unwrap()
        .with_stored_scope("s")
        .unwrap();
    assert_eq!(named.scope(), "s", "any other scope as with_scope");
}
