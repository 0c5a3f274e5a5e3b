//! What idem's benchmark programs share: the PostgreSQL server they measure against.

use idem_store_postgres::sqlx::postgres::PgPoolOptions;
use idem_store_postgres::sqlx::PgPool;
use idem_testdb::Cluster;

/// The server a benchmark measures against, and a pool of 32 connections to it.
#[derive(Debug)]
pub struct Server {
    /// Its URL.
    pub url: String,
    /// A pool of 32 connections to it.
    pub pool: PgPool,
    /// The throwaway cluster, when one was started: the server stops when this is dropped.
    pub cluster: Option<Cluster>,
}

/// Connects to `url` when one was given; otherwise starts a throwaway cluster with
/// `extra_options` (`"-c name=value"`) and connects to that. Panics, saying why, when neither
/// works: a benchmark has nothing to measure without it.
pub async fn server(url: Option<&str>, extra_options: &[&str]) -> Server {
    let (url, cluster) = match url {
        Some(url) => (url.to_owned(), None),
        None => {
            let cluster = Cluster::start_with(extra_options)
                .expect("a throwaway PostgreSQL for the benchmark");
            (cluster.url(), Some(cluster))
        }
    };
    let pool = PgPoolOptions::new()
        .max_connections(32)
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    Server { url, pool, cluster }
}
