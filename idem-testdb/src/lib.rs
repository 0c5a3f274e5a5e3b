//! Throwaway PostgreSQL clusters for idem's tests.
//!
//! The test command (`scripts/test`) uses the `idem-testdb` binary to start one cluster for the
//! whole run when `DATABASE_URL` is unset; tests that must stop and restart a server (the outage
//! test) start their own [`Cluster`] with this library. One implementation serves both.
//!
//! The server binaries are looked up on `PATH`, then under `/usr/lib/postgresql/*/bin` (newest
//! version first). `initdb` refuses to run as root, so when run as root every server command
//! runs as the `postgres` user if it exists, else as `nobody`, through `runuser`.
//!
//! It knows nothing of idem's stores (the test stores are `idem_store_postgres::testing`'s), so
//! every crate may use it in its tests, the PostgreSQL store's included.

mod error;
mod port;
mod postgres;
mod redis;

pub use error::ClusterError;
pub use port::free_port;
pub use postgres::{find_bin_dir, find_bin_dir_in, Cluster, INSTALL_HINT};
pub use redis::{redis_cluster_urls, redis_url, RedisCluster, RedisServer, REDIS_INSTALL_HINT};
