//! The current call: reachable from code nested anywhere under an idempotent body, without
//! threading a parameter through every call (like `tracing`'s current span).
//!
//! ```
//! use idem_core::{context, idempotent, MemoryStore};
//!
//! async fn charge(customer: &str) -> String {
//!     // Deep inside the handler: derive the provider's idempotency key from the job's key.
//!     let call = context::current().expect("inside an idempotent call");
//!     call.sub_key(&format!("charge:{customer}")).unwrap().into_string()
//! }
//!
//! #[idempotent(key = "invoice-run:{period}", store = store)]
//! async fn invoice_run(store: &MemoryStore, period: &str) -> Result<Vec<String>, std::io::Error> {
//!     Ok(vec![charge("cust_42").await, charge("cust_7").await])
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let keys = invoice_run(&MemoryStore::new(), "2026-11").await.unwrap().into_value().unwrap();
//! assert_eq!(keys, ["invoice-run:2026-11/charge:cust_42", "invoice-run:2026-11/charge:cust_7"]);
//! # }
//! ```
//!
//! **Spawned tasks** do not inherit the context (a task-local belongs to its task). Wrap the
//! spawned future with [`propagate`] to carry it along:
//! `tokio::spawn(context::propagate(async { .. }))`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::key::{InvalidKey, Key};
use crate::store::{Fence, Store};

tokio::task_local! {
    static CURRENT: CallContext;
}

/// The idempotent call whose body the current task is running. Cheap to clone (shared).
#[derive(Clone)]
pub struct CallContext(Arc<Shared>);

/// What a call's body, its journal and its lease renewal share.
struct Shared {
    key: Key,
    fence: Fence,
    /// The store the call claimed its key in, for the [journal](crate::journal) and renewal.
    store: Arc<dyn Store>,
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("key", &self.0.key)
            .field("fence", &self.0.fence)
            .finish_non_exhaustive()
    }
}

impl CallContext {
    pub(crate) fn new(key: Key, fence: Fence, store: Arc<dyn Store>) -> CallContext {
        CallContext(Arc::new(Shared { key, fence, store }))
    }

    /// The store the call claimed its key in.
    pub(crate) fn store(&self) -> &dyn Store {
        &*self.0.store
    }

    /// The call's key.
    pub fn key(&self) -> &Key {
        &self.0.key
    }

    /// The claim's fencing token.
    pub fn fence(&self) -> Fence {
        self.0.fence
    }

    /// A named sub-key for one effect of this run: `<key>/<name>`, for example
    /// `invoice-run:2026-11/charge:cust_42`. It is the same on every retry of the same work, and
    /// different for each effect, so two charges in one run never share a provider key.
    /// It is validated like any key (at most 512 bytes, no control characters).
    pub fn sub_key(&self, name: &str) -> Result<Key, InvalidKey> {
        Key::new(format!("{}/{name}", self.0.key))
    }

    /// Runs `future` with this context as the current one.
    pub fn scope<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self, future)
    }
}

/// The current call, when the caller runs inside an idempotent body (in its own task).
pub fn current() -> Option<CallContext> {
    CURRENT.try_with(CallContext::clone).ok()
}

/// Carries the current call's context (if any) into `future`, for a task it will be spawned as.
pub fn propagate<F: Future>(future: F) -> Propagated<F> {
    match current() {
        Some(context) => Propagated::Scoped(Box::pin(CURRENT.scope(context, future))),
        None => Propagated::Plain(Box::pin(future)),
    }
}

/// The future [`propagate`] returns.
pub enum Propagated<F: Future> {
    /// With a context.
    Scoped(Pin<Box<tokio::task::futures::TaskLocalFuture<CallContext, F>>>),
    /// There was none to carry.
    Plain(Pin<Box<F>>),
}

impl<F: Future> Future for Propagated<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        match self.get_mut() {
            Propagated::Scoped(future) => future.as_mut().poll(cx),
            Propagated::Plain(future) => future.as_mut().poll(cx),
        }
    }
}
