//! The transactional capability: stores whose records live in the same database as the
//! handler's writes can claim, run and complete inside one transaction.

use async_trait::async_trait;
use std::sync::Arc;

use crate::error::StoreError;
use crate::key::Key;
use crate::store::{Claim, ClaimRequest, Completion, Fence, Fenced, Store};

/// The answer to a claim made inside a transaction.
#[derive(Debug)]
pub struct TxClaim<Tx> {
    /// What the claim found, as for [`Store::claim`].
    pub claim: Claim,
    /// The open transaction holding the claimed row: `Some` exactly when `claim` is
    /// [`Claim::Acquired`]. Otherwise the store has already ended its transaction.
    pub transaction: Option<Tx>,
}

/// A store that can run a handler's claim, its writes and its completion in one database
/// transaction: they commit together, or none of them does.
///
/// This is the `transaction = tx` mode of `#[idempotent]`. It gives *exactly once* for side
/// effects that are writes to the store's own database: a crash or an `Err` rolls the writes
/// back together with the claim, and a concurrent duplicate waits on the claimed row and then
/// finds it completed. Effects outside the database (emails, HTTP calls) get no such guarantee;
/// use lease mode for those.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot run handlers in a transaction",
    label = "`transaction = ..` needs a store with transactions",
    note = "transactional mode needs a store whose records live in the same database as the \
            handler's writes, such as `idem_store_postgres::PgStore` (a concrete store, not \
            `dyn Store`); remove `transaction` to use lease mode"
)]
pub trait TransactionalStore: Store {
    /// The open transaction the handler receives (for PostgreSQL, a `sqlx::Transaction`).
    type Transaction: Send;

    /// Begins a transaction and claims the key in it. When acquired, the claimed row stays
    /// locked by the returned transaction until it commits or rolls back.
    async fn claim_in_transaction(
        &self,
        request: ClaimRequest<'_>,
    ) -> Result<TxClaim<Self::Transaction>, StoreError>;

    /// Records the completion in `transaction` and commits it, with the handler's writes.
    async fn commit_completion(
        &self,
        transaction: Self::Transaction,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError>;

    /// Rolls `transaction` back: the claim and the handler's writes are undone.
    async fn roll_back(&self, transaction: Self::Transaction) -> Result<(), StoreError>;
}

macro_rules! delegate_transactional {
    ($($ty:ty),*) => {$(
        #[diagnostic::do_not_recommend]
        #[async_trait]
        impl<S: TransactionalStore + ?Sized> TransactionalStore for $ty {
            type Transaction = S::Transaction;

            async fn claim_in_transaction(
                &self,
                request: ClaimRequest<'_>,
            ) -> Result<TxClaim<Self::Transaction>, StoreError> {
                (**self).claim_in_transaction(request).await
            }

            async fn commit_completion(
                &self,
                transaction: Self::Transaction,
                key: &Key,
                fence: Fence,
                completion: Completion<'_>,
            ) -> Result<Fenced, StoreError> {
                (**self).commit_completion(transaction, key, fence, completion).await
            }

            async fn roll_back(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
                (**self).roll_back(transaction).await
            }
        }
    )*};
}

delegate_transactional!(&S, Arc<S>, Box<S>);
