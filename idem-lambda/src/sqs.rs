//! SQS batches: each record claimed and run once, failures reported back as a partial batch
//! response.

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_runtime::{service_fn, Context, LambdaEvent, Service};
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use crate::{EventKey, Idempotency};

impl EventKey<SqsMessage> {
    /// A record's `messageId`: SQS delivers a message again under the same id (after a failure
    /// or a visibility timeout), so a redelivery is a duplicate. To treat two messages with
    /// the same content as one, key on the body instead:
    /// `EventKey::path("powertools_json(body).order_id")`.
    pub fn message_id() -> EventKey<SqsMessage> {
        EventKey::from_fn(|message: &SqsMessage| message.message_id.clone().unwrap_or_default())
    }
}

impl Idempotency {
    /// An SQS batch handler: `handler` runs once per record key, records in order. A record
    /// already done is acknowledged without running; a record whose handler failed, or that
    /// another invocation is running, is reported in `batchItemFailures`, so SQS delivers it
    /// again and leaves the rest deleted (turn on `ReportBatchItemFailures` on the event source
    /// mapping). On a FIFO queue, once a record of a message group failed, the group's later
    /// records in the batch are reported failed without running, so the group stays in order,
    /// while other groups go on (Powertools' `skip_group_on_error`; SQS's own advice is to stop
    /// the whole batch, which keeps every group in order too, at the cost of redelivering
    /// groups that had nothing to do with the failure).
    pub fn sqs<F, Fut>(
        &self,
        key: EventKey<SqsMessage>,
        handler: F,
    ) -> impl Service<LambdaEvent<SqsEvent>, Response = SqsBatchResponse, Error = lambda_runtime::Error>
    where
        F: Fn(SqsMessage, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), lambda_runtime::Error>> + Send,
    {
        let this = self.clone();
        let handler = Arc::new(handler);
        service_fn(move |event: LambdaEvent<SqsEvent>| {
            let (this, key, handler) = (this.clone(), key.clone(), handler.clone());
            async move { this.batch(&key, &*handler, event).await }
        })
    }

    async fn batch<F, Fut>(
        &self,
        key: &EventKey<SqsMessage>,
        handler: &F,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, lambda_runtime::Error>
    where
        F: Fn(SqsMessage, Context) -> Fut,
        Fut: Future<Output = Result<(), lambda_runtime::Error>>,
    {
        let (batch, context) = event.into_parts();
        let mut response = SqsBatchResponse::default();
        let mut failed_groups: HashSet<String> = HashSet::new();
        for record in batch.records {
            let Some(id) = record.message_id.clone() else {
                return Err(
                    "an SQS record has no messageId, so its failure could not be \
                            reported; the whole batch failed and returns to the queue"
                        .into(),
                );
            };
            let fifo = record
                .event_source_arn
                .as_deref()
                .is_some_and(|arn| arn.ends_with(".fifo"));
            let group = record
                .attributes
                .get("MessageGroupId")
                .cloned()
                .unwrap_or_default();
            if fifo && failed_groups.contains(&group) {
                response.add_failure(id);
                continue;
            }
            let done = match key.key_of(&record) {
                Ok(picked) => {
                    let record_context = context.clone();
                    self.run_once(picked, &context, async move {
                        handler(record, record_context).await
                    })
                    .await
                }
                Err(e) => Err(e.into()),
            };
            if let Err(e) = done {
                tracing::warn!(message_id = %id, error = %e, "an SQS record failed; it is reported for redelivery");
                response.add_failure(id);
                if fifo {
                    failed_groups.insert(group);
                }
            }
        }
        Ok(response)
    }
}
