//! Every statement of a store, written once from its validated table name. Times are integer
//! microseconds since the Unix epoch, from the clock of the process that runs the statement
//! (the processes sharing a database file share a machine, and so a clock).

use idem_sql::InspectSql;

/// The statements on one store's tables.
#[derive(Debug)]
pub(crate) struct Sql {
    /// `$1` key, `$2` scope.
    pub get: String,
    /// Next fence: one counter for the table, so a released or purged key claimed again still
    /// gets a fence larger than any earlier one.
    pub next_fence: String,
    /// Takes the database's write lock and changes nothing: the first statement of every
    /// write transaction (see `write_transaction`).
    pub lock: String,
    /// `$1` key, `$2` scope, `$3` fence, `$4` fingerprint, `$5` token, `$6` expires, `$7`
    /// holder.
    pub insert: String,
    /// Same parameters: a takeover of a lapsed claim or an expired completion.
    pub take_over: String,
    /// `$1` key, `$2` scope, `$3` fence, `$4` now, `$5` keep (µs), `$6` output.
    pub complete: String,
    /// `$1` key, `$2` scope, `$3` fence.
    pub release: String,
    /// `$1` key, `$2` scope, `$3` fence, `$4` expires.
    pub renew: String,
    /// `$1` now, `$2` limit.
    pub purge_records: String,
    /// `$1` now, `$2` limit.
    pub purge_effects: String,
    /// `$1` key, `$2` scope, `$3` effect, `$4` now.
    pub effect: String,
    /// `$1` key, `$2` scope, `$3` fence: the record is held by that fence, in progress?
    pub holder: String,
    /// `$1` key, `$2` scope, `$3` effect, `$4` state, `$5` output, `$6` fence, `$7` now,
    /// `$8` expires. Never over a done entry that has not expired.
    pub record_effect: String,
    /// The operator's statements, in the order `idem_sql` binds them (the clock last).
    pub inspect: InspectSql,
    /// The schema, version 1.
    pub create: String,
    /// Version 2: who holds a claim (`host:pid`, `idem_core::holder`).
    pub add_holder: String,
}

impl Sql {
    pub fn new(table: &str) -> Sql {
        let t = format!("\"{table}\"");
        let e = format!("\"{table}_effects\"");
        let f = format!("\"{table}_fence\"");
        let inspected = "key, scope, fence, fingerprint, holder, completed_us, expires_us,
                         length(output)";
        let status = "CASE WHEN completed_us IS NOT NULL THEN
                (CASE WHEN expires_us > $5 THEN 'completed' ELSE 'expired' END)
            WHEN expires_us > $5 THEN 'claimed' ELSE 'stale' END";
        // The inner range reads at most `$7` rows of the primary key; the outer filter stops
        // it as soon as the page is full. The clock is `$8`.
        let page = |from: &str| {
            format!(
                "SELECT {inspected}
                 FROM (SELECT * FROM {t} WHERE (key, scope) {from} ($5, $6)
                       ORDER BY key, scope LIMIT $7)
                 WHERE ($1 IS NULL OR {status} = $1) AND ($2 IS NULL OR scope = $2)
                   AND ($3 IS NULL OR substr(key, 1, length($3)) = $3)
                 ORDER BY key, scope LIMIT $4",
                status = status.replace("$5", "$8"),
            )
        };
        let scan_end = |from: &str| {
            format!(
                "SELECT key, scope FROM {t} WHERE (key, scope) {from} ($1, $2)
                 ORDER BY key, scope LIMIT 1 OFFSET $3"
            )
        };
        Sql {
            inspect: InspectSql {
                find: format!(
                    "SELECT {inspected} FROM {t}
                     WHERE key = $1 AND ($2 IS NULL OR scope = $2) ORDER BY scope"
                ),
                list: format!(
                    "SELECT {inspected} FROM {t}
                     WHERE ($1 IS NULL OR {status} = $1) AND ($2 IS NULL OR scope = $2)
                       AND ($3 IS NULL OR substr(key, 1, length($3)) = $3)
                     ORDER BY coalesce(completed_us, expires_us) DESC LIMIT $4"
                ),
                page_from: page(">="),
                page_after: page(">"),
                scan_end_from: scan_end(">="),
                scan_end_after: scan_end(">"),
                counts: format!(
                    "SELECT scope, {status}, count(*)
                     FROM (SELECT scope, completed_us, expires_us FROM {t} LIMIT $1)
                     GROUP BY 1, 2 ORDER BY 1, 2",
                    status = status.replace("$5", "$2"),
                ),
                completed_per_minute: format!(
                    "SELECT completed_us / 60000000 * 60000000, count(*) FROM {t}
                     WHERE completed_us >= $1 GROUP BY 1 ORDER BY 1"
                ),
                release_lapsed: format!(
                    "DELETE FROM {t} WHERE key = $1 AND scope = $2 AND fence = $3
                       AND completed_us IS NULL AND expires_us <= $4
                     RETURNING 1"
                ),
                forget: format!(
                    "DELETE FROM {t} WHERE key = $1 AND scope = $2 AND completed_us IS NOT NULL
                     RETURNING 1"
                ),
                journal: format!(
                    "SELECT scope, effect, state, fence, output, NULL, expires_us FROM {e}
                     WHERE key = $1 AND ($2 IS NULL OR scope = $2) ORDER BY effect"
                ),
                count_expired: format!(
                    "SELECT (SELECT count(*) FROM {t} WHERE expires_us <= $1),
                            (SELECT count(*) FROM {e} WHERE expires_us <= $1)"
                ),
            },
            get: format!(
                "SELECT fence, fingerprint, token, completed_us, expires_us, output
                 FROM {t} WHERE key = $1 AND scope = $2"
            ),
            next_fence: format!("UPDATE {f} SET value = value + 1 WHERE id = 1 RETURNING value"),
            lock: crate::write_transaction::lock(&f),
            insert: format!(
                "INSERT INTO {t} (key, scope, fence, fingerprint, token, completed_us, expires_us,
                                  output, holder)
                 VALUES ($1, $2, $3, $4, $5, NULL, $6, NULL, $7)"
            ),
            take_over: format!(
                "UPDATE {t} SET fence = $3, fingerprint = $4, token = $5, completed_us = NULL,
                                expires_us = $6, output = NULL, holder = $7
                 WHERE key = $1 AND scope = $2"
            ),
            complete: format!(
                "UPDATE {t} SET completed_us = coalesce(completed_us, $4),
                                expires_us = coalesce(completed_us, $4) + $5, output = $6
                 WHERE key = $1 AND scope = $2 AND fence = $3"
            ),
            release: format!(
                "DELETE FROM {t}
                 WHERE key = $1 AND scope = $2 AND fence = $3 AND completed_us IS NULL"
            ),
            renew: format!(
                "UPDATE {t} SET expires_us = $4
                 WHERE key = $1 AND scope = $2 AND fence = $3 AND completed_us IS NULL"
            ),
            purge_records: format!(
                "DELETE FROM {t} WHERE (key, scope) IN (
                     SELECT key, scope FROM {t} WHERE expires_us <= $1
                     ORDER BY expires_us LIMIT $2)"
            ),
            purge_effects: format!(
                "DELETE FROM {e} WHERE (key, scope, effect) IN (
                     SELECT key, scope, effect FROM {e} WHERE expires_us <= $1
                     ORDER BY expires_us LIMIT $2)"
            ),
            effect: format!(
                "SELECT state, output, fence FROM {e}
                 WHERE key = $1 AND scope = $2 AND effect = $3 AND expires_us > $4"
            ),
            holder: format!(
                "SELECT 1 FROM {t}
                 WHERE key = $1 AND scope = $2 AND fence = $3 AND completed_us IS NULL"
            ),
            record_effect: format!(
                "INSERT INTO {e} AS j (key, scope, effect, state, output, fence, expires_us)
                 VALUES ($1, $2, $3, $4, $5, $6, $8)
                 ON CONFLICT (key, scope, effect) DO UPDATE
                 SET state = excluded.state, output = excluded.output, fence = excluded.fence,
                     expires_us = excluded.expires_us
                 WHERE j.state <> 1 OR j.expires_us <= $7"
            ),
            create: format!(
                "CREATE TABLE {t} (
                     key          TEXT    NOT NULL,
                     scope        TEXT    NOT NULL,
                     fence        INTEGER NOT NULL,
                     fingerprint  TEXT,
                     token        INTEGER,
                     -- NULL while the work is in progress.
                     completed_us INTEGER,
                     -- In progress: when the lease lapses. Completed: when `keep` ends.
                     expires_us   INTEGER NOT NULL,
                     output       BLOB,
                     PRIMARY KEY (key, scope)
                 ) WITHOUT ROWID;
                 CREATE INDEX \"{table}_expires\" ON {t} (expires_us);
                 CREATE TABLE {f} (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL);
                 INSERT INTO {f} (id, value) VALUES (1, 0);
                 CREATE TABLE {e} (
                     key        TEXT    NOT NULL,
                     scope      TEXT    NOT NULL,
                     effect     TEXT    NOT NULL,
                     state      INTEGER NOT NULL,
                     output     BLOB,
                     fence      INTEGER NOT NULL,
                     expires_us INTEGER NOT NULL,
                     PRIMARY KEY (key, scope, effect)
                 ) WITHOUT ROWID;
                 CREATE INDEX \"{table}_effects_expires\" ON {e} (expires_us);"
            ),
            add_holder: format!("ALTER TABLE {t} ADD COLUMN holder TEXT"),
        }
    }
}
