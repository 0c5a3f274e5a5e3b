//! Dedicated connections: PgStore's own small set of connections, outside the pool.
//!
//! sqlx 0.8's pool tests every connection with a round trip when it is returned, so a
//! one-statement store operation through the pool costs two round trips and about three times
//! the client CPU of the statement alone (see BENCHMARKS.md). With dedicated connections a store
//! operation is one round trip. A connection whose operation failed or was cancelled mid-way is
//! closed rather than reused, since its state is unknown.

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgConnection};
use sqlx::{PgPool, Postgres};
use std::sync::Mutex;
use tokio::sync::{Semaphore, SemaphorePermit};

pub(crate) struct Direct {
    options: PgConnectOptions,
    connections: usize,
    idle: Mutex<Vec<PgConnection>>,
    permits: Semaphore,
}

/// A connection checked out of [`Direct`]; closed on drop unless given back.
pub(crate) struct Checkout<'a> {
    direct: &'a Direct,
    conn: Option<PgConnection>,
    reused: bool,
    _permit: SemaphorePermit<'a>,
}

impl Checkout<'_> {
    fn give_back(mut self) {
        if let Some(conn) = self.conn.take() {
            self.direct
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
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
    pub fn new(options: PgConnectOptions, connections: usize) -> Direct {
        Direct {
            options,
            connections: connections.max(1),
            idle: Mutex::new(Vec::with_capacity(connections)),
            permits: Semaphore::new(connections.max(1)),
        }
    }

    async fn checkout(&self) -> Result<Checkout<'_>, sqlx::Error> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let (conn, reused) = match idle {
            Some(conn) => (conn, true),
            None => (self.options.connect().await?, false),
        };
        Ok(Checkout {
            direct: self,
            conn: Some(conn),
            reused,
            _permit: permit,
        })
    }

    /// Checks a connection out: a dedicated one if the store has them, else one of the pool's.
    pub async fn checkout_or_pool<'a>(
        direct: Option<&'a Direct>,
        pool: &PgPool,
    ) -> Result<Conn<'a>, sqlx::Error> {
        Ok(match direct {
            Some(direct) => Conn::Direct(direct.checkout().await?),
            None => Conn::Pooled(pool.acquire().await?),
        })
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
            Conn::Direct(checkout) => checkout.conn.as_mut().expect("checked out"),
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
/// `Result<_, sqlx::Error>`.
macro_rules! on_conn {
    ($store:expr, $conn:ident => $body:expr) => {{
        let mut retries = $crate::direct::retry_budget($store.direct(), $store.pool());
        loop {
            let mut checkout = match $crate::direct::Direct::checkout_or_pool(
                $store.direct(),
                $store.pool(),
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
