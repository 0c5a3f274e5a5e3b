//! The records table's rows as idem reads them, and its parameters as idem writes them.

use idem_core::{Claim, ClaimToken, Fence, Fenced};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::time::from_micros;

/// One decoded row of the claim statement.
pub(crate) struct ClaimRow {
    /// Whether the statement inserted the record (a fresh claim).
    pub(super) inserted: bool,
    fence: i64,
    fingerprint: Option<String>,
    completed_at: Option<i64>,
    expires_at: i64,
    output: Option<Vec<u8>>,
    lapsed: bool,
    token: Option<i64>,
    scope: String,
}

impl ClaimRow {
    /// Decodes the claim's columns, which start at column `first` of `row`.
    pub(crate) fn decode_from(row: &PgRow, first: usize) -> Result<ClaimRow, sqlx::Error> {
        Ok(ClaimRow {
            inserted: row.try_get(first)?,
            fence: row.try_get(first + 1)?,
            fingerprint: row.try_get(first + 2)?,
            completed_at: row.try_get(first + 3)?,
            expires_at: row.try_get(first + 4)?,
            output: row.try_get(first + 5)?,
            lapsed: row.try_get(first + 6)?,
            token: row.try_get(first + 7)?,
            scope: row.try_get(first + 8)?,
        })
    }
}

/// What one claim statement's answer means for one request.
pub(crate) enum Judged {
    /// The claim is settled.
    Settled(Claim),
    /// No row: a concurrent claim inserted the key after the statement's snapshot. Look again.
    Raced,
    /// The record's lease lapsed (or its completion expired): take it over, from `scope`.
    Lapsed { scope: String },
}

pub(crate) fn fence(value: i64) -> Fence {
    Fence(value.unsigned_abs())
}

pub(crate) fn fenced(rows: u64) -> Fenced {
    if rows == 1 {
        Fenced::Applied
    } else {
        Fenced::Lost
    }
}

/// What the claim statement's row (or its absence) means for a request with `fingerprint`
/// and `token`: the one reading of a claim's answer, for single and batched claims.
pub(crate) fn judge(
    row: Option<ClaimRow>,
    fingerprint: Option<&str>,
    token: Option<i64>,
) -> Judged {
    let Some(row) = row else {
        return Judged::Raced;
    };
    // Inserted now, or the caller's own claim, sent again after its answer was lost.
    let own = !row.lapsed && row.completed_at.is_none() && token.is_some() && row.token == token;
    if row.inserted || own {
        return Judged::Settled(Claim::Acquired {
            fence: fence(row.fence),
            lease_expires_at: from_micros(row.expires_at),
            taken_over: false,
        });
    }
    if row.lapsed {
        return Judged::Lapsed { scope: row.scope };
    }
    let mismatch = matches!(
        (row.fingerprint.as_deref(), fingerprint),
        (Some(stored), Some(requested)) if stored != requested
    );
    Judged::Settled(if mismatch {
        Claim::Mismatch
    } else if let Some(completed_at) = row.completed_at {
        Claim::Completed {
            completed_at: from_micros(completed_at),
            output: row.output,
        }
    } else {
        Claim::InProgress {
            lease_expires_at: from_micros(row.expires_at),
        }
    })
}

/// A fence as the bigint column keeps it.
pub fn fence_param(fence: Fence) -> i64 {
    i64::try_from(fence.0).unwrap_or(i64::MAX)
}

/// A token's bits, as the bigint column keeps them.
pub(crate) fn token_param(token: Option<ClaimToken>) -> Option<i64> {
    token.map(|t| t.0 as i64)
}
