//! The store's own connections: a small set of connections that PgStore keeps checked out and
//! runs its statements on, instead of checking one out of the pool for every statement.
//!
//! sqlx 0.8's pool tests every connection with a round trip when it is returned, so a
//! one-statement store operation through the pool costs two round trips and about three times
//! the client CPU of the statement alone (see BENCHMARKS.md). On connections of its own a store
//! operation is one round trip. They are either held from the pool (the default: taken from it
//! once and kept, so the store never makes the server hold more connections than the pool
//! allows) or opened apart from the pool with its connect options (`dedicated_connections`).
//! A connection whose operation failed or was cancelled mid-way is closed rather than reused,
//! since its state is unknown.

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgConnection};
use sqlx::{PgPool, Postgres};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::{oneshot, Semaphore, SemaphorePermit};

/// Where the store's own connections come from.
pub(crate) enum Source {
    /// Checked out of the pool once, then kept (never given back, so never pinged).
    Pool(PgPool),
    /// Opened with these options, apart from the pool.
    Options(Box<PgConnectOptions>),
}

/// One of the store's own connections.
enum Own {
    Held(PoolConnection<Postgres>),
    Opened(PgConnection),
}

impl Own {
    fn get(&mut self) -> &mut PgConnection {
        match self {
            Own::Held(conn) => conn,
            Own::Opened(conn) => conn,
        }
    }

    /// Closes the connection (a held one is closed, not given back to the pool).
    fn discard(self) {
        if let Own::Held(mut conn) = self {
            conn.close_on_drop();
        }
    }
}

/// How a connection of the store's is set up for the statements it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tuning {
    /// The server's defaults: for the queue's statements, whose plans depend on the data.
    Default,
    /// For the records table's statements, each a lookup by index: sequential scans off and
    /// one generic plan per statement (see [`tune`]).
    Indexed,
}

/// Idle connections, by how they are set up.
#[derive(Default)]
struct Idle {
    default: Vec<Own>,
    indexed: Vec<Own>,
}

impl Idle {
    fn of(&mut self, tuning: Tuning) -> &mut Vec<Own> {
        match tuning {
            Tuning::Default => &mut self.default,
            Tuning::Indexed => &mut self.indexed,
        }
    }

    fn other(&mut self, tuning: Tuning) -> &mut Vec<Own> {
        match tuning {
            Tuning::Default => &mut self.indexed,
            Tuning::Indexed => &mut self.default,
        }
    }
}

pub(crate) struct Direct {
    source: Source,
    connections: usize,
    idle: Arc<Mutex<Idle>>,
    permits: Semaphore,
    /// Stops the task that gives held connections back when the pool is closed (so
    /// `pool.close().await` does not wait for a store that is still alive); it ends when this
    /// is dropped, with the store.
    watching: Mutex<Option<oneshot::Sender<()>>>,
}

/// A connection checked out of [`Direct`]; closed on drop unless given back.
pub(crate) struct Checkout<'a> {
    direct: &'a Direct,
    conn: Option<Own>,
    tuning: Tuning,
    reused: bool,
    _permit: SemaphorePermit<'a>,
}

impl Checkout<'_> {
    fn give_back(mut self) {
        let Some(conn) = self.conn.take() else { return };
        if matches!(&self.direct.source, Source::Pool(pool) if pool.is_closed()) {
            return conn.discard();
        }
        lock(&self.direct.idle).of(self.tuning).push(conn);
    }
}

fn lock(idle: &Mutex<Idle>) -> std::sync::MutexGuard<'_, Idle> {
    idle.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.discard();
        }
    }
}

/// Errors after which the connection is gone: retrying on a fresh one is safe.
fn is_connection_lost(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
        || crate::error::sqlstate(error)
            .is_some_and(|code| code.starts_with("08") || code == "57P01")
}

impl Direct {
    pub fn new(source: Source, connections: usize) -> Direct {
        Direct {
            source,
            connections: connections.max(1),
            idle: Arc::new(Mutex::new(Idle::default())),
            permits: Semaphore::new(connections.max(1)),
            watching: Mutex::new(None),
        }
    }

    /// Takes a connection out of the pool to keep. The first one starts a task that empties
    /// the idle connections into the pool when the pool is closed.
    async fn hold(&self, pool: &PgPool) -> Result<Own, sqlx::Error> {
        let conn = pool.acquire().await?;
        let mut watching = self.watching.lock().unwrap_or_else(|e| e.into_inner());
        if watching.is_none() {
            let (stop, stopped) = oneshot::channel();
            let (closed, idle) = (pool.close_event(), Arc::downgrade(&self.idle));
            tokio::spawn(give_back_on_close(closed, stopped, idle));
            *watching = Some(stop);
        }
        Ok(Own::Held(conn))
    }

    /// How many connections the store may hold.
    pub fn connections(&self) -> usize {
        self.connections
    }

    /// Checks out a connection set up for `tuning`: an idle one set up so, else an idle one set
    /// up the other way (set up again, one round trip per setting), else a new one.
    async fn checkout(&self, tuning: Tuning) -> Result<Checkout<'_>, sqlx::Error> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        // A connection given back to the idle list just as the pool closed (after the close
        // watcher emptied it) must not outlive the pool: once it is closed, nothing is checked
        // out, and what is idle is let go.
        if matches!(&self.source, Source::Pool(pool) if pool.is_closed()) {
            let idle: Vec<Own> = {
                let mut idle = lock(&self.idle);
                let mut conns: Vec<Own> = idle.default.drain(..).collect();
                conns.append(&mut idle.indexed);
                conns
            };
            for conn in idle {
                conn.discard();
            }
            return Err(sqlx::Error::PoolClosed);
        }
        // Each idle connection is tried at most once: one that died while idle (a server
        // restart) fails its set-up and is closed.
        for _ in 0..=self.connections {
            let (idle, retune) = {
                let mut idle = lock(&self.idle);
                match idle.of(tuning).pop() {
                    Some(conn) => (Some(conn), false),
                    None => (idle.other(tuning).pop(), true),
                }
            };
            let (mut conn, reused) = match idle {
                Some(conn) => (conn, true),
                None => (
                    match &self.source {
                        Source::Pool(pool) => self.hold(pool).await?,
                        Source::Options(options) => Own::Opened(options.connect().await?),
                    },
                    false,
                ),
            };
            // A new connection has the server's defaults.
            let set_up = match (reused, retune) {
                (true, false) => Ok(()),
                (false, _) if tuning == Tuning::Default => Ok(()),
                _ => tune(conn.get(), tuning).await,
            };
            match set_up {
                Ok(()) => {
                    return Ok(Checkout {
                        direct: self,
                        conn: Some(conn),
                        tuning,
                        reused,
                        _permit: permit,
                    })
                }
                Err(e) if reused && is_connection_lost(&e) => conn.discard(),
                Err(e) => {
                    conn.discard();
                    return Err(e);
                }
            }
        }
        Err(sqlx::Error::Protocol(
            "every idle connection of the store was lost".into(),
        ))
    }

    /// Checks a connection out: one of the store's own if it has them, else one of the pool's.
    pub async fn checkout_or_pool<'a>(
        direct: Option<&'a Direct>,
        pool: &PgPool,
        tuning: Tuning,
    ) -> Result<Conn<'a>, sqlx::Error> {
        Ok(match direct {
            Some(direct) => Conn::Direct(direct.checkout(tuning).await?),
            None => Conn::Pooled(pool.acquire().await?),
        })
    }
}

/// Sets a connection of the store's up for `tuning`. [`Tuning::Indexed`], for the records
/// table's statements, makes their plans independent of the table's statistics:
///
/// - `enable_seqscan = off`: each of those statements finds its rows through an index (the
///   primary key, or `expires_at` for the purge), but on a table that is new, small, or was
///   analyzed while it was empty, the planner believes a sequential scan is cheaper and keeps
///   that plan as the table grows: measured, a store whose table was analyzed empty ran 25
///   times slower, and one on a new table 4 times (BENCHMARKS.md). With sequential scans off,
///   the index is used whatever the statistics say.
/// - `plan_cache_mode = force_generic_plan`: prepared statements keep one generic plan. The
///   batched statements take arrays, for which the default plans every execution anew (a
///   custom plan looks cheaper for the array in hand), and planning costs more than running
///   them.
///
/// [`Tuning::Default`] resets both, for the queue's statements (whose plans depend on the data:
/// with these settings the queue ran at a third of its speed). The settings stay on the
/// connection only: a held one is closed, never given back to the pool with them. A server that
/// lacks a setting (`plan_cache_mode` before PostgreSQL 12) plans as before.
async fn tune(conn: &mut PgConnection, tuning: Tuning) -> Result<(), sqlx::Error> {
    let settings = match tuning {
        Tuning::Indexed => [
            "SET enable_seqscan = off",
            "SET plan_cache_mode = force_generic_plan",
        ],
        Tuning::Default => ["RESET enable_seqscan", "RESET plan_cache_mode"],
    };
    for setting in settings {
        // A `&str` with no arguments goes out as a simple query: one round trip.
        match sqlx::Executor::execute(&mut *conn, setting).await {
            Err(e) if crate::error::sqlstate(&e).as_deref() == Some(UNDEFINED_SETTING) => {}
            other => other.map(drop)?,
        }
    }
    Ok(())
}

/// SQLSTATE: no such configuration parameter.
const UNDEFINED_SETTING: &str = "42704";

/// Waits for the pool to close (or the store to go), then lets the idle held connections go.
async fn give_back_on_close(
    closed: sqlx::pool::CloseEvent,
    stopped: oneshot::Receiver<()>,
    idle: Weak<Mutex<Idle>>,
) {
    tokio::select! {
        () = closed => {
            if let Some(idle) = idle.upgrade() {
                let conns: Vec<_> = {
                    let mut idle = lock(&idle);
                    let mut conns: Vec<_> = idle.default.drain(..).collect();
                    conns.append(&mut idle.indexed);
                    conns
                };
                conns.into_iter().for_each(Own::discard);
            }
        }
        _ = stopped => {}
    }
}

/// How many times an operation may move on from a dead idle connection: once for each
/// connection the store may hold idle, plus one.
pub fn retry_budget(direct: Option<&Direct>, pool: &PgPool) -> usize {
    match direct {
        Some(direct) => direct.connections + 1,
        None => pool.options().get_max_connections() as usize + 1,
    }
}

/// A connection for one store operation.
pub(crate) enum Conn<'a> {
    Pooled(PoolConnection<Postgres>),
    Direct(Checkout<'a>),
}

impl Conn<'_> {
    pub fn get(&mut self) -> &mut PgConnection {
        match self {
            Conn::Pooled(conn) => conn,
            Conn::Direct(checkout) => checkout.conn.as_mut().expect("checked out").get(),
        }
    }

    /// Settles the connection after an operation: gives it back unless it was lost (then it is
    /// closed). Returns whether to run the operation again on another connection: when the
    /// connection was lost and had been used before (an idle connection the server dropped, as
    /// a restart or failover drops all of them), while `retries` last. A connection opened for
    /// this operation that fails means the server is unreachable: the error stands (fail
    /// closed). Every store statement is safe to send again: a claim whose answer was lost is
    /// found held (and the call reports it in progress), a completion applies again under the
    /// same fence, a release or renewal is fenced.
    pub fn settle<R>(self, result: &Result<R, sqlx::Error>, retries: &mut usize) -> bool {
        let lost = matches!(result, Err(e) if is_connection_lost(e));
        let retry = |retries: &mut usize| {
            let retry = *retries > 0;
            *retries = retries.saturating_sub(1);
            retry
        };
        match self {
            // A pooled connection was taken from the pool's idle ones (the pool tests them
            // before handing them out, but a connection can die between the test and the
            // statement).
            Conn::Pooled(mut conn) if lost => {
                conn.close_on_drop();
                retry(retries)
            }
            Conn::Pooled(_) => false, // back to the pool on drop
            Conn::Direct(checkout) if lost => checkout.reused && retry(retries),
            Conn::Direct(checkout) => {
                checkout.give_back();
                false
            }
        }
    }
}

/// Runs `$body` (an expression using the `&mut PgConnection` bound to `$conn`) on a connection of
/// `$store`, settling the connection and retrying on another while idle connections turn out
/// dead (at most once per connection the store may hold, plus one). Evaluates to
/// `Result<_, sqlx::Error>`. `on_conn!(indexed store, ..)` runs it on a connection set up for
/// the records table's statements ([`Tuning::Indexed`]); without `indexed`, on one with the
/// server's defaults (the queue's statements).
macro_rules! on_conn {
    (indexed $store:expr, $conn:ident => $body:expr) => {
        $crate::direct::on_conn!(@run $crate::direct::Tuning::Indexed, $store, $conn => $body)
    };
    ($store:expr, $conn:ident => $body:expr) => {
        $crate::direct::on_conn!(@run $crate::direct::Tuning::Default, $store, $conn => $body)
    };
    (@run $tuning:expr, $store:expr, $conn:ident => $body:expr) => {{
        let mut retries = $crate::direct::retry_budget($store.direct(), $store.pool());
        loop {
            let mut checkout = match $crate::direct::Direct::checkout_or_pool(
                $store.direct(),
                $store.pool(),
                $tuning,
            )
            .await
            {
                Ok(checkout) => checkout,
                Err(e) => break Err(e),
            };
            let result = {
                let $conn = checkout.get();
                $body.await
            };
            if !checkout.settle(&result, &mut retries) {
                break result;
            }
        }
    }};
}

pub(crate) use on_conn;
