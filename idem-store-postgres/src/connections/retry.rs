//! Running a statement on one of the store's connections (or the pool's), and moving on
//! from a connection that turns out dead.

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};

use super::{Checkout, Direct};

/// Errors after which the connection is gone: retrying on a fresh one is safe.
pub(crate) fn is_connection_lost(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
        || crate::error::sqlstate(error)
            .is_some_and(|code| code.starts_with("08") || code == "57P01")
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
/// the store's own statements ([`Tuning::Indexed`](super::Tuning::Indexed)); without `indexed`, on one with the
/// server's defaults (what takes turns with transactions).
///
/// `on_conn!(once indexed store, ..)` never sends `$body` again: for a statement that is not
/// safe to repeat once it may have been applied (the queue's claims, which take whatever jobs
/// are free: a second sending would claim a second set while the first sits claimed).
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
    (@run $tuning:expr, $retries:expr, $store:expr, $conn:ident => $body:expr) => {{
        let mut retries: usize = $retries;
        loop {
            let mut checkout = match $crate::connections::Direct::checkout_or_pool(
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
