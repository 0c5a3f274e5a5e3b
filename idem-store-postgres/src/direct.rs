//! The store's own connections: a small set of connections that PgStore keeps checked out and
//! runs its statements on, instead of checking one out of the pool for every statement.
//!
//! sqlx 0.8's pool tests every connection with a round trip when it is returned, so a
//! one-statement store operation through the pool costs two round trips and about three times
//! the client CPU of the statement alone (see BENCHMARKS.md). On connections of its own a store
//! operation is one round trip. They are either held from the pool (the default: taken from it
//! once and kept, so the store never makes the server hold more connections than the pool
//! allows) or opened apart from the pool with its connect options (`dedicated_connections`).
//! A connection whose operation failed or was cancelled mid-way is closed rather than reused,
//! since its state is unknown.

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgConnection};
use sqlx::{PgPool, Postgres};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore, SemaphorePermit};

/// Where the store's own connections come from.
pub(crate) enum Source {
    /// Checked out of the pool once, then kept (never given back, so never pinged).
    Pool(PgPool),
    /// Opened with these options, apart from the pool.
    Options(Box<PgConnectOptions>),
}

/// One of the store's own connections.
enum Own {
    Held(PoolConnection<Postgres>),
    Opened(PgConnection),
}

impl Own {
    fn get(&mut self) -> &mut PgConnection {
        match self {
            Own::Held(conn) => conn,
            Own::Opened(conn) => conn,
        }
    }

    fn get_ref(&self) -> &PgConnection {
        match self {
            Own::Held(conn) => conn,
            Own::Opened(conn) => conn,
        }
    }

    /// Closes the connection (a held one is closed, not given back to the pool).
    fn discard(self) {
        if let Own::Held(mut conn) = self {
            conn.close_on_drop();
        }
    }
}

/// How a connection of the store's is set up for the statements it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tuning {
    /// The server's defaults: for transactions (the caller's own SQL runs on them) and the
    /// transactional read-first, which takes turns with them.
    Default,
    /// For the store's own statements on the records table and the queue, each a lookup by
    /// index: sequential scans off and one generic plan per statement (see [`tune`]).
    Indexed,
}

/// Idle connections, by how they are set up, and how many the store has.
#[derive(Default)]
struct Idle {
    default: Vec<Own>,
    indexed: Vec<Own>,
    /// Connections the store has: idle, running a statement, or lent.
    held: usize,
    /// Of those, lent to open transactions.
    lent: usize,
    /// Of those, still being opened (counted in `held` before their connection exists).
    opening: usize,
}

impl Idle {
    /// Empties the idle lists (the connections are no longer the store's).
    fn drain(&mut self) -> Vec<Own> {
        let mut conns: Vec<Own> = self.default.drain(..).collect();
        conns.append(&mut self.indexed);
        self.held -= conns.len();
        conns
    }

    fn of(&mut self, tuning: Tuning) -> &mut Vec<Own> {
        match tuning {
            Tuning::Default => &mut self.default,
            Tuning::Indexed => &mut self.indexed,
        }
    }

    fn other(&mut self, tuning: Tuning) -> &mut Vec<Own> {
        match tuning {
            Tuning::Default => &mut self.indexed,
            Tuning::Indexed => &mut self.default,
        }
    }
}

pub(crate) struct Direct {
    source: Source,
    connections: usize,
    idle: Arc<Mutex<Idle>>,
    permits: Arc<Semaphore>,
    /// How many connections that are not lent the store keeps before it lends one.
    reserved: usize,
    /// How many connections may be lent to open transactions at once (see [`Direct::lend`]):
    /// `connections - reserved`. `None` when that is none.
    lendable: Option<Arc<Semaphore>>,
    /// Woken when a connection being opened is opened (or failed to open).
    opened: Notify,
    /// Stops the task that gives held connections back when the pool is closed (so
    /// `pool.close().await` does not wait for a store that is still alive); it ends when this
    /// is dropped, with the store.
    watching: Mutex<Option<oneshot::Sender<()>>>,
    /// The longest a store statement waits on a row lock (see [`tune`]).
    lock_timeout: Duration,
}

/// Where a checkout's connection comes from.
enum Pick {
    /// An idle one; `true`: set up the other way, so to be set up again.
    Idle(Own, bool),
    /// A new one (counted already).
    New,
    /// A new one to keep idle for lease mode before lending (counted already).
    Reserve,
    /// None: the loan is refused.
    Refused,
}

/// A connection checked out of [`Direct`]; closed on drop unless given back.
pub(crate) struct Checkout<'a> {
    direct: &'a Direct,
    conn: Option<Own>,
    tuning: Tuning,
    reused: bool,
    _permit: SemaphorePermit<'a>,
}

impl Checkout<'_> {
    fn give_back(mut self) {
        if let Some(conn) = self.conn.take() {
            self.direct.give_back(conn, self.tuning, false);
        }
    }
}

/// A connection of the store's lent to an open transaction for as long as it lasts, which can
/// outlive any borrow of the store (see [`Direct::lend`]). Closed on drop unless given back.
pub(crate) struct Lent {
    direct: Arc<Direct>,
    conn: Option<Own>,
    reused: bool,
    _permits: [OwnedSemaphorePermit; 2],
}

impl Lent {
    /// The connection.
    pub fn get(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("lent until given back").get()
    }

    /// The connection, to read.
    pub fn conn(&self) -> &PgConnection {
        self.conn.as_ref().expect("lent until given back").get_ref()
    }

    /// Whether the connection was idle before (so one found dead may be replaced).
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// Gives the connection back to the store's idle ones. Only for a connection whose last
    /// statement ended normally and which is outside any transaction.
    pub fn give_back(mut self) {
        if let Some(conn) = self.conn.take() {
            self.direct.give_back(conn, Tuning::Default, true);
        }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.direct.discard(conn, true);
        }
    }
}

fn lock(idle: &Mutex<Idle>) -> std::sync::MutexGuard<'_, Idle> {
    idle.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.direct.discard(conn, false);
        }
    }
}

/// Errors after which the connection is gone: retrying on a fresh one is safe.
pub(crate) fn is_connection_lost(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
        || crate::error::sqlstate(error)
            .is_some_and(|code| code.starts_with("08") || code == "57P01")
}

impl Direct {
    /// Up to `connections` connections from `source`, of which all but `reserved` may be lent
    /// to open transactions.
    pub fn new(
        source: Source,
        connections: usize,
        reserved: usize,
        lock_timeout: Duration,
    ) -> Direct {
        let connections = connections.max(1);
        let lendable = connections.saturating_sub(reserved);
        Direct {
            source,
            connections,
            idle: Arc::new(Mutex::new(Idle::default())),
            permits: Arc::new(Semaphore::new(connections)),
            reserved,
            lendable: (lendable > 0).then(|| Arc::new(Semaphore::new(lendable))),
            opened: Notify::new(),
            watching: Mutex::new(None),
            lock_timeout,
        }
    }

    /// Puts a connection whose operation ended normally back among the idle ones (or lets it
    /// go, when its pool has closed). `lent`: it comes back from a transaction.
    fn give_back(&self, conn: Own, tuning: Tuning, lent: bool) {
        if matches!(&self.source, Source::Pool(pool) if pool.is_closed()) {
            return self.discard(conn, lent);
        }
        let mut idle = lock(&self.idle);
        idle.lent -= usize::from(lent);
        idle.of(tuning).push(conn);
    }

    /// Closes a connection of the store's (a held one is closed, not given back to the pool).
    fn discard(&self, conn: Own, lent: bool) {
        {
            let mut idle = lock(&self.idle);
            idle.held -= 1;
            idle.lent -= usize::from(lent);
        }
        conn.discard();
    }

    /// Opens a connection, or holds one from the pool, for a place already counted in `held`
    /// and `opening` (which this ends).
    async fn open(&self) -> Result<Own, sqlx::Error> {
        let opened = match &self.source {
            Source::Pool(pool) => self.hold(pool).await,
            Source::Options(options) => options.connect().await.map(Own::Opened),
        };
        lock(&self.idle).opening -= 1;
        self.opened.notify_waiters();
        opened
    }

    /// Waits until the store holds the connections it never lends (`reserved`), opening
    /// those it lacks. A transaction that runs on a connection of the pool (the store lends
    /// none, or all it may are out) waits for this first: otherwise a burst of transactions
    /// could take the pool's last connections while the store was still opening its own, and
    /// their bodies' lease-mode calls, which need those, would wait on the pool until its
    /// `acquire_timeout` (seen in CI, on a cluster slow to open connections). Connections
    /// opened apart from the pool (`dedicated_connections`) never wait on it.
    pub async fn hold_reserve(&self) -> Result<(), sqlx::Error> {
        if matches!(self.source, Source::Options(_)) {
            return Ok(());
        }
        enum Next {
            Done,
            Wait,
            Open,
        }
        loop {
            let opened = self.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            let next = {
                let mut idle = lock(&self.idle);
                let unlent = idle.held - idle.lent;
                if unlent.saturating_sub(idle.opening) >= self.reserved
                    || (idle.held >= self.connections && idle.opening == 0)
                {
                    Next::Done
                } else if unlent >= self.reserved || idle.held >= self.connections {
                    // Enough are counted, but some are still being opened.
                    Next::Wait
                } else {
                    idle.held += 1;
                    idle.opening += 1;
                    Next::Open
                }
            };
            match next {
                Next::Done => return Ok(()),
                Next::Wait => {
                    opened.await;
                    continue;
                }
                Next::Open => {}
            }
            match self.open().await {
                Ok(conn) => lock(&self.idle).default.push(conn),
                Err(e) => {
                    lock(&self.idle).held -= 1;
                    return Err(e);
                }
            }
        }
    }

    /// Takes a connection out of the pool to keep. The first one starts a task that empties
    /// the idle connections into the pool when the pool is closed.
    async fn hold(&self, pool: &PgPool) -> Result<Own, sqlx::Error> {
        let conn = pool.acquire().await?;
        let mut watching = self.watching.lock().unwrap_or_else(|e| e.into_inner());
        if watching.is_none() {
            let (stop, stopped) = oneshot::channel();
            let (closed, idle) = (pool.close_event(), Arc::downgrade(&self.idle));
            tokio::spawn(give_back_on_close(closed, stopped, idle));
            *watching = Some(stop);
        }
        Ok(Own::Held(conn))
    }

    /// How many connections the store holds that are open and not lent.
    pub fn unlent_open(&self) -> usize {
        let idle = lock(&self.idle);
        (idle.held - idle.lent).saturating_sub(idle.opening)
    }

    /// How many connections the store may hold.
    pub fn connections(&self) -> usize {
        self.connections
    }

    /// Checks out a connection set up for `tuning` for one operation (see [`Direct::connection`]).
    async fn checkout(&self, tuning: Tuning) -> Result<Checkout<'_>, sqlx::Error> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let (conn, reused) = self
            .connection(tuning, false)
            .await?
            .expect("only a loan is refused");
        Ok(Checkout {
            direct: self,
            conn: Some(conn),
            tuning,
            reused,
            _permit: permit,
        })
    }

    /// Lends a connection with the server's settings to an open transaction if one may be lent
    /// now: `Ok(None)` when the store lends none (it has too few) or all it may lend are out
    /// (then the transaction runs on a pooled connection, as the application's own do).
    pub async fn lend(self: &Arc<Self>) -> Result<Option<Lent>, sqlx::Error> {
        let Some(lent) = self
            .lendable
            .as_ref()
            .and_then(|lendable| Arc::clone(lendable).try_acquire_owned().ok())
        else {
            return Ok(None);
        };
        let any = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let Some((conn, reused)) = self.connection(Tuning::Default, true).await? else {
            return Ok(None);
        };
        Ok(Some(Lent {
            direct: Arc::clone(self),
            conn: Some(conn),
            reused,
            _permits: [lent, any],
        }))
    }

    /// An idle connection set up for `tuning`, else an idle one set up the other way (set up
    /// again), else a new one; with whether it was idle before. The caller holds a permit.
    ///
    /// `lend`: the connection is for a transaction, which may hold it while its body makes
    /// lease-mode calls that need the store's other connections. So a loan first leaves
    /// `reserved` connections that are not lent (holding more to keep them when the store has
    /// fewer), and is refused (`None`) when the store cannot keep them: lease mode's statements
    /// then never wait on a pool that transactions have emptied.
    async fn connection(
        &self,
        tuning: Tuning,
        lend: bool,
    ) -> Result<Option<(Own, bool)>, sqlx::Error> {
        // A connection given back to the idle list just as the pool closed (after the close
        // watcher emptied it) must not outlive the pool: once it is closed, nothing is checked
        // out, and what is idle is let go.
        if matches!(&self.source, Source::Pool(pool) if pool.is_closed()) {
            let idle = lock(&self.idle).drain();
            idle.into_iter().for_each(Own::discard);
            return Err(sqlx::Error::PoolClosed);
        }
        // Each idle connection is tried at most once: one that died while idle (a server
        // restart) fails its set-up and is closed.
        let mut tries = 0;
        while tries <= self.connections + self.reserved {
            tries += 1;
            let (conn, reused, retune) = match self.pick(tuning, lend) {
                Pick::Refused => return Ok(None),
                Pick::Idle(conn, retune) => (conn, true, retune),
                Pick::Reserve => {
                    match self.open().await {
                        Ok(conn) => lock(&self.idle).default.push(conn),
                        Err(e) => {
                            lock(&self.idle).held -= 1;
                            return Err(e);
                        }
                    }
                    continue;
                }
                Pick::New => match self.open().await {
                    Ok(conn) => (conn, false, false),
                    Err(e) => {
                        let mut idle = lock(&self.idle);
                        idle.held -= 1;
                        idle.lent -= usize::from(lend);
                        return Err(e);
                    }
                },
            };
            let mut conn = conn;
            // A new connection has the server's defaults.
            let set_up = match (reused, retune) {
                (true, false) => Ok(()),
                (false, _) if tuning == Tuning::Default => Ok(()),
                _ => tune(conn.get(), tuning, self.lock_timeout).await,
            };
            match set_up {
                Ok(()) => return Ok(Some((conn, reused))),
                Err(e) if reused && is_connection_lost(&e) => self.discard(conn, lend),
                Err(e) => {
                    self.discard(conn, lend);
                    return Err(e);
                }
            }
        }
        Err(sqlx::Error::Protocol(
            "every idle connection of the store was lost".into(),
        ))
    }

    /// Decides, under the lock, where a checkout's connection comes from (see
    /// [`Direct::connection`]), and counts it.
    fn pick(&self, tuning: Tuning, lend: bool) -> Pick {
        let mut idle = lock(&self.idle);
        if lend && idle.held - idle.lent <= self.reserved {
            if idle.held >= self.connections {
                return Pick::Refused;
            }
            idle.held += 1;
            idle.opening += 1;
            return Pick::Reserve;
        }
        let pick = match idle.of(tuning).pop() {
            Some(conn) => Pick::Idle(conn, false),
            None => match idle.other(tuning).pop() {
                Some(conn) => Pick::Idle(conn, true),
                None if lend && idle.held >= self.connections => return Pick::Refused,
                None => {
                    idle.held += 1;
                    idle.opening += 1;
                    Pick::New
                }
            },
        };
        idle.lent += usize::from(lend);
        pick
    }

    /// Checks a connection out: one of the store's own if it has them, else one of the pool's.
    pub async fn checkout_or_pool<'a>(
        direct: Option<&'a Direct>,
        pool: &PgPool,
        tuning: Tuning,
    ) -> Result<Conn<'a>, sqlx::Error> {
        Ok(match direct {
            Some(direct) => Conn::Direct(direct.checkout(tuning).await?),
            None => Conn::Pooled(pool.acquire().await?),
        })
    }
}

/// Sets a connection of the store's up for `tuning`. [`Tuning::Indexed`], for the store's own
/// statements (the records table's and the queue's), makes their plans independent of the
/// tables' statistics:
///
/// - `enable_seqscan = off`: each of those statements finds its rows through an index (the
///   primary key, or `expires_at` for the purge), but on a table that is new, small, or was
///   analyzed while it was empty, the planner believes a sequential scan is cheaper and keeps
///   that plan as the table grows: measured, a store whose table was analyzed empty ran 25
///   times slower, and one on a new table 4 times (BENCHMARKS.md). With sequential scans off,
///   the index is used whatever the statistics say.
/// - `plan_cache_mode = force_generic_plan`: prepared statements keep one generic plan. The
///   batched statements take arrays, for which the default plans every execution anew (a
///   custom plan looks cheaper for the array in hand), and planning costs more than running
///   them: the queue's completion that claims the next job spent 0.69 ms planning against
///   0.32 running. (The queue's claims pick their jobs as an array for this: see
///   `queue/sql.rs`.)
///
/// - `lock_timeout` ([`PgStoreBuilder::lock_timeout`](crate::PgStoreBuilder::lock_timeout),
///   5 s by default): a store statement waits on a row lock only while another
///   transaction holds the same record (a transactional handler of the same key and scope, or
///   a transaction of the application's own on idem's tables). Unbounded, such a wait holds
///   up every call batched with it, and deadlocks the process when that transaction itself
///   waits for one of them (a transactional body that makes a lease-mode call through the
///   same store). Bounded, the statement fails with SQLSTATE 55P03, a batch is sent again
///   call by call, and the call whose record is held fails with a store error that says so.
///
/// [`Tuning::Default`] resets them, for transactions, where the caller's own SQL runs with the
/// server's settings. The settings stay on the connection only: a held one is closed, never
/// given back to the pool with them. A server that lacks a setting (`plan_cache_mode` before
/// PostgreSQL 12) plans as before.
async fn tune(
    conn: &mut PgConnection,
    tuning: Tuning,
    lock_timeout: Duration,
) -> Result<(), sqlx::Error> {
    let lock_timeout = format!(
        "SET lock_timeout = '{}ms'",
        lock_timeout.as_millis().clamp(1, i32::MAX as u128)
    );
    let (both, settings) = match tuning {
        Tuning::Indexed => (
            format!(
                "SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan; {lock_timeout}"
            ),
            [
                "SET enable_seqscan = off".to_owned(),
                "SET plan_cache_mode = force_generic_plan".to_owned(),
                lock_timeout,
            ],
        ),
        Tuning::Default => (
            "RESET enable_seqscan; RESET plan_cache_mode; RESET lock_timeout".to_owned(),
            [
                "RESET enable_seqscan".to_owned(),
                "RESET plan_cache_mode".to_owned(),
                "RESET lock_timeout".to_owned(),
            ],
        ),
    };
    // A `&str` with no arguments goes out as a simple query, so both settings take one round
    // trip. They run as one implicit transaction: a server that lacks a setting refuses both,
    // and then each goes alone, the missing one left out.
    match sqlx::Executor::execute(&mut *conn, both.as_str()).await {
        Err(e) if crate::error::sqlstate(&e).as_deref() == Some(UNDEFINED_SETTING) => {}
        other => return other.map(drop),
    }
    for setting in &settings {
        match sqlx::Executor::execute(&mut *conn, setting.as_str()).await {
            Err(e) if crate::error::sqlstate(&e).as_deref() == Some(UNDEFINED_SETTING) => {}
            other => other.map(drop)?,
        }
    }
    Ok(())
}

/// SQLSTATE: no such configuration parameter.
const UNDEFINED_SETTING: &str = "42704";

/// Waits for the pool to close (or the store to go), then lets the idle held connections go.
async fn give_back_on_close(
    closed: sqlx::pool::CloseEvent,
    stopped: oneshot::Receiver<()>,
    idle: Weak<Mutex<Idle>>,
) {
    tokio::select! {
        () = closed => {
            if let Some(idle) = idle.upgrade() {
                let conns = lock(&idle).drain();
                conns.into_iter().for_each(Own::discard);
            }
        }
        _ = stopped => {}
    }
}

/// How many times an operation may move on from a dead idle connection: once for each
/// connection the store may hold idle, plus one.
pub fn retry_budget(direct: Option<&Direct>, pool: &PgPool) -> usize {
    match direct {
        Some(direct) => direct.connections + 1,
        None => pool.options().get_max_connections() as usize + 1,
    }
}

/// A connection for one store operation.
pub(crate) enum Conn<'a> {
    Pooled(PoolConnection<Postgres>),
    Direct(Checkout<'a>),
}

impl Conn<'_> {
    pub fn get(&mut self) -> &mut PgConnection {
        match self {
            Conn::Pooled(conn) => conn,
            Conn::Direct(checkout) => checkout.conn.as_mut().expect("checked out").get(),
        }
    }

    /// Settles the connection after an operation: gives it back unless it was lost (then it is
    /// closed). Returns whether to run the operation again on another connection: when the
    /// connection was lost and had been used before (an idle connection the server dropped, as
    /// a restart or failover drops all of them), while `retries` last. A connection opened for
    /// this operation that fails means the server is unreachable: the error stands (fail
    /// closed). The records' statements are safe to send again: a claim whose answer was lost
    /// is recognised by its token, a completion applies again under the same fence, a release
    /// or renewal is fenced. The queue's claims are not, and are sent with no `retries`.
    pub fn settle<R>(self, result: &Result<R, sqlx::Error>, retries: &mut usize) -> bool {
        let lost = matches!(result, Err(e) if is_connection_lost(e));
        let retry = |retries: &mut usize| {
            let retry = *retries > 0;
            *retries = retries.saturating_sub(1);
            retry
        };
        match self {
            // A pooled connection was taken from the pool's idle ones (the pool tests them
            // before handing them out, but a connection can die between the test and the
            // statement).
            Conn::Pooled(mut conn) if lost => {
                conn.close_on_drop();
                retry(retries)
            }
            Conn::Pooled(_) => false, // back to the pool on drop
            Conn::Direct(checkout) if lost => checkout.reused && retry(retries),
            Conn::Direct(checkout) => {
                checkout.give_back();
                false
            }
        }
    }
}

/// Runs `$body` (an expression using the `&mut PgConnection` bound to `$conn`) on a connection of
/// `$store`, settling the connection and retrying on another while idle connections turn out
/// dead (at most once per connection the store may hold, plus one). Evaluates to
/// `Result<_, sqlx::Error>`. `on_conn!(indexed store, ..)` runs it on a connection set up for
/// the store's own statements ([`Tuning::Indexed`]); without `indexed`, on one with the
/// server's defaults (what takes turns with transactions).
///
/// `on_conn!(once indexed store, ..)` never sends `$body` again: for a statement that is not
/// safe to repeat once it may have been applied (the queue's claims, which take whatever jobs
/// are free: a second sending would claim a second set while the first sits claimed).
macro_rules! on_conn {
    (once indexed $store:expr, $conn:ident => $body:expr) => {
        $crate::direct::on_conn!(@run $crate::direct::Tuning::Indexed, 0, $store, $conn => $body)
    };
    (indexed $store:expr, $conn:ident => $body:expr) => {
        $crate::direct::on_conn!(@run $crate::direct::Tuning::Indexed,
            $crate::direct::retry_budget($store.direct(), $store.pool()), $store, $conn => $body)
    };
    ($store:expr, $conn:ident => $body:expr) => {
        $crate::direct::on_conn!(@run $crate::direct::Tuning::Default,
            $crate::direct::retry_budget($store.direct(), $store.pool()), $store, $conn => $body)
    };
    (@run $tuning:expr, $retries:expr, $store:expr, $conn:ident => $body:expr) => {{
        let mut retries: usize = $retries;
        loop {
            let mut checkout = match $crate::direct::Direct::checkout_or_pool(
                $store.direct(),
                $store.pool(),
                $tuning,
            )
            .await
            {
                Ok(checkout) => checkout,
                Err(e) => break Err(e),
            };
            let result = {
                let $conn = checkout.get();
                $body.await
            };
            if !checkout.settle(&result, &mut retries) {
                break result;
            }
        }
    }};
}

pub(crate) use on_conn;
