//! Checking the store's own connections out, and opening them.

use super::idle::{lock, Idle, Own};
use super::setup::{tune, Tuning};
use crate::error::is_connection_lost;

use sqlx::postgres::PgConnectOptions;
use sqlx::ConnectOptions;
use sqlx::PgPool;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, Notify, Semaphore, SemaphorePermit};

/// Where the store's own connections come from.
pub(crate) enum Source {
    /// Checked out of the pool once, then kept (never given back, so never pinged).
    Pool(PgPool),
    /// Opened with these options, apart from the pool.
    Options(Box<PgConnectOptions>),
}

pub(crate) struct Direct {
    source: Source,
    pub(super) connections: usize,
    idle: Arc<Mutex<Idle>>,
    pub(super) permits: Arc<Semaphore>,
    /// How many connections that are not lent the store keeps before it lends one.
    reserved: usize,
    /// How many connections may be lent to open transactions at once (see [`Direct::lend`]):
    /// `connections - reserved`. `None` when that is none.
    pub(super) lendable: Option<Arc<Semaphore>>,
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
    pub(super) conn: Option<Own>,
    tuning: Tuning,
    pub(super) reused: bool,
    _permit: SemaphorePermit<'a>,
}

impl Checkout<'_> {
    pub(super) fn give_back(mut self) {
        if let Some(conn) = self.conn.take() {
            self.direct.give_back(conn, self.tuning, false);
        }
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.direct.discard(conn, false);
        }
    }
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
    pub(super) fn give_back(&self, conn: Own, tuning: Tuning, lent: bool) {
        if matches!(&self.source, Source::Pool(pool) if pool.is_closed()) {
            return self.discard(conn, lent);
        }
        let mut idle = lock(&self.idle);
        idle.lent -= usize::from(lent);
        idle.of(tuning).push(conn);
    }

    /// Closes a connection of the store's (a held one is closed, not given back to the pool).
    pub(super) fn discard(&self, conn: Own, lent: bool) {
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
    /// `acquire_timeout` (likeliest on a server slow to open connections). Connections
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

    /// How many connections the store holds that are open and not lent (a test hook).
    #[cfg(feature = "testing")]
    pub fn unlent_open(&self) -> usize {
        let idle = lock(&self.idle);
        (idle.held - idle.lent).saturating_sub(idle.opening)
    }

    /// How many connections the store may hold.
    pub fn connections(&self) -> usize {
        self.connections
    }

    /// Checks out a connection set up for `tuning` for one operation (see [`Direct::connection`]).
    pub(super) async fn checkout(&self, tuning: Tuning) -> Result<Checkout<'_>, sqlx::Error> {
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

    /// An idle connection set up for `tuning`, else an idle one set up the other way (set up
    /// again), else a new one; with whether it was idle before. The caller holds a permit.
    ///
    /// `lend`: the connection is for a transaction, which may hold it while its body makes
    /// lease-mode calls that need the store's other connections. So a loan first leaves
    /// `reserved` connections that are not lent (holding more to keep them when the store has
    /// fewer), and is refused (`None`) when the store cannot keep them: lease mode's statements
    /// then never wait on a pool that transactions have emptied.
    pub(super) async fn connection(
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
}

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
