//! `SqliteStore`: the claim lifecycle on one SQLite database file. Every step that reads and
//! writes runs in a transaction that holds the write lock from its start: SQLite has one
//! writer at a time, so the read and the write of a claim are one atomic step for every
//! connection and every process on the file. A claim that finds a live record answers from a
//! plain read (`answer_live`); claims that write, and completions, share transactions
//! (`group_commit`).

use async_trait::async_trait;
use idem_core::{
    Claim, ClaimRequest, Completion, EffectEntry, EffectRecord, EffectState, Fence, Fenced,
    Fingerprint, Key, Operation, Purge, Record, RecordState, Store, StoreError, TransactionalStore,
    TxClaim,
};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, Sqlite, SqlitePool, Transaction};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::group_commit::{claim_locked, ClaimParts, ClaimWrite, CompleteWrite, Writer};
use crate::record::{applied, at, judge, micros, now_us, store_error};
use crate::sql::Sql;
use crate::write_transaction::write_transaction;

/// The default table: `idem_records` (and `idem_records_effects`, `idem_records_fence`,
/// `idem_records_migrations`).
pub const DEFAULT_TABLE: &str = "idem_records";

/// How long [`SqliteStore::open`] lets a statement wait for another connection's (or process's)
/// write lock before it fails with [`StoreError`] (the call then fails closed): 5 s.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections of the pool [`SqliteStore::open`] makes: SQLite writes one at a time, so more
/// only serve concurrent reads (duplicates, `get`).
pub const DEFAULT_CONNECTIONS: u32 = 4;

/// An idem store in a SQLite database: durable (a claim is on disk before the body runs),
/// embedded (no server), and shared by every process that opens the same file on one machine.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idem_core::StoreError> {
/// use idem_core::{Call, Outcome};
/// use idem_store_sqlite::SqliteStore;
///
/// let dir = std::env::temp_dir().join(format!("idem-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let store = SqliteStore::open(dir.join("idem.db")).await?;
/// store.migrate().await?;
/// let first = Call::new(&store, "invoice-run:2026-11").run(async { Ok::<_, std::io::Error>(()) });
/// assert_eq!(first.await.unwrap(), Outcome::Executed(()));
/// let again = Call::new(&store, "invoice-run:2026-11").run(async { Ok::<_, std::io::Error>(()) });
/// assert!(again.await.unwrap().is_duplicate());
/// # std::fs::remove_dir_all(dir).unwrap();
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    table: String,
    pub(crate) sql: Arc<Sql>,
    /// Writes claims and completions, many to a transaction.
    writer: Writer,
}

/// A table name idem can put in its statements: a lowercase letter or `_`, then lowercase
/// letters, digits or `_`, at most 48 characters.
fn valid_table(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 48
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl SqliteStore {
    /// Opens (creating it if missing) the database file at `path`, in WAL mode (readers never
    /// wait for the writer), with `synchronous = FULL` (a claim survives a power cut before the
    /// body runs) and a busy timeout of [`DEFAULT_BUSY_TIMEOUT`]; a pool of
    /// [`DEFAULT_CONNECTIONS`]. Call [`migrate`](Self::migrate) once before use.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(DEFAULT_BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(DEFAULT_CONNECTIONS)
            .connect_with(options)
            .await
            .map_err(|e| store_error(e).during(Operation::Setup))?;
        Ok(SqliteStore::new(pool))
    }

    /// A store on your own pool (its connect options are yours: set WAL mode and a busy
    /// timeout, as [`open`](Self::open) does), in the table [`DEFAULT_TABLE`].
    pub fn new(pool: SqlitePool) -> SqliteStore {
        SqliteStore::with_table(pool, DEFAULT_TABLE).expect("the default table name is valid")
    }

    /// A store in `table` (a lowercase name: letters, digits, `_`, at most 48 characters), so
    /// several stores can share one file.
    pub fn with_table(pool: SqlitePool, table: &str) -> Result<SqliteStore, StoreError> {
        if !valid_table(table) {
            return Err(StoreError::msg(format!(
                "{table:?} is not a table name idem accepts: a lowercase letter or `_`, then \
                 lowercase letters, digits or `_`, at most 48 characters"
            ))
            .during(Operation::Setup));
        }
        let sql = Arc::new(Sql::new(table));
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                table: table.to_owned(),
                writer: Writer::new(pool.clone(), Arc::clone(&sql)),
                sql,
            }),
            pool,
        })
    }

    /// The pool, for your own statements (and transactions) on the same file.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Creates the store's tables if they are not there, or brings them to this version; safe
    /// to run from several processes at once (they take turns on the write lock).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        crate::migrate::migrate(&self.pool, &self.inner.table, &self.inner.sql)
            .await
            .map_err(|e| store_error(e).during(Operation::Setup))
    }

    /// The answer for a live record (completed, or claimed and not lapsed), from a plain read
    /// without the write lock: a WAL read sees one committed state, and the answer is the one
    /// the locked path would give at that moment (a live record changes only by its holder's
    /// completion or release, after which either answer is one a caller could have got). So
    /// duplicates never queue behind writers. `None`: the key is fresh or lapsed.
    async fn answer_live(&self, request: &ClaimRequest<'_>) -> Result<Option<Claim>, sqlx::Error> {
        let row = sqlx::query(&self.inner.sql.get)
            .bind(request.key.as_str())
            .bind(request.key.scope())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row
            .filter(|row| row.get::<i64, _>("expires_us") > now_us())
            .map(|row| judge(&row, fingerprint(request), token(request))))
    }

    /// A live record's answer from a read; else the claim, written with the other callers'
    /// writes (`group_commit`).
    async fn claim_now(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        if let Some(claim) = self.answer_live(&request).await.map_err(store_error)? {
            return Ok(claim);
        }
        self.inner
            .writer
            .claim(ClaimWrite {
                key: request.key.as_str().to_owned(),
                scope: request.key.scope().to_owned(),
                fingerprint: fingerprint(&request).map(str::to_owned),
                token: token(&request),
                lease: request.lease,
            })
            .await
    }

    /// A transaction holding SQLite's write lock from its start (see [`write_transaction`]).
    async fn begin_immediate(&self) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        write_transaction(&self.pool, &self.inner.sql.lock).await
    }

    /// The completion statement, to run on the pool or in a transaction.
    fn completion<'q>(
        &'q self,
        key: &'q Key,
        fence: Fence,
        completion: Completion<'q>,
    ) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
        sqlx::query(&self.inner.sql.complete)
            .bind(key.as_str())
            .bind(key.scope())
            .bind(fence.0 as i64)
            .bind(now_us())
            .bind(micros(completion.keep))
            .bind(completion.output)
    }

    pub(crate) async fn fenced(
        &self,
        statement: &str,
        key: &Key,
        fence: Fence,
        extra: Option<i64>,
    ) -> Result<Fenced, StoreError> {
        let mut query = sqlx::query(statement)
            .bind(key.as_str())
            .bind(key.scope())
            .bind(fence.0 as i64);
        if let Some(extra) = extra {
            query = query.bind(extra);
        }
        let done = query.execute(&self.pool).await.map_err(store_error)?;
        Ok(applied(done.rows_affected()))
    }
}

fn fingerprint<'a>(request: &ClaimRequest<'a>) -> Option<&'a str> {
    request.fingerprint.map(Fingerprint::as_str)
}

fn token(request: &ClaimRequest<'_>) -> Option<i64> {
    request.token.map(|t| t.0 as i64)
}

#[async_trait]
impl Store for SqliteStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.claim_now(request).await
    }

    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        self.inner
            .writer
            .complete(CompleteWrite {
                key: key.as_str().to_owned(),
                scope: key.scope().to_owned(),
                fence: fence.0 as i64,
                keep: completion.keep,
                output: completion.output.map(<[u8]>::to_vec),
            })
            .await
    }

    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        self.fenced(&self.inner.sql.release, key, fence, None).await
    }

    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        let expires = now_us().saturating_add(micros(lease));
        self.fenced(&self.inner.sql.renew, key, fence, Some(expires))
            .await
    }

    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        let row = sqlx::query(&self.inner.sql.get)
            .bind(key.as_str())
            .bind(key.scope())
            .fetch_optional(&self.pool)
            .await
            .map_err(store_error)?;
        Ok(row.map(|row| {
            let expires: i64 = row.get("expires_us");
            let state = RecordState::from_stored(
                row.get::<Option<i64>, _>("completed_us").map(at),
                at(expires),
                row.get("output"),
            );
            Record {
                key: key.clone(),
                fence: Fence(row.get::<i64, _>("fence") as u64),
                fingerprint: row
                    .get::<Option<String>, _>("fingerprint")
                    .map(Fingerprint::from_stored),
                state,
            }
        }))
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    /// Frees the key at once, on the current Tokio runtime (without one, at the latest when
    /// the lease lapses).
    fn abandon(&self, key: &Key, fence: Fence) {
        idem_core::release_in_background(self.shared(), key, fence);
    }

    async fn effect(&self, key: &Key, effect: &str) -> Result<Option<EffectEntry>, StoreError> {
        let row = sqlx::query(&self.inner.sql.effect)
            .bind(key.as_str())
            .bind(key.scope())
            .bind(effect)
            .bind(now_us())
            .fetch_optional(&self.pool)
            .await
            .map_err(store_error)?;
        Ok(row.map(|row| EffectEntry {
            state: if row.get::<i64, _>("state") == 1 {
                EffectState::Done
            } else {
                EffectState::Started
            },
            output: row.get("output"),
            fence: Fence(row.get::<i64, _>("fence") as u64),
        }))
    }

    async fn record_effect(
        &self,
        key: &Key,
        fence: Fence,
        record: EffectRecord<'_>,
    ) -> Result<Fenced, StoreError> {
        let sql = &self.inner.sql;
        let run = async {
            let mut tx = self.begin_immediate().await?;
            let held = sqlx::query(&sql.holder)
                .bind(key.as_str())
                .bind(key.scope())
                .bind(fence.0 as i64)
                .fetch_optional(&mut *tx)
                .await?
                .is_some();
            if !held {
                tx.commit().await?;
                return Ok(Fenced::Lost);
            }
            let now = now_us();
            let state = match record.state {
                EffectState::Started => 0i64,
                EffectState::Done => 1,
            };
            let written = sqlx::query(&sql.record_effect)
                .bind(key.as_str())
                .bind(key.scope())
                .bind(record.effect)
                .bind(state)
                .bind(record.output)
                .bind(fence.0 as i64)
                .bind(now)
                .bind(now.saturating_add(micros(record.keep)))
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            Ok::<_, sqlx::Error>(applied(written))
        };
        run.await.map_err(store_error)
    }
}

#[async_trait]
impl Purge for SqliteStore {
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        let sql = &self.inner.sql;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let now = now_us();
        let mut purged = 0;
        for statement in [&sql.purge_records, &sql.purge_effects] {
            purged += sqlx::query(statement)
                .bind(now)
                .bind(limit)
                .execute(&self.pool)
                .await
                .map_err(|e| store_error(e).during(Operation::Purge))?
                .rows_affected();
        }
        Ok(purged)
    }
}

/// Transactional mode (`#[idempotent(transaction = tx)]`): the claim, the handler's writes
/// (through `&mut **tx`) and the completion are one SQLite transaction. It holds SQLite's single
/// write lock from the claim to the commit, so every other writer on the file (any key, any
/// process) waits for it, up to its busy timeout: keep such bodies short, or use lease mode.
#[async_trait]
impl TransactionalStore for SqliteStore {
    type Transaction = Transaction<'static, Sqlite>;

    /// Claims as lease mode does (in progress) and writes the completion at the commit: the
    /// statement a record written as completed would save is in-process here.
    async fn claim_in_transaction(
        &self,
        request: ClaimRequest<'_>,
        _keep: Duration,
    ) -> Result<TxClaim<Self::Transaction>, StoreError> {
        let failed = |e| store_error(e).during(Operation::Claim);
        if let Some(claim) = self.answer_live(&request).await.map_err(failed)? {
            return Ok(TxClaim {
                claim,
                transaction: None,
            });
        }
        let mut tx = self.begin_immediate().await.map_err(failed)?;
        let parts = ClaimParts {
            key: request.key.as_str(),
            scope: request.key.scope(),
            fingerprint: fingerprint(&request),
            token: token(&request),
            lease: request.lease,
        };
        let claim = claim_locked(&mut tx, &self.inner.sql, &parts)
            .await
            .map_err(failed)?;
        if matches!(claim, Claim::Acquired { .. }) {
            return Ok(TxClaim {
                claim,
                transaction: Some(tx),
            });
        }
        tx.rollback().await.map_err(failed)?;
        Ok(TxClaim {
            claim,
            transaction: None,
        })
    }

    async fn commit_completion(
        &self,
        mut transaction: Self::Transaction,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        let failed = |e| store_error(e).during(Operation::Complete);
        let done = self
            .completion(key, fence, completion)
            .execute(&mut *transaction)
            .await
            .map_err(failed)?;
        let fenced = applied(done.rows_affected());
        match fenced {
            Fenced::Applied => transaction.commit().await.map_err(failed)?,
            Fenced::Lost => transaction.rollback().await.map_err(failed)?,
        }
        Ok(fenced)
    }

    async fn roll_back(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        transaction
            .rollback()
            .await
            .map_err(|e| store_error(e).during(Operation::Release))
    }
}

#[cfg(test)]
mod tests {
    use super::valid_table;

    #[test]
    fn table_names_are_plain_lowercase_identifiers() {
        for ok in ["idem_records", "_x", "jobs_2026"] {
            assert!(valid_table(ok), "{ok}");
        }
        for bad in ["", "Idem", "1x", "a-b", "a\"b", &"x".repeat(49)] {
            assert!(!valid_table(bad), "{bad}");
        }
    }
}
