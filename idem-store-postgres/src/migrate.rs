//! Versioned migrations, embedded with `sqlx::migrate!` and applied under an advisory lock.
//!
//! idem keeps its own migration history in `<schema>.<table>_migrations`, not in sqlx's
//! `_sqlx_migrations`, so it never mixes with (or breaks) the application's own migrations.

use idem_core::{Operation, StoreError};
use sqlx::migrate::Migrator;
use sqlx::{Executor, PgPool, Row};
use std::collections::HashMap;

use crate::error::store_error;

/// The migrations shipped with this crate, with `__IDEM_SCHEMA__`/`__IDEM_TABLE__` placeholders.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// One advisory lock for every idem migration in a database: concurrent `migrate()` calls
/// from several processes run one after another, and the later ones find nothing to do.
const MIGRATION_LOCK: i64 = 0x1de3_4d16_0001;

fn setup(e: sqlx::Error) -> StoreError {
    store_error(e).during(Operation::Setup)
}

pub(crate) async fn migrate(pool: &PgPool, schema: &str, table: &str) -> Result<(), StoreError> {
    let mut tx = pool.begin().await.map_err(setup)?;
    match apply(&mut tx, schema, table).await {
        Ok(()) => tx.commit().await.map_err(setup),
        Err(e) => {
            // Roll back now rather than when the connection is next used, so the advisory lock
            // is released for the next migrator at once.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

async fn apply(
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
    let history = format!("\"{schema}\".\"{table}_migrations\"");
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
        .find(|v| !MIGRATOR.iter().any(|m| m.version == **v))
    {
        return Err(StoreError::msg(format!(
            "{history} records migration {newer}, which this version of idem-store-postgres does \
             not know: the table was migrated by a newer version; upgrade this one"
        ))
        .during(Operation::Setup));
    }
    for migration in MIGRATOR.iter() {
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
