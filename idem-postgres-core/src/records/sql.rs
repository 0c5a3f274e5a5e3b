//! The records table's SQL and its parameters' encoding, in one home: the SQL written once per store
//! from its validated schema and table names.
//!
//! Every `Store` operation is one statement and one round trip; only the takeover of a lapsed
//! claim costs a second statement.
//!
//! This is also the narrow interface through which a crate that builds on the store (the work
//! queue) reaches the records of its rows: it embeds [`RecordsSql::complete_many`] in its own
//! statements, and asks for what a job's record needs beyond it ([`RecordsSql::unheld`],
//! [`RecordsSql::hold`], [`RecordsSql::held_by_another`], [`RecordsSql::insert_completed`]).
//! No other file spells the records table's SQL.

use crate::time::{batch_start_sql, micros_sql};
use idem_sql::InspectSql;

/// Parameters, by position, of each statement:
/// claim: $1 key, $2 fingerprint, $3 lease (µs), $4 the claim's token (or NULL), $5 scope;
/// claim_completed: the claim's, but $3 the completion's keep (µs);
/// takeover: the claim's, and $6 the scope of the record the claim found;
/// (A record in the scope `''`, written before scopes existed, counts in every scope.)
/// complete: $1 key, $2 fence, $3 output, $4 keep (µs);
/// release: $1 key, $2 fence; renew: $1 key, $2 fence, $3 lease (µs);
/// get: $1 key; purge: $1 and $2 limits, $3 and $4 where the previous batch of the same drain
/// ended (epoch µs, or NULL for the start); look_up: $1 key, $2 scope.
/// claim_many: the claim's parameters as arrays, one element per record ($1 keys, $2 scopes,
/// $3 fingerprints, $4 leases, $5 tokens); complete_many: $1 keys, $2 fences, $3 outputs,
/// $4 keeps.
#[derive(Debug)]
pub struct RecordsSql {
    /// The quoted, schema-qualified table name.
    pub table: String,
    /// The quoted fence sequence name, as a `nextval` argument.
    seq: String,
    pub(crate) claim: String,
    pub(crate) claim_completed: String,
    pub(crate) claim_many: String,
    pub(crate) takeover: String,
    pub(crate) complete: String,
    /// `complete` inside a transaction: `keep` counts from this statement, not from the
    /// transaction's start (`now()`), so a body that ran long does not commit a record whose
    /// `keep` has run out.
    pub(crate) complete_in_transaction: String,
    pub(crate) complete_many: String,
    pub(crate) release: String,
    pub(crate) renew: String,
    pub(crate) get: String,
    pub(crate) look_up: String,
    pub(crate) purge: String,
    /// The operator's statements (`inspect.rs`), in the order `idem_sql` binds them: through
    /// the pool, not on the hot path.
    pub(crate) inspect: InspectSql,
    pub(crate) effect: String,
    pub(crate) record_effect: String,
    /// A block of [`FENCE_BLOCK`](crate::fences::FENCE_BLOCK) fences from the sequence.
    pub(crate) fence_block: String,
    /// Prepares, on a connection, the claim of a fresh key in a transactional call: it writes
    /// the key's record ($1 key, $2 scope, $3 fence, $4 fingerprint, $6 token, $7 holder),
    /// completed and kept for $5 µs, and fails (dividing by the zero records it wrote) when the
    /// key has a record in its scope, or one from before scopes, so that the transaction it is
    /// sent in is open exactly when the key was fresh (`fresh_claim.rs`).
    pub(crate) claim_fresh_prepare: String,
    /// The name [`claim_fresh_prepare`](Self::claim_fresh_prepare) prepares.
    fresh_claim: String,
}

/// The columns a claim of one key writes, in the order of its `SELECT`: the claim in lease and
/// transactional mode, and the one sent with a BEGIN ([`RecordsSql::claim_fresh_prepare`]).
const CLAIM_COLUMNS: &str =
    "key, scope, fence, fingerprint, completed_at, expires_at, purge_at, token, holder";

/// The condition that finds the rows of `table` (an alias) whose keys are in `keys` (an array)
/// and pairs each with the entry of `batch` (an alias of those keys unnested) for its key.
///
/// The rows are found by `key = ANY(keys)`, an index lookup whatever the plan, and paired
/// comparing keys in the "C" collation (bytes, as the default collation's equality does),
/// which the index cannot serve. Paired by plain `key = batch.key`, the planner could look
/// each row up by that join in a loop over the batch instead: with `ANY(keys)` beside it (a
/// generic plan made without statistics, on a table that grew fast since it was created), the
/// whole array is then sorted and scanned again for each of its keys, n² index descents; with
/// the join alone (on a table analyzed empty), the whole primary key is read.
/// `tests/plans.rs` checks both states.
pub fn batch_rows(table: &str, keys: &str, batch: &str) -> String {
    format!("{table}.key = ANY({keys}) AND {table}.key = {batch}.key COLLATE \"C\"")
}

/// The name of the prepared statement of [`RecordsSql::claim_fresh_prepare`] for the table
/// `schema.table`. A connection held from the pool may go back to it when its store is
/// dropped, and serve another store next (another table, or a table of the same name in
/// another schema): the name is the table's, so a store never executes a claim another store
/// prepared. (A hash: a prepared statement's name is cut at 63 bytes.)
fn fresh_claim_name(schema: &str, table: &str) -> String {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same name for the same table in every process.
    let mut hasher = std::hash::DefaultHasher::new();
    (schema, table).hash(&mut hasher);
    format!("idem_fresh_claim_{:016x}", hasher.finish())
}

impl RecordsSql {
    pub(crate) fn new(schema: &str, table: &str) -> RecordsSql {
        let t = format!("\"{schema}\".\"{table}\"");
        let e = format!("\"{schema}\".\"{table}_effects\"");
        let seq = format!("'\"{schema}\".\"{table}_fence\"'");
        let fresh_claim = fresh_claim_name(schema, table);
        let expires = micros_sql("expires_at");
        let completed = micros_sql("completed_at");
        // Where a purge batch starts (see `purge`).
        let (after_3, after_4) = (batch_start_sql(3), batch_start_sql(4));
        let (due_end, effects_end) = (micros_sql("max(purge_at)"), micros_sql("max(expires_at)"));
        // The claim, inserting a fresh key with `completed_at` (NULL, or now) and `expires_at`
        // and `purge_at` $3 µs after now (the lease, or a completion's keep).
        let claim = |completed_at: &str| {
            format!(
                "WITH existing AS (
                    SELECT fence, fingerprint, completed_at, expires_at, output,
                           expires_at <= now() AS lapsed, token, scope
                    FROM {t} WHERE key = $1 AND scope IN ($5, '')
                    ORDER BY scope DESC LIMIT 1
                 ), inserted AS (
                    INSERT INTO {t} ({CLAIM_COLUMNS})
                    SELECT $1, $5, nextval({seq}), $2, {completed_at},
                           now() + $3 * interval '1 microsecond',
                           now() + $3 * interval '1 microsecond', $4, $6
                    WHERE NOT EXISTS (SELECT 1 FROM existing)
                    ON CONFLICT (key, scope) DO NOTHING
                    RETURNING fence, expires_at
                 )
                 SELECT true AS inserted, fence, NULL::text AS fingerprint,
                        NULL::bigint AS completed_us, {expires} AS expires_us,
                        NULL::bytea AS output, false AS lapsed, $4::bigint AS token,
                        $5::text AS scope
                 FROM inserted
                 UNION ALL
                 SELECT false, fence, fingerprint, {completed}, {expires}, output, lapsed,
                        token, scope
                 FROM existing"
            )
        };
        let status = "CASE WHEN completed_at IS NOT NULL THEN
                (CASE WHEN expires_at > now() THEN 'completed' ELSE 'expired' END)
            WHEN expires_at > now() THEN 'claimed' ELSE 'stale' END";
        let inspected = format!(
            "key, scope, fence, fingerprint, holder, {completed}, {expires},
             octet_length(output)::bigint"
        );
        // The inner range reads at most `$7` rows of the primary key; the outer filter stops it
        // as soon as the page is full (the executor pulls rows one by one), so an unfiltered
        // page still reads only its own rows.
        let page = |from: &str| {
            format!(
                "SELECT {inspected}
                 FROM (SELECT * FROM {t} WHERE (key, scope) {from} ($5::text, $6::text)
                       ORDER BY key, scope LIMIT $7) AS t
                 WHERE ($1::text IS NULL OR {status} = $1) AND ($2::text IS NULL OR scope = $2)
                   AND ($3::text IS NULL OR starts_with(key, $3))
                 ORDER BY key, scope LIMIT $4"
            )
        };
        let scan_end = |from: &str| {
            format!(
                "SELECT key, scope FROM {t} WHERE (key, scope) {from} ($1::text, $2::text)
                 ORDER BY key, scope OFFSET $3 LIMIT 1"
            )
        };
        let inspect = InspectSql {
            find: format!(
                "SELECT {inspected} FROM {t}
                 WHERE key = $1 AND ($2::text IS NULL OR scope = $2) ORDER BY scope"
            ),
            list: format!(
                "SELECT {inspected} FROM {t}
                 WHERE ($1::text IS NULL OR {status} = $1) AND ($2::text IS NULL OR scope = $2)
                   AND ($3::text IS NULL OR starts_with(key, $3))
                 ORDER BY coalesce(completed_at, expires_at) DESC LIMIT $4"
            ),
            // Keyset paging: `(key, scope) > (..)` is a range of the primary key, so the plan
            // walks the index from there and stops when the page is full (`tests/plans.rs`).
            page_from: page(">="),
            page_after: page(">"),
            scan_end_from: scan_end(">="),
            scan_end_after: scan_end(">"),
            counts: format!(
                "SELECT scope, {status}, count(*)
                 FROM (SELECT scope, completed_at, expires_at FROM {t} LIMIT $1) AS read
                 GROUP BY 1, 2 ORDER BY 1, 2"
            ),
            completed_per_minute: format!(
                "SELECT {minute}, count(*) FROM {t}
                 WHERE completed_at >= to_timestamp($1::bigint / 1000000.0)
                 GROUP BY 1 ORDER BY 1",
                minute = micros_sql("date_trunc('minute', completed_at)"),
            ),
            release_lapsed: format!(
                "DELETE FROM {t}
                 WHERE key = $1 AND scope = $2 AND fence = $3 AND completed_at IS NULL
                   AND expires_at <= now()
                 RETURNING 1"
            ),
            forget: format!(
                "DELETE FROM {t} WHERE key = $1 AND scope = $2 AND completed_at IS NOT NULL
                 RETURNING 1"
            ),
            journal: format!(
                "SELECT scope, effect, state::int, fence, output, {recorded}, {expires}
                 FROM {e} WHERE key = $1 AND ($2::text IS NULL OR scope = $2)
                 ORDER BY recorded_at, effect",
                recorded = micros_sql("recorded_at"),
            ),
            // Every expired record is due (its `purge_at` has passed: migration 7), so the
            // count reads the `purge_at` index, not the whole table.
            count_expired: format!(
                "SELECT (SELECT count(*) FROM {t} WHERE purge_at <= now() AND expires_at <= now()),
                        (SELECT count(*) FROM {e} WHERE expires_at <= now())"
            ),
        };
        RecordsSql {
            inspect,
            // A fresh key is inserted; an existing key is only read (no row lock, no WAL, unlike
            // `ON CONFLICT DO UPDATE`). `existing` sees the statement's snapshot, so a row that
            // another claim committed meanwhile yields no row at all, and the caller retries.
            claim: claim("NULL"),
            // The claim of a transactional call: a fresh key is inserted as completed, kept
            // for $3 (µs), since nothing outside the transaction sees it before the commit,
            // which then completes the call (see transaction.rs).
            claim_completed: claim("now()"),
            // The claim for many records at once (each at most once), answering a row per
            // record with its position `i` (from 1) first. Each record is looked up on its own
            // (`LATERAL .. LIMIT 1`, an index lookup whatever the plan), and fresh keys are
            // inserted in key order, so two batches inserting the same keys wait on each other
            // in one order and never deadlock. A record with no row in the answer raced a
            // concurrent insert; its caller claims it again on its own.
            claim_many: format!(
                "WITH req AS (
                    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[],
                                         $5::bigint[])
                    WITH ORDINALITY AS r(key, scope, fingerprint, lease, token, i)
                 ), existing AS (
                    SELECT req.i, found.*
                    FROM req CROSS JOIN LATERAL (
                        SELECT fence, fingerprint, completed_at, expires_at, output,
                               expires_at <= now() AS lapsed, token, scope
                        FROM {t} WHERE key = req.key AND scope IN (req.scope, '')
                        ORDER BY scope DESC LIMIT 1
                    ) AS found
                 ), inserted AS (
                    INSERT INTO {t} (key, scope, fence, fingerprint, expires_at, purge_at, token,
                                     holder)
                    SELECT key, scope, nextval({seq}), fingerprint,
                           now() + lease * interval '1 microsecond',
                           now() + lease * interval '1 microsecond', token, $6::text
                    FROM req WHERE NOT EXISTS (SELECT 1 FROM existing WHERE existing.i = req.i)
                    ORDER BY key, scope
                    ON CONFLICT (key, scope) DO NOTHING
                    RETURNING key, scope, fence, expires_at
                 )
                 SELECT req.i, true AS inserted, inserted.fence, NULL::text AS fingerprint,
                        NULL::bigint AS completed_us, {ins_expires} AS expires_us,
                        NULL::bytea AS output, false AS lapsed, req.token, req.scope
                 FROM inserted JOIN req ON req.key = inserted.key AND req.scope = inserted.scope
                 UNION ALL
                 SELECT i, false, fence, fingerprint, {completed}, {expires}, output, lapsed,
                        token, scope
                 FROM existing",
                ins_expires = micros_sql("inserted.expires_at"),
            ),
            // Only for a lapsed lease or an expired completion. The `WHERE` is re-checked on the
            // newest row version, so of two racing takeovers exactly one updates.
            takeover: format!(
                "UPDATE {t}
                 SET fence = nextval({seq}), fingerprint = $2, completed_at = NULL, output = NULL,
                     expires_at = now() + $3 * interval '1 microsecond',
                     purge_at = now() + $3 * interval '1 microsecond', token = $4, scope = $5,
                     holder = $7
                 WHERE key = $1 AND scope = $6 AND expires_at <= now()
                 RETURNING fence, {expires}"
            ),
            // `purge_at` keeps its value unless `keep` ends first: an index covers it, and a
            // completion that changes no indexed column is a HOT update (see 0007_purge_at.sql).
            complete: format!(
                "UPDATE {t}
                 SET completed_at = coalesce(completed_at, now()),
                     expires_at = coalesce(completed_at, now()) + $4 * interval '1 microsecond',
                     purge_at = least(purge_at,
                                      coalesce(completed_at, now()) + $4 * interval '1 microsecond'),
                     output = $3
                 WHERE key = $1 AND fence = $2"
            ),
            complete_in_transaction: format!(
                "UPDATE {t}
                 SET completed_at = statement_timestamp(),
                     expires_at = statement_timestamp() + $4 * interval '1 microsecond',
                     purge_at = greatest(purge_at,
                                         statement_timestamp() + $4 * interval '1 microsecond'),
                     output = $3
                 WHERE key = $1 AND fence = $2"
            ),
            // The completion of many claims at once (each record at most once), answering the
            // position `i` (from 1) of each one that applied. The records are found by key
            // (`batch_rows`), then matched to their fences.
            complete_many: format!(
                "UPDATE {t} AS t
                 SET completed_at = coalesce(t.completed_at, now()),
                     expires_at = coalesce(t.completed_at, now()) + c.keep * interval '1 microsecond',
                     purge_at = least(t.purge_at,
                                      coalesce(t.completed_at, now()) + c.keep * interval '1 microsecond'),
                     output = c.output
                 FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::bigint[])
                      WITH ORDINALITY AS c(key, fence, output, keep, i)
                 WHERE {} AND t.fence = c.fence
                 RETURNING c.i",
                batch_rows("t", "$1::text[]", "c"),
            ),
            release: format!(
                "DELETE FROM {t} WHERE key = $1 AND fence = $2 AND completed_at IS NULL"
            ),
            renew: format!(
                "UPDATE {t} SET expires_at = now() + $3 * interval '1 microsecond'
                 WHERE key = $1 AND fence = $2 AND completed_at IS NULL"
            ),
            // $1 key, $2 scope.
            get: format!(
                "SELECT fence, fingerprint, {completed}, {expires}, output FROM {t}
                 WHERE key = $1 AND scope IN ($2, '') ORDER BY scope DESC LIMIT 1"
            ),
            // The claim's reading of an existing record, without its insert and outside any
            // transaction: the same columns as the claim's row (see `ClaimRow`).
            look_up: format!(
                "SELECT false, fence, fingerprint, {completed}, {expires}, output,
                        expires_at <= now(), token, scope
                 FROM {t} WHERE key = $1 AND scope IN ($2, '') ORDER BY scope DESC LIMIT 1"
            ),
            // Bounded batches in `purge_at` order, records and journal entries in one statement;
            // rows locked by a concurrent claim are skipped. Of the due records, the expired ones
            // are deleted and the others are filed again at their `expires_at` (0007_purge_at.sql);
            // the second column counts those. A row is deleted (or filed again) by its `ctid`,
            // which the batch's own row lock keeps: no join, and a TID scan on the store's
            // connections (one that allows sequential scans reads a table the planner thinks tiny
            // whole). Matching the batch back by key and scope would be a join, and the generic
            // plan the store's connections keep, not knowing the batch's size, may compare each row
            // with the whole batch: quadratic in the batch's size. A row that was updated after the
            // statement's snapshot and before the batch locked it is locked at its new version,
            // which the statement does not see: it is left as it is, due for the next drain.
            // $1 the records' limit, $2 the journal entries'.
            //
            // A drain's batches each start where the one before ended ($3, $4: the latest
            // `purge_at` and journal `expires_at` it took, returned as the last two columns), not
            // at the index's start: the entries of the rows a drain deleted stay in the index until
            // VACUUM, and a batch that started at the start would read past all of them, so each
            // batch of a long drain would be slower than the one before. One microsecond before
            // that end, so rows that share it (a batched claim's records do) and a rounding of the
            // epoch are never passed over. What a drain passes over (a row locked when its batch
            // came, a completion that moved `purge_at` back) is due for the next drain, which
            // starts at the start.
            purge: format!(
                "WITH due AS (
                    SELECT ctid, purge_at, expires_at <= now() AS expired FROM {t}
                    WHERE purge_at <= now() AND purge_at >= {after_3}
                    ORDER BY purge_at LIMIT $1 FOR UPDATE SKIP LOCKED
                 ), records AS (
                    DELETE FROM {t} WHERE ctid = ANY(ARRAY(SELECT ctid FROM due WHERE expired))
                    RETURNING 1
                 ), refiled AS (
                    UPDATE {t} AS t SET purge_at = t.expires_at
                    WHERE ctid = ANY(ARRAY(SELECT ctid FROM due WHERE NOT expired))
                    RETURNING 1
                 ), due_effects AS (
                    SELECT ctid, expires_at FROM {e}
                    WHERE expires_at <= now() AND expires_at >= {after_4}
                    ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
                 ), effects AS (
                    DELETE FROM {e} WHERE ctid = ANY(ARRAY(SELECT ctid FROM due_effects))
                    RETURNING 1
                 )
                 SELECT (SELECT count(*) FROM records), (SELECT count(*) FROM refiled),
                        (SELECT count(*) FROM effects),
                        (SELECT {due_end} FROM due), (SELECT {effects_end} FROM due_effects)"
            ),
            // $1 key, $2 effect, $3 scope.
            effect: format!(
                "SELECT state, output, fence FROM {e}
                 WHERE key = $1 AND scope IN ($3, '') AND effect = $2 AND expires_at > now()
                 ORDER BY scope DESC LIMIT 1"
            ),
            // $1 key, $2 fence, $3 effect, $4 state, $5 output, $6 keep (µs). Writes only while
            // the key's record holds the fence and is in progress (`FOR SHARE` makes a
            // concurrent takeover wait, or this wait for it), and never over a done entry.
            record_effect: format!(
                "WITH holder AS (
                    SELECT scope FROM {t}
                    WHERE key = $1 AND fence = $2 AND completed_at IS NULL FOR SHARE
                 )
                 INSERT INTO {e} AS j (key, scope, effect, state, output, fence, expires_at)
                 SELECT $1, holder.scope, $3, $4, $5, $2, now() + $6 * interval '1 microsecond'
                 FROM holder
                 ON CONFLICT (key, scope, effect) DO UPDATE
                 SET state = excluded.state, output = excluded.output, fence = excluded.fence,
                     recorded_at = now(), expires_at = excluded.expires_at
                 WHERE j.state <> 1 OR j.expires_at <= now()
                 RETURNING 1"
            ),
            claim_fresh_prepare: format!(
                "PREPARE {fresh_claim}(text, text, bigint, text, bigint, bigint, text) AS
                 WITH inserted AS (
                    INSERT INTO {t} ({CLAIM_COLUMNS})
                    SELECT $1, $2, $3, $4, now(), now() + $5 * interval '1 microsecond',
                           now() + $5 * interval '1 microsecond', $6, $7
                    WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE key = $1 AND scope = '')
                    ON CONFLICT (key, scope) DO NOTHING
                    RETURNING 1
                 )
                 SELECT 1 / (SELECT count(*)::int FROM inserted)"
            ),
            fresh_claim,
            fence_block: format!(
                "SELECT nextval({seq}) FROM generate_series(1, {})",
                crate::fences::FENCE_BLOCK
            ),
            table: t,
            seq,
        }
    }

    /// `BEGIN`, then the claim of a fresh key in a transactional call, as one simple-query text
    /// (see `fresh_claim.rs`): it executes [`claim_fresh_prepare`](Self::claim_fresh_prepare)'s
    /// statement with `args` (SQL constants the caller made safe: key, scope, fence,
    /// fingerprint, keep in µs, token, holder), so it fails with `26000` on a connection that
    /// has not prepared it.
    pub(crate) fn claim_fresh(&self, args: &str) -> String {
        format!("BEGIN; EXECUTE {}({args})", self.fresh_claim)
    }

    /// The completion of one record: `$1` key, `$2` fence, `$3` output, `$4` keep (µs); a row
    /// for the record completed, none when its fence was taken over.
    pub fn complete(&self) -> &str {
        &self.complete
    }

    /// The completion of many records: [`complete`](Self::complete)'s parameters as arrays,
    /// one element per record.
    pub fn complete_many(&self) -> &str {
        &self.complete_many
    }

    /// A `SELECT` (for a CTE of the caller's statement) that reserves a fresh fence for each
    /// key that `source` (a query yielding a `key` column) names and that has no record in
    /// `scope` (a constant of the caller's, plain text): `key, fence` of each. It writes no
    /// record: the caller's own row (a queue job's claim) holds the key until the record is
    /// written, by [`hold`](Self::hold) or [`insert_completed`](Self::insert_completed). Keys
    /// with a record are left out: their call claims through the store as usual.
    ///
    /// A key with a record from before scopes (scope `''`) counts as held. The check is a
    /// lookup per key: `OFFSET 0` keeps it a subquery run per key, because as an anti-join a
    /// generic plan made while the table was small (a fresh deployment's, kept by the store's
    /// connections for their life) reads every entry of the primary key with `scope = ''`, for
    /// each claim, at a cost that grows with the table.
    pub fn unheld(&self, scope: &str, source: &str) -> String {
        let scope = scope_literal(scope);
        let (t, seq) = (&self.table, &self.seq);
        format!(
            "SELECT key, nextval({seq}) AS fence
             FROM ({source}) AS unheld
             WHERE NOT EXISTS (
                 SELECT 1 FROM {t} AS r
                 WHERE r.key = unheld.key AND r.scope IN ({scope}, '')
                 OFFSET 0
             )"
        )
    }

    /// An `INSERT` (for a CTE of the caller's statement) that writes in `scope`, in progress
    /// with a lease of `lease` (an SQL interval expression) and `holder`, the record of each
    /// row of `source` (a query yielding `key, fence` columns), or renews it when it is there
    /// with that fence and in progress. Returns a row for each record written or renewed: a
    /// record there with another fence, or completed, is left alone.
    pub fn hold(&self, scope: &str, source: &str, lease: &str, holder: &str) -> String {
        let scope = scope_literal(scope);
        let t = &self.table;
        format!(
            "INSERT INTO {t} AS t (key, scope, fence, expires_at, purge_at, holder)
             SELECT key, {scope}, fence, now() + {lease}, now() + {lease}, {holder}
             FROM ({source}) AS held
             ON CONFLICT (key, scope) DO UPDATE SET expires_at = excluded.expires_at
             WHERE t.fence = excluded.fence AND t.completed_at IS NULL
             RETURNING 1"
        )
    }

    /// A query (for `EXISTS`) finding the record of `key` in `scope` when it holds a fence
    /// other than `fence` (SQL expressions of the caller's): the key's record is another run's.
    pub fn held_by_another(&self, scope: &str, key: &str, fence: &str) -> String {
        let scope = scope_literal(scope);
        format!(
            "SELECT 1 FROM {} AS other
             WHERE other.key = {key} AND other.scope = {scope} AND other.fence <> {fence}",
            self.table
        )
    }

    /// An `INSERT` (for a CTE of the caller's statement) that writes in `scope`, completed at
    /// `completed_at` and kept until `expires_at`, with a fresh fence and no output, the record
    /// of each row of `source` (a query yielding `key, completed_at, expires_at` columns) that
    /// has none there.
    pub fn insert_completed(&self, scope: &str, source: &str) -> String {
        let scope = scope_literal(scope);
        let (t, seq) = (&self.table, &self.seq);
        format!(
            "INSERT INTO {t} (key, scope, fence, completed_at, expires_at, purge_at)
             SELECT key, {scope}, nextval({seq}), completed_at, expires_at, expires_at
             FROM ({source}) AS completed
             ON CONFLICT (key, scope) DO NOTHING
             RETURNING 1"
        )
    }
}

/// `scope` (a constant of the queue's, never user input) as an SQL literal.
fn scope_literal(scope: &str) -> String {
    debug_assert!(scope.chars().all(|c| c.is_ascii_alphanumeric() || c == ':'));
    format!("'{scope}'")
}
