//! The shared conformance suite, run against `RedisStore` on a Redis Cluster of three masters
//! (`REDIS_CLUSTER_URLS`, which `scripts/test` sets, starting a throwaway cluster when it is
//! unset): every record's keys share one slot, so every script runs on one node.

use async_trait::async_trait;
use idem_conformance::{Harness, InspectHarness};
use idem_core::Purge;
use idem_store_redis::RedisStore;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct ClusterHarness {
    store: RedisStore,
}

#[async_trait]
impl Harness for ClusterHarness {
    fn store(&self) -> Arc<dyn Purge> {
        Arc::new(self.store.clone())
    }

    fn short_lease(&self) -> Duration {
        Duration::from_millis(1000)
    }

    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }
}

async fn cluster_harness() -> ClusterHarness {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let urls = idem_testdb::redis_cluster_urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let prefix = format!(
        "idem-cluster-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let store = RedisStore::connect_cluster(&nodes)
        .await
        .expect("connect to REDIS_CLUSTER_URLS")
        .prefix(&prefix);
    ClusterHarness { store }
}

idem_conformance::store_conformance!(cluster_harness);

impl InspectHarness for ClusterHarness {
    fn inspector(&self) -> Arc<dyn idem_core::Inspect> {
        Arc::new(self.store.clone())
    }

    // Redis reads every record of the prefix for any page.
    fn pages_stop_at_their_scan(&self) -> bool {
        false
    }
}

idem_conformance::inspect_conformance!(cluster_harness);

/// The keys of many records spread over all three masters (so the suite above ran on each).
#[tokio::test]
async fn records_spread_over_every_master() {
    let urls = idem_testdb::redis_cluster_urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let store = RedisStore::connect_cluster(&nodes)
        .await
        .unwrap()
        .prefix(&format!("idem-spread-{}", std::process::id()));
    for i in 0..60 {
        let key = idem_core::Key::new(format!("spread:{i}")).unwrap();
        let claim = idem_core::Store::claim(
            &store,
            idem_core::ClaimRequest {
                key: &key,
                fingerprint: None,
                lease: Duration::from_secs(5),
                token: None,
            },
        )
        .await
        .unwrap();
        assert!(matches!(claim, idem_core::Claim::Acquired { .. }));
    }
    for url in &urls {
        let client = idem_store_redis::redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = idem_store_redis::redis::cmd("KEYS")
            .arg(format!("idem-spread-{}:*", std::process::id()))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!keys.is_empty(), "{url} holds some of the records");
    }
}
