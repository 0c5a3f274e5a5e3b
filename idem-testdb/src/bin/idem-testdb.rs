//! `idem-testdb start DIR` creates and starts a throwaway cluster in DIR and prints its URL;
//! `idem-testdb stop DIR` stops it. Used by `scripts/test` when `DATABASE_URL` is unset.
//! `redis-start DIR` and `redis-stop DIR` do the same for a throwaway `redis-server`, when
//! `REDIS_URL` is unset, and `redis-cluster-start DIR` / `redis-cluster-stop DIR` for a
//! 3-master Redis Cluster, when `REDIS_CLUSTER_URLS` is unset.

use idem_testdb::{Cluster, RedisCluster, RedisServer};
use std::path::PathBuf;
use std::process::ExitCode;

/// Throwaway PostgreSQL clusters. Unknown commands exit with status 2 and the usage.
#[derive(Debug, clap::Parser)]
#[command(about = "Throwaway PostgreSQL clusters for idem's tests")]
enum Command {
    /// Create a cluster in DIR, start it, and print its URL.
    Start { dir: PathBuf },
    /// Stop the cluster in DIR.
    Stop { dir: PathBuf },
    /// Start a throwaway redis-server in DIR and print its URL.
    RedisStart { dir: PathBuf },
    /// Stop the redis-server in DIR.
    RedisStop { dir: PathBuf },
    /// Start a throwaway 3-master Redis Cluster in DIR and print its nodes' URLs, comma-separated.
    RedisClusterStart { dir: PathBuf },
    /// Stop the Redis Cluster in DIR.
    RedisClusterStop { dir: PathBuf },
}

fn main() -> ExitCode {
    let result = match clap::Parser::parse() {
        Command::Start { dir } => Cluster::init(&dir).and_then(|cluster| {
            cluster.start_again()?;
            println!("{}", cluster.url());
            Ok(())
        }),
        Command::Stop { dir } => Cluster::open(&dir).and_then(|cluster| cluster.stop()),
        Command::RedisStart { dir } => RedisServer::start_in(&dir, false).map(|server| {
            println!("{}", server.url());
        }),
        Command::RedisStop { dir } => RedisServer::open(&dir).and_then(|server| server.stop()),
        Command::RedisClusterStart { dir } => RedisCluster::start_in(&dir).map(|cluster| {
            println!("{}", cluster.urls().join(","));
        }),
        Command::RedisClusterStop { dir } => {
            RedisCluster::open(&dir).and_then(|cluster| cluster.stop())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idem-testdb: {e}");
            ExitCode::FAILURE
        }
    }
}
