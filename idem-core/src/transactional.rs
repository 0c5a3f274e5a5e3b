//! The transactional capability: stores whose records live in the same database as the
//! handler's writes can claim, run and complete inside one transaction. This file holds the
//! capability ([`TransactionalStore`]) and the one flow that uses it
//! ([`execute_in_transaction`]), which `Call::run_in_transaction` and
//! `#[idempotent(transaction = ..)]` both call.

use async_trait::async_trait;
use std::future::Future;
use std::panic::resume_unwind;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tracing::{Instrument, Span};

use crate::codec::Codec;
use crate::context::CallContext;
use crate::error::{Error, Operation, StoreError};
use crate::execute::{catch_unwind, record_outcome, Prepared, Spec};
use crate::key::Key;
use crate::outcome::Outcome;
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
///
/// A `Transaction` that is dropped without being committed must roll back (sqlx's do): a body
/// that panics, or a call whose future is dropped, drops its transaction.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot run handlers in a transaction",
    label = "`transaction = ..` needs a store with transactions",
    note = "transactional mode needs a store whose records live in the same database as the \
            handler's writes, such as `idem_store_postgres::PgStore` (a concrete store, not \
            `dyn Store`); remove `transaction` to use lease mode"
)]
pub trait TransactionalStore: Store {
    /// The open transaction the handler receives (for PostgreSQL, `PgTransaction`, which
    /// derefs to sqlx's connection; for SQLite, a `sqlx::Transaction`).
    type Transaction: Send;

    /// Begins a transaction and claims the key in it. When acquired, the claimed row stays
    /// locked by the returned transaction until it commits or rolls back.
    ///
    /// `keep` is how long the call's completion will be kept. Nothing outside the transaction
    /// sees the claimed row before the commit, so a store may write a fresh key's record as
    /// completed already (with no output, kept for `keep`): the commit then completes the
    /// call, and [`commit_completion`](Self::commit_completion) of a completion with no output
    /// and that `keep` only commits, which saves a statement and a write (PostgreSQL does this;
    /// a completion with an output is still written in the transaction before the commit).
    async fn claim_in_transaction(
        &self,
        request: ClaimRequest<'_>,
        keep: Duration,
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
                keep: Duration,
            ) -> Result<TxClaim<Self::Transaction>, StoreError> {
                (**self).claim_in_transaction(request, keep).await
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

/// Hands the open transaction to a body future that was built before the claim (so the body
/// borrows the handler's parameters as in lease mode, and the future stays `Send`).
#[derive(Debug)]
pub struct TxSender<Tx>(oneshot::Sender<Tx>);

/// The body's end of a [`TxSender`].
#[derive(Debug)]
pub struct TxReceiver<Tx>(oneshot::Receiver<Tx>);

/// A sender and receiver of one transaction.
pub fn handoff<Tx>() -> (TxSender<Tx>, TxReceiver<Tx>) {
    let (sender, receiver) = oneshot::channel();
    (TxSender(sender), TxReceiver(receiver))
}

impl<Tx> TxReceiver<Tx> {
    /// The transaction. The runtime polls the body only after handing it over.
    pub async fn recv(self) -> Tx {
        self.0
            .await
            .expect("the runtime hands the transaction over before it runs the body")
    }
}

/// Transactional mode: claims inside a new transaction of `store`, hands the transaction to
/// `body` (which gives it back with its result), then commits the completion with the body's
/// writes on `Ok`, or rolls everything back on `Err` or a panic (then resumes the panic).
pub(crate) async fn execute_in_transaction<S, T, E, C, B>(
    store: &S,
    spec: Spec,
    codec: C,
    sender: TxSender<S::Transaction>,
    body: B,
) -> Result<Outcome<T>, Error<E>>
where
    S: TransactionalStore + ?Sized,
    C: Codec<T>,
    B: Future<Output = (S::Transaction, Result<T, E>)>,
{
    let span = spec.span();
    let meter = crate::metrics::CallMeter::start(spec.name);
    let handler = meter.handler();
    let result = async move {
        let prepared = Prepared::new(spec, std::time::Instant::now(), &Span::current())?;
        let (request, keep) = (prepared.request(), prepared.keep());
        let claimed = prepared
            .claim(&codec, || async move {
                let started = std::time::Instant::now();
                let claimed = store.claim_in_transaction(request, keep).await;
                handler.claim_took(started.elapsed());
                let TxClaim { claim, transaction } = claimed?;
                Ok((claim, transaction))
            })
            .await?;
        let (fence, transaction) = match claimed {
            Ok(acquired) => acquired,
            Err(settled) => return Ok(settled),
        };
        let Some(transaction) = transaction else {
            record_outcome("store_error");
            return Err(Error::Store(
                StoreError::msg("the store acquired a claim without an open transaction")
                    .during(Operation::Claim),
            ));
        };
        // No lease renewal: the open transaction holds the claimed row, and if the call is
        // dropped or the process dies, the transaction (claim and writes) rolls back.
        if sender.0.send(transaction).is_err() {
            unreachable!("the body, which holds the receiver, has not run yet");
        }
        let key = prepared.key();
        let context = CallContext::new(key.clone(), fence, store.shared());
        // A panic drops the body, and with it the transaction: it rolls back.
        let started = std::time::Instant::now();
        let body_result = catch_unwind(context.scope(body)).await;
        handler.body_took(started.elapsed());
        let (transaction, result) = match body_result {
            Ok(returned) => returned,
            Err(panic) => {
                record_outcome("panicked");
                resume_unwind(panic);
            }
        };
        let roll_back = |transaction| async {
            if let Err(e) = store.roll_back(transaction).await {
                tracing::warn!(error = %e, "rolling back failed; the connection drops it");
            }
        };
        let value = match result {
            Err(e) => {
                roll_back(transaction).await;
                record_outcome("handler_error");
                return Err(Error::Handler(e));
            }
            Ok(value) => value,
        };
        let output = match codec.encode(&value) {
            Ok(output) => output,
            Err(e) => {
                roll_back(transaction).await;
                record_outcome("codec_error");
                return Err(Error::Codec(e));
            }
        };
        let completion = Completion {
            output: output.as_deref(),
            keep: prepared.keep(),
        };
        match store
            .commit_completion(transaction, key, fence, completion)
            .await
        {
            Ok(Fenced::Applied) => {
                record_outcome("executed");
                Ok(Outcome::Executed(value))
            }
            Ok(Fenced::Lost) => {
                record_outcome("lost_claim");
                Err(Error::LostClaim {
                    key: key.as_str().to_owned(),
                })
            }
            Err(e) => {
                record_outcome("store_error");
                tracing::error!(error = %e, "commit failed; the handler's writes rolled back");
                Err(Error::Store(e.during(Operation::Complete)))
            }
        }
    }
    .instrument(span)
    .await;
    meter.finish(result)
}
