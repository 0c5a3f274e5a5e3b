//! Connections lent to open transactions, for as long as each lasts.

use sqlx::PgConnection;
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::direct::Direct;
use super::idle::Own;
use super::setup::Tuning;

/// A connection of the store's lent to an open transaction for as long as it lasts, which can
/// outlive any borrow of the store (see [`Direct::lend`]). Closed on drop unless given back.
pub(crate) struct Lent {
    direct: Arc<Direct>,
    conn: Option<Own>,
    reused: bool,
    _permits: [OwnedSemaphorePermit; 2],
}

impl Lent {
    /// The connection.
    pub fn get(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("lent until given back").get()
    }

    /// The connection, to read.
    pub fn conn(&self) -> &PgConnection {
        self.conn.as_ref().expect("lent until given back").get_ref()
    }

    /// Whether the connection was idle before (so one found dead may be replaced).
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// Gives the connection back to the store's idle ones. Only for a connection whose last
    /// statement ended normally and which is outside any transaction.
    pub fn give_back(mut self) {
        if let Some(conn) = self.conn.take() {
            self.direct.give_back(conn, Tuning::Default, true);
        }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.direct.discard(conn, true);
        }
    }
}

impl Direct {
    /// Lends a connection with the server's settings to an open transaction if one may be lent
    /// now: `Ok(None)` when the store lends none (it has too few) or all it may lend are out
    /// (then the transaction runs on a pooled connection, as the application's own do).
    pub async fn lend(self: &Arc<Self>) -> Result<Option<Lent>, sqlx::Error> {
        let Some(lent) = self
            .lendable
            .as_ref()
            .and_then(|lendable| Arc::clone(lendable).try_acquire_owned().ok())
        else {
            return Ok(None);
        };
        let any = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let Some((conn, reused)) = self.connection(Tuning::Default, true).await? else {
            return Ok(None);
        };
        Ok(Some(Lent {
            direct: Arc::clone(self),
            conn: Some(conn),
            reused,
            _permits: [lent, any],
        }))
    }
}
