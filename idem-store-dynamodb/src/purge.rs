//! Deleting expired items sooner than the table's TTL does (DynamoDB deletes expired items
//! within days, and a local server never).

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use idem_core::{Operation, Purge, StoreError};

use crate::item::{millis, n, s, Stored, RELEASED};
use crate::layout::{is_effect, own};
use crate::store::{failed, DynamoDbStore};

/// Items a scan reads per page.
const SCAN_PAGE: i32 = 1000;

/// `purge_expired` scans the table for items past their end (claims whose lease lapsed,
/// completions past their `keep`, journal entries past theirs, released claims' tombstones) and
/// deletes each with a condition that it is still expired, so a key claimed again meanwhile
/// stays. A scan reads the whole table: on a large table, leave deletion to its TTL.
/// Tombstones are deleted but not counted: they are no record.
#[async_trait]
impl Purge for DynamoDbStore {
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        let inner = &self.inner;
        let layout = &inner.layout;
        let now = millis(self.now());
        let (mut records, mut effects) = (0usize, 0usize);
        let mut start = None;
        loop {
            let mut scan = inner
                .client
                .scan()
                .table_name(&inner.table)
                .consistent_read(true)
                .limit(SCAN_PAGE)
                .set_exclusive_start_key(start.take())
                .filter_expression("#until <= :now")
                .expression_attribute_names("#until", own::UNTIL)
                .expression_attribute_values(":now", n(now));
            if let Some((_, partition)) = &layout.sort_key {
                // Only this store's partition: other functions' records may share the table.
                scan = scan
                    .filter_expression("#until <= :now AND #pk = :pk")
                    .expression_attribute_names("#pk", &layout.partition_key)
                    .expression_attribute_values(":pk", s(partition));
            }
            let page = scan.send().await.map_err(|e| failed(e, Operation::Purge))?;
            for item in page.items() {
                let Some(id) = crate::item::text(item, layout.id_attr()) else {
                    continue;
                };
                let counted = if is_effect(id) {
                    &mut effects
                } else {
                    &mut records
                };
                let tombstone =
                    Stored::read(item, layout).is_some_and(|stored| stored.status == RELEASED);
                if !tombstone && *counted >= limit {
                    continue;
                }
                let key = layout.item_key(id.to_owned());
                let deleted = inner
                    .client
                    .delete_item()
                    .table_name(&inner.table)
                    .set_key(Some(key))
                    .condition_expression("#until <= :now")
                    .expression_attribute_names("#until", own::UNTIL)
                    .expression_attribute_values(":now", n(now))
                    .send()
                    .await;
                match deleted {
                    Ok(_) if !tombstone => *counted += 1,
                    Ok(_) => {}
                    Err(SdkError::ServiceError(e))
                        if matches!(
                            e.err(),
                            DeleteItemError::ConditionalCheckFailedException(_)
                        ) => {}
                    Err(e) => return Err(failed(e, Operation::Purge)),
                }
            }
            if records >= limit && effects >= limit {
                break;
            }
            match page.last_evaluated_key() {
                Some(last) => start = Some(last.clone()),
                None => break,
            }
        }
        Ok((records + effects) as u64)
    }
}
