//! Versioned migrations, embedded with `sqlx::migrate!` and applied under an advisory lock.
//!
//! idem keeps its own migration history in `<schema>.<table>_migrations`, not in sqlx's
//! `_sqlx_migrations`, so it never mixes with (or breaks) the application's own migrations. A
//! crate that adds tables beside the records (the work queue) ships its own [`Migrations`],
//! with a history of its own, applied the same way.

use idem_core::{Operation, StoreError};
use sqlx::migrate::Migrator;
use sqlx::{Executor, PgPool, Row};
use std::collections::HashMap;

use crate::error::store_error;
use crate::PgStore;

/// The migrations shipped with this crate, with `__IDEM_SCHEMA__`/`__IDEM_TABLE__` placeholders.
static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// One advisory lock for every idem migration in a database: concurrent `migrate()` calls
/// from several processes run one after another, and the later ones find nothing to do.
const MIGRATION_LOCK: i64 = 0x1de3_4d16_0001;

fn setup(e: sqlx::Error) -> StoreError {
    store_error(e).during(Operation::Setup)
}

/// The records' migrations. Versions 3 and 8 are retired: they created and tuned the work
/// queue's table, which `idem-queue`'s own migrations own (and adopt where those two made it),
/// so a history that lists them is one this version knows.
pub(crate) const RECORDS: Migrations = Migrations {
    owner: "idem-store-postgres",
    history: "migrations",
    migrator: &MIGRATOR,
    retired: &[3, 8],
};

/// A crate's versioned migrations of tables that sit beside a [`PgStore`]'s records.
///
/// Each migration is a SQL file embedded with [`sqlx::migrate!`], in which `__IDEM_SCHEMA__` and
/// `__IDEM_TABLE__` stand for the store's schema and records table (name new tables
/// `__IDEM_TABLE___<suffix>`). [`apply`](Migrations::apply) runs those not yet applied, in one
/// transaction, under the advisory lock every idem migration takes, and keeps their history in
/// `<schema>.<table>_<history>`: concurrent start-ups apply each migration once, a changed
/// migration or a history from a newer version is refused, and sqlx's own
/// `_sqlx_migrations` (the application's) is never touched.
#[derive(Debug, Clone, Copy)]
pub struct Migrations {
    owner: &'static str,
    history: &'static str,
    migrator: &'static Migrator,
    retired: &'static [i64],
}

impl Migrations {
    /// The migrations of crate `owner` (named in errors), their history kept in
    /// `<table>_<history>` (which must differ from every other crate's, and from the records'
    /// `migrations`).
    pub const fn new(
        owner: &'static str,
        history: &'static str,
        migrator: &'static Migrator,
    ) -> Migrations {
        Migrations {
            owner,
            history,
            migrator,
            retired: &[],
        }
    }

    /// Applies the migrations not yet applied to `store`'s schema and table. Safe to call from
    /// many processes at once and on every start-up.
    pub async fn apply(&self, store: &PgStore) -> Result<(), StoreError> {
        let (schema, table) = store.names();
        self.apply_to(store.pool(), schema, table).await
    }

    pub(crate) async fn apply_to(
        &self,
        pool: &PgPool,
        schema: &str,
        table: &str,
    ) -> Result<(), StoreError> {
        let mut tx = pool.begin().await.map_err(setup)?;
        match self.apply_in(&mut tx, schema, table).await {
            Ok(()) => tx.commit().await.map_err(setup),
            Err(e) => {
                // Roll back now rather than when the connection is next used, so the advisory
                // lock is released for the next migrator at once.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    async fn apply_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        schema: &str,
        table: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut **tx)
            .await
            .map_err(setup)?;
        let schema_exists = sqlx::query("SELECT 1 FROM pg_namespace WHERE nspname = $1")
            .bind(schema)
            .fetch_optional(&mut **tx)
            .await
            .map_err(setup)?
            .is_some();
        if !schema_exists {
            tx.execute(format!("CREATE SCHEMA \"{schema}\"").as_str())
                .await
                .map_err(setup)?;
        }
        let history = format!("\"{schema}\".\"{table}_{}\"", self.history);
        let create_history = format!(
            "CREATE TABLE IF NOT EXISTS {history} (
                version     bigint      PRIMARY KEY,
                description text        NOT NULL,
                checksum    bytea       NOT NULL,
                applied_at  timestamptz NOT NULL DEFAULT now()
            )"
        );
        tx.execute(create_history.as_str()).await.map_err(setup)?;
        let applied: HashMap<i64, Vec<u8>> =
            sqlx::query(&format!("SELECT version, checksum FROM {history}"))
                .fetch_all(&mut **tx)
                .await
                .map_err(setup)?
                .into_iter()
                .map(|row| (row.get::<i64, _>(0), row.get::<Vec<u8>, _>(1)))
                .collect();
        if let Some(newer) = applied
            .keys()
            .find(|v| !self.retired.contains(v) && !self.migrator.iter().any(|m| m.version == **v))
        {
            return Err(StoreError::msg(format!(
                "{history} records migration {newer}, which this version of {} does not know: the \
                 table was migrated by a newer version; upgrade this one",
                self.owner
            ))
            .during(Operation::Setup));
        }
        for migration in self.migrator.iter() {
            if migration.migration_type.is_down_migration() {
                continue;
            }
            match applied.get(&migration.version) {
                Some(checksum) if *checksum == *migration.checksum => {}
                Some(_) => {
                    return Err(StoreError::msg(format!(
                        "migration {} ({}) differs from the one applied to {history}; shipped \
                         migrations must never change",
                        migration.version, migration.description
                    ))
                    .during(Operation::Setup))
                }
                None => {
                    let sql = migration
                        .sql
                        .replace("__IDEM_SCHEMA__", schema)
                        .replace("__IDEM_TABLE__", table);
                    tx.execute(sql.as_str()).await.map_err(setup)?;
                    sqlx::query(&format!(
                        "INSERT INTO {history} (version, description, checksum) VALUES ($1, $2, $3)"
                    ))
                    .bind(migration.version)
                    .bind(&*migration.description)
                    .bind(&*migration.checksum)
                    .execute(&mut **tx)
                    .await
                    .map_err(setup)?;
                    tracing::info!(
                        version = migration.version,
                        description = %migration.description,
                        "applied idem migration"
                    );
                }
            }
        }
        Ok(())
    }
}

impl PgStore {
    /// Creates or upgrades the schema, the table, its sequence and index, by applying this
    /// crate's versioned migrations that are not applied yet. Safe to call from many processes
    /// at once (they take turns on an advisory lock) and on every start-up.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        RECORDS
            .apply_to(self.pool(), self.names().0, self.names().1)
            .await
    }
}
