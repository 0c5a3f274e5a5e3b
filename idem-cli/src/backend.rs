//! The stores the command reads and edits, behind one set of operations: PostgreSQL
//! (`postgres://`), SQLite (`sqlite://PATH`) and Redis (`redis://`, a node or a cluster's
//! nodes). Each answers with the same [`RecordRow`]s, so
//! every command prints the same fields whatever the store.

use idem_core::Purge;
use idem_core::{Fence, Fenced, RecordState, Store};
use idem_store_postgres::sqlx::{self, postgres::PgRow, Row};
use idem_store_postgres::PgStore;
use idem_store_redis::{Inspected, RedisStore};
use idem_store_sqlite::SqliteStore;
use serde_json::{json, Map, Value};
use std::time::{SystemTime, UNIX_EPOCH};

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

fn micros_of(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// A Redis record as a row, judged against `now`.
fn redis_row(inspected: &Inspected, now: i64) -> RecordRow {
    let record = &inspected.record;
    let (state, completed_at, expires) = match &record.state {
        RecordState::InProgress { lease_expires_at } => {
            let expires = micros_of(*lease_expires_at);
            (
                if expires > now { "claimed" } else { "stale" },
                None,
                expires,
            )
        }
        RecordState::Completed {
            completed_at,
            expires_at,
            ..
        } => {
            let expires = micros_of(*expires_at);
            (
                if expires > now {
                    "completed"
                } else {
                    "expired"
                },
                Some(rfc3339(micros_of(*completed_at))),
                expires,
            )
        }
    };
    RecordRow {
        key: record.key.as_str().to_owned(),
        scope: record.key.scope().to_owned(),
        state,
        fence: record.fence.0 as i64,
        holder: inspected.holder.clone(),
        completed_at,
        expires_at: rfc3339(expires),
        left_s: (expires - now) as f64 / 1e6,
        fingerprint: record.fingerprint.as_ref().map(|f| f.as_str().to_owned()),
        output_bytes: inspected.output_bytes.map(|n| n as i64),
    }
}

fn redis_failed(e: idem_core::StoreError) -> sqlx::Error {
    sqlx::Error::Protocol(e.to_string())
}

fn scoped(key: &str, scope: &str) -> Result<idem_core::Key, sqlx::Error> {
    idem_core::Key::new(key)
        .and_then(|k| k.with_scope(scope.to_owned()))
        .map_err(|e| sqlx::Error::Protocol(e.to_string()))
}

/// A timestamp column as RFC 3339 text (UTC), in PostgreSQL.
fn pg_ts(column: &str) -> String {
    format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
}

/// Microseconds since the epoch as RFC 3339 text (UTC).
pub(crate) fn rfc3339(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

const PG_STATE: &str = "CASE WHEN completed_at IS NOT NULL THEN
        (CASE WHEN expires_at > now() THEN 'completed' ELSE 'expired' END)
    WHEN expires_at > now() THEN 'claimed' ELSE 'stale' END";

const SQLITE_STATE: &str = "CASE WHEN completed_us IS NOT NULL THEN
        (CASE WHEN expires_us > $0 THEN 'completed' ELSE 'expired' END)
    WHEN expires_us > $0 THEN 'claimed' ELSE 'stale' END";

fn state_name(state: &str) -> &'static str {
    match state {
        "claimed" => "claimed",
        "stale" => "stale",
        "completed" => "completed",
        _ => "expired",
    }
}

fn filter_name(state: Option<State>) -> Option<&'static str> {
    state.map(|s| match s {
        State::Claimed => "claimed",
        State::Stale => "stale",
        State::Completed => "completed",
    })
}

impl Backend {
    fn pg_records(schema: &str, table: &str) -> String {
        format!("\"{schema}\".\"{table}\"")
    }

    fn pg_columns() -> String {
        format!(
            "key, scope, fence, fingerprint, holder, {PG_STATE} AS state,
             {completed} AS completed_at, {expires} AS expires_at,
             extract(epoch FROM expires_at - now())::float8 AS left_s,
             octet_length(output)::bigint AS output_bytes",
            completed = pg_ts("completed_at"),
            expires = pg_ts("expires_at"),
        )
    }

    fn pg_row(row: &PgRow) -> RecordRow {
        RecordRow {
            key: row.get("key"),
            scope: row.get("scope"),
            state: state_name(&row.get::<String, _>("state")),
            fence: row.get("fence"),
            holder: row.get("holder"),
            completed_at: row.get("completed_at"),
            expires_at: row.get("expires_at"),
            left_s: row.get("left_s"),
            fingerprint: row.get("fingerprint"),
            output_bytes: row.get("output_bytes"),
        }
    }

    const SQLITE_COLUMNS: &'static str =
        "key, scope, fence, fingerprint, holder, completed_us, expires_us, length(output) AS output_bytes";

    fn sqlite_row(row: &sqlx::sqlite::SqliteRow, now: i64) -> RecordRow {
        let completed: Option<i64> = row.get("completed_us");
        let expires: i64 = row.get("expires_us");
        let state = match (completed, expires > now) {
            (Some(_), true) => "completed",
            (Some(_), false) => "expired",
            (None, true) => "claimed",
            (None, false) => "stale",
        };
        RecordRow {
            key: row.get("key"),
            scope: row.get("scope"),
            state,
            fence: row.get("fence"),
            holder: row.get("holder"),
            completed_at: completed.map(rfc3339),
            expires_at: rfc3339(expires),
            left_s: (expires - now) as f64 / 1e6,
            fingerprint: row.get("fingerprint"),
            output_bytes: row.get("output_bytes"),
        }
    }

    /// The records of `key` (in `scope`, or in every scope).
    pub async fn find(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<RecordRow>, sqlx::Error> {
        match self {
            Backend::Postgres {
                pool,
                schema,
                table,
                ..
            } => {
                let rows = sqlx::query(&format!(
                    "SELECT {} FROM {} WHERE key = $1 AND ($2::text IS NULL OR scope = $2) ORDER BY scope",
                    Self::pg_columns(),
                    Self::pg_records(schema, table)
                ))
                .bind(key)
                .bind(scope)
                .fetch_all(pool)
                .await?;
                Ok(rows.iter().map(Self::pg_row).collect())
            }
            Backend::Sqlite { store, table } => {
                let now = now_us();
                let rows = sqlx::query(&format!(
                    "SELECT {} FROM \"{table}\" WHERE key = $1 AND ($2 IS NULL OR scope = $2) ORDER BY scope",
                    Self::SQLITE_COLUMNS
                ))
                .bind(key)
                .bind(scope)
                .fetch_all(store.pool())
                .await?;
                Ok(rows.iter().map(|r| Self::sqlite_row(r, now)).collect())
            }
            Backend::Redis { store } => {
                let now = now_us();
                let found = match scope {
                    Some(scope) => store
                        .inspect(&scoped(key, scope)?)
                        .await
                        .map_err(redis_failed)?
                        .into_iter()
                        .collect(),
                    None => store
                        .records()
                        .await
                        .map_err(redis_failed)?
                        .into_iter()
                        .filter(|i| i.record.key.as_str() == key)
                        .collect::<Vec<_>>(),
                };
                let mut rows: Vec<_> = found.iter().map(|i| redis_row(i, now)).collect();
                rows.sort_by(|a, b| a.scope.cmp(&b.scope));
                Ok(rows)
            }
        }
    }

    /// Records, newest first.
    pub async fn list(
        &self,
        state: Option<State>,
        scope: Option<&str>,
        prefix: Option<&str>,
        limit: i64,
    ) -> Result<Vec<RecordRow>, sqlx::Error> {
        let state = filter_name(state);
        match self {
            Backend::Postgres {
                pool,
                schema,
                table,
                ..
            } => {
                let rows = sqlx::query(&format!(
                    "SELECT {} FROM {} WHERE ($1::text IS NULL OR {PG_STATE} = $1)
                       AND ($2::text IS NULL OR scope = $2) AND ($3::text IS NULL OR starts_with(key, $3))
                     ORDER BY coalesce(completed_at, expires_at) DESC LIMIT $4",
                    Self::pg_columns(),
                    Self::pg_records(schema, table)
                ))
                .bind(state)
                .bind(scope)
                .bind(prefix)
                .bind(limit)
                .fetch_all(pool)
                .await?;
                Ok(rows.iter().map(Self::pg_row).collect())
            }
            Backend::Sqlite { store, table } => {
                let now = now_us();
                let rows = sqlx::query(&format!(
                    "SELECT {} FROM \"{table}\" WHERE ($1 IS NULL OR {} = $1)
                       AND ($2 IS NULL OR scope = $2) AND ($3 IS NULL OR substr(key, 1, length($3)) = $3)
                     ORDER BY coalesce(completed_us, expires_us) DESC LIMIT $4",
                    Self::SQLITE_COLUMNS,
                    SQLITE_STATE.replace("$0", "$5")
                ))
                .bind(state)
                .bind(scope)
                .bind(prefix)
                .bind(limit)
                .bind(now)
                .fetch_all(store.pool())
                .await?;
                Ok(rows.iter().map(|r| Self::sqlite_row(r, now)).collect())
            }
            Backend::Redis { store } => {
                let now = now_us();
                let mut rows: Vec<RecordRow> = store
                    .records()
                    .await
                    .map_err(redis_failed)?
                    .iter()
                    .map(|i| redis_row(i, now))
                    .filter(|r| state.is_none_or(|s| r.state == s))
                    .filter(|r| scope.is_none_or(|s| r.scope == s))
                    .filter(|r| prefix.is_none_or(|p| r.key.starts_with(p)))
                    .collect();
                let newest = |r: &RecordRow| {
                    r.completed_at
                        .clone()
                        .unwrap_or_else(|| r.expires_at.clone())
                };
                rows.sort_by_key(|r| std::cmp::Reverse(newest(r)));
                rows.truncate(usize::try_from(limit).unwrap_or(0));
                Ok(rows)
            }
        }
    }

    /// Deletes an unfinished claim holding `fence`; how many rows went.
    pub async fn delete_claim(
        &self,
        key: &str,
        scope: &str,
        fence: i64,
    ) -> Result<u64, sqlx::Error> {
        let done = match self {
            Backend::Postgres { pool, schema, table, .. } => sqlx::query(&format!(
                "DELETE FROM {} WHERE key = $1 AND scope = $2 AND fence = $3 AND completed_at IS NULL",
                Self::pg_records(schema, table)
            ))
            .bind(key)
            .bind(scope)
            .bind(fence)
            .execute(pool)
            .await?
            .rows_affected(),
            Backend::Sqlite { store, table } => sqlx::query(&format!(
                "DELETE FROM \"{table}\" WHERE key = $1 AND scope = $2 AND fence = $3 AND completed_us IS NULL"
            ))
            .bind(key)
            .bind(scope)
            .bind(fence)
            .execute(store.pool())
            .await?
            .rows_affected(),
            Backend::Redis { store } => {
                let fenced = store
                    .release(&scoped(key, scope)?, Fence(fence as u64))
                    .await
                    .map_err(redis_failed)?;
                u64::from(fenced == Fenced::Applied)
            }
        };
        Ok(done)
    }

    /// Deletes a completed record; how many rows went.
    pub async fn delete_completed(&self, key: &str, scope: &str) -> Result<u64, sqlx::Error> {
        let done = match self {
            Backend::Postgres {
                pool,
                schema,
                table,
                ..
            } => sqlx::query(&format!(
                "DELETE FROM {} WHERE key = $1 AND scope = $2 AND completed_at IS NOT NULL",
                Self::pg_records(schema, table)
            ))
            .bind(key)
            .bind(scope)
            .execute(pool)
            .await?
            .rows_affected(),
            Backend::Sqlite { store, table } => sqlx::query(&format!(
                "DELETE FROM \"{table}\" WHERE key = $1 AND scope = $2 AND completed_us IS NOT NULL"
            ))
            .bind(key)
            .bind(scope)
            .execute(store.pool())
            .await?
            .rows_affected(),
            Backend::Redis { store } => u64::from(
                store
                    .forget(&scoped(key, scope)?)
                    .await
                    .map_err(redis_failed)?,
            ),
        };
        Ok(done)
    }

    /// The journal entries of `key`.
    pub async fn journal(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<Map<String, Value>>, sqlx::Error> {
        let entry = |scope: String,
                     effect: String,
                     done: bool,
                     fence: i64,
                     recorded: Option<String>,
                     expires: String| {
            Map::from_iter([
                ("scope".into(), json!(scope)),
                ("effect".into(), json!(effect)),
                ("state".into(), json!(if done { "done" } else { "started" })),
                ("fence".into(), json!(fence)),
                ("recorded_at".into(), json!(recorded)),
                ("expires_at".into(), json!(expires)),
            ])
        };
        match self {
            Backend::Postgres {
                pool,
                schema,
                table,
                ..
            } => {
                let rows = sqlx::query(&format!(
                    "SELECT scope, effect, state::int AS state, fence, {recorded} AS recorded_at,
                            {expires} AS expires_at
                     FROM \"{schema}\".\"{table}_effects\" WHERE key = $1 AND ($2::text IS NULL OR scope = $2)
                     ORDER BY recorded_at, effect",
                    recorded = pg_ts("recorded_at"),
                    expires = pg_ts("expires_at"),
                ))
                .bind(key)
                .bind(scope)
                .fetch_all(pool)
                .await?;
                Ok(rows
                    .iter()
                    .map(|r| {
                        entry(
                            r.get("scope"),
                            r.get("effect"),
                            r.get::<i32, _>("state") == 1,
                            r.get("fence"),
                            r.get("recorded_at"),
                            r.get("expires_at"),
                        )
                    })
                    .collect())
            }
            Backend::Sqlite { store, table } => {
                let rows = sqlx::query(&format!(
                    "SELECT scope, effect, state, fence, expires_us FROM \"{table}_effects\"
                     WHERE key = $1 AND ($2 IS NULL OR scope = $2) ORDER BY effect"
                ))
                .bind(key)
                .bind(scope)
                .fetch_all(store.pool())
                .await?;
                Ok(rows
                    .iter()
                    .map(|r| {
                        entry(
                            r.get("scope"),
                            r.get("effect"),
                            r.get::<i64, _>("state") == 1,
                            r.get("fence"),
                            None,
                            rfc3339(r.get("expires_us")),
                        )
                    })
                    .collect())
            }
            Backend::Redis { store } => {
                let scopes: Vec<String> = match scope {
                    Some(scope) => vec![scope.to_owned()],
                    None => self
                        .find(key, None)
                        .await?
                        .into_iter()
                        .map(|r| r.scope)
                        .collect(),
                };
                let mut entries = Vec::new();
                for scope in scopes {
                    let journal = store
                        .journal(&scoped(key, &scope)?)
                        .await
                        .map_err(redis_failed)?;
                    for (effect, e) in journal {
                        let done = e.state == idem_core::EffectState::Done;
                        entries.push(entry(
                            scope.clone(),
                            effect,
                            done,
                            e.fence.0 as i64,
                            None,
                            "-".into(),
                        ));
                    }
                }
                Ok(entries)
            }
        }
    }

    /// Expired records and journal entries.
    pub async fn count_expired(&self) -> Result<(i64, i64), sqlx::Error> {
        match self {
            Backend::Postgres {
                pool,
                schema,
                table,
                ..
            } => {
                // Every expired record is due (`purge_at` has passed: see the store's migration
                // 7), so the count reads the `purge_at` index, not the whole table.
                let row = sqlx::query(&format!(
                    "SELECT (SELECT count(*) FROM \"{schema}\".\"{table}\"
                             WHERE purge_at <= now() AND expires_at <= now()),
                            (SELECT count(*) FROM \"{schema}\".\"{table}_effects\" WHERE expires_at <= now())"
                ))
                .fetch_one(pool)
                .await?;
                Ok((row.get(0), row.get(1)))
            }
            Backend::Sqlite { store, table } => {
                let row = sqlx::query(&format!(
                    "SELECT (SELECT count(*) FROM \"{table}\" WHERE expires_us <= $1),
                            (SELECT count(*) FROM \"{table}_effects\" WHERE expires_us <= $1)"
                ))
                .bind(now_us())
                .fetch_one(store.pool())
                .await?;
                Ok((row.get(0), row.get(1)))
            }
            Backend::Redis { store } => {
                let now = now_us();
                let records = store.records().await.map_err(redis_failed)?;
                let expired = records
                    .iter()
                    .filter(|i| matches!(redis_row(i, now).state, "stale" | "expired"))
                    .count();
                // Journal entries are not counted here: Redis expires them by itself.
                Ok((expired as i64, 0))
            }
        }
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
            Backend::Postgres { store, .. } => store.migrate().await,
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

    #[test]
    fn timestamps_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339(1_764_576_000_123_456),
            "2025-12-01T08:00:00.123456Z"
        );
        assert_eq!(rfc3339(951_782_400_000_000), "2000-02-29T00:00:00.000000Z");
    }
}
