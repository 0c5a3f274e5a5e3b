//! What the roles of one running set of workers share.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::job::Job;
use crate::outcome::Failure;
use crate::queue::Queue;
use crate::worker::held::Holder;

/// A running handler.
pub(crate) type BoxFuture =
    Pin<Box<dyn Future<Output = Result<serde_json::Value, Failure>> + Send>>;

/// A job handler, its result as JSON and its error turned into a [`Failure`].
pub(crate) type Handler = Arc<dyn Fn(Job) -> BoxFuture + Send + Sync>;

/// What the roles of one set of workers share.
pub(crate) struct Shared {
    pub queue: Queue,
    pub handler: Handler,
    pub backoff: Backoff,
    pub timeout: Option<Duration>,
    /// The workers as the holder of their claims: name, lease, the claims held.
    pub holder: Arc<Holder>,
    /// Set at the shutdown's deadline: running handlers are cut there, and their calls settle
    /// (a job whose handler had finished is recorded as done, never cut and run again).
    pub cut: tokio::sync::watch::Sender<bool>,
    /// Jobs whose handlers were cut at the deadline and given back to the queue.
    pub cut_released: AtomicUsize,
}
