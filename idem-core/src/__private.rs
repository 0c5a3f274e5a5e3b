//! Not public API. What `#[idempotent]` expands to, behind one path that can change with
//! idem-core's version without breaking generated code.

pub use crate::call::Call;
pub use crate::codec::{JsonReplay, NoReplay};
pub use crate::error::{CodecError, Error};
pub use crate::execute::{Caught, TxBegun, TxPending};
pub use crate::fingerprint::Fingerprint;
pub use crate::key::{InvalidKey, Key};
pub use crate::keyed::KeyedClient;
pub use crate::outcome::Outcome;
pub use crate::store::Store;
pub use crate::transactional::TransactionalStore;
pub use core::result::Result;
pub use core::time::Duration;
pub use tracing::Instrument;

/// Renders a key template's arguments into a validated key.
#[inline]
pub fn render_key(args: core::fmt::Arguments<'_>) -> Result<Key, InvalidKey> {
    match args.as_str() {
        Some(fixed) => Key::new(fixed),
        None => Key::new(std::fmt::format(args)),
    }
}

/// Views any kind of store (a concrete store, a reference, `&dyn Store`, `Arc<dyn Store>`,
/// `Box<dyn Store>`) as `&dyn Store`. A non-store expression fails here, with the error on it.
#[inline]
pub fn as_store<S: Store>(store: &S) -> &dyn Store {
    store
}

/// Checks that a `transaction = ..` store supports transactions. A store that does not fails
/// here, with the error on the `store` expression.
#[inline]
pub fn as_transactional<S: TransactionalStore>(store: &S) -> &S {
    store
}

/// Runs the body, turning a panic into `Err(payload)` so the claim can be settled first.
pub async fn catch_unwind<F: core::future::Future>(
    work: F,
) -> Caught<<F::Output as BodyResult>::Ok, <F::Output as BodyResult>::Err>
where
    F::Output: BodyResult,
{
    crate::execute::catch_unwind(async { work.await.into_result() }).await
}

/// The `Result<T, E>` a body returns, named by its parts.
pub trait BodyResult {
    /// `T`.
    type Ok;
    /// `E`.
    type Err;
    /// Itself.
    fn into_result(self) -> Result<Self::Ok, Self::Err>;
}

impl<T, E> BodyResult for Result<T, E> {
    type Ok = T;
    type Err = E;
    fn into_result(self) -> Result<T, E> {
        self
    }
}

/// `client`'s keyed view for the current call; a client that has none fails here, with the
/// error on its name in `clients(..)`.
pub fn keyed<C: KeyedClient>(client: &C) -> C::Keyed<'_> {
    client.keyed(current_key())
}

/// The current call's key, for rebinding `clients(..)` inside the body.
pub fn current_key() -> Key {
    crate::context::current()
        .map(|call| call.key().clone())
        .expect("`clients(..)` rebinding runs inside the claimed body")
}
