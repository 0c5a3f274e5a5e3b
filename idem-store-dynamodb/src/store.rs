//! `DynamoDbStore`: the claim lifecycle in DynamoDB, each step one conditional request.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use idem_core::clock::{Clock, SystemClock};
use idem_core::{
    Claim, ClaimRequest, ClaimToken, Completion, EffectEntry, EffectRecord, Fence, Fenced,
    Fingerprint, Key, Operation, Record, Store, StoreError,
};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::item::{
    self, at, duration_ms, millis, n, s, Item, Stored, COMPLETED, INPROGRESS, RELEASED,
};
use crate::layout::{own, record_id, TableLayout};

/// How long a lapsed claim's item stays before the table's TTL may delete it, by default (10
/// minutes): long enough that the next claim is reported as a takeover and `get` shows what
/// lapsed.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(600);

/// The largest answer the store records. DynamoDB refuses items over 400 KB; the rest of the
/// item (key, fence, times) fits in what is left.
pub const MAX_OUTPUT_BYTES: usize = 380 * 1024;

/// How many times a claim retries when its fence lost to the fence it found (a tombstone or
/// lapsed claim written by a host whose clock runs ahead): each retry takes a greater fence.
const FENCE_RETRIES: usize = 8;

/// An idem store in one DynamoDB table: a claim is one conditional `PutItem`, a completion,
/// release or renewal one conditional `UpdateItem` on the claim's fence, a journal write one
/// `TransactWriteItems`.
///
/// Times are the hosts' clocks (DynamoDB keeps none that a condition can read): leases and
/// `keep` are as exact as the clocks of the hosts that share the table agree.
#[derive(Clone)]
pub struct DynamoDbStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) table: String,
    pub(crate) layout: TableLayout,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) grace: Duration,
}

impl fmt::Debug for DynamoDbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbStore")
            .field("table", &self.inner.table)
            .field("layout", &self.inner.layout)
            .field("grace", &self.inner.grace)
            .finish()
    }
}

/// Builds a [`DynamoDbStore`]: [`DynamoDbStore::builder`].
#[derive(Debug)]
#[must_use]
pub struct DynamoDbStoreBuilder {
    client: Client,
    table: String,
    layout: TableLayout,
    clock: Option<Arc<dyn Clock>>,
    grace: Duration,
}

impl DynamoDbStoreBuilder {
    /// The table's layout (default: Powertools' attribute names, partition key `id`).
    pub fn layout(mut self, layout: TableLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Where the store reads the time (default: the system clock). Tests pass a
    /// [`ManualClock`](idem_core::clock::ManualClock) to let leases lapse without sleeping.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// How long a lapsed claim's item outlives its lease before the TTL may delete it (default
    /// [`DEFAULT_GRACE`]).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The store, if the layout names every attribute once.
    pub fn build(self) -> Result<DynamoDbStore, crate::InvalidLayout> {
        Ok(DynamoDbStore {
            inner: Arc::new(Inner {
                client: self.client,
                table: self.table,
                layout: self.layout.validated()?,
                clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
                grace: self.grace,
            }),
        })
    }
}

/// A failed request, with the SDK's whole chain of causes in the message.
pub(crate) fn failed<E>(
    e: SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
    op: Operation,
) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
{
    StoreError::new(
        format!("the DynamoDB store failed: {}", DisplayErrorContext(&e)),
        e,
    )
    .during(op)
}

/// A fence for a claim at `micros` (epoch microseconds): the time, or one more than the last
/// fence this process took if that is larger, so a process never takes one fence twice (for
/// two keys, or a clock that reads the same time twice or steps back).
fn next_fence(micros: u64) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = micros.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// The claim's inputs, owned: the request runs on a task of its own.
#[derive(Clone)]
struct Asked {
    key: Key,
    fingerprint: Option<Fingerprint>,
    lease: Duration,
    token: ClaimToken,
}

/// A claim's answer on its way to its caller. If it is dropped before the caller took it (the
/// caller went away while the request was out), an acquired claim is released, so the key is
/// not held for nobody until its lease lapses.
struct Answer {
    claim: Option<Result<Claim, StoreError>>,
    store: DynamoDbStore,
    key: Key,
}

impl Answer {
    fn take(mut self) -> Result<Claim, StoreError> {
        self.claim.take().expect("an answer is taken once")
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let Some(Ok(Claim::Acquired { fence, .. })) = self.claim.take() {
            tracing::info!(key = %self.key, "a claim's caller went away; releasing it");
            idem_core::release_in_background(self.store.shared(), &self.key, fence);
        }
    }
}

impl DynamoDbStore {
    /// A store in `table`, through `client`, with the default layout, clock and grace. The
    /// table must exist ([`create_table`](crate::create_table) makes one).
    pub fn new(client: Client, table: impl Into<String>) -> DynamoDbStore {
        DynamoDbStore::builder(client, table)
            .build()
            .expect("the default layout is valid")
    }

    /// A store to configure: its layout, clock and grace.
    pub fn builder(client: Client, table: impl Into<String>) -> DynamoDbStoreBuilder {
        DynamoDbStoreBuilder {
            client,
            table: table.into(),
            layout: TableLayout::default(),
            clock: None,
            grace: DEFAULT_GRACE,
        }
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// The table's layout.
    pub fn layout(&self) -> &TableLayout {
        &self.inner.layout
    }

    /// The client the store sends its requests through.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    pub(crate) fn now(&self) -> SystemTime {
        self.inner.clock.now()
    }

    /// The TTL value (epoch seconds) of an item that stops counting at `until` (ms) and may be
    /// deleted `grace` later.
    fn ttl(&self, until: u64, grace: Duration) -> u64 {
        until.div_ceil(1000) + grace.as_secs()
    }

    /// The claim itself: one conditional `PutItem`, again with a greater fence when the item it
    /// found holds a fence at least as great.
    async fn claim_now(&self, asked: &Asked) -> Result<Claim, StoreError> {
        let layout = &self.inner.layout;
        let now_at = self.now();
        let now = millis(now_at);
        let micros = now_at
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 4));
        let until = now.saturating_add(duration_ms(asked.lease));
        let mut fence = next_fence(micros);
        let token = asked.token;
        for _ in 0..FENCE_RETRIES {
            let mut item: Item = layout.item_key(record_id(&asked.key));
            item.insert(layout.status.clone(), s(INPROGRESS));
            item.insert(own::FENCE.into(), n(fence));
            item.insert(own::UNTIL.into(), n(until));
            item.insert(layout.in_progress_expiration.clone(), n(until));
            item.insert(
                layout.expiration.clone(),
                n(self.ttl(until, self.inner.grace)),
            );
            item.insert(own::HOLDER.into(), s(idem_core::holder()));
            item.insert(own::TOKEN.into(), n(token.0));
            if let Some(fp) = &asked.fingerprint {
                item.insert(layout.validation.clone(), s(fp.as_str()));
            }
            let put = self
                .inner
                .client
                .put_item()
                .table_name(&self.inner.table)
                .set_item(Some(item))
                .condition_expression(
                    "attribute_not_exists(#id) OR ((#until <= :now OR #st = :released \
                     OR (attribute_not_exists(#until) AND (#exp < :now_s \
                     OR (#st = :inprogress AND #ipe < :now)))) \
                     AND (attribute_not_exists(#fence) OR #fence < :fence))",
                )
                .expression_attribute_names("#id", layout.id_attr())
                .expression_attribute_names("#until", own::UNTIL)
                .expression_attribute_names("#st", &layout.status)
                .expression_attribute_names("#exp", &layout.expiration)
                .expression_attribute_names("#ipe", &layout.in_progress_expiration)
                .expression_attribute_names("#fence", own::FENCE)
                .expression_attribute_values(":now", n(now))
                .expression_attribute_values(":now_s", n(now / 1000))
                .expression_attribute_values(":released", s(RELEASED))
                .expression_attribute_values(":inprogress", s(INPROGRESS))
                .expression_attribute_values(":fence", n(fence))
                .return_values(ReturnValue::AllOld)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            let found = match put {
                Ok(out) => {
                    let taken_over = out
                        .attributes()
                        .and_then(|old| Stored::read(old, layout))
                        .is_some_and(|old| old.status != RELEASED);
                    return Ok(Claim::Acquired {
                        fence: Fence(fence),
                        lease_expires_at: at(until),
                        taken_over,
                    });
                }
                Err(SdkError::ServiceError(e)) => match e.into_err() {
                    PutItemError::ConditionalCheckFailedException(ccf) => ccf.item,
                    other => {
                        return Err(StoreError::new(
                            format!("the DynamoDB store failed: {}", DisplayErrorContext(&other)),
                            other,
                        )
                        .during(Operation::Claim))
                    }
                },
                Err(e) => return Err(failed(e, Operation::Claim)),
            };
            let Some(old) = found.as_ref().and_then(|old| Stored::read(old, layout)) else {
                return Err(StoreError::msg(format!(
                    "the DynamoDB store's claim of {} was refused, and the item it found has no \
                     {:?} attribute (another program writing to table {:?}?)",
                    asked.key, layout.status, self.inner.table
                ))
                .during(Operation::Claim));
            };
            if !old.live(now) {
                // Free, but it holds a fence at least ours (a faster clock wrote it).
                fence = fence.max(old.fence.saturating_add(1));
                continue;
            }
            let mismatch = matches!(
                (&old.fingerprint, &asked.fingerprint),
                (Some(stored), Some(asked)) if stored != asked.as_str()
            );
            return Ok(if mismatch {
                Claim::Mismatch
            } else if old.completed() {
                Claim::Completed {
                    completed_at: old.completed_at(),
                    output: old.output,
                }
            } else if old.status == INPROGRESS && old.token == Some(token.0) {
                Claim::Acquired {
                    fence: old.fence(),
                    lease_expires_at: at(old.until),
                    taken_over: false,
                }
            } else {
                Claim::InProgress {
                    lease_expires_at: at(old.until),
                }
            });
        }
        Err(StoreError::msg(format!(
            "the DynamoDB store could not take a fence for {} greater than the one stored after \
             {FENCE_RETRIES} tries (another writer keeps raising it)",
            asked.key
        ))
        .during(Operation::Claim))
    }

    /// An `UpdateItem` of `key`'s record, applied only while it holds `fence` and has one of
    /// `statuses`.
    fn fenced_update(&self, key: &Key, fence: Fence, statuses: &[&str]) -> UpdateItemFluentBuilder {
        let layout = &self.inner.layout;
        let allowed: Vec<String> = (0..statuses.len())
            .map(|i| format!("#st = :allowed{i}"))
            .collect();
        let mut update = self
            .inner
            .client
            .update_item()
            .table_name(&self.inner.table)
            .set_key(Some(layout.item_key(record_id(key))))
            .condition_expression(format!("#fence = :fence AND ({})", allowed.join(" OR ")))
            .expression_attribute_names("#fence", own::FENCE)
            .expression_attribute_names("#st", &layout.status)
            .expression_attribute_values(":fence", n(fence.0));
        for (i, status) in statuses.iter().enumerate() {
            update = update.expression_attribute_values(format!(":allowed{i}"), s(status));
        }
        update
    }

    /// Sends a fenced update: `Lost` when its condition failed.
    async fn send_fenced(
        &self,
        update: UpdateItemFluentBuilder,
        op: Operation,
    ) -> Result<Fenced, StoreError> {
        match update.send().await {
            Ok(_) => Ok(Fenced::Applied),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(Fenced::Lost)
            }
            Err(e) => Err(failed(e, op)),
        }
    }
}

#[async_trait]
impl Store for DynamoDbStore {
    /// The claim runs on a task of its own, so a caller that goes away while the request is out
    /// cannot leave it applied and unanswered: an acquired claim nobody took is released.
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let asked = Asked {
            key: request.key.clone(),
            fingerprint: request.fingerprint.cloned(),
            lease: request.lease,
            // Without a token of the caller's, one of this claim's own: a put applied whose
            // answer was lost (retried by the SDK, or sent again to undo it) finds its claim.
            token: request.token.unwrap_or_else(ClaimToken::random),
        };
        let (send, answer) = tokio::sync::oneshot::channel();
        let store = self.clone();
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StoreError::msg("the DynamoDB store runs on a Tokio runtime; there is none here")
                .during(Operation::Claim)
        })?;
        // On idem's pending work, so `idem_core::pending::drain` waits for it at shutdown.
        idem_core::pending::spawn(&runtime, async move {
            let claim = store.claim_now(&asked).await;
            if claim.is_err() {
                // The request may have been applied before its answer was lost (a timeout, a
                // broken connection): send it once more with its token, and release what it
                // finds its own. Once: during an outage this fails too, and the lease frees it.
                let (store, asked) = (store.clone(), asked.clone());
                idem_core::pending::spawn(&tokio::runtime::Handle::current(), async move {
                    if let Ok(Claim::Acquired { fence, .. }) = store.claim_now(&asked).await {
                        tracing::info!(key = %asked.key, "a claim that failed was applied; releasing it");
                        let _ = store.release(&asked.key, fence).await;
                    }
                });
            }
            let answer = Answer {
                claim: Some(claim),
                store,
                key: asked.key,
            };
            // Dropped (and undone) here if the caller left.
            let _ = send.send(answer);
        });
        match answer.await {
            Ok(answer) => answer.take(),
            Err(_) => Err(StoreError::msg(
                "the DynamoDB store's claim ended without an answer (its task panicked or the \
                 runtime is shutting down)",
            )
            .during(Operation::Claim)),
        }
    }

    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        if let Some(output) = completion.output {
            if output.len() > MAX_OUTPUT_BYTES {
                return Err(StoreError::msg(format!(
                    "the answer of {key} is {} bytes; a DynamoDB item holds at most 400 KB, so \
                     the store records answers up to {MAX_OUTPUT_BYTES} bytes (store a reference \
                     to it, or do not replay it)",
                    output.len()
                ))
                .during(Operation::Complete));
            }
        }
        let layout = &self.inner.layout;
        let now = millis(self.now());
        let until = now.saturating_add(duration_ms(completion.keep));
        let mut expression = String::from(
            "SET #st = :completed, #until = :until, #exp = :exp, #done = if_not_exists(#done, :now)",
        );
        let mut update = self
            .fenced_update(key, fence, &[INPROGRESS, COMPLETED])
            .expression_attribute_names("#until", own::UNTIL)
            .expression_attribute_names("#exp", &layout.expiration)
            .expression_attribute_names("#done", own::COMPLETED)
            .expression_attribute_names("#data", &layout.data)
            .expression_attribute_values(":completed", s(COMPLETED))
            .expression_attribute_values(":until", n(until))
            // A completed record expires with its keep, as Powertools reads `expiration`.
            .expression_attribute_values(":exp", n(self.ttl(until, Duration::ZERO)))
            .expression_attribute_values(":now", n(now));
        match completion.output {
            Some(output) => {
                expression.push_str(", #data = :data");
                update = update.expression_attribute_values(":data", item::output_value(output));
            }
            None => expression.push_str(" REMOVE #data"),
        }
        self.send_fenced(update.update_expression(expression), Operation::Complete)
            .await
    }

    /// Leaves a tombstone holding the fence (the next claim's is greater), which counts as no
    /// record.
    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        let layout = &self.inner.layout;
        let now = millis(self.now());
        let update = self
            .fenced_update(key, fence, &[INPROGRESS])
            .update_expression(
                "SET #st = :released, #until = :now, #exp = :exp REMOVE #data, #val, #tok",
            )
            .expression_attribute_names("#until", own::UNTIL)
            .expression_attribute_names("#exp", &layout.expiration)
            .expression_attribute_names("#data", &layout.data)
            .expression_attribute_names("#val", &layout.validation)
            .expression_attribute_names("#tok", own::TOKEN)
            .expression_attribute_values(":released", s(RELEASED))
            .expression_attribute_values(":now", n(now))
            // Already past for Powertools (`expiration < now`), which may claim over it at once.
            .expression_attribute_values(":exp", n((now / 1000).saturating_sub(1)));
        self.send_fenced(update, Operation::Release).await
    }

    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        let layout = &self.inner.layout;
        let until = millis(self.now()).saturating_add(duration_ms(lease));
        let update = self
            .fenced_update(key, fence, &[INPROGRESS])
            .update_expression("SET #until = :until, #ipe = :until, #exp = :exp")
            .expression_attribute_names("#until", own::UNTIL)
            .expression_attribute_names("#ipe", &layout.in_progress_expiration)
            .expression_attribute_names("#exp", &layout.expiration)
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":exp", n(self.ttl(until, self.inner.grace)));
        self.send_fenced(update, Operation::Renew).await
    }

    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        let layout = &self.inner.layout;
        let found = self
            .inner
            .client
            .get_item()
            .table_name(&self.inner.table)
            .set_key(Some(layout.item_key(record_id(key))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| failed(e, Operation::Get))?;
        let Some(stored) = found.item().and_then(|item| Stored::read(item, layout)) else {
            return Ok(None);
        };
        if stored.status == RELEASED {
            return Ok(None);
        }
        Ok(Some(Record {
            key: key.clone(),
            fence: stored.fence(),
            fingerprint: stored.fingerprint(),
            state: stored.state(),
        }))
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    /// Frees the key at once, on the current Tokio runtime (without one, at the latest when
    /// the lease lapses).
    fn abandon(&self, key: &Key, fence: Fence) {
        idem_core::release_in_background(self.shared(), key, fence);
    }

    /// Nothing to do: the claim's request runs on a task of its own, which releases a claim
    /// acquired for a caller that left (see [`claim`](Store::claim)). Sending the claim again
    /// instead could overtake the first request on another connection.
    fn abandon_claim(&self, request: ClaimRequest<'_>) {
        let _ = request;
    }

    async fn effect(&self, key: &Key, effect: &str) -> Result<Option<EffectEntry>, StoreError> {
        self.read_effect(key, effect).await
    }

    async fn record_effect(
        &self,
        key: &Key,
        fence: Fence,
        record: EffectRecord<'_>,
    ) -> Result<Fenced, StoreError> {
        self.write_effect(key, fence, record).await
    }
}
