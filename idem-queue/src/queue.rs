//! [`Queue`]: the work queue of a [`PgStore`], its statements and its migrations.

use std::sync::Arc;

use idem_core::{Operation, StoreError};
use idem_postgres_core::extend::store_error;
use idem_postgres_core::extend::Batcher;
use idem_store_postgres::PgStore;

use crate::completer::completion::JobCompleteOp;
use crate::db::QueueSql;

/// The queue's migrations: its table, `<table>_queue`, beside the store's records, with its
/// history in `<table>_queue_migrations`. Migration 8 first shipped (in two texts) building its
/// indexes in a transaction, which held writes to the queue until it committed; it now builds
/// them concurrently, and a database that applied an earlier text is up to date.
static MIGRATIONS: idem_postgres_core::extend::Migrations =
    idem_postgres_core::extend::Migrations::new("idem-queue", "queue_migrations", &MIGRATOR)
        .rewritten(&[
            (
                8,
                "e21d037b6607a29b64ff834658577d1a38cec45660c7ef8d4fed6d6c12b8d812dadf81a7c9c9c51d2decf629843e26b2",
            ),
            (
                8,
                "6d3f168ef9f8be046f863570f2c3e68ff1e0a42a150c98cda15d6cd02094616385d32d7bcb8ee23228f2c4825b734d8e",
            ),
        ]);
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The work queue of a [`PgStore`]: table `<table>_queue` next to its records, created by
/// [`Queue::migrate`]. Build it once at start-up ([`Queue::new`] writes its statements);
/// clones are cheap and share them. See the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct Queue {
    pub(crate) store: PgStore,
    pub(crate) sql: Arc<QueueSql>,
    /// The completions of concurrent jobs, batched as the store batches calls' (when it does),
    /// with at least two statements in flight: each also claims the next jobs for the slots it
    /// frees, so with one in flight two workers' jobs would take turns on the wire, each
    /// waiting for the other's completion to claim its next job.
    pub(crate) completions: Option<Arc<Batcher<JobCompleteOp>>>,
}

pub(crate) fn failed(operation: Operation) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| store_error(e).during(operation)
}

impl Queue {
    /// The queue of `store` (table `<table>_queue` in the store's schema), whose jobs run as
    /// idempotent calls on that store.
    pub fn new(store: &PgStore) -> Queue {
        Queue {
            sql: Arc::new(QueueSql::new(store)),
            store: store.clone(),
            completions: store
                .batch_drivers()
                .map(|drivers| Arc::new(Batcher::new(drivers.max(2)))),
        }
    }

    /// Creates or upgrades the store's records table ([`PgStore::migrate`]) and the queue's
    /// own, by applying the versioned migrations not applied yet. Safe to call from many
    /// processes at once and on every start-up.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.store.migrate().await?;
        MIGRATIONS.apply(&self.store).await
    }

    /// The store whose records the queue's jobs run under.
    pub fn store(&self) -> &PgStore {
        &self.store
    }
}
