//! The connection a transaction runs on: lent by the store, or the pool's.

use sqlx::PgConnection;

use crate::closing::ClosingTransaction;
use crate::connections::Lent;

/// The connection a transactional call's transaction runs on.
pub(crate) enum TxConn {
    /// One of the store's own connections, lent for the transaction.
    Lent(Lent),
    /// A connection of the pool, when the store lends none.
    Pooled(ClosingTransaction),
}

impl TxConn {
    /// The connection.
    pub fn get(&mut self) -> &mut PgConnection {
        match self {
            TxConn::Lent(lent) => lent.get(),
            TxConn::Pooled(tx) => tx,
        }
    }
}
