//! The shared conformance suite, run against `SqliteStore` on a real database file, each test
//! in a file of its own.

use async_trait::async_trait;
use idem_conformance::{Harness, InspectHarness, TransactionalHarness};
use idem_core::Purge;
use idem_store_sqlite::SqliteStore;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct SqliteHarness {
    store: SqliteStore,
    dir: PathBuf,
}

impl Drop for SqliteHarness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[async_trait]
impl Harness for SqliteHarness {
    fn store(&self) -> Arc<dyn Purge> {
        Arc::new(self.store.clone())
    }

    /// The store keeps the wall clock, so lapses are real: sleep past a short lease.
    fn short_lease(&self) -> Duration {
        Duration::from_millis(1000)
    }

    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }
}

pub(crate) async fn sqlite_harness() -> SqliteHarness {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "idem-sqlite-conf-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let store = SqliteStore::open(dir.join("idem.db")).await.unwrap();
    store.migrate().await.unwrap();
    SqliteHarness { store, dir }
}

idem_conformance::store_conformance!(sqlite_harness);

impl InspectHarness for SqliteHarness {
    fn inspector(&self) -> Arc<dyn idem_core::Inspect> {
        Arc::new(self.store.clone())
    }
}

idem_conformance::inspect_conformance!(sqlite_harness);

impl TransactionalHarness for SqliteHarness {
    type Store = SqliteStore;

    fn store(&self) -> SqliteStore {
        self.store.clone()
    }
}

mod transactional {
    use super::sqlite_harness;
    idem_conformance::transactional_conformance!(sqlite_harness);
}
