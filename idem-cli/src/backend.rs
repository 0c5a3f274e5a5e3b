//! The stores the command reads and edits: PostgreSQL (`postgres://`), SQLite
//! (`sqlite://PATH`) and Redis (`redis://`, a node or a cluster's nodes). Every question is the
//! store's own [`Inspect`] (the command holds no store's queries), answered as the same
//! [`RecordRow`]s, so every command prints the same fields whatever the store.

use crate::error::Failure;
use idem_core::Purge;
use idem_core::StoreError;
use idem_core::{Inspect, InspectedRecord, RecordFilter, RecordState, RecordStatus};
use idem_store_postgres::sqlx;
use idem_store_postgres::PgStore;
use idem_store_redis::RedisStore;
use idem_store_sqlite::SqliteStore;
use serde_json::{json, Map, Value};
use std::time::SystemTime;

use crate::args::State;

/// A record as the commands show it.
pub(crate) struct RecordRow {
    pub key: String,
    pub scope: String,
    /// `claimed`, `stale`, `completed` or `expired`.
    pub state: &'static str,
    pub fence: i64,
    pub holder: Option<String>,
    pub completed_at: Option<String>,
    pub expires_at: String,
    pub left_s: f64,
    pub fingerprint: Option<String>,
    pub output_bytes: Option<i64>,
}

impl RecordRow {
    pub fn claimed(&self) -> bool {
        matches!(self.state, "claimed" | "stale")
    }

    /// The fields of `show` and `list`.
    pub fn to_json(&self) -> Map<String, Value> {
        let claimed = self.claimed();
        Map::from_iter([
            ("key".into(), json!(self.key)),
            ("scope".into(), json!(self.scope)),
            ("state".into(), json!(self.state)),
            ("fence".into(), json!(self.fence)),
            ("holder".into(), json!(self.holder)),
            (
                "lease_expires_at".into(),
                json!(claimed.then_some(&self.expires_at)),
            ),
            (
                "lease_left_s".into(),
                json!(claimed.then(|| (self.left_s.max(0.0) * 10.0).round() / 10.0)),
            ),
            ("completed_at".into(), json!(self.completed_at)),
            (
                "keep_until".into(),
                json!((!claimed).then_some(&self.expires_at)),
            ),
            ("fingerprint".into(), json!(self.fingerprint)),
            ("output_bytes".into(), json!(self.output_bytes)),
        ])
    }
}

/// The store a `--database-url` names.
pub(crate) enum Backend {
    Postgres {
        pool: sqlx::PgPool,
        store: PgStore,
        schema: String,
        table: String,
    },
    Sqlite {
        store: SqliteStore,
        table: String,
    },
    Redis {
        store: RedisStore,
    },
}

/// A record as a row, judged against `now`.
fn row_of(inspected: &InspectedRecord, now: SystemTime) -> RecordRow {
    let record = &inspected.record;
    let (completed_at, expires) = match &record.state {
        RecordState::InProgress { lease_expires_at } => (None, *lease_expires_at),
        RecordState::Completed {
            completed_at,
            expires_at,
            ..
        } => (Some(rfc3339(*completed_at)), *expires_at),
    };
    RecordRow {
        key: record.key.as_str().to_owned(),
        scope: record.key.scope().to_owned(),
        state: inspected.status(now).as_str(),
        fence: record.fence.0 as i64,
        holder: inspected.holder.clone(),
        completed_at,
        expires_at: rfc3339(expires),
        left_s: match expires.duration_since(now) {
            Ok(left) => left.as_secs_f64(),
            Err(past) => -past.duration().as_secs_f64(),
        },
        fingerprint: record.fingerprint.as_ref().map(|f| f.as_str().to_owned()),
        output_bytes: inspected.output_bytes.map(|n| n as i64),
    }
}

fn scoped(key: &str, scope: &str) -> Result<idem_core::Key, StoreError> {
    idem_core::Key::new(key)
        .and_then(|k| k.with_stored_scope(scope))
        .map_err(|e| StoreError::msg(e.to_string()))
}

/// A time as RFC 3339 text in UTC, to the microsecond.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_micros(at).to_string()
}

/// A time for `--json`: RFC 3339 text, or `null`.
pub(crate) fn json_time(at: Option<SystemTime>) -> Value {
    at.map_or(Value::Null, |at| json!(rfc3339(at)))
}

fn filter_status(state: Option<State>) -> Option<RecordStatus> {
    state.map(|s| match s {
        State::Claimed => RecordStatus::Claimed,
        State::Stale => RecordStatus::Stale,
        State::Completed => RecordStatus::Completed,
    })
}

impl Backend {
    /// The store's answers to its operator.
    pub fn inspector(&self) -> &dyn Inspect {
        match self {
            Backend::Postgres { store, .. } => store,
            Backend::Sqlite { store, .. } => store,
            Backend::Redis { store } => store,
        }
    }

    /// The records of `key` (in `scope`, or in every scope).
    pub async fn find(&self, key: &str, scope: Option<&str>) -> Result<Vec<RecordRow>, Failure> {
        let now = SystemTime::now();
        let found = self.inspector().find(key, scope).await?;
        Ok(found.iter().map(|r| row_of(r, now)).collect())
    }

    /// Records, newest first.
    pub async fn list(
        &self,
        state: Option<State>,
        scope: Option<&str>,
        prefix: Option<&str>,
        limit: i64,
    ) -> Result<Vec<RecordRow>, Failure> {
        let now = SystemTime::now();
        let filter = RecordFilter {
            status: filter_status(state),
            scope: scope.map(str::to_owned),
            key_prefix: prefix.map(str::to_owned),
            limit: usize::try_from(limit).unwrap_or(0),
            ..RecordFilter::default()
        };
        let found = self.inspector().list(&filter).await?;
        Ok(found.iter().map(|r| row_of(r, now)).collect())
    }

    /// Deletes a completed record; how many records went.
    pub async fn delete_completed(&self, key: &str, scope: &str) -> Result<u64, Failure> {
        Ok(u64::from(
            self.inspector().forget(&scoped(key, scope)?).await?,
        ))
    }

    /// The journal entries of `key`.
    pub async fn journal(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<Map<String, Value>>, Failure> {
        let entries = self.inspector().journal(key, scope).await?;
        Ok(entries
            .into_iter()
            .map(|e| {
                let done = e.entry.state == idem_core::EffectState::Done;
                Map::from_iter([
                    ("scope".into(), json!(e.scope)),
                    ("effect".into(), json!(e.effect)),
                    ("state".into(), json!(if done { "done" } else { "started" })),
                    ("fence".into(), json!(e.entry.fence.0)),
                    ("recorded_at".into(), json_time(e.recorded_at)),
                    (
                        "expires_at".into(),
                        json!(e.expires_at.map_or_else(|| "-".to_owned(), rfc3339)),
                    ),
                ])
            })
            .collect())
    }

    /// Expired records and journal entries.
    pub async fn count_expired(&self) -> Result<(i64, i64), Failure> {
        let counts = self.inspector().count_expired().await?;
        Ok((counts.records as i64, counts.effects as i64))
    }

    /// The store's own drain of expired rows, `batch` at a time, calling `on_batch` with each
    /// batch's count as it goes.
    pub async fn purge_all(
        &self,
        batch: usize,
        on_batch: &mut (dyn FnMut(u64) + Send),
    ) -> Result<u64, idem_core::StoreError> {
        match self {
            Backend::Postgres { store, .. } => {
                store.purge_all_expired_reporting(batch, on_batch).await
            }
            Backend::Sqlite { store, .. } => {
                store.purge_all_expired_reporting(batch, on_batch).await
            }
            Backend::Redis { store } => store.purge_all_expired_reporting(batch, on_batch).await,
        }
    }

    /// The store's migrations.
    pub async fn migrate(&self) -> Result<(), idem_core::StoreError> {
        match self {
            // The records and the work queue: `idem jobs` reads the queue's table.
            Backend::Postgres { store, .. } => idem_queue::Queue::new(store).migrate().await,
            Backend::Sqlite { store, .. } => store.migrate().await,
            // Redis has no schema: nothing to migrate.
            Backend::Redis { .. } => Ok(()),
        }
    }

    /// What the store is, for messages.
    pub fn name(&self) -> String {
        match self {
            Backend::Postgres { schema, table, .. } => format!("\"{schema}\".\"{table}\""),
            Backend::Sqlite { table, .. } => format!("SQLite table \"{table}\""),
            Backend::Redis { .. } => "the Redis store (no schema)".to_owned(),
        }
    }

    /// The PostgreSQL store, for the work queue (which only it has).
    pub fn postgres(&self) -> Option<(&sqlx::PgPool, &PgStore, String)> {
        match self {
            Backend::Postgres {
                pool,
                store,
                schema,
                table,
            } => Some((pool, store, format!("\"{schema}\".\"{table}_queue\""))),
            Backend::Sqlite { .. } | Backend::Redis { .. } => None,
        }
    }

    /// Closes the connections.
    pub async fn close(&self) {
        match self {
            Backend::Postgres { pool, .. } => pool.close().await,
            Backend::Sqlite { store, .. } => store.pool().close().await,
            Backend::Redis { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::rfc3339;
    use std::time::{Duration, SystemTime};

    #[test]
    fn timestamps_are_rfc3339_in_utc() {
        let at = |us: u64| SystemTime::UNIX_EPOCH + Duration::from_micros(us);
        assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339(at(1_764_576_000_123_456)),
            "2025-12-01T08:00:00.123456Z"
        );
        assert_eq!(
            rfc3339(at(951_782_400_000_000)),
            "2000-02-29T00:00:00.000000Z"
        );
    }
}
