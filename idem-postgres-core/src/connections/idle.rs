//! The store's idle connections, by how they are set up, and the connections themselves.

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};
use std::sync::Mutex;

use super::setup::Tuning;

/// One of the store's own connections.
pub(super) enum Own {
    Held(PoolConnection<Postgres>),
    Opened(PgConnection),
}

impl Own {
    pub(super) fn get(&mut self) -> &mut PgConnection {
        match self {
            Own::Held(conn) => conn,
            Own::Opened(conn) => conn,
        }
    }

    pub(super) fn get_ref(&self) -> &PgConnection {
        match self {
            Own::Held(conn) => conn,
            Own::Opened(conn) => conn,
        }
    }

    /// Closes the connection (a held one is closed, not given back to the pool).
    pub(super) fn discard(self) {
        if let Own::Held(mut conn) = self {
            conn.close_on_drop();
        }
    }
}

/// Idle connections, by how they are set up, and how many the store has.
#[derive(Default)]
pub(super) struct Idle {
    pub(super) default: Vec<Own>,
    pub(super) indexed: Vec<Own>,
    /// Connections the store has: idle, running a statement, or lent.
    pub(super) held: usize,
    /// Of those, lent to open transactions.
    pub(super) lent: usize,
    /// Of those, still being opened (counted in `held` before their connection exists).
    pub(super) opening: usize,
}

impl Idle {
    /// Empties the idle lists (the connections are no longer the store's).
    pub(super) fn drain(&mut self) -> Vec<Own> {
        let mut conns: Vec<Own> = self.default.drain(..).collect();
        conns.append(&mut self.indexed);
        self.held -= conns.len();
        conns
    }

    pub(super) fn of(&mut self, tuning: Tuning) -> &mut Vec<Own> {
        match tuning {
            Tuning::Default => &mut self.default,
            Tuning::Indexed => &mut self.indexed,
        }
    }

    pub(super) fn other(&mut self, tuning: Tuning) -> &mut Vec<Own> {
        match tuning {
            Tuning::Default => &mut self.indexed,
            Tuning::Indexed => &mut self.default,
        }
    }
}

pub(super) fn lock(idle: &Mutex<Idle>) -> std::sync::MutexGuard<'_, Idle> {
    idle.lock().unwrap_or_else(|e| e.into_inner())
}
