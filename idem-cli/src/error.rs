//! What stops a command: a store's error (the database, its records or its work queue, on any
//! backend), or the dashboard's socket.

use idem_core::StoreError;

/// Why a command failed, as the command reports it on stderr with exit status `FAILED`.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The store failed: its database, or a rule of its records or its queue.
    #[error("the database failed: {0}")]
    Store(#[from] StoreError),
    /// The key or scope given is not one idem stores.
    #[error("{0}")]
    Key(#[from] idem_core::InvalidKey),
    /// The dashboard's socket failed while serving.
    #[error("serving failed: {0}")]
    Io(#[from] std::io::Error),
}

impl Failure {
    /// Whether a table the command read does not exist: the store (or its work queue) was
    /// never migrated.
    pub fn undefined_table(&self) -> bool {
        undefined_table(self)
    }
}

/// Whether `error` comes from a table that does not exist: PostgreSQL's `undefined_table`,
/// wherever it sits in the error's chain.
pub fn undefined_table(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if let Some(idem_store_postgres::sqlx::Error::Database(db)) =
            e.downcast_ref::<idem_store_postgres::sqlx::Error>()
        {
            return db.code().as_deref() == Some("42P01");
        }
        source = e.source();
    }
    false
}
