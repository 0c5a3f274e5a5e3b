//! Running a statement on one of the store's connections (or the pool's), and moving on
//! from a connection that turns out dead.

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};

use super::direct::{Checkout, Direct};
use super::setup::Tuning;
use crate::error::is_connection_lost;

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
    Pooled(PooledCheckout),
    Direct(Checkout<'a>),
}

/// A connection of the pool for one operation: closed if dropped before the operation settled
/// it, as a checkout of the store's own is discarded. An operation cut short (its caller went
/// away) may leave the connection mid-way, inside a transaction whose `BEGIN` sqlx never
/// counted, and the pool would hand it out again after only a ping.
pub(crate) struct PooledCheckout(Option<PoolConnection<Postgres>>);

impl Drop for PooledCheckout {
    fn drop(&mut self) {
        if let Some(conn) = &mut self.0 {
            conn.close_on_drop();
        }
    }
}

impl Conn<'_> {
    /// Checks a connection out: one of the store's own if it has them, else one of the pool's.
    pub async fn checkout<'a>(
        direct: Option<&'a Direct>,
        pool: &PgPool,
        tuning: Tuning,
    ) -> Result<Conn<'a>, sqlx::Error> {
        Ok(match direct {
            Some(direct) => Conn::Direct(direct.checkout(tuning).await?),
            None => Conn::Pooled(PooledCheckout(Some(pool.acquire().await?))),
        })
    }
}

impl Conn<'_> {
    pub fn get(&mut self) -> &mut PgConnection {
        match self {
            Conn::Pooled(checkout) => checkout.0.as_mut().expect("checked out"),
            Conn::Direct(checkout) => checkout.conn.as_mut().expect("checked out").get(),
        }
    }

    /// Settles the connection after an operation: gives it back unless it was lost (then it is
    /// closed). Returns whether to run the operation again on another connection: when the
    /// connection was lost and had been used before (an idle connection the server dropped, as
    /// a restart or failover drops all of them), while `retries` last. A connection opened for
    /// this operation that fails means the server is unreachable: the error stands (fail
    /// closed). The records' statements are safe to send again: a claim whose answer was lost
    /// is recognised by its token, a completion applies again under the same fence, a release
    /// or renewal is fenced. The queue's claims are not, and are sent with no `retries`.
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
            Conn::Pooled(checkout) if lost => {
                drop(checkout); // closed
                retry(retries)
            }
            Conn::Pooled(mut checkout) => {
                drop(checkout.0.take()); // back to the pool
                false
            }
            Conn::Direct(checkout) if lost => checkout.reused && retry(retries),
            Conn::Direct(checkout) => {
                checkout.give_back();
                false
            }
        }
    }
}

/// Whether [`on_connection!`](crate::on_connection) may send a statement again when its connection turns
/// out dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// Never: for a statement that must not be applied twice once it may have been applied
    /// (one that takes whatever rows are free, such as a queue's claim: a second sending would
    /// take a second set while the first sits taken). A lost connection is the call's error.
    Never,
    /// On another connection, while connections the store had kept idle turn out dead: for a
    /// statement that is safe to apply twice (fenced, or keyed so a repeat finds its own
    /// effect).
    OnLostConnection,
}

/// One statement's tries on a store's connections, for [`on_connection!`](crate::on_connection):
/// it hands out a connection for each try and says, from the try's result, whether to try again
/// on another (only while idle connections turn out dead, and only for statements that may be
/// sent again).
pub struct Attempts<'s> {
    direct: Option<&'s Direct>,
    pool: &'s PgPool,
    tuning: Tuning,
    retries: usize,
}

impl std::fmt::Debug for Attempts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attempts")
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl<'s> Attempts<'s> {
    pub(crate) fn with(
        direct: Option<&'s Direct>,
        pool: &'s PgPool,
        tuning: Tuning,
        retries: usize,
    ) -> Attempts<'s> {
        Attempts {
            direct,
            pool,
            tuning,
            retries,
        }
    }

    /// A connection for the next try.
    pub async fn connection(&self) -> Result<StoreConnection<'s>, sqlx::Error> {
        Conn::checkout(self.direct, self.pool, self.tuning)
            .await
            .map(StoreConnection)
    }

    /// Settles `conn` after a try that gave `result`: gives it back, or closes it when it was
    /// lost. Returns whether to try again on another connection.
    pub fn again<R>(&mut self, conn: StoreConnection<'s>, result: &Result<R, sqlx::Error>) -> bool {
        conn.0.settle(result, &mut self.retries)
    }
}

/// A connection lent for one try of a statement (see [`Attempts`]).
pub struct StoreConnection<'s>(Conn<'s>);

impl std::fmt::Debug for StoreConnection<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConnection").finish_non_exhaustive()
    }
}

impl StoreConnection<'_> {
    /// The connection.
    pub fn get(&mut self) -> &mut PgConnection {
        self.0.get()
    }
}

/// Runs `$body` (an expression using the `&mut PgConnection` bound to `$conn`, awaited) on a
/// connection of the store `$store` (a [`PgStore`](crate::PgStore)), settling the connection
/// and, with [`Resend::OnLostConnection`](crate::extend::Resend), sending it again on another
/// while idle connections turn out dead (at most once per connection the store may hold, plus
/// one). Evaluates to `Result<_, sqlx::Error>`; use it in an `async` context.
///
/// ```no_run
/// # async fn f(store: idem_postgres_core::PgStore) -> Result<(), idem_postgres_core::sqlx::Error> {
/// use idem_postgres_core::extend::Resend;
/// let key = "job-1";
/// let n: i64 = idem_postgres_core::on_connection!(store, Resend::OnLostConnection, conn =>
///     idem_postgres_core::sqlx::query_scalar("SELECT count(*) FROM my_jobs WHERE key = $1")
///         .bind(key)
///         .fetch_one(&mut *conn))?;
/// # Ok(()) }
/// ```
#[macro_export]
macro_rules! on_connection {
    ($store:expr, $resend:expr, $conn:ident => $body:expr) => {
        $crate::on_connection!(@tries $crate::extend::Attempts::new(&$store, $resend), $conn => $body)
    };
    (@tries $attempts:expr, $conn:ident => $body:expr) => {{
        let mut attempts = $attempts;
        loop {
            let mut connection = match attempts.connection().await {
                Ok(connection) => connection,
                Err(e) => break Err(e),
            };
            let result = {
                let $conn = connection.get();
                $body.await
            };
            if !attempts.again(connection, &result) {
                break result;
            }
        }
    }};
}

/// [`on_connection!`](crate::on_connection) for the store's own statements:
/// `on_conn!(indexed store, ..)` runs `$body` on a connection set up for the store's own
/// statements ([`Tuning::Indexed`](super::Tuning::Indexed)); without `indexed`, on one with the
/// server's defaults (what takes turns with transactions).
///
/// `on_conn!(once indexed store, ..)` never sends `$body` again: for a statement that is not
/// safe to repeat once it may have been applied.
macro_rules! on_conn {
    (once indexed $store:expr, $conn:ident => $body:expr) => {
        $crate::connections::on_conn!(@run $crate::connections::Tuning::Indexed, 0, $store, $conn => $body)
    };
    (indexed $store:expr, $conn:ident => $body:expr) => {
        $crate::connections::on_conn!(@run $crate::connections::Tuning::Indexed,
            $crate::connections::retry_budget($store.direct(), $store.pool()), $store, $conn => $body)
    };
    ($store:expr, $conn:ident => $body:expr) => {
        $crate::connections::on_conn!(@run $crate::connections::Tuning::Default,
            $crate::connections::retry_budget($store.direct(), $store.pool()), $store, $conn => $body)
    };
    (@run $tuning:expr, $retries:expr, $store:expr, $conn:ident => $body:expr) => {
        $crate::on_connection!(@tries $crate::extend::Attempts::with(
            $store.direct(), $store.pool(), $tuning, $retries), $conn => $body)
    };
}

pub(crate) use on_conn;
