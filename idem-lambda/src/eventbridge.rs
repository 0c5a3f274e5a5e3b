//! EventBridge events, scheduled ones included, keyed by the event's id.

use aws_lambda_events::eventbridge::EventBridgeEvent;
use idem_core::Replayable;
use lambda_runtime::{LambdaEvent, Service};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;

use crate::{EventKey, Idempotency};

impl Idempotency {
    /// An EventBridge handler keyed by the event's `id`: EventBridge delivers at least once,
    /// and Lambda retries a failed asynchronous invocation with the same event, so a scheduled
    /// rule's firing runs once however often it arrives. An event without an id fails.
    pub fn eventbridge<T, R, F, Fut>(
        &self,
        handler: F,
    ) -> impl Service<LambdaEvent<EventBridgeEvent<T>>, Response = R, Error = lambda_runtime::Error>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        R: Replayable + Send + 'static,
        F: Fn(LambdaEvent<EventBridgeEvent<T>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, lambda_runtime::Error>> + Send,
    {
        let key =
            EventKey::from_fn(|event: &EventBridgeEvent<T>| event.id.clone().unwrap_or_default());
        self.handler(key, handler)
    }
}
