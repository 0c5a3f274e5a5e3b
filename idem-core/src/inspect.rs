//! What a store tells its operator: records looked up or listed with who holds them, a key's
//! journal, what is due for a purge, and the one edit an operator makes that the runtime does
//! not (forgetting a completed record). The `idem` command and any page for operators call
//! this, so no tool writes a store's queries itself.

use async_trait::async_trait;
use std::time::SystemTime;

use crate::error::StoreError;
use crate::key::Key;
use crate::store::{EffectEntry, Purge, Record, RecordState};

/// A record with what an operator asks of it beyond [`Record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectedRecord {
    /// The record. A listing may leave a completed record's output out (`None`): see
    /// [`output_bytes`](Self::output_bytes).
    pub record: Record,
    /// Who claimed it (`host:pid`, [`holder`](crate::holder())), when the store keeps it.
    pub holder: Option<String>,
    /// The recorded output's size, in bytes.
    pub output_bytes: Option<u64>,
}

/// Where a record stands at a given time, as operators name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordStatus {
    /// Claimed, its lease live: a run holds it.
    Claimed,
    /// Claimed, its lease lapsed: the run that held it stopped; the next claim takes it over.
    Stale,
    /// Completed, and counted as done until its `keep` ends.
    Completed,
    /// Completed, its `keep` over: the key is new work again; a purge deletes it.
    Expired,
}

impl RecordStatus {
    /// The status's name: `claimed`, `stale`, `completed` or `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordStatus::Claimed => "claimed",
            RecordStatus::Stale => "stale",
            RecordStatus::Completed => "completed",
            RecordStatus::Expired => "expired",
        }
    }

    /// The status [`as_str`](Self::as_str) names, or `None`.
    pub fn parse(name: &str) -> Option<RecordStatus> {
        [
            RecordStatus::Claimed,
            RecordStatus::Stale,
            RecordStatus::Completed,
            RecordStatus::Expired,
        ]
        .into_iter()
        .find(|status| status.as_str() == name)
    }
}

impl InspectedRecord {
    /// Where the record stands at `now`.
    pub fn status(&self, now: SystemTime) -> RecordStatus {
        match &self.record.state {
            RecordState::InProgress { lease_expires_at } if *lease_expires_at > now => {
                RecordStatus::Claimed
            }
            RecordState::InProgress { .. } => RecordStatus::Stale,
            RecordState::Completed { expires_at, .. } if *expires_at > now => {
                RecordStatus::Completed
            }
            RecordState::Completed { .. } => RecordStatus::Expired,
        }
    }
}

/// Which records a listing returns: all of them by default, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFilter {
    /// Only records with this status (judged by the store's clock).
    pub status: Option<RecordStatus>,
    /// Only records of this scope.
    pub scope: Option<String>,
    /// Only keys starting with this.
    pub key_prefix: Option<String>,
    /// At most this many.
    pub limit: usize,
    /// At most this many records read for one [`page`](Inspect::page), matching or not
    /// (default [`PAGE_SCAN`]); [`list`](Inspect::list) ignores it.
    pub scan: usize,
}

impl Default for RecordFilter {
    fn default() -> Self {
        RecordFilter {
            status: None,
            scope: None,
            key_prefix: None,
            limit: 50,
            scan: PAGE_SCAN,
        }
    }
}

/// The most records a [`page`](Inspect::page) reads by default ([`RecordFilter::scan`]): a
/// filter that matches few records stops there, so no page a browser asks for reads a big
/// table whole.
pub const PAGE_SCAN: usize = 10_000;

/// A page of records in (key, scope) order ([`Inspect::page`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordPage {
    /// The records the filter selects, at most its `limit`.
    pub records: Vec<InspectedRecord>,
    /// Where the next page starts (pass it as `after`), or `None` when the page reached the
    /// end of the records. After a full page it is the page's last record; after a page that
    /// stopped at the filter's `scan` before it was full, the last record read, so the next
    /// page goes on searching from there.
    pub next: Option<RecordCursor>,
}

impl RecordPage {
    /// The page of `records` read with `filter`: full, it ends at its last record; not full, it
    /// ends where the store stopped reading (`scan_end`, `None` at the end of the records).
    pub fn new(
        records: Vec<InspectedRecord>,
        filter: &RecordFilter,
        scan_end: Option<RecordCursor>,
    ) -> RecordPage {
        let full = filter.limit > 0 && records.len() >= filter.limit;
        let next = match records.last() {
            Some(last) if full => Some(RecordCursor {
                key: last.record.key.as_str().to_owned(),
                scope: last.record.key.scope().to_owned(),
            }),
            _ => scan_end,
        };
        RecordPage { records, next }
    }
}

/// Where a page of records in key order resumes: just after this record
/// ([`Inspect::page`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordCursor {
    /// The last key of the page before.
    pub key: String,
    /// That record's scope.
    pub scope: String,
}

/// How many records of one scope stand in each status ([`Inspect::summary`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeCounts {
    /// The scope.
    pub scope: String,
    /// Claimed, the lease live.
    pub claimed: u64,
    /// Claimed, the lease lapsed.
    pub stale: u64,
    /// Completed, within their `keep`.
    pub completed: u64,
    /// Completed, past their `keep` (a purge deletes them).
    pub expired: u64,
}

impl ScopeCounts {
    /// Counts per scope, by scope, from (scope, status, how many) in any order: what each
    /// store's [`Inspect::summary`] makes of its rows.
    pub fn group(rows: impl IntoIterator<Item = (String, RecordStatus, u64)>) -> Vec<ScopeCounts> {
        let mut scopes = std::collections::BTreeMap::<String, ScopeCounts>::new();
        for (scope, status, n) in rows {
            scopes
                .entry(scope.clone())
                .or_insert_with(|| ScopeCounts {
                    scope,
                    ..ScopeCounts::default()
                })
                .add(status, n);
        }
        scopes.into_values().collect()
    }

    /// Adds `n` records in `status`.
    pub fn add(&mut self, status: RecordStatus, n: u64) {
        *match status {
            RecordStatus::Claimed => &mut self.claimed,
            RecordStatus::Stale => &mut self.stale,
            RecordStatus::Completed => &mut self.completed,
            RecordStatus::Expired => &mut self.expired,
        } += n;
    }
}

/// The most records a summary's counts read ([`Inspect::summary`]): an overview that anyone's
/// browser may ask for costs the same on a table of a billion records as on one of a hundred
/// thousand. Past it, [`RecordSummary::partial`] says the counts cover only the records read.
pub const SUMMARY_ROWS: u64 = 100_000;

/// What an overview shows of a store's records ([`Inspect::summary`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordSummary {
    /// Counts by status, one entry per scope, by scope: of every record, or (when
    /// [`partial`](Self::partial)) of the first [`SUMMARY_ROWS`] the store read.
    pub scopes: Vec<ScopeCounts>,
    /// The store holds more records than the counts read.
    pub partial: bool,
    /// Records completed in each minute since the time asked about (the start of the minute,
    /// and the count), oldest first; minutes with none are left out.
    pub completed_per_minute: Vec<(SystemTime, u64)>,
}

/// One entry of a key's journal, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectedEffect {
    /// The scope of the key it belongs to.
    pub scope: String,
    /// The effect's name within the key.
    pub effect: String,
    /// The entry.
    pub entry: EffectEntry,
    /// When it was written, when the store keeps that.
    pub recorded_at: Option<SystemTime>,
    /// When it stops counting, when the store keeps that (Redis expires entries itself).
    pub expires_at: Option<SystemTime>,
}

/// How much a purge would delete now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExpiredCounts {
    /// Expired records: lapsed claims and completions past their `keep`.
    pub records: u64,
    /// Expired journal entries (stores that expire entries themselves report none).
    pub effects: u64,
}

/// A store's answers to its operator: the capability the `idem` command builds on.
///
/// Releasing a stale claim is the store's own [`release`](crate::Store::release) (fenced: it
/// deletes only the claim the operator saw), and a purge is [`Purge`]'s.
#[async_trait]
pub trait Inspect: Purge {
    /// The records of `key`: in `scope`, or in every scope; ordered by scope.
    async fn find(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<InspectedRecord>, StoreError>;

    /// The records `filter` selects, newest first (by completion, else by lease end).
    async fn list(&self, filter: &RecordFilter) -> Result<Vec<InspectedRecord>, StoreError>;

    /// Up to `filter.limit` records `filter` selects, in (key, scope) order, starting just after
    /// `after` (at the start without one): keyset paging, which the SQL stores serve from their
    /// primary key, so a page deep into a large table costs what the first does. A page reads
    /// at most `filter.scan` records: one of rare matches stops there, not full, and its
    /// [`next`](RecordPage::next) goes on from where it stopped.
    async fn page(
        &self,
        filter: &RecordFilter,
        after: Option<&RecordCursor>,
    ) -> Result<RecordPage, StoreError>;

    /// Counts of records by scope and status (over at most [`SUMMARY_ROWS`] records), and
    /// completions per minute since `since`: what an overview shows.
    async fn summary(&self, since: SystemTime) -> Result<RecordSummary, StoreError>;

    /// Deletes the claim on `key` if it still holds `fence`, is not completed, and its lease
    /// has lapsed by the store's clock, in one step: a run that renewed its lease since the
    /// operator looked keeps its claim. What releasing a stale claim without force does.
    async fn release_lapsed(
        &self,
        key: &Key,
        fence: crate::store::Fence,
    ) -> Result<crate::store::Fenced, StoreError>;

    /// Deletes `key`'s record if it is completed (expired or not), so the key is new work;
    /// says whether it did. A claimed record is left alone: release it with its fence.
    async fn forget(&self, key: &Key) -> Result<bool, StoreError>;

    /// The journal entries of `key`: in `scope`, or in every scope.
    async fn journal(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<InspectedEffect>, StoreError>;

    /// How many records and journal entries have expired (what a purge would delete now).
    async fn count_expired(&self) -> Result<ExpiredCounts, StoreError>;
}

/// What [`release_claim`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// The claim was deleted: the next delivery runs the work.
    Released,
    /// No record has this key in this scope.
    NotFound,
    /// The record is completed: there is no claim to release (forget it to run the work again).
    Completed,
    /// The lease is live, so its run may still be going: releasing it would let the next
    /// delivery run beside it. Refused without `force`.
    Live {
        /// Who holds it, when the store keeps that.
        holder: Option<String>,
        /// The lease left.
        left: std::time::Duration,
    },
    /// The record no longer holds the fence the operator saw, or its lease was renewed
    /// (completed, renewed or taken over meanwhile): nothing was released.
    Changed,
}

/// Releases the claim on `key` that holds `fence` (the one the operator saw), by the rules
/// `idem release` and the dashboard share: a completed record is not a claim, a live lease is
/// refused unless `force` (its run may still be going), and the release is fenced, so a claim
/// taken over since is never deleted.
pub async fn release_claim<S: Inspect + ?Sized>(
    store: &S,
    key: &Key,
    fence: crate::store::Fence,
    force: bool,
) -> Result<Released, StoreError> {
    let now = SystemTime::now();
    let found = store.find(key.as_str(), Some(key.scope())).await?;
    let Some(record) = found.first() else {
        return Ok(Released::NotFound);
    };
    if record.record.fence != fence {
        return Ok(Released::Changed);
    }
    match (&record.record.state, record.status(now)) {
        (_, RecordStatus::Completed | RecordStatus::Expired) => return Ok(Released::Completed),
        (RecordState::InProgress { lease_expires_at }, RecordStatus::Claimed) if !force => {
            return Ok(Released::Live {
                holder: record.holder.clone(),
                left: lease_expires_at.duration_since(now).unwrap_or_default(),
            });
        }
        _ => {}
    }
    // Without force, the store checks the lease again as it deletes: a run that renewed its
    // lease since it was read above keeps its claim.
    let released = if force {
        store.release(key, fence).await?
    } else {
        store.release_lapsed(key, fence).await?
    };
    Ok(match released {
        crate::store::Fenced::Applied => Released::Released,
        crate::store::Fenced::Lost => Released::Changed,
    })
}
