//! Any handler made idempotent: its key from the event, its answer replayed to duplicates.

use idem_core::Replayable;
use lambda_runtime::{service_fn, LambdaEvent, Service};
use std::future::Future;
use std::sync::Arc;

use crate::{EventKey, Idempotency};

impl Idempotency {
    /// `handler`, made idempotent: the first invocation with an event's key runs it and stores
    /// its answer; a duplicate invocation (a retry, a second delivery) gets the stored answer
    /// without running it; one that arrives while the first runs fails with
    /// [`AlreadyInProgress`](crate::AlreadyInProgress). The claim lasts until the invocation's
    /// deadline. A handler error releases the key, so a retry runs it again.
    ///
    /// Hand the result to `lambda_runtime::run`.
    pub fn handler<E, R, F, Fut>(
        &self,
        key: EventKey<E>,
        handler: F,
    ) -> impl Service<LambdaEvent<E>, Response = R, Error = lambda_runtime::Error>
    where
        E: Send + 'static,
        R: Replayable + Send + 'static,
        F: Fn(LambdaEvent<E>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, lambda_runtime::Error>> + Send,
    {
        let this = self.clone();
        let handler = Arc::new(handler);
        service_fn(move |event: LambdaEvent<E>| {
            let (this, key, handler) = (this.clone(), key.clone(), handler.clone());
            async move {
                let picked = key.key_of(&event.payload)?;
                let context = event.context.clone();
                // The handler is called only once the claim is held: a closure that does work
                // before returning its future would otherwise do it for every duplicate.
                this.run(picked, &context, async move { handler(event).await })
                    .await
            }
        })
    }
}
