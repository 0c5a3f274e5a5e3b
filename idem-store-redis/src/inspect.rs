//! [`Inspect`] for [`RedisStore`]: records are found by scanning the prefix on every node, so
//! listings and counts read every record (an operator's occasional look, not a hot path).

use async_trait::async_trait;
use idem_core::{
    ExpiredCounts, Fence, Fenced, Inspect, InspectedEffect, InspectedRecord, Key, RecordCursor,
    RecordFilter, RecordPage, RecordState, RecordStatus, RecordSummary, ScopeCounts, Store,
    StoreError,
};
use std::time::{Duration, SystemTime};

use crate::keys;
use crate::scripts;
use crate::store::store_error;
use crate::RedisStore;

impl RedisStore {
    /// The record of `key`, with its holder.
    async fn inspect_one(&self, key: &Key) -> Result<Option<InspectedRecord>, StoreError> {
        let holder: Option<String> = redis::cmd("HGET")
            .arg(keys::record(&self.prefix, key))
            .arg("h")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(self.get(key).await?.map(|record| {
            let output_bytes = match &record.state {
                RecordState::Completed { output, .. } => output.as_ref().map(|o| o.len() as u64),
                RecordState::InProgress { .. } => None,
            };
            InspectedRecord {
                record,
                holder: holder.filter(|h| !h.is_empty()),
                output_bytes,
            }
        }))
    }

    /// Every record under the prefix (a `SCAN` of every node), with its holder.
    async fn every_record(&self) -> Result<Vec<InspectedRecord>, StoreError> {
        let mut found = Vec::new();
        for name in self.scan().await? {
            let Some((scope, key)) = keys::parse_record(&self.prefix, &name) else {
                continue;
            };
            let Ok(key) = Key::new(key).and_then(|k| k.with_scope(scope)) else {
                continue;
            };
            if let Some(inspected) = self.inspect_one(&key).await? {
                found.push(inspected);
            }
        }
        Ok(found)
    }

    /// The journal of one scoped `key`: each effect's name and entry, by name (expired ones
    /// included, until Redis or a purge deletes them).
    async fn journal_of(&self, key: &Key) -> Result<Vec<InspectedEffect>, StoreError> {
        let pattern = keys::effects_pattern(&self.prefix, key);
        let base = keys::effect(&self.prefix, key, "");
        let mut entries = Vec::new();
        for name in self.scan_matching(&pattern).await? {
            let Some(effect) = std::str::from_utf8(&name)
                .ok()
                .and_then(|n| n.strip_prefix(&base))
            else {
                continue;
            };
            if let Some(entry) = self.effect(key, effect).await? {
                entries.push(InspectedEffect {
                    scope: key.scope().to_owned(),
                    effect: effect.to_owned(),
                    entry,
                    recorded_at: None,
                    expires_at: None,
                });
            }
        }
        entries.sort_by(|a, b| a.effect.cmp(&b.effect));
        Ok(entries)
    }
}

/// When a record was last settled: its completion, else its lease's end (what "newest" means
/// in a listing, as in the SQL stores).
fn newest(record: &InspectedRecord) -> SystemTime {
    match &record.record.state {
        RecordState::Completed { completed_at, .. } => *completed_at,
        RecordState::InProgress { lease_expires_at } => *lease_expires_at,
    }
}

fn scoped(key: &str, scope: &str) -> Result<Key, StoreError> {
    Key::new(key)
        .and_then(|k| k.with_scope(scope.to_owned()))
        .map_err(|e| StoreError::msg(e.to_string()))
}

impl RedisStore {
    /// Every record `filter` selects (its limit aside), in no order.
    async fn selected(&self, filter: &RecordFilter) -> Result<Vec<InspectedRecord>, StoreError> {
        let now = SystemTime::now();
        Ok(self
            .every_record()
            .await?
            .into_iter()
            .filter(|r| filter.status.is_none_or(|s| r.status(now) == s))
            .filter(|r| {
                filter
                    .scope
                    .as_deref()
                    .is_none_or(|s| r.record.key.scope() == s)
            })
            .filter(|r| {
                filter
                    .key_prefix
                    .as_deref()
                    .is_none_or(|p| r.record.key.as_str().starts_with(p))
            })
            .collect())
    }
}

#[async_trait]
impl Inspect for RedisStore {
    async fn find(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<InspectedRecord>, StoreError> {
        let mut found: Vec<_> = match scope {
            Some(scope) => self
                .inspect_one(&scoped(key, scope)?)
                .await?
                .into_iter()
                .collect(),
            None => self
                .every_record()
                .await?
                .into_iter()
                .filter(|i| i.record.key.as_str() == key)
                .collect(),
        };
        found.sort_by(|a, b| a.record.key.scope().cmp(b.record.key.scope()));
        Ok(found)
    }

    async fn list(&self, filter: &RecordFilter) -> Result<Vec<InspectedRecord>, StoreError> {
        let mut found = self.selected(filter).await?;
        found.sort_by_key(|r| std::cmp::Reverse(newest(r)));
        found.truncate(filter.limit);
        Ok(found)
    }

    /// Redis keeps no order of its keys: every page reads every record of the store's prefix
    /// (`SCAN`, as `list` does), then sorts what `filter` selects and returns the part after
    /// `after`. An operator's look, not a hot path.
    async fn page(
        &self,
        filter: &RecordFilter,
        after: Option<&RecordCursor>,
    ) -> Result<RecordPage, StoreError> {
        let order = |r: &InspectedRecord| {
            (
                r.record.key.as_str().to_owned(),
                r.record.key.scope().to_owned(),
            )
        };
        let mut found: Vec<_> = self
            .selected(filter)
            .await?
            .into_iter()
            .filter(|r| after.is_none_or(|a| order(r) > (a.key.clone(), a.scope.clone())))
            .collect();
        found.sort_by_key(order);
        found.truncate(filter.limit);
        // Every record was read: a page that is not full is the last.
        Ok(RecordPage::new(found, filter, None))
    }

    async fn summary(&self, since: SystemTime) -> Result<RecordSummary, StoreError> {
        let now = SystemTime::now();
        let records = self.every_record().await?;
        let scopes = ScopeCounts::group(
            records
                .iter()
                .map(|r| (r.record.key.scope().to_owned(), r.status(now), 1)),
        );
        let mut minutes = std::collections::BTreeMap::<u64, u64>::new();
        for r in &records {
            if let RecordState::Completed { completed_at, .. } = r.record.state {
                if completed_at >= since {
                    let secs = completed_at
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    *minutes.entry(secs / 60 * 60).or_default() += 1;
                }
            }
        }
        Ok(RecordSummary {
            scopes,
            // Redis lists every record of the prefix for any page: all of them are counted.
            partial: false,
            completed_per_minute: minutes
                .into_iter()
                .map(|(secs, n)| (SystemTime::UNIX_EPOCH + Duration::from_secs(secs), n))
                .collect(),
        })
    }

    async fn release_lapsed(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        self.fenced(&scripts::RELEASE_LAPSED, key, &[fence.0]).await
    }

    async fn forget(&self, key: &Key) -> Result<bool, StoreError> {
        let deleted: i64 = scripts::FORGET
            .key(keys::record(&self.prefix, key))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(deleted == 1)
    }

    async fn journal(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<InspectedEffect>, StoreError> {
        let scopes: Vec<String> = match scope {
            Some(scope) => vec![scope.to_owned()],
            None => self
                .find(key, None)
                .await?
                .into_iter()
                .map(|r| r.record.key.scope().to_owned())
                .collect(),
        };
        let mut entries = Vec::new();
        for scope in scopes {
            entries.extend(self.journal_of(&scoped(key, &scope)?).await?);
        }
        Ok(entries)
    }

    /// Journal entries are not counted: Redis expires them by itself.
    async fn count_expired(&self) -> Result<ExpiredCounts, StoreError> {
        let now = SystemTime::now();
        let records = self
            .every_record()
            .await?
            .iter()
            .filter(|r| matches!(r.status(now), RecordStatus::Stale | RecordStatus::Expired))
            .count();
        Ok(ExpiredCounts {
            records: records as u64,
            effects: 0,
        })
    }
}
