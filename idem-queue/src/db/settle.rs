//! Settling claims: how each claim that did not complete its call ended (done with an
//! earlier run's result, retried, dead, snoozed, cancelled, given back), fenced by the claim's
//! attempt.

use std::time::Duration;

use sqlx::PgExecutor;

use crate::completer::settlement::Settle;
use crate::db::fragments::{in_state, logged, Table, COUNTED, MICROS};
use idem_postgres_core::extend::{batch_rows, duration_micros, unseen};

/// The statements that settle claims.
#[derive(Debug)]
pub struct SettleSql {
    /// `$1` keys, `$2` attempts, `$3` a result (or NULL): marks finished jobs done.
    done: String,
    /// `$1` key, `$2` attempt, `$3` delay (µs), `$4` error.
    retry: String,
    /// `$1` key, `$2` attempt, `$3` error.
    dead: String,
    /// `$1` keys, `$2` attempts, `$3` delay (µs), `$4` whether the jobs started (else only
    /// those whose start was noted are logged): gives claims back without counting them.
    release: String,
    /// `$1` key, `$2` attempt, `$3` delay µs, `$4` message: back to the queue after the delay,
    /// the attempt given back, logged `snoozed`.
    snooze: String,
    /// `$1` key, `$2` attempt, `$3` reason: the running job ends `cancelled`.
    cancelled: String,
}

impl SettleSql {
    /// The statements of `t`'s queue.
    pub(crate) fn new(t: &Table) -> SettleSql {
        let q = &t.q;
        let micros = MICROS;
        let (is_running, q_is_running) =
            (in_state("state", "running"), in_state("q.state", "running"));
        let keys = unseen("$1", "text[]");
        // The jobs of a batch (`done`, `release`), each while its claim is this attempt's.
        let fenced = format!(
            "FROM unnest({keys}, {}) AS held(key, attempts)
             WHERE {} AND q.attempts = held.attempts AND {q_is_running}",
            unseen("$2", "int[]"),
            batch_rows("q", &keys, "held"),
        );
        SettleSql {
            done: format!(
                "UPDATE {q} AS q SET state = 'done', finished_at = now(), worker = NULL,
                     result = coalesce($3, q.result),
                     attempted_at = coalesce(q.attempted_at, now()) {fenced}"
            ),
            retry: format!(
                "UPDATE {q} SET state = 'queued', available_at = now() + $3::bigint {micros},
                     last_error = $4, worker = NULL,
                     attempted_at = coalesce(attempted_at, now()), attempt_log = {}
                 WHERE key = $1 AND attempts = $2 AND {is_running}",
                logged(COUNTED, "'retried'", "$4::text")
            ),
            dead: format!(
                "UPDATE {q} SET state = 'dead', finished_at = now(), last_error = $3, worker = NULL,
                     attempted_at = coalesce(attempted_at, now()), attempt_log = {}
                 WHERE key = $1 AND attempts = $2 AND {is_running}",
                logged(COUNTED, "'dead'", "$3::text")
            ),
            release: format!(
                "UPDATE {q} AS q SET state = 'queued', unrun = q.unrun + 1, worker = NULL,
                     available_at = now() + $3::bigint {micros},
                     attempt_log = CASE WHEN $4 OR q.attempted_at IS NOT NULL THEN {}
                                        ELSE q.attempt_log END {fenced}",
                logged("q.attempts - q.unrun", "'released'", "NULL::text")
            ),
            snooze: format!(
                "UPDATE {q} SET state = 'queued', unrun = unrun + 1, worker = NULL,
                     available_at = now() + $3::bigint {micros},
                     attempted_at = coalesce(attempted_at, now()), attempt_log = {}
                 WHERE key = $1 AND attempts = $2 AND {is_running}",
                logged(COUNTED, "'snoozed'", "$4::text")
            ),
            // An operator's reason (`cancel_reason`), when one asked, is the job's last error;
            // the attempt log adds how the handler ended.
            cancelled: format!(
                "UPDATE {q} SET state = 'cancelled', finished_at = now(),
                     last_error = coalesce(cancel_reason, $3),
                     worker = NULL, attempted_at = coalesce(attempted_at, now()),
                     attempt_log = {}
                 WHERE key = $1 AND attempts = $2 AND {is_running}",
                logged(
                    COUNTED,
                    "'cancelled'",
                    "coalesce(cancel_reason || ' (' || $3::text || ')', $3::text)"
                )
            ),
        }
    }

    /// Every statement, by name: what the plan tests read.
    #[cfg(feature = "testing")]
    pub fn named(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("done", &self.done),
            ("retry", &self.retry),
            ("dead", &self.dead),
            ("release", &self.release),
            ("snooze", &self.snooze),
            ("cancelled", &self.cancelled),
        ]
    }

    /// Records how the claim `attempt` of the job `key` ended; returns how many rows it
    /// settled (none: the claim was taken over meanwhile, its lease lapsed).
    pub async fn settle<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        key: &str,
        attempt: i32,
        how: &Settle,
    ) -> Result<u64, sqlx::Error> {
        let query = match how {
            Settle::Done { result } => sqlx::query(&self.done)
                .bind(vec![key])
                .bind(vec![attempt])
                .bind(result.as_deref()),
            Settle::Retry { delay, error } => sqlx::query(&self.retry)
                .bind(key)
                .bind(attempt)
                .bind(duration_micros(*delay))
                .bind(error),
            Settle::Dead { error } => sqlx::query(&self.dead).bind(key).bind(attempt).bind(error),
            Settle::Release { delay } => sqlx::query(&self.release)
                .bind(vec![key])
                .bind(vec![attempt])
                .bind(duration_micros(*delay))
                .bind(true),
            Settle::Snooze { delay, message } => sqlx::query(&self.snooze)
                .bind(key)
                .bind(attempt)
                .bind(duration_micros(*delay))
                .bind(message),
            Settle::Cancelled { reason } => sqlx::query(&self.cancelled)
                .bind(key)
                .bind(attempt)
                .bind(reason),
        };
        Ok(query.execute(executor).await?.rows_affected())
    }

    /// Gives the claims `attempts` of the jobs `keys` back to the queue after `delay`,
    /// without counting them; logged only where they `started` (else only those whose start
    /// was noted). Returns how many were still those claims.
    pub async fn release<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        keys: &[&str],
        attempts: &[i32],
        delay: Duration,
        started: bool,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(&self.release)
            .bind(keys)
            .bind(attempts)
            .bind(duration_micros(delay))
            .bind(started)
            .execute(executor)
            .await?;
        Ok(done.rows_affected())
    }
}
