//! # idem-store-redis: idem on Redis, single node or Cluster
//!
//! [`RedisStore`] keeps idem's records in Redis. Each store operation is **one round trip**: a
//! Lua script (sent with `EVALSHA`, loaded once per server) that claims, renews, completes
//! (fenced), releases or takes over atomically. Leases and keep are Redis expiries. All keys of
//! one record share a hash tag, so the store runs unchanged on **Redis Cluster**
//! ([`RedisStore::connect_cluster`]).
//!
//! Built on the [`redis`] crate (re-exported): its tokio connection manager reconnects after
//! the server goes away (calls fail with `StoreError` meanwhile, and no body runs without a
//! claim), and its cluster connection follows the slot map.
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
//! done. A replica promoted by failover (replication is asynchronous) loses what had not reached
//! it, with the same cost. Where a repeat is not acceptable, run Redis with
//! `appendfsync always`, or use `idem-store-postgres`.
//!
//! Fences are the server's clock in microseconds at each claim (or one more than the record's
//! fence): they grow across claims, releases and takeovers of a key, and after its record is
//! gone, as long as the server's clock does not step back.

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
