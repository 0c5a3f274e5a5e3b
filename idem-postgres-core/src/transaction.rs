//! Transactional mode: the claim, the handler's writes and the completion in one transaction.

use async_trait::async_trait;
use idem_core::{
    Claim, ClaimRequest, Completion, Fence, Fenced, Fingerprint, Key, Operation, StoreError,
    TransactionalStore, TxClaim,
};
use sqlx::{Database, PgConnection, Postgres, TransactionManager};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant, SystemTime};

use crate::closing::ClosingTransaction;
use crate::connections::{on_conn, retry_budget};
use crate::error::is_connection_lost;
use crate::error::store_error;
use crate::fresh_claim::Fresh;
use crate::records::token_param;
use crate::records::{self, judge, ClaimRow, Judged};
use crate::store::PgStore;
use crate::tx_conn::TxConn;

type Manager = <Postgres as Database>::TransactionManager;

/// The open transaction of a transactional call, which the handler receives: it derefs to
/// [`PgConnection`], so the handler runs its queries on `&mut **tx` (as on sqlx's
/// [`Transaction`](sqlx::Transaction)), and may open savepoints with [`sqlx::Connection::begin`].
///
/// It runs on one of the store's own connections when the store can lend one (so neither
/// taking the connection nor giving it back costs a round trip: sqlx's pool tests every
/// connection it takes back), else on a connection of the pool. The store commits it with the
/// completion, or rolls it back; one dropped while open (a panic, a cancelled call) is rolled
/// back by closing its connection.
pub struct PgTransaction {
    conn: TxConn,
    /// The fence and `keep` of the record the claim wrote as completed, if it did, and when:
    /// a completion with no output and that `keep`, soon after, then needs only the commit.
    completed: Option<(Fence, Duration, Instant)>,
}

impl fmt::Debug for PgTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = match self.conn {
            TxConn::Lent(_) => "the store's connection",
            TxConn::Pooled(_) => "a pooled connection",
        };
        f.debug_struct("PgTransaction").field("on", &on).finish()
    }
}

impl Deref for PgTransaction {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match &self.conn {
            TxConn::Lent(lent) => lent.conn(),
            TxConn::Pooled(tx) => tx,
        }
    }
}

impl DerefMut for PgTransaction {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.conn.get()
    }
}

impl PgTransaction {
    /// Begins a transaction on a connection the store lends, else on one of the pool. A lent
    /// connection that was idle and turns out dead (a server restart) is replaced, as lease
    /// mode's are.
    async fn begin(store: &PgStore) -> Result<PgTransaction, sqlx::Error> {
        let Some(lender) = store.lender() else {
            return PgTransaction::pooled(store).await;
        };
        let mut retries = retry_budget(Some(lender), store.pool());
        loop {
            let Some(mut lent) = lender.lend().await? else {
                return PgTransaction::pooled(store).await;
            };
            match Manager::begin(lent.get(), None).await {
                Ok(()) => {
                    return Ok(PgTransaction {
                        conn: TxConn::Lent(lent),
                        completed: None,
                    })
                }
                Err(e) if lent.reused() && is_connection_lost(&e) && retries > 0 => {
                    retries -= 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn pooled(store: &PgStore) -> Result<PgTransaction, sqlx::Error> {
        if let Some(direct) = store.lender() {
            direct.hold_reserve().await?;
        }
        Ok(PgTransaction {
            conn: TxConn::Pooled(ClosingTransaction::begin(store.pool(), None).await?),
            completed: None,
        })
    }

    /// Fails unless the transaction is at its outermost level: committing with a savepoint
    /// still open (one leaked with `mem::forget`) would only release the savepoint.
    fn outermost(&self) -> Result<(), sqlx::Error> {
        match Manager::get_transaction_depth(self) {
            1 => Ok(()),
            depth => Err(sqlx::Error::Protocol(format!(
                "the transaction is {depth} levels deep at its end: the handler left a \
                 savepoint open; nothing was committed"
            ))),
        }
    }

    /// Commits; a lent connection then goes back to the store.
    async fn commit(self) -> Result<(), sqlx::Error> {
        self.outermost()?;
        match self.conn {
            TxConn::Lent(mut lent) => {
                Manager::commit(lent.get()).await?;
                lent.give_back();
                Ok(())
            }
            TxConn::Pooled(tx) => tx.end(true).await,
        }
    }

    /// Rolls back; a lent connection then goes back to the store.
    async fn rollback(self) -> Result<(), sqlx::Error> {
        match self.conn {
            TxConn::Lent(mut lent) if Manager::get_transaction_depth(lent.conn()) == 1 => {
                Manager::rollback(lent.get()).await?;
                lent.give_back();
                Ok(())
            }
            TxConn::Pooled(tx) if Manager::get_transaction_depth(&tx) == 1 => tx.end(false).await,
            // Savepoints left open: closing the connection rolls everything back.
            TxConn::Lent(_) | TxConn::Pooled(_) => Ok(()),
        }
    }
}

impl PgStore {
    /// Reads the request's record outside any transaction: `Some` when it is settled for this
    /// request (completed, or stored with another payload), which a claim in a transaction
    /// would answer the same way (a completion is final until it expires, and an expired one
    /// counts as lapsed here too); `None` for anything a claim must decide (no record, one in
    /// progress or lapsed, one inserted but not yet committed: invisible here, so the claim in
    /// the transaction waits on it as usual).
    async fn settled(&self, request: &ClaimRequest<'_>) -> Result<Option<Claim>, sqlx::Error> {
        let sql = &self.records().look_up;
        // On a connection with the server's settings, as the transactions' own: set up for
        // lease mode's statements instead, the store would set its connections up again and
        // again as reads and transactions take turns on them.
        let row = on_conn!(self, conn => {
            sqlx::query(sql)
                .bind(request.key.as_str())
                .bind(request.key.scope())
                .fetch_optional(conn)
        })?;
        let row = row.map(|row| ClaimRow::decode_from(&row, 0)).transpose()?;
        let Some(row) = row else { return Ok(None) };
        let fingerprint = request.fingerprint.map(Fingerprint::as_str);
        Ok(
            match judge(Some(row), fingerprint, token_param(request.token)) {
                Judged::Settled(claim @ (Claim::Completed { .. } | Claim::Mismatch)) => Some(claim),
                _ => None,
            },
        )
    }
}

/// The handler receives the open transaction; run its queries on `&mut **tx`:
///
/// ```no_run
/// # use idem_postgres_core as idem_store_postgres;
/// use idem_core::idempotent;
/// use idem_store_postgres::PgStore;
///
/// #[idempotent(key = "credit:{order}", store = store, transaction = tx)]
/// async fn credit(store: &PgStore, order: i64, amount: i64) -> Result<(), sqlx::Error> {
///     sqlx::query("UPDATE accounts SET credits = credits + $1 WHERE id = 42")
///         .bind(amount)
///         .execute(&mut **tx)
///         .await?;
///     Ok(())
/// }
/// # use idem_store_postgres::sqlx;
/// ```
///
/// The credit and the key commit together: a duplicate delivery waits on the claimed row, then
/// finds it completed and does not credit again; an `Err` or a crash rolls both back, so the
/// retry runs cleanly. (A `credits = credits + 100` is unsafe to repeat; here it
/// cannot be repeated.)
#[async_trait]
impl TransactionalStore for PgStore {
    type Transaction = PgTransaction;

    /// A fresh key's record is written as completed (no output, kept for `keep`), so the
    /// commit completes the call: a fresh call is BEGIN, the claim and COMMIT, three round
    /// trips, where writing the completion on its own would take four; two with
    /// [`claim_with_begin`](crate::PgStoreBuilder::claim_with_begin), which sends the claim
    /// with the BEGIN (`fresh_claim.rs`).
    async fn claim_in_transaction(
        &self,
        request: ClaimRequest<'_>,
        keep: Duration,
    ) -> Result<TxClaim<Self::Transaction>, StoreError> {
        crate::store::refuse_legacy_scope(request.key)?;
        let failed = |e| store_error(e).during(Operation::Claim);
        let duplicates = self.tx_duplicates();
        // While duplicates dominate, a settled key is answered from one read, with no
        // transaction (see `duplicate_rate`); anything else is claimed in one, as always.
        let read_first = duplicates.read_first(self.claims_with_begin());
        if read_first && self.direct().is_some() {
            if let Some(claim) = self.settled(&request).await.map_err(failed)? {
                duplicates.observe(true);
                return Ok(TxClaim {
                    claim,
                    transaction: None,
                });
            }
        }
        // A fresh key is claimed with the BEGIN where the store does that (`fresh_claim.rs`),
        // unless duplicates dominate on a store that cannot read first (it has no connections
        // of its own): each would cost a round trip more than a plain BEGIN.
        let fresh = if read_first && self.direct().is_none() {
            None
        } else {
            self.claim_fresh(&request, keep).await.map_err(failed)?
        };
        let mut tx = match fresh {
            Some(Fresh::Claimed(conn, fence)) => {
                duplicates.observe(false);
                return Ok(TxClaim {
                    claim: Claim::Acquired {
                        fence,
                        // The record's end, by this clock (the statement does not say).
                        lease_expires_at: SystemTime::now()
                            .checked_add(keep)
                            .unwrap_or(SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 40)),
                        taken_over: false,
                    },
                    transaction: Some(PgTransaction {
                        conn,
                        completed: Some((fence, keep, Instant::now())),
                    }),
                });
            }
            Some(Fresh::Open(conn)) => PgTransaction {
                conn,
                completed: None,
            },
            None => PgTransaction::begin(self).await.map_err(failed)?,
        };
        let (claim, completed) = records::claim_as(self.records(), &mut tx, request, Some(keep))
            .await
            .map_err(failed)?;
        duplicates.observe(matches!(claim, Claim::Completed { .. } | Claim::Mismatch));
        if let Claim::Acquired { fence, .. } = claim {
            tx.completed = completed.then_some((fence, keep, Instant::now()));
            return Ok(TxClaim {
                claim,
                transaction: Some(tx),
            });
        }
        tx.rollback().await.map_err(failed)?;
        Ok(TxClaim {
            claim,
            transaction: None,
        })
    }

    async fn commit_completion(
        &self,
        mut transaction: Self::Transaction,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        let failed = |e| store_error(e).during(Operation::Complete);
        // Written with the claim: the commit is the completion, unless the body ran long
        // enough (a hundredth of `keep`) that `keep`, counted from the claim, would end
        // noticeably early; then it is counted again from the completion.
        let written = completion.output.is_none()
            && transaction.completed.is_some_and(|(claimed, keep, at)| {
                claimed == fence && keep == completion.keep && at.elapsed() < keep / 100
            });
        let fenced = if written {
            Fenced::Applied
        } else {
            let done = sqlx::query(&self.records().complete_in_transaction)
                .bind(key.as_str())
                .bind(crate::records::fence_param(fence))
                .bind(completion.output)
                .bind(crate::time::duration_micros(completion.keep))
                .execute(&mut *transaction)
                .await
                .map_err(failed)?;
            if done.rows_affected() == 0 {
                Fenced::Lost
            } else {
                Fenced::Applied
            }
        };
        match fenced {
            Fenced::Applied => transaction.commit().await.map_err(failed)?,
            Fenced::Lost => transaction.rollback().await.map_err(failed)?,
        }
        Ok(fenced)
    }

    async fn roll_back(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        transaction
            .rollback()
            .await
            .map_err(|e| store_error(e).during(Operation::Release))
    }
}
