//! Lease mode's two operations as the batcher runs them, claims and completions: their one-statement forms
//! for many records (`claim_many`, `complete_many` in `records/sql.rs`), and each request's statement
//! of its own, which a batch of one uses and a refused batch falls back to (batch.rs).

use std::hash::Hasher;

use idem_core::{Claim, Fenced, Fingerprint};
use idem_core::{Operation, StoreError};
use sqlx::{PgConnection, Row};

use crate::batch::{hash_record, Op};
use crate::connections::on_conn;
use crate::error::store_error;
use crate::records::{self, judge, ClaimRow, Judged};
use crate::records::{fence_param, token_param};
use crate::records::{OwnedClaim, OwnedCompletion};
use crate::store::{ClaimOp, CompleteOp, PgStore};
use crate::time::duration_micros;

impl Op for ClaimOp {
    type Executor = PgStore;
    type Request = OwnedClaim;
    type Answer = Claim;

    fn record(request: &OwnedClaim, state: &mut impl Hasher) {
        hash_record(request.key.as_str(), request.key.scope(), state);
    }

    const NAME: &'static str = "claim";
    const OPERATION: Operation = Operation::Claim;

    async fn many(store: &PgStore, batch: &[OwnedClaim]) -> Result<Vec<Claim>, sqlx::Error> {
        on_conn!(indexed store, conn => claim_many_on(store, conn, batch))
    }

    async fn one(store: &PgStore, claim: &OwnedClaim) -> Result<Claim, StoreError> {
        on_conn!(indexed store, conn => records::claim_on(store.records(), conn, claim.request()))
            .map_err(|e| store_error(e).during(Self::OPERATION))
    }

    /// A claim acquired for a caller that went away would hold its key for nobody for a whole
    /// lease (every retry in between told it is in progress): it is released at once.
    fn orphaned(store: &PgStore, claim: OwnedClaim, answer: Claim) {
        if let Claim::Acquired { fence, .. } = answer {
            tracing::info!(key = %claim.key, "a claim's caller went away; releasing it");
            idem_core::release_in_background(idem_core::Store::shared(store), &claim.key, fence);
        }
    }
}

impl Op for CompleteOp {
    type Executor = PgStore;
    type Request = OwnedCompletion;
    type Answer = Fenced;

    fn record(request: &OwnedCompletion, state: &mut impl Hasher) {
        hash_record(request.key.as_str(), "", state);
    }

    const NAME: &'static str = "completion";
    const OPERATION: Operation = Operation::Complete;

    async fn many(store: &PgStore, batch: &[OwnedCompletion]) -> Result<Vec<Fenced>, sqlx::Error> {
        on_conn!(indexed store, conn => complete_many_on(store, conn, batch))
    }

    async fn one(store: &PgStore, c: &OwnedCompletion) -> Result<Fenced, StoreError> {
        on_conn!(indexed store, conn => records::complete_on(store.records(), conn, &c.key, c.fence, c.completion()))
            .map_err(|e| store_error(e).during(Self::OPERATION))
    }
}

/// The batch's claims in one statement. A record the statement could not settle (it raced a
/// concurrent insert, or its lease lapsed and must be taken over) is claimed on its own, on the
/// same connection.
async fn claim_many_on(
    store: &PgStore,
    conn: &mut PgConnection,
    batch: &[OwnedClaim],
) -> Result<Vec<Claim>, sqlx::Error> {
    let keys: Vec<&str> = batch.iter().map(|c| c.key.as_str()).collect();
    let scopes: Vec<&str> = batch.iter().map(|c| c.key.scope()).collect();
    let fingerprints: Vec<Option<&str>> = batch
        .iter()
        .map(|c| c.fingerprint.as_ref().map(Fingerprint::as_str))
        .collect();
    let leases: Vec<i64> = batch.iter().map(|c| duration_micros(c.lease)).collect();
    let tokens: Vec<Option<i64>> = batch.iter().map(|c| token_param(c.token)).collect();
    let rows = sqlx::query(&store.records().claim_many)
        .bind(keys)
        .bind(scopes)
        .bind(fingerprints)
        .bind(leases)
        .bind(tokens)
        .bind(idem_core::holder())
        .fetch_all(&mut *conn)
        .await?;
    let mut found: Vec<Option<ClaimRow>> = (0..batch.len()).map(|_| None).collect();
    for row in &rows {
        let i: i64 = row.try_get(0)?;
        let slot = usize::try_from(i - 1)
            .ok()
            .and_then(|i| found.get_mut(i))
            .ok_or_else(|| sqlx::Error::Protocol(format!("batched claim answered row {i}")))?;
        *slot = Some(ClaimRow::decode_from(row, 1)?);
    }
    let mut claims = Vec::with_capacity(batch.len());
    for (claim, row) in batch.iter().zip(found) {
        let request = claim.request();
        let fingerprint = request.fingerprint.map(Fingerprint::as_str);
        claims.push(match judge(row, fingerprint, token_param(request.token)) {
            Judged::Settled(claim) => claim,
            Judged::Raced | Judged::Lapsed { .. } => {
                records::claim_on(store.records(), conn, request).await?
            }
        });
    }
    Ok(claims)
}

/// The batch's completions in one statement: each applies while its record holds its fence.
async fn complete_many_on(
    store: &PgStore,
    conn: &mut PgConnection,
    batch: &[OwnedCompletion],
) -> Result<Vec<Fenced>, sqlx::Error> {
    let keys: Vec<&str> = batch.iter().map(|c| c.key.as_str()).collect();
    let fences: Vec<i64> = batch.iter().map(|c| fence_param(c.fence)).collect();
    let outputs: Vec<Option<&[u8]>> = batch.iter().map(|c| c.output.as_deref()).collect();
    let keeps: Vec<i64> = batch.iter().map(|c| duration_micros(c.keep)).collect();
    let rows = sqlx::query(&store.records().complete_many)
        .bind(keys)
        .bind(fences)
        .bind(outputs)
        .bind(keeps)
        .fetch_all(conn)
        .await?;
    let mut fenced = vec![Fenced::Lost; batch.len()];
    for row in &rows {
        let i: i64 = row.try_get(0)?;
        let slot = usize::try_from(i - 1)
            .ok()
            .and_then(|i| fenced.get_mut(i))
            .ok_or_else(|| sqlx::Error::Protocol(format!("batched completion answered {i}")))?;
        *slot = Fenced::Applied;
    }
    Ok(fenced)
}
