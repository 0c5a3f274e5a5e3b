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

    /// Settles the connection after an operation: gives a dedicated one back unless its
    /// connection was lost (then it is closed). Returns whether to run the operation again on a
    /// fresh connection: once, when an idle dedicated connection turned out dead (every store
    /// statement is safe to send again).
    pub fn settle<R>(self, result: &Result<R, sqlx::Error>, retried: &mut bool) -> bool {
        match self {
            Conn::Pooled(_) => false, // back to the pool on drop
            Conn::Direct(checkout) => match result {
                Err(e) if is_connection_lost(e) => {
                    let retry = checkout.reused && !*retried;
                    *retried = true;
                    retry
                }
                _ => {
                    checkout.give_back();
                    false
                }
            },
        }
    }
}

/// Runs `$body` (an expression using the `&mut PgConnection` bound to `$conn`) on a connection of
/// `$store`, settling the connection and retrying once on a dead idle one. Evaluates to
/// `Result<_, sqlx::Error>`.
macro_rules! on_conn {
    ($store:expr, $conn:ident => $body:expr) => {{
        let mut retried = false;
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
            if !checkout.settle(&result, &mut retried) {
                break result;
            }
        }
    }};
}

pub(crate) use on_conn;
