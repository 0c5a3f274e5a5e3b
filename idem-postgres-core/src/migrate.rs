//! Versioned migrations, embedded with `sqlx::migrate!` and applied under an advisory lock.
//!
//! idem keeps its own migration history in `<schema>.<table>_migrations`, not in sqlx's
//! `_sqlx_migrations`, so it never mixes with (or breaks) the application's own migrations. A
//! crate that adds tables beside the records (the work queue) ships its own [`Migrations`],
//! with a history of its own, applied the same way.

use idem_core::{Operation, StoreError};
use sqlx::migrate::Migrator;
use sqlx::{Connection, Executor, PgConnection, PgPool, Row};
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
    rewritten: &[],
};

/// A crate's versioned migrations of tables that sit beside a [`PgStore`]'s records.
///
/// Each migration is a SQL file embedded with [`sqlx::migrate!`], in which `__IDEM_SCHEMA__` and
/// `__IDEM_TABLE__` stand for the store's schema and records table (name new tables
/// `__IDEM_TABLE___<suffix>`). [`apply`](Migrations::apply) runs those not yet applied, each in
/// a transaction of its own, under the advisory lock every idem migration takes, and keeps
/// their history in `<schema>.<table>_<history>`: concurrent start-ups apply each migration
/// once, a changed migration or a history from a newer version is refused, and sqlx's own
/// `_sqlx_migrations` (the application's) is never touched.
///
/// A migration whose file starts with `-- no-transaction` runs outside any transaction, one
/// statement at a time (statements end with `;` at the end of a line): what
/// `CREATE INDEX CONCURRENTLY` needs, which builds an index while the table takes writes. Write
/// such a migration so that running it again after it stopped midway is safe (drop an index
/// a failed build left invalid before building it again). A line
/// `-- online unless empty: "__IDEM_SCHEMA__"."__IDEM_TABLE___t"` names the table it builds on:
/// when that table has no rows (a new deployment), the migration runs in one transaction with
/// `CONCURRENTLY` taken out, which spares it the concurrent build's waits for every
/// transaction running.
#[derive(Debug, Clone, Copy)]
pub struct Migrations {
    owner: &'static str,
    history: &'static str,
    migrator: &'static Migrator,
    retired: &'static [i64],
    /// Migrations rewritten after they shipped, with the checksum of each earlier text: a
    /// history that applied the earlier text is one this version knows.
    rewritten: &'static [(i64, &'static str)],
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
            rewritten: &[],
        }
    }

    /// These migrations, knowing that each `(version, sha384)` of `rewritten` (the SHA-384 of
    /// its earlier text, in hex) was shipped before with that earlier text: a migration made
    /// online after the fact (its indexes built concurrently), whose earlier text some
    /// databases applied.
    pub const fn rewritten(self, rewritten: &'static [(i64, &'static str)]) -> Migrations {
        Migrations { rewritten, ..self }
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
        // A connection of its own, closed when dropped (a cancelled `migrate` included): the
        // session's advisory lock then goes with it, never back to the pool.
        let mut conn = pool.acquire().await.map_err(setup)?.detach();
        // Tried, not waited for: `CREATE INDEX CONCURRENTLY` waits for every transaction
        // running, and a statement waiting for the lock is one, held by the migrator it waits
        // for (a deadlock).
        let mut pause = std::time::Duration::from_millis(5);
        while !sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
            .bind(MIGRATION_LOCK)
            .fetch_one(&mut conn)
            .await
            .map_err(setup)?
        {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(200));
        }
        let applied = self.apply_locked(&mut conn, schema, table).await;
        let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
        applied?;
        unlocked.map(|_| ()).map_err(setup)
    }

    async fn apply_locked(
        &self,
        conn: &mut PgConnection,
        schema: &str,
        table: &str,
    ) -> Result<(), StoreError> {
        let schema_exists = sqlx::query("SELECT 1 FROM pg_namespace WHERE nspname = $1")
            .bind(schema)
            .fetch_optional(&mut *conn)
            .await
            .map_err(setup)?
            .is_some();
        if !schema_exists {
            conn.execute(format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"").as_str())
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
        conn.execute(create_history.as_str()).await.map_err(setup)?;
        let applied: HashMap<i64, Vec<u8>> =
            sqlx::query(&format!("SELECT version, checksum FROM {history}"))
                .fetch_all(&mut *conn)
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
                Some(checksum)
                    if *checksum == *migration.checksum
                        || self.was_shipped(migration.version, checksum) => {}
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
                        .replace("\r\n", "\n")
                        .replace("__IDEM_SCHEMA__", schema)
                        .replace("__IDEM_TABLE__", table);
                    let insert = format!(
                        "INSERT INTO {history} (version, description, checksum) VALUES ($1, $2, $3)"
                    );
                    let record = || {
                        sqlx::query(&insert)
                            .bind(migration.version)
                            .bind(&*migration.description)
                            .bind(&*migration.checksum)
                    };
                    if !migration.no_tx {
                        let mut tx = conn.begin().await.map_err(setup)?;
                        tx.execute(sql.as_str()).await.map_err(setup)?;
                        record().execute(&mut *tx).await.map_err(setup)?;
                        tx.commit().await.map_err(setup)?;
                    } else if !in_one_transaction(conn, &sql, record()).await? {
                        for statement in statements(&sql) {
                            conn.execute(statement).await.map_err(setup)?;
                        }
                        record().execute(&mut *conn).await.map_err(setup)?;
                    }
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

    /// Whether `checksum` is that of an earlier text of migration `version`.
    fn was_shipped(&self, version: i64, checksum: &[u8]) -> bool {
        let hex: String = checksum.iter().map(|b| format!("{b:02x}")).collect();
        self.rewritten
            .iter()
            .any(|(v, earlier)| *v == version && earlier.eq_ignore_ascii_case(&hex))
    }
}

/// Runs a no-transaction migration in one transaction, `CONCURRENTLY` taken out, with
/// `record` (its history row), when the table it names on a line `-- online unless empty: T`
/// has no rows: nothing to build, and none of a concurrent build's waits for every transaction
/// running. The table is locked first without waiting (an application's transaction may
/// hold it, with rows not yet visible), and its rows counted under that lock. Returns false,
/// having changed nothing, when the migration names no table, the table has rows, or its lock
/// was not free: then the migration runs outside a transaction.
async fn in_one_transaction(
    conn: &mut PgConnection,
    sql: &str,
    record: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<bool, StoreError> {
    let Some(table) = sql
        .lines()
        .find_map(|line| line.strip_prefix("-- online unless empty: "))
        .map(str::trim)
    else {
        return Ok(false);
    };
    let mut tx = conn.begin().await.map_err(setup)?;
    let locked = tx
        .execute(format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE NOWAIT").as_str())
        .await;
    if locked.is_err() {
        return Ok(false); // dropped: rolled back
    }
    let empty: bool = sqlx::query_scalar(&format!("SELECT NOT EXISTS (SELECT 1 FROM {table})"))
        .fetch_one(&mut *tx)
        .await
        .map_err(setup)?;
    if !empty {
        return Ok(false);
    }
    for statement in statements(sql) {
        let statement = statement.replace(" CONCURRENTLY", "");
        tx.execute(statement.as_str()).await.map_err(setup)?;
    }
    record.execute(&mut *tx).await.map_err(setup)?;
    tx.commit().await.map_err(setup)?;
    Ok(true)
}

/// The statements of a migration run outside a transaction: each ends with `;` at the end of a
/// line. Comment-only pieces are skipped.
fn statements(sql: &str) -> impl Iterator<Item = &str> {
    let mut rest = sql;
    std::iter::from_fn(move || loop {
        let end = match rest.find(";\n") {
            Some(at) => at + 1,
            None if rest.trim().is_empty() => return None,
            None => rest.len(),
        };
        let (statement, after) = rest.split_at(end);
        rest = after;
        let code: String = statement
            .lines()
            .filter(|line| !line.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        if !code.trim().trim_end_matches(';').trim().is_empty() {
            return Some(statement);
        }
        if rest.is_empty() {
            return None;
        }
    })
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
