//! [`ClosingTransaction`]: a transaction on a connection of the pool that never goes back to
//! the pool open.

use std::ops::{Deref, DerefMut};

use sqlx::pool::PoolConnection;
use sqlx::{Database, PgConnection, PgPool, Postgres, TransactionManager};

type Manager = <Postgres as Database>::TransactionManager;

/// The `BEGIN` of a read-only transaction whose statements all see one snapshot: a page and
/// the point where its read stopped.
pub const SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// A transaction on a connection of the pool, closed on drop unless it was committed or
/// rolled back: dropped while open, or while its `BEGIN`'s answer is still on the way (a
/// caller's timeout), its connection must not go back to the pool inside a transaction.
///
/// sqlx's own [`Transaction`](sqlx::Transaction) counts a transaction only once the server
/// answered its `BEGIN`, and its pool takes a connection back after only a ping: a
/// `pool.begin()` dropped in between returns the connection open, and whoever takes it next
/// runs its statements inside that transaction, where nothing commits them. Every
/// transaction idem opens on a pool is one of these (or runs on a checkout of the store's
/// that closes its connection likewise); use it for the application's own:
///
/// ```no_run
/// # use idem_postgres_core as idem_store_postgres;
/// # async fn run(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// use idem_store_postgres::ClosingTransaction;
///
/// let mut tx = ClosingTransaction::begin(&pool, None).await?;
/// sqlx::query("INSERT INTO orders (id) VALUES (7)").execute(&mut *tx).await?;
/// tx.end(true).await?; // commits; dropped instead, the connection is closed
/// # Ok(()) }
/// ```
pub struct ClosingTransaction {
    conn: PoolConnection<Postgres>,
    ended: bool,
}

impl ClosingTransaction {
    /// Takes a connection of `pool` and begins a transaction on it, with `statement` (a
    /// `BEGIN` with options, such as `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`) or a
    /// plain `BEGIN`.
    pub async fn begin(
        pool: &PgPool,
        statement: Option<&'static str>,
    ) -> Result<ClosingTransaction, sqlx::Error> {
        let mut tx = ClosingTransaction::on(pool.acquire().await?);
        Manager::begin(&mut tx.conn, statement.map(Into::into)).await?;
        Ok(tx)
    }

    /// `conn`, on which the caller begins the transaction itself (with a statement sent along
    /// its `BEGIN`, which sqlx's [`Transaction`](sqlx::Transaction) cannot do).
    pub(crate) fn on(conn: PoolConnection<Postgres>) -> ClosingTransaction {
        ClosingTransaction { conn, ended: false }
    }

    /// Commits (`true`) or rolls back; the connection then goes back to the pool. A savepoint
    /// left open (one leaked with `mem::forget`) fails it, and the connection is closed:
    /// committing would only release the savepoint.
    pub async fn end(mut self, commit: bool) -> Result<(), sqlx::Error> {
        let depth = Manager::get_transaction_depth(&self.conn);
        if depth != 1 {
            return Err(sqlx::Error::Protocol(format!(
                "the transaction is {depth} levels deep at its end: a savepoint was left open; \
                 nothing was committed"
            )));
        }
        if commit {
            Manager::commit(&mut self.conn).await?;
        } else {
            Manager::rollback(&mut self.conn).await?;
        }
        self.ended = true;
        Ok(())
    }
}

impl Deref for ClosingTransaction {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl DerefMut for ClosingTransaction {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

impl Drop for ClosingTransaction {
    fn drop(&mut self) {
        if !self.ended {
            self.conn.close_on_drop();
        }
    }
}
