//! The connection a transaction runs on: lent by the store, or the pool's.

use sqlx::pool::PoolConnection;
use sqlx::{Database, PgConnection, Postgres, Transaction, TransactionManager};

use crate::connections::Lent;

type Manager = <Postgres as Database>::TransactionManager;

/// The connection a transactional call's transaction runs on.
pub(crate) enum TxConn {
    /// One of the store's own connections, lent for the transaction.
    Lent(Lent),
    /// A connection of the pool, when the store lends none.
    Pooled(Transaction<'static, Postgres>),
    /// A connection of the pool whose transaction the store began with a claim sent along
    /// (`fresh_claim.rs`), which sqlx's [`Transaction`] cannot do.
    Begun(Begun),
}

/// A connection of the pool in a transaction the store began itself. Closed on drop unless
/// its transaction was committed or rolled back, as a lent connection is: dropped while open
/// (or while its BEGIN's answer was still on the way), it must not go back to the pool inside
/// a transaction, and sqlx's pool only pings a connection it takes back.
pub(crate) struct Begun {
    pub(crate) conn: PoolConnection<Postgres>,
    ended: bool,
}

impl Begun {
    /// `conn`, to begin a transaction on.
    pub fn new(conn: PoolConnection<Postgres>) -> Begun {
        Begun { conn, ended: false }
    }

    pub(crate) async fn end(mut self, commit: bool) -> Result<(), sqlx::Error> {
        if commit {
            Manager::commit(&mut self.conn).await?;
        } else {
            Manager::rollback(&mut self.conn).await?;
        }
        self.ended = true;
        Ok(())
    }
}

impl Drop for Begun {
    fn drop(&mut self) {
        if !self.ended {
            self.conn.close_on_drop();
        }
    }
}

impl TxConn {
    /// The connection.
    pub fn get(&mut self) -> &mut PgConnection {
        match self {
            TxConn::Lent(lent) => lent.get(),
            TxConn::Pooled(tx) => tx,
            TxConn::Begun(begun) => &mut begun.conn,
        }
    }
}
