//! The effect journal: one item per `(key, effect)`, written in a transaction with a check of
//! the key's record (it holds the writer's fence and is in progress).

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{ConditionCheck, Put, TransactWriteItem};
use idem_core::{
    EffectEntry, EffectRecord, EffectState, Fence, Fenced, Key, Operation, StoreError,
};

use crate::item::{self, duration_ms, millis, n, s, Item, Stored, DONE, INPROGRESS, STARTED};
use crate::layout::{effect_id, own, record_id};
use crate::store::{failed, DynamoDbStore};

/// How many times a journal write is sent again after DynamoDB cancelled its transaction for a
/// conflict with another transaction on the same items (nothing was written).
const CONFLICT_RETRIES: usize = 5;

impl DynamoDbStore {
    /// The journal entry of `effect` under `key`, unless it expired.
    pub(crate) async fn read_effect(
        &self,
        key: &Key,
        effect: &str,
    ) -> Result<Option<EffectEntry>, StoreError> {
        let store = self;
        let inner = &store.inner;
        let found = inner
            .client
            .get_item()
            .table_name(&inner.table)
            .set_key(Some(inner.layout.item_key(effect_id(key, effect))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| failed(e, Operation::JournalRead))?;
        let now = millis(store.now());
        let Some(entry) = found
            .item()
            .and_then(|item| Stored::read(item, &inner.layout))
        else {
            return Ok(None);
        };
        if !entry.live(now) {
            return Ok(None);
        }
        Ok(Some(EffectEntry {
            state: if entry.status == DONE {
                EffectState::Done
            } else {
                EffectState::Started
            },
            fence: entry.fence(),
            output: entry.output,
        }))
    }

    /// Writes a journal entry, if the record holds `fence` and is in progress, and the entry is not
    /// done.
    pub(crate) async fn write_effect(
        &self,
        key: &Key,
        fence: Fence,
        record: EffectRecord<'_>,
    ) -> Result<Fenced, StoreError> {
        let store = self;
        let inner = &store.inner;
        let layout = &inner.layout;
        let invalid = |e: aws_sdk_dynamodb::error::BuildError| {
            StoreError::new("the DynamoDB store could not build a journal write", e)
                .during(Operation::JournalWrite)
        };
        for _ in 0..CONFLICT_RETRIES {
            let now = millis(store.now());
            let until = now.saturating_add(duration_ms(record.keep));
            let check = ConditionCheck::builder()
                .table_name(&inner.table)
                .set_key(Some(layout.item_key(record_id(key))))
                .condition_expression("#fence = :fence AND #st = :inprogress")
                .expression_attribute_names("#fence", own::FENCE)
                .expression_attribute_names("#st", &layout.status)
                .expression_attribute_values(":fence", n(fence.0))
                .expression_attribute_values(":inprogress", s(INPROGRESS))
                .build()
                .map_err(invalid)?;
            let mut entry: Item = layout.item_key(effect_id(key, record.effect));
            let state = match record.state {
                EffectState::Started => STARTED,
                EffectState::Done => DONE,
            };
            entry.insert(layout.status.clone(), s(state));
            entry.insert(own::FENCE.into(), n(fence.0));
            entry.insert(own::UNTIL.into(), n(until));
            entry.insert(
                layout.expiration.clone(),
                n(until.div_ceil(1000) + inner.grace.as_secs()),
            );
            if let Some(output) = record.output {
                entry.insert(layout.data.clone(), item::output_value(output));
            }
            let put = Put::builder()
                .table_name(&inner.table)
                .set_item(Some(entry))
                // Never over a done entry that still counts.
                .condition_expression("attribute_not_exists(#id) OR #st <> :done OR #until <= :now")
                .expression_attribute_names("#id", layout.id_attr())
                .expression_attribute_names("#st", &layout.status)
                .expression_attribute_names("#until", own::UNTIL)
                .expression_attribute_values(":done", s(DONE))
                .expression_attribute_values(":now", n(now))
                .build()
                .map_err(invalid)?;
            let sent = inner
                .client
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().condition_check(check).build())
                .transact_items(TransactWriteItem::builder().put(put).build())
                .send()
                .await;
            match sent {
                Ok(_) => return Ok(Fenced::Applied),
                Err(SdkError::ServiceError(e)) => {
                    if let TransactWriteItemsError::TransactionCanceledException(cancelled) =
                        e.err()
                    {
                        let codes: Vec<&str> = cancelled
                            .cancellation_reasons()
                            .iter()
                            .filter_map(|reason| reason.code())
                            .collect();
                        if codes.contains(&"ConditionalCheckFailed") {
                            return Ok(Fenced::Lost);
                        }
                        if codes.contains(&"TransactionConflict") {
                            continue;
                        }
                    }
                    return Err(failed(SdkError::ServiceError(e), Operation::JournalWrite));
                }
                Err(e) => return Err(failed(e, Operation::JournalWrite)),
            }
        }
        Err(StoreError::msg(format!(
            "the DynamoDB store's journal write for {key} conflicted with other transactions \
         {CONFLICT_RETRIES} times; nothing was written"
        ))
        .during(Operation::JournalWrite))
    }
}
