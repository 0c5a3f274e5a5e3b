//! Transactional mode: the claim, the handler's writes and the completion in one transaction.

use async_trait::async_trait;
use idem_core::{
    Claim, ClaimRequest, Completion, Fence, Fenced, Key, Operation, StoreError, TransactionalStore,
    TxClaim,
};
use sqlx::{Postgres, Transaction};

use crate::error::store_error;
use crate::store::PgStore;

/// The handler receives the open transaction; run its queries on `&mut **tx`:
///
/// ```no_run
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
/// retry runs cleanly. (The article's `credits = credits + 100` is unsafe to repeat; here it
/// cannot be repeated.)
#[async_trait]
impl TransactionalStore for PgStore {
    type Transaction = Transaction<'static, Postgres>;

    async fn claim_in_transaction(
        &self,
        request: ClaimRequest<'_>,
    ) -> Result<TxClaim<Self::Transaction>, StoreError> {
        let failed = |e| store_error(e).during(Operation::Claim);
        let mut tx = self.pool().begin().await.map_err(failed)?;
        let claim = self.claim_on(&mut tx, request).await.map_err(failed)?;
        if matches!(claim, Claim::Acquired { .. }) {
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
        let fenced = self
            .complete_on(&mut transaction, key, fence, completion)
            .await
            .map_err(failed)?;
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
