//! `PgStore`: idem's records in PostgreSQL.

use async_trait::async_trait;
use idem_core::{
    Claim, ClaimRequest, Completion, EffectEntry, EffectRecord, Fence, Fenced, Key, Operation,
    Purge, Record, Store, StoreError,
};
use sqlx::PgPool;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::batch::{self, Batcher};
use crate::connections::{on_conn, retry_budget, Attempts, Direct, Resend, Source, Tuning};
use crate::duplicate_rate::DuplicateRate;
use crate::error::store_error;
use crate::fences::Fences;
use crate::ident::validate_ident;
use crate::records::{self, fenced, OwnedClaim, OwnedCompletion, PurgeCursor, RecordsSql};

/// The default schema and table: `public.idem_records`.
pub const DEFAULT_SCHEMA: &str = "public";
/// See [`DEFAULT_SCHEMA`].
pub const DEFAULT_TABLE: &str = "idem_records";

/// idem's records in PostgreSQL, shared by every process that uses the same database.
///
/// Each [`Store`] operation is one SQL statement (one round trip): a fresh call costs two
/// (claim, complete), a duplicate one. Lease expiry is judged by the database's `now()`, so app
/// servers with skewed clocks agree. Run [`PgStore::migrate`] once at start-up.
///
/// **Connections and batching, by default.** The store runs its statements on up to half of
/// the pool's `max_connections`, which it takes from the pool as it needs them and keeps (see
/// [`PgStoreBuilder::dedicated_connections`] and [`PgStoreBuilder::through_pool`] for the
/// alternatives). Claims of concurrent calls share one statement, and so do their
/// completions: a batch is whatever queued while the previous statement was on the wire, so a
/// lone call is sent at once and waits for nothing, and under load many calls cost one round
/// trip ([`PgStoreBuilder::batching`]). Each call in a batch is answered as if it had been
/// alone; a batch never holds two calls for one key; a batch the database refuses is sent
/// again call by call, so a failure is reported to its own call only, and a batch that cannot
/// reach the database fails each of its calls at once. Transactional mode's
/// transactions run on those connections too, lent for the transaction's length (all but the
/// few lease mode's statements need), and on the pool's when none is free to lend, once the
/// store holds those few (so transactions never leave lease mode without connections; see
/// [`PgTransaction`](crate::PgTransaction)).
///
/// ```no_run
/// # use idem_postgres_core as idem_store_postgres;
/// use idem_core::{idempotent, Outcome};
/// use idem_store_postgres::{sqlx::PgPool, PgStore};
///
/// struct App { store: PgStore }
///
/// #[idempotent(key = "reminder:{user_id}", store = app.store)]
/// async fn send_reminder(app: &App, user_id: u64) -> Result<(), std::io::Error> {
///     Ok(())
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
/// let store = PgStore::new(pool);
/// store.migrate().await?;
/// let app = App { store };
/// assert!(send_reminder(&app, 42).await?.is_executed());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    shared: Arc<Shared>,
}

struct Shared {
    schema: String,
    table: String,
    sql: RecordsSql,
    direct: Option<Arc<Direct>>,
    batches: Option<Batches>,
    /// How often transactional claims find their key settled.
    tx_duplicates: DuplicateRate,
    /// Fences for fresh transactional claims (`fresh_claim.rs`).
    fences: Fences,
    /// Whether a transactional call claims a fresh key with its BEGIN.
    claim_with_begin: bool,
}

/// Claims of concurrent calls, in one statement (`lease_ops.rs`).
pub(crate) struct ClaimOp;

/// Completions of concurrent calls, in one statement (`lease_ops.rs`).
pub(crate) struct CompleteOp;

/// The queues of lease mode's batched operations.
pub(crate) struct Batches {
    pub claims: Arc<Batcher<ClaimOp>>,
    pub completions: Arc<Batcher<CompleteOp>>,
}

/// Where the store's statements run.
#[derive(Debug, Clone, Copy)]
enum Connections {
    /// Connections held from the pool: half of its `max_connections` (none of a pool of one).
    HeldFromPool,
    /// Connections of the store's own, apart from the pool: this many.
    Dedicated(usize),
    /// A connection checked out of the pool for each statement.
    Pooled,
}

impl<'s> Attempts<'s> {
    /// The tries of one statement on `store`'s connections, set up for the store's own
    /// statements (generic plans, the store's lock timeout).
    pub fn new(store: &'s PgStore, resend: Resend) -> Attempts<'s> {
        let retries = match resend {
            Resend::Never => 0,
            Resend::OnLostConnection => retry_budget(store.direct(), store.pool()),
        };
        Attempts::with(store.direct(), store.pool(), Tuning::Indexed, retries)
    }
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("table", &self.shared.sql.table)
            .finish_non_exhaustive()
    }
}

/// Builds a [`PgStore`] with another schema or table name, or other connection settings.
#[derive(Debug)]
pub struct PgStoreBuilder {
    pool: PgPool,
    schema: String,
    table: String,
    connections: Connections,
    batching: bool,
    in_flight: usize,
    claim_with_begin: bool,
    lock_timeout: Duration,
}

/// The longest the store's statements wait on a row lock, unless set: see
/// [`PgStoreBuilder::lock_timeout`].
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// How many batched statements of one kind (claims, completions) may be on the wire at once,
/// unless set: see [`PgStoreBuilder::max_batches_in_flight`].
pub const DEFAULT_BATCHES_IN_FLIGHT: usize = 1;

impl PgStoreBuilder {
    /// The schema to keep the table in (default `public`). Created by `migrate` if missing.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The table name (default `idem_records`).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Runs the store's statements on up to `connections` connections opened apart from the
    /// pool (with the pool's connect options), instead of the default: connections held from
    /// the pool.
    ///
    /// By default a store takes up to half of the pool's `max_connections` (rounded down; a
    /// pool of one connection is used as [`through_pool`](Self::through_pool) does) out of the
    /// pool as it needs them and keeps them: its statements then cost one round trip each
    /// (sqlx 0.8's pool tests every connection with a round trip when it is given back, which
    /// for idem's one-statement operations doubles the round trips, and the client CPU with
    /// them), and the server never sees more connections than the pool allows.
    /// Use this to size the store apart from a pool that the application's own queries need
    /// whole. Fewer connections make bigger batches under load; more let more statements run at
    /// once. The cost: up to `connections` server connections besides the pool's.
    pub fn dedicated_connections(mut self, connections: usize) -> Self {
        self.connections = Connections::Dedicated(connections.max(1));
        self
    }

    /// Checks a connection out of the pool for every statement and gives it back after, as the
    /// pool's other users do: the store holds no connection between statements, at the cost of
    /// a round trip more per statement, and without batching. The pool's connections also keep
    /// the server's plan settings (the store's own keep one generic plan per statement): with
    /// the default `plan_cache_mode = auto`, the server plans a statement anew for its first
    /// five executions on a connection, then keeps the generic plan unless it is costed above
    /// those. The work queue's statements hide from the planner how many jobs a claim takes
    /// and how many keys a batch holds, so that it does keep them; still, a queue through the
    /// pool runs well below its speed on the store's own connections, a round trip more per
    /// statement and no batching.
    pub fn through_pool(mut self) -> Self {
        self.connections = Connections::Pooled;
        self
    }

    /// Whether the claims of concurrent calls share one statement, and their completions too
    /// (default on; needs the store's own connections). A batch is whatever was queued while
    /// the previous statement was on the wire, so a lone call waits for nothing; turn it off
    /// to send every claim and completion as a statement of its own.
    pub fn batching(mut self, on: bool) -> Self {
        self.batching = on;
        self
    }

    /// The longest one of the store's own statements waits on a row lock (default
    /// [`DEFAULT_LOCK_TIMEOUT`], 5 s; the server's `lock_timeout`, set on the store's
    /// connections). A store statement waits on a lock only while another transaction holds
    /// the same record: a transactional handler given the same key and scope as a lease-mode
    /// one, or a transaction of your own on idem's table. Unbounded, such a wait holds up every
    /// call batched with it, and deadlocks the process when that transaction itself waits for
    /// one of them (a transactional body that makes a lease-mode call through the same store).
    /// Past it, the statement is refused: a batch is sent again call by call, and the call whose
    /// record is held fails with a store error that says so. A store checking connections out
    /// of the pool ([`through_pool`](Self::through_pool)) leaves the pool's settings as they are.
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// How many batched statements of one kind (claims, completions) may be on the wire at once
    /// (default [`DEFAULT_BATCHES_IN_FLIGHT`], one; never more than the store's connections). A
    /// call that finds them busy joins the next batch, which goes out as soon as one returns.
    /// One makes the biggest batches and so the least work per call for the server: a second
    /// splits the same calls into smaller batches, and serves fewer calls per second for it.
    /// More let a batch that waits on a row lock hold up fewer calls. A claim waits on a lock
    /// only while another transaction has inserted or taken over the same key in the same scope
    /// and not committed: a transactional handler given the same `scope` as a lease-mode one,
    /// or a transaction of your own on idem's table. Raise this if your handlers do that.
    pub fn max_batches_in_flight(mut self, batches: usize) -> Self {
        self.in_flight = batches.max(1);
        self
    }

    /// Whether a transactional call claims a fresh key in the round trip of its BEGIN (default
    /// off). A fresh call is then two round trips (BEGIN with the claim, COMMIT) instead of
    /// three, whether the transaction runs on a connection the store lends or, past those, on
    /// one of the pool. That gains most at few callers, where a call's time is its round trips,
    /// and also saves client CPU per call.
    ///
    /// The cost, and why it is off by default: sqlx sends nothing with a BEGIN but plain text
    /// whose rows it does not return, so the claim answers by failing when the key is not fresh
    /// (`fresh_claim.rs`). Each such key (a duplicate delivery, while fewer than a quarter of
    /// the calls are duplicates: above that the store reads first, or begins without the claim
    /// when it has no connections of its own) then costs four round trips instead of three, and
    /// writes an `ERROR` line to the server's log with the claim's text, key included (a bound
    /// parameter's value is never logged). The claim is a statement each connection prepares
    /// once, by a name of the store's table (`PREPARE`); connections of the pool keep it when
    /// they go back, as they keep sqlx's own cached statements. A pooler that moves sessions
    /// between server connections (PgBouncer in transaction mode) has it prepared again where
    /// it is missing, at a round trip each time.
    pub fn claim_with_begin(mut self, on: bool) -> Self {
        self.claim_with_begin = on;
        self
    }

    /// Checks the names (plain lowercase identifiers only) and builds the store.
    pub fn build(self) -> Result<PgStore, StoreError> {
        validate_ident("schema", &self.schema)?;
        validate_ident("table", &self.table)?;
        // The batchers' statements in flight, and one for the other operations: kept from
        // transactional mode, which may borrow the rest (see `Direct::lend`).
        let reserved = if self.batching {
            2 * self.in_flight + 1
        } else {
            1
        };
        let direct = match self.connections {
            Connections::HeldFromPool => {
                match held_connections(self.pool.options().get_max_connections()) {
                    0 => None,
                    n => Some(Direct::new(
                        Source::Pool(self.pool.clone()),
                        n,
                        reserved,
                        self.lock_timeout,
                    )),
                }
            }
            Connections::Dedicated(n) => {
                let options = (*self.pool.connect_options()).clone();
                Some(Direct::new(
                    Source::Options(Box::new(options)),
                    n,
                    reserved,
                    self.lock_timeout,
                ))
            }
            Connections::Pooled => None,
        }
        .map(Arc::new);
        let batches = match &direct {
            Some(direct) if self.batching => {
                let in_flight = self.in_flight.min(direct.connections());
                let (claims, completions) = Batcher::pair(in_flight);
                Some(Batches {
                    claims: Arc::new(claims),
                    completions: Arc::new(completions),
                })
            }
            _ => None,
        };
        let sql = RecordsSql::new(&self.schema, &self.table);
        Ok(PgStore {
            pool: self.pool,
            shared: Arc::new(Shared {
                sql,
                schema: self.schema,
                table: self.table,
                direct,
                batches,
                tx_duplicates: DuplicateRate::default(),
                fences: Fences::default(),
                claim_with_begin: self.claim_with_begin,
            }),
        })
    }
}

/// How many of a pool's `max_connections` a store holds by default: half, rounded down, so the
/// other half serves the application's own queries (and transactions when the store has none to
/// lend). None of a pool of
/// one: the store then checks it out for each statement.
pub(crate) fn held_connections(pool_max: u32) -> usize {
    pool_max as usize / 2
}

impl PgStore {
    /// A store on the application's pool, in `public.idem_records`.
    pub fn new(pool: PgPool) -> PgStore {
        PgStore::builder(pool)
            .build()
            .expect("the default names are valid")
    }

    /// A builder for another schema or table.
    pub fn builder(pool: PgPool) -> PgStoreBuilder {
        PgStoreBuilder {
            pool,
            schema: DEFAULT_SCHEMA.to_owned(),
            table: DEFAULT_TABLE.to_owned(),
            connections: Connections::HeldFromPool,
            batching: true,
            in_flight: DEFAULT_BATCHES_IN_FLIGHT,
            claim_with_begin: false,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        }
    }

    /// The pool the store uses.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) fn direct(&self) -> Option<&Direct> {
        self.shared.direct.as_deref()
    }

    /// How often transactional claims find their key settled.
    pub(crate) fn tx_duplicates(&self) -> &DuplicateRate {
        &self.shared.tx_duplicates
    }

    /// Fences for fresh transactional claims.
    pub(crate) fn fences(&self) -> &Fences {
        &self.shared.fences
    }

    /// Whether a transactional call claims a fresh key with its BEGIN
    /// ([`PgStoreBuilder::claim_with_begin`]).
    pub(crate) fn claims_with_begin(&self) -> bool {
        self.shared.claim_with_begin
    }

    /// The store's own connections, to lend to open transactions.
    pub(crate) fn lender(&self) -> Option<&Arc<Direct>> {
        self.shared.direct.as_ref()
    }

    /// How many connections of its own the store holds, opened and not lent (`0` through the
    /// pool); for tests of when it opens them (with the `testing` feature).
    #[cfg(feature = "testing")]
    pub fn connections_held(&self) -> usize {
        self.lender().map_or(0, |direct| direct.unlent_open())
    }

    /// How many claims and completions wait for a statement (always `(0, 0)` without
    /// batching); for tests that need a batch to have formed (with the `testing` feature).
    #[cfg(feature = "testing")]
    pub fn queued(&self) -> (usize, usize) {
        self.batches()
            .map_or((0, 0), |b| (b.claims.queued(), b.completions.queued()))
    }

    /// The batched operations' queues, when batching is on.
    pub(crate) fn batches(&self) -> Option<&Batches> {
        self.shared.batches.as_ref()
    }

    /// The records table's statements, for a crate whose own statements write records in the
    /// same statement as its rows (see [`extend`](crate::extend)). Hidden from the store's
    /// documentation: it belongs to the layers, not to the store's API.
    #[doc(hidden)]
    pub fn records(&self) -> &RecordsSql {
        &self.shared.sql
    }

    /// The schema and table names the store was built with (unquoted).
    pub fn names(&self) -> (&str, &str) {
        (&self.shared.schema, &self.shared.table)
    }

    /// How many statements of one batched operation the store puts on the wire at once, or
    /// `None` when it does not batch ([`through_pool`](PgStoreBuilder::through_pool)): for a
    /// crate that batches its own statements the way the store does (see
    /// [`extend`](crate::extend)). Hidden from the store's documentation, as
    /// [`records`](Self::records) is.
    #[doc(hidden)]
    pub fn batch_drivers(&self) -> Option<usize> {
        self.batches().map(|batches| batches.claims.drivers())
    }

    /// The claim statement's SQL (`$1` key, `$2` fingerprint, `$3` lease in µs, `$4` token, `$5`
    /// scope, `$6` holder), for tools that replay idem's exact statements, such as the pgbench
    /// comparison in `idem-bench` (with the `testing` feature).
    #[cfg(feature = "testing")]
    pub fn claim_sql(&self) -> &str {
        &self.shared.sql.claim
    }

    /// Transactional mode's claim statement, which writes a fresh key's record completed (the
    /// claim's parameters, but `$3` the completion's keep in µs); see
    /// [`claim_sql`](PgStore::claim_sql).
    #[cfg(feature = "testing")]
    pub fn claim_completed_sql(&self) -> &str {
        &self.shared.sql.claim_completed
    }

    /// The completion statement's SQL (`$1` key, `$2` fence, `$3` output, `$4` keep in µs);
    /// see [`claim_sql`](PgStore::claim_sql).
    #[cfg(feature = "testing")]
    pub fn complete_sql(&self) -> &str {
        &self.shared.sql.complete
    }

    /// The quoted, schema-qualified table name, e.g. `"public"."idem_records"`.
    pub fn table(&self) -> &str {
        &self.shared.sql.table
    }

    /// One purge batch of a drain that `from` follows (see [`PurgeCursor`]).
    async fn purge_from(&self, limit: usize, from: &Mutex<PurgeCursor>) -> Result<u64, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut at = *from.lock().unwrap_or_else(|e| e.into_inner());
        let purged =
            on_conn!(indexed self, conn => records::purge_on(self.records(), conn, limit, &mut at))
                .map_err(|e| store_error(e).during(Operation::Purge))?;
        *from.lock().unwrap_or_else(|e| e.into_inner()) = at;
        Ok(purged)
    }
}

/// A claim in the legacy scope `''` would write a record that stands for its key in every
/// scope: only operator tools name that scope, to free records written before scopes.
pub(crate) fn refuse_legacy_scope(key: &Key) -> Result<(), StoreError> {
    if key.scope() == idem_core::LEGACY_SCOPE {
        return Err(StoreError::msg(format!(
            "no claim can be made in the legacy scope '' (key {:?}): it names records written \
             before scopes, for releasing or forgetting them",
            key.as_str()
        ))
        .during(Operation::Claim));
    }
    Ok(())
}

#[async_trait]
impl Store for PgStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        refuse_legacy_scope(request.key)?;
        if let Some(batches) = self.batches() {
            return batch::submit(self, &batches.claims, OwnedClaim::new(request)).await;
        }
        on_conn!(indexed self, conn => records::claim_on(self.records(), conn, request))
            .map_err(|e| store_error(e).during(Operation::Claim))
    }

    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        if let Some(batches) = self.batches() {
            let completion = OwnedCompletion::new(key, fence, completion);
            return batch::submit(self, &batches.completions, completion).await;
        }
        on_conn!(indexed self, conn => records::complete_on(self.records(), conn, key, fence, completion))
            .map_err(|e| store_error(e).during(Operation::Complete))
    }

    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        on_conn!(indexed self, conn => records::release_on(self.records(), conn, key.as_str(), fence))
            .map(fenced)
            .map_err(|e| store_error(e).during(Operation::Release))
    }

    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        on_conn!(indexed self, conn => records::renew_on(self.records(), conn, key, fence, lease))
            .map(fenced)
            .map_err(|e| store_error(e).during(Operation::Renew))
    }

    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        on_conn!(indexed self, conn => records::get_on(self.records(), conn, key))
            .map_err(|e| store_error(e).during(Operation::Get))
    }

    async fn effect(&self, key: &Key, effect: &str) -> Result<Option<EffectEntry>, StoreError> {
        on_conn!(indexed self, conn => records::effect_on(self.records(), conn, key, effect))
            .map_err(|e| store_error(e).during(Operation::JournalRead))
    }

    async fn record_effect(
        &self,
        key: &Key,
        fence: Fence,
        record: EffectRecord<'_>,
    ) -> Result<Fenced, StoreError> {
        on_conn!(indexed self, conn => records::record_effect_on(self.records(), conn, key, fence, record))
            .map_err(|e| store_error(e).during(Operation::JournalWrite))
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    /// Releases the claim in a background task on the current Tokio runtime, so a cancelled
    /// call frees its key at once. Without a runtime, the lease lapses as usual.
    fn abandon(&self, key: &Key, fence: Fence) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.clone();
        let key = key.as_str().to_owned();
        idem_core::pending::spawn(&runtime, async move {
            let released = on_conn!(indexed store, conn => records::release_on(store.records(), conn, &key, fence));
            if let Err(e) = released {
                tracing::warn!(
                    key,
                    error = %e,
                    "releasing an abandoned claim failed; it lapses with its lease"
                );
            }
        });
    }

    /// With batching, nothing to do here: the batch skips a claim whose caller left before it
    /// was sent and releases one acquired for a caller that left (`batch.rs`,
    /// `Op::orphaned`). Without it, the claim is sent again with its token and released.
    fn abandon_claim(&self, request: ClaimRequest<'_>) {
        if self.batches().is_none() {
            idem_core::reclaim_and_release_in_background(self.shared(), request);
        }
    }
}

/// Deletes expired records and journal entries in bounded batches, in index order; rows locked
/// by a concurrent claim are skipped. `spawn_purger` (from [`Purge`]) runs it periodically.
/// [`purge_expired`](Purge::purge_expired) starts at the start of the indexes; the batches of
/// one [`purge_all_expired`](Purge::purge_all_expired) each start where the one before ended,
/// and what one drain passes over (a row locked when its batch came) is due for the next.
#[async_trait]
impl Purge for PgStore {
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        self.purge_from(limit, &Mutex::new(PurgeCursor::default()))
            .await
    }

    async fn purge_all_expired_reporting(
        &self,
        batch: usize,
        on_batch: &mut (dyn FnMut(u64) + Send),
    ) -> Result<u64, StoreError> {
        let from = Mutex::new(PurgeCursor::default());
        idem_core::purge::drain_reporting(batch, |limit| self.purge_from(limit, &from), on_batch)
            .await
    }
}
