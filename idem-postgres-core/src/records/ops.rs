//! The records table's operations, each run on a connection it is given: what the store, its
//! batches and its transactions build on.

use std::time::Duration;

use idem_core::{
    Claim, ClaimRequest, Completion, EffectEntry, EffectRecord, EffectState, Fence, Fenced,
    Fingerprint, Key, Record, RecordState,
};
use sqlx::{PgConnection, Row};

use super::rows::{fence, fence_param, fenced, judge, token_param, ClaimRow, Judged};
use super::sql::RecordsSql;
use crate::time::{duration_micros, from_micros};

/// How often a claim is retried when its statement raced a concurrent insert or takeover. Each
/// retry sees a newer snapshot that holds the winner's row, so one retry almost always settles it.
const CLAIM_ATTEMPTS: usize = 16;

/// Where a drain's previous purge batch ended: the latest `purge_at` of the records and
/// `expires_at` of the journal entries it took (epoch µs; `None` before the first). The next
/// batch starts there instead of at the index's start, past the index entries of the rows the
/// drain already deleted (they stay until VACUUM).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PurgeCursor {
    records: Option<i64>,
    effects: Option<i64>,
}

/// Claims on `conn`: the one-statement claim, plus a takeover statement for a lapsed
/// record. Used by lease mode (on one connection) and transactional mode (inside the
/// open transaction, where an inserted or taken-over row stays locked until commit).
pub(crate) async fn claim_on(
    sql: &RecordsSql,
    conn: &mut PgConnection,
    request: ClaimRequest<'_>,
) -> Result<Claim, sqlx::Error> {
    Ok(claim_as(sql, conn, request, None).await?.0)
}

/// [`claim_on`], inserting a fresh key as completed and kept for `keep`
/// when it is `Some` (only inside a transaction, whose commit completes the call); the
/// `bool` says whether it did. A lapsed record taken over is claimed as usual (`false`).
pub(crate) async fn claim_as(
    sql: &RecordsSql,
    conn: &mut PgConnection,
    request: ClaimRequest<'_>,
    keep: Option<Duration>,
) -> Result<(Claim, bool), sqlx::Error> {
    let key = request.key.as_str();
    let fingerprint = request.fingerprint.map(Fingerprint::as_str);
    let lease = duration_micros(request.lease);
    let (claim, fresh_for) = match keep {
        Some(keep) => (&sql.claim_completed, duration_micros(keep)),
        None => (&sql.claim, lease),
    };
    let token = token_param(request.token);
    for _ in 0..CLAIM_ATTEMPTS {
        let row = sqlx::query(claim)
            .bind(key)
            .bind(fingerprint)
            .bind(fresh_for)
            .bind(token)
            .bind(request.key.scope())
            .bind(idem_core::holder())
            .fetch_optional(&mut *conn)
            .await?;
        let row = row.map(|row| ClaimRow::decode_from(&row, 0)).transpose()?;
        let inserted = row.as_ref().is_some_and(|row| row.inserted);
        let scope = match judge(row, fingerprint, token) {
            Judged::Settled(claim) => return Ok((claim, inserted && keep.is_some())),
            Judged::Raced => continue,
            Judged::Lapsed { scope } => scope,
        };
        let taken = sqlx::query(&sql.takeover)
            .bind(key)
            .bind(fingerprint)
            .bind(lease)
            .bind(token)
            .bind(request.key.scope())
            .bind(&scope)
            .bind(idem_core::holder())
            .fetch_optional(&mut *conn)
            .await?;
        match taken {
            Some(taken) => {
                let claim = Claim::Acquired {
                    fence: fence(taken.try_get(0)?),
                    lease_expires_at: from_micros(taken.try_get(1)?),
                    taken_over: true,
                };
                return Ok((claim, false));
            }
            // Another claim took it over (or it was renewed) first: look again.
            None => continue,
        }
    }
    Err(sqlx::Error::Protocol(format!(
        "claim of {key:?} kept racing concurrent claims after {CLAIM_ATTEMPTS} attempts"
    )))
}

pub(crate) async fn complete_on(
    sql: &RecordsSql,
    conn: &mut PgConnection,
    key: &Key,
    fence: Fence,
    completion: Completion<'_>,
) -> Result<Fenced, sqlx::Error> {
    let result = sqlx::query(&sql.complete)
        .bind(key.as_str())
        .bind(fence_param(fence))
        .bind(completion.output)
        .bind(duration_micros(completion.keep))
        .execute(conn)
        .await?;
    Ok(fenced(result.rows_affected()))
}

pub(crate) async fn release_on(
    sql: &RecordsSql,
    conn: &mut PgConnection,
    key: &str,
    fence: Fence,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(&sql.release)
        .bind(key)
        .bind(fence_param(fence))
        .execute(conn)
        .await?
        .rows_affected())
}

pub(crate) async fn renew_on(
    sql: &RecordsSql,
    conn: &mut PgConnection,
    key: &Key,
    fence: Fence,
    lease: Duration,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(&sql.renew)
        .bind(key.as_str())
        .bind(fence_param(fence))
        .bind(duration_micros(lease))
        .execute(conn)
        .await?
        .rows_affected())
}

pub(crate) async fn get_on(
    sql: &RecordsSql,
    conn: &mut PgConnection,
    key: &Key,
) -> Result<Option<Record>, sqlx::Error> {
    let row = sqlx::query(&sql.get)
        .bind(key.as_str())
        .bind(key.scope())
        .fetch_optional(conn)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let completed_at: Option<i64> = row.try_get(2)?;
    let expires_at = from_micros(row.try_get(3)?);
    Ok(Some(Record {
        key: key.clone(),
        fence: fence(row.try_get(0)?),
        fingerprint: row
            .try_get::<Option<String>, _>(1)?
            .map(Fingerprint::from_stored),
        state: RecordState::from_stored(completed_at.map(from_micros), expires_at, row.try_get(4)?),
    }))
}

/// Deletes up to `limit` expired records and up to `limit` expired journal entries, from
/// where `from` says the drain's previous batch ended (and moves it on). A batch of due
/// records that were not expired yet (a completion's `keep`, a renewed lease) files them
/// again and goes on, so a call deletes fewer than `limit` records only when no due record
/// is left: [`idem_core::purge::drain`] stops on that.
pub(crate) async fn purge_on(
    sql: &RecordsSql,
    conn: &mut PgConnection,
    limit: i64,
    from: &mut PurgeCursor,
) -> Result<u64, sqlx::Error> {
    let (mut records, mut effects) = (0, 0);
    loop {
        let asked = limit - records;
        let row = sqlx::query(&sql.purge)
            .bind(asked)
            .bind(limit - effects)
            .bind(from.records)
            .bind(from.effects)
            .fetch_one(&mut *conn)
            .await?;
        let (deleted, refiled): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        records += deleted;
        effects += row.try_get::<i64, _>(2)?;
        let ends: (Option<i64>, Option<i64>) = (row.try_get(3)?, row.try_get(4)?);
        from.records = ends.0.or(from.records);
        from.effects = ends.1.or(from.effects);
        if deleted + refiled < asked || records >= limit {
            return Ok((records + effects).unsigned_abs());
        }
    }
}

pub(crate) async fn effect_on(
    sql: &RecordsSql,
    conn: &mut PgConnection,
    key: &Key,
    effect: &str,
) -> Result<Option<EffectEntry>, sqlx::Error> {
    let row = sqlx::query(&sql.effect)
        .bind(key.as_str())
        .bind(effect)
        .bind(key.scope())
        .fetch_optional(conn)
        .await?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(EffectEntry {
        state: if row.try_get::<i16, _>(0)? == 1 {
            EffectState::Done
        } else {
            EffectState::Started
        },
        output: row.try_get(1)?,
        fence: fence(row.try_get(2)?),
    }))
}

pub(crate) async fn record_effect_on(
    sql: &RecordsSql,
    conn: &mut PgConnection,
    key: &Key,
    fence: Fence,
    record: EffectRecord<'_>,
) -> Result<Fenced, sqlx::Error> {
    let state: i16 = match record.state {
        EffectState::Started => 0,
        EffectState::Done => 1,
    };
    let written = sqlx::query(&sql.record_effect)
        .bind(key.as_str())
        .bind(fence_param(fence))
        .bind(record.effect)
        .bind(state)
        .bind(record.output)
        .bind(duration_micros(record.keep))
        .fetch_optional(conn)
        .await?;
    Ok(if written.is_some() {
        Fenced::Applied
    } else {
        Fenced::Lost
    })
}
