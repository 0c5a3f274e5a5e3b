//! # idem-store-redis: idem on Redis, single node or Cluster
//!
//! [`RedisStore`] keeps idem's records in Redis. Each store operation is **one round trip**: a
//! Lua script (sent with `EVALSHA`, loaded once per server) that claims, renews, completes
//! (fenced), releases or takes over atomically. Leases and keep are Redis expiries, judged by
//! the server's clock, so app servers with skewed clocks agree. All keys of one record share a
//! hash tag, so the store runs unchanged on **Redis Cluster**
//! ([`RedisStore::connect_cluster`]).
//!
//! Built on the [`redis`] crate (re-exported): its tokio connection manager reconnects after
//! the server goes away (calls fail with `StoreError` meanwhile, and no body runs without a
//! claim), and its cluster connection follows the slot map.
//!
//! ## Setup
//!
//! ```no_run
//! use idem_core::{idempotent, Purge};
//! use idem_store_redis::RedisStore;
//! use std::time::Duration;
//!
//! struct App { store: RedisStore }
//!
//! #[idempotent(key = "reminder:{user_id}", store = app.store)]
//! async fn send_reminder(app: &App, user_id: u64) -> Result<(), std::io::Error> {
//!     Ok(()) // send the email
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // One server (`redis://host:port/db`):
//! let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
//! // Or a Redis Cluster, through any of its nodes:
//! // RedisStore::connect_cluster(&["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]).await?
//! let store = store.prefix("myapp").grace(Duration::from_secs(600));
//! let app = App { store };
//! assert!(send_reminder(&app, 42).await?.is_executed());
//! # Ok(()) }
//! ```
//!
//! There is nothing to migrate: the scripts create what they write. [`RedisStore::new`] and
//! [`RedisStore::new_cluster`] take a connection manager or cluster connection of your own.
//!
//! | option | default | what it does |
//! | --- | --- | --- |
//! | [`prefix`](RedisStore::prefix) | [`DEFAULT_PREFIX`], `idem` | the prefix of every key the store writes, so several stores (or applications) share a server |
//! | [`grace`](RedisStore::grace) | [`DEFAULT_GRACE`], 10 minutes | how long a record stays readable after it stops counting, so a claim after a lapsed lease is reported as a takeover and `get` shows what lapsed; Redis deletes it after that |
//!
//! Records delete themselves (a Redis expiry of their end plus the grace);
//! [`Purge`](idem_core::Purge) deletes expired ones sooner, walking the prefix's keys with
//! `SCAN` (on every primary of a cluster). [`RedisStore`] also implements
//! [`idem_core::Inspect`], for the `idem` command (`redis://host:port`, or a cluster's nodes
//! comma-separated). Lease mode only: Redis has no transactions to put a handler's writes in,
//! so `transaction = tx` does not compile with this store.
//!
//! ## Single node or Cluster
//!
//! On a single node every key lives on one server. On Redis Cluster, a record and its journal
//! entries carry the same hash tag (a hash of the scope and key), so they live in one slot and
//! each script runs on the one primary that owns it; records spread over the primaries by key.
//! Either way each operation is one script, one round trip. Listing and purging walk every
//! primary with `SCAN`, so they are for operators and background purges, not the hot path.
//!
//! ## What a Redis crash can cost
//!
//! A claim is acknowledged once Redis applied it in memory; what survives a crash of the
//! server depends on its persistence:
//!
//! | persistence | a crash of Redis loses | what that costs |
//! | --- | --- | --- |
//! | none (the default of many installs) | every record | every key whose record was lost runs again on its next delivery: a repeat of completed work |
//! | AOF, `appendfsync everysec` | up to about one second of writes | claims and completions of that second: their keys run again |
//! | AOF, `appendfsync always` | nothing acknowledged | nothing |
//!
//! Never a skip: a record that is lost makes the key new, so work is repeated, not reported
//! done. **A failover** (Sentinel, or a Cluster promoting a replica) loses what had not
//! reached the replica, since replication is asynchronous: claims and completions of the last
//! moments before it, whose keys run again, and a claim lost that way lets a second run start
//! while the first still runs (its completion is then refused, as a takeover's would be). Where
//! a repeat is not acceptable, run Redis with `appendfsync always` and no failover, or use
//! `idem-store-postgres`.
//!
//! **Memory.** Every record carries an expiry, so an eviction policy that evicts keys with one
//! (`volatile-lru`, `volatile-ttl`, ..., as well as the `allkeys-*` policies) may delete live
//! records under memory pressure, with the same cost as a crash. Give idem a Redis (or a
//! `maxmemory` budget) with `maxmemory-policy noeviction`: a full server then refuses claims,
//! and calls fail closed instead of running twice.
//!
//! Fences are the server's clock in microseconds at each claim (or one more than the record's
//! fence): they grow across claims, releases and takeovers of a key, and after its record is
//! gone, as long as the server's clock does not step back (a failover to a node whose clock is
//! behind is such a step).

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod inspect;
mod keys;
mod scripts;
mod store;

pub use store::{RedisStore, DEFAULT_GRACE, DEFAULT_PREFIX};

/// The claim script's source, for measuring it on its own (`redis-benchmark` with `EVALSHA`):
/// KEYS[1] the record; ARGV fingerprint (empty: none), token (empty: none), lease (µs), grace
/// (ms), holder.
#[doc(hidden)]
pub fn claim_script_source() -> &'static str {
    &scripts::CLAIM_SOURCE
}

/// The `redis` crate this store is built on.
pub use redis;

/// The README's example, compiled with the doc tests so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
