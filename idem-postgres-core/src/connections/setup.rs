//! A connection's session settings, by what it runs.

use sqlx::PgConnection;
use std::time::Duration;

/// How a connection of the store's is set up for the statements it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tuning {
    /// The server's defaults: for transactions (the caller's own SQL runs on them) and the
    /// transactional read-first, which takes turns with them.
    Default,
    /// For the store's own statements on the records table and the queue, each a lookup by
    /// index: sequential scans off and one generic plan per statement (see [`tune`]).
    Indexed,
}

/// Sets a connection of the store's up for `tuning`. [`Tuning::Indexed`], for the store's own
/// statements (the records table's and the queue's), makes their plans independent of the
/// tables' statistics:
///
/// - `enable_seqscan = off`: each of those statements finds its rows through an index (the
///   primary key, or `expires_at` for the purge), but on a table that is new, small, or was
///   analyzed while it was empty, the planner believes a sequential scan is cheaper and keeps
///   that plan as the table grows, so the store slows down as its table fills. With sequential
///   scans off, the index is used whatever the statistics say.
/// - `plan_cache_mode = force_generic_plan`: prepared statements keep one generic plan. The
///   batched statements take arrays, for which the default plans every execution anew (a
///   custom plan looks cheaper for the array in hand), and planning them costs more than
///   running them, the queue's completion that claims the next job most of all. (The queue's
///   claims pick their jobs as an array for this: see `idem-queue`'s `db/claim.rs`.)
/// - `jit = off`: the statements are short lookups, never worth compiling. A generic plan
///   prices a batch's `LIMIT` at a tenth of the table, so a claim over several named queues on
///   a large queue table can cost above `jit_above_cost`, and compiling it at every execution
///   then takes far longer than running it (a drain fell from 10,000 jobs a second to 400).
///
/// - `lock_timeout` ([`PgStoreBuilder::lock_timeout`](crate::PgStoreBuilder::lock_timeout),
///   5 s by default): a store statement waits on a row lock only while another
///   transaction holds the same record (a transactional handler of the same key and scope, or
///   a transaction of the application's own on idem's tables). Unbounded, such a wait holds
///   up every call batched with it, and deadlocks the process when that transaction itself
///   waits for one of them (a transactional body that makes a lease-mode call through the
///   same store). Bounded, the statement fails with SQLSTATE 55P03, a batch is sent again
///   call by call, and the call whose record is held fails with a store error that says so.
///
/// [`Tuning::Default`] resets them, for transactions, where the caller's own SQL runs with the
/// server's settings. The settings stay on the connection only: a held one is closed, never
/// given back to the pool with them. A server that lacks a setting (`plan_cache_mode` before
/// PostgreSQL 12) goes without it.
pub(super) async fn tune(
    conn: &mut PgConnection,
    tuning: Tuning,
    lock_timeout: Duration,
) -> Result<(), sqlx::Error> {
    let lock_timeout = format!(
        "SET lock_timeout = '{}ms'",
        lock_timeout.as_millis().clamp(1, i32::MAX as u128)
    );
    let (both, settings) = match tuning {
        Tuning::Indexed => (
            format!(
                "SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan; \
                 SET jit = off; {lock_timeout}"
            ),
            [
                "SET enable_seqscan = off".to_owned(),
                "SET plan_cache_mode = force_generic_plan".to_owned(),
                "SET jit = off".to_owned(),
                lock_timeout,
            ],
        ),
        Tuning::Default => (
            "RESET enable_seqscan; RESET plan_cache_mode; RESET jit; RESET lock_timeout".to_owned(),
            [
                "RESET enable_seqscan".to_owned(),
                "RESET plan_cache_mode".to_owned(),
                "RESET jit".to_owned(),
                "RESET lock_timeout".to_owned(),
            ],
        ),
    };
    // A `&str` with no arguments goes out as a simple query, so both settings take one round
    // trip. They run as one implicit transaction: a server that lacks a setting refuses both,
    // and then each goes alone, the missing one left out.
    match sqlx::Executor::execute(&mut *conn, both.as_str()).await {
        Err(e) if crate::error::sqlstate(&e).as_deref() == Some(UNDEFINED_SETTING) => {}
        other => return other.map(drop),
    }
    for setting in &settings {
        match sqlx::Executor::execute(&mut *conn, setting.as_str()).await {
            Err(e) if crate::error::sqlstate(&e).as_deref() == Some(UNDEFINED_SETTING) => {}
            other => other.map(drop)?,
        }
    }
    Ok(())
}

/// SQLSTATE: no such configuration parameter.
const UNDEFINED_SETTING: &str = "42704";
