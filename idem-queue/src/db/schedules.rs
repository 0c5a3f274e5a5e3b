//! The schedules' table statements.

use idem_store_postgres::extend::micros_sql;

/// The schedules' statements, written once per queue.
#[derive(Debug)]
pub(crate) struct ScheduleSql {
    /// `$1` name, `$2` spec, `$3` now (µs): declares a schedule; a new one starts at `$3`
    /// (no catch-up before it existed).
    pub register: String,
    /// `$1` name: paused, last tick, verified through, paused at, resumed at (µs).
    pub load: String,
    /// `$1` name, `$2` last tick seen (µs), `$3` new last tick (µs), `$4` missed, `$5` next
    /// tick (µs or NULL): moves the last tick on, if no other scheduler did first.
    pub advance: String,
    /// `$1` name, `$2` verified through seen (µs), `$3` new verified through (µs), `$4` late
    /// ticks, `$5` latest success (µs or NULL).
    pub verify: String,
    /// `$1` keys: each job's state and finish time (µs).
    pub jobs: String,
    /// Every schedule's state, by name.
    pub list: String,
    /// `$1` name: pauses it (a pause already on keeps its start).
    pub pause: String,
    /// `$1` name: ends its pause, if it is paused.
    pub resume: String,
    /// `$1` name.
    pub remove: String,
    /// `$1` name, `$2` spec, `$3` stored definition (JSON text): a schedule of the database's.
    pub store: String,
    /// Every stored schedule: name, definition (JSON text).
    pub stored: String,
    /// The database's clock (µs).
    pub now: String,
}

fn ts(n: u8) -> String {
    format!("(timestamptz 'epoch' + ${n}::bigint * interval '1 microsecond')")
}

impl ScheduleSql {
    pub(crate) fn new(schema: &str, table: &str) -> ScheduleSql {
        let s = format!("\"{schema}\".\"{table}_schedules\"");
        let q = format!("\"{schema}\".\"{table}_queue\"");
        let us = micros_sql;
        ScheduleSql {
            register: format!(
                "INSERT INTO {s} (name, spec, last_tick, verified_through)
                 VALUES ($1, $2, {t3}, {t3})
                 ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, seen_at = now()",
                t3 = ts(3)
            ),
            load: format!(
                "SELECT paused, {}, {}, {}, {} FROM {s} WHERE name = $1",
                us("last_tick"),
                us("verified_through"),
                us("paused_at"),
                us("resumed_at")
            ),
            advance: format!(
                "UPDATE {s} SET last_tick = {t3}, missed = missed + $4,
                     last_missed_at = CASE WHEN $4 > 0 THEN now() ELSE last_missed_at END,
                     next_tick = {t5}
                 WHERE name = $1 AND last_tick = {t2}",
                t2 = ts(2),
                t3 = ts(3),
                t5 = ts(5)
            ),
            verify: format!(
                "UPDATE {s} SET verified_through = {t3}, missed = missed + $4,
                     last_missed_at = CASE WHEN $4 > 0 THEN now() ELSE last_missed_at END,
                     last_success_at = greatest(last_success_at, {t5})
                 WHERE name = $1 AND verified_through = {t2}",
                t2 = ts(2),
                t3 = ts(3),
                t5 = ts(5)
            ),
            jobs: format!(
                "SELECT key, state, {} FROM {q} WHERE key = ANY($1)",
                us("finished_at")
            ),
            list: format!(
                "SELECT name, spec, paused, {}, {}, missed, {}, {}, {} FROM {s} ORDER BY name",
                us("last_tick"),
                us("next_tick"),
                us("last_missed_at"),
                us("last_success_at"),
                us("seen_at")
            ),
            pause: format!(
                "UPDATE {s} SET paused_at = CASE WHEN paused THEN paused_at ELSE now() END,
                     resumed_at = CASE WHEN paused THEN resumed_at END,
                     paused = true
                 WHERE name = $1"
            ),
            resume: format!(
                "UPDATE {s} SET resumed_at = CASE WHEN paused THEN now() ELSE resumed_at END,
                     paused = false
                 WHERE name = $1"
            ),
            remove: format!("DELETE FROM {s} WHERE name = $1"),
            store: format!(
                "INSERT INTO {s} (name, spec, stored, last_tick, verified_through)
                 VALUES ($1, $2, $3::jsonb, now(), now())
                 ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, stored = excluded.stored"
            ),
            stored: format!(
                "SELECT name, stored::text FROM {s} WHERE stored IS NOT NULL ORDER BY name"
            ),
            now: format!("SELECT {}", us("now()")),
        }
    }
}
