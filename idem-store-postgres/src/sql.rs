//! The statements, written once per store from its validated schema and table names.
//!
//! Every `Store` operation is one statement and one round trip; only the takeover of a lapsed
//! claim costs a second statement.

use crate::time::micros_sql;

/// Parameters, by position, of each statement:
/// claim/takeover: $1 key, $2 fingerprint, $3 lease (µs);
/// complete: $1 key, $2 fence, $3 output, $4 keep (µs);
/// release: $1 key, $2 fence; renew: $1 key, $2 fence, $3 lease (µs);
/// get: $1 key; purge: $1 limit.
#[derive(Debug)]
pub(crate) struct Statements {
    pub table: String,
    pub claim: String,
    pub takeover: String,
    pub complete: String,
    pub release: String,
    pub renew: String,
    pub get: String,
    pub purge: String,
}

impl Statements {
    pub fn new(schema: &str, table: &str) -> Statements {
        let t = format!("\"{schema}\".\"{table}\"");
        let seq = format!("'\"{schema}\".\"{table}_fence\"'");
        let expires = micros_sql("expires_at");
        let completed = micros_sql("completed_at");
        Statements {
            // A fresh key is inserted; an existing key is only read (no row lock, no WAL, unlike
            // `ON CONFLICT DO UPDATE`). `existing` sees the statement's snapshot, so a row that
            // another claim committed meanwhile yields no row at all, and the caller retries.
            claim: format!(
                "WITH existing AS (
                    SELECT fence, fingerprint, completed_at, expires_at, output,
                           expires_at <= now() AS lapsed
                    FROM {t} WHERE key = $1
                 ), inserted AS (
                    INSERT INTO {t} (key, fence, fingerprint, expires_at)
                    SELECT $1, nextval({seq}), $2, now() + $3 * interval '1 microsecond'
                    WHERE NOT EXISTS (SELECT 1 FROM existing)
                    ON CONFLICT (key) DO NOTHING
                    RETURNING fence, expires_at
                 )
                 SELECT true AS inserted, fence, NULL::text AS fingerprint,
                        NULL::bigint AS completed_us, {expires} AS expires_us,
                        NULL::bytea AS output, false AS lapsed
                 FROM inserted
                 UNION ALL
                 SELECT false, fence, fingerprint, {completed}, {expires}, output, lapsed
                 FROM existing"
            ),
            // Only for a lapsed lease or an expired completion. The `WHERE` is re-checked on the
            // newest row version, so of two racing takeovers exactly one updates.
            takeover: format!(
                "UPDATE {t}
                 SET fence = nextval({seq}), fingerprint = $2, completed_at = NULL, output = NULL,
                     expires_at = now() + $3 * interval '1 microsecond'
                 WHERE key = $1 AND expires_at <= now()
                 RETURNING fence, {expires}"
            ),
            complete: format!(
                "UPDATE {t}
                 SET completed_at = coalesce(completed_at, now()),
                     expires_at = coalesce(completed_at, now()) + $4 * interval '1 microsecond',
                     output = $3
                 WHERE key = $1 AND fence = $2"
            ),
            release: format!(
                "DELETE FROM {t} WHERE key = $1 AND fence = $2 AND completed_at IS NULL"
            ),
            renew: format!(
                "UPDATE {t} SET expires_at = now() + $3 * interval '1 microsecond'
                 WHERE key = $1 AND fence = $2 AND completed_at IS NULL"
            ),
            get: format!(
                "SELECT fence, fingerprint, {completed}, {expires}, output FROM {t} WHERE key = $1"
            ),
            // Bounded batches in index order; rows locked by a concurrent claim are skipped.
            purge: format!(
                "DELETE FROM {t} WHERE key IN (
                    SELECT key FROM {t} WHERE expires_at <= now()
                    ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
                 )"
            ),
            table: t,
        }
    }
}
