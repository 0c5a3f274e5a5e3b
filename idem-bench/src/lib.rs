//! What idem's benchmark programs share: the PostgreSQL server they measure against, the CPU
//! time a run costs the client and that server ([`cpu`]), and the median and range of repeated
//! measurements ([`spread`]), and how a queue benchmark's `--prefetch` configures workers
//! ([`prefetch`]).

pub mod cpu;
pub mod spread;

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

/// `calls` lease-mode calls with empty bodies from `callers` tasks, which take call numbers
/// from one counter; call `i` uses the key `key(i)`. Returns calls per second and how many of
/// the calls executed (the rest were duplicates).
pub async fn lease_calls<S, K>(store: &S, callers: usize, calls: u64, key: K) -> (f64, u64)
where
    S: idem_core::Store + Clone + Send + Sync + 'static,
    K: Fn(u64) -> String + Clone + Send + 'static,
{
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let next = Arc::new(AtomicU64::new(0));
    let executed = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (store, next, executed, key) =
                (store.clone(), next.clone(), executed.clone(), key.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls {
                        return;
                    }
                    let outcome = idem_core::Call::new(&store, key(i))
                        .run(async { Ok::<_, std::convert::Infallible>(()) })
                        .await
                        .expect("call");
                    if let idem_core::Outcome::Executed(()) = outcome {
                        executed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("caller");
    }
    (
        calls as f64 / started.elapsed().as_secs_f64(),
        executed.load(Ordering::Relaxed),
    )
}

/// Workers as a queue benchmark's `--prefetch` says: the queue's defaults (adaptive
/// prefetching) without it, else always `n` jobs past the free slots (0: never).
pub fn prefetch(workers: idem_queue::WorkerBuilder, n: Option<usize>) -> idem_queue::WorkerBuilder {
    match n {
        Some(n) => workers.prefetch(n),
        None => workers,
    }
}
