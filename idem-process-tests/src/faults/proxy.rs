//! A TCP proxy between worker processes and a server (PostgreSQL, Redis) that injects network
//! faults, and counts each where it hits a connection, not where it was scheduled.
//!
//! It knows nothing of the protocols it carries: it forwards bytes, late, not at all for a
//! while, or it ends connections with a reset.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The network's condition between the processes and the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// Bytes flow.
    Healthy,
    /// Every chunk of bytes is held this long before it is forwarded: a latency spike.
    Slow(Duration),
    /// Nothing is forwarded, and no side is told. What was held is delivered late once the
    /// network is healthy again (as TCP retransmits after a short outage), unless
    /// [`FaultProxy::reset_held`] resets those connections first (as TCP gives up after a long
    /// one). The proxy's own sockets still acknowledge what they receive: the peers see a
    /// silent network, not a dead host.
    Stalled,
    /// [`Stalled`](Net::Stalled), and new connections are refused (reset as they open).
    Partitioned,
}

/// What the proxy's faults hit, counted at the proxy.
#[derive(Debug, Default)]
pub struct Hits {
    /// Chunks of bytes forwarded late.
    pub delayed: AtomicU64,
    /// Live connections reset by [`FaultProxy::reset`].
    pub reset: AtomicU64,
    /// Connections that had bytes held by a stall or a partition, counted once per stall.
    pub stalled: AtomicU64,
    /// Connections refused during a partition.
    pub refused: AtomicU64,
}

struct Shared {
    upstream: (String, u16),
    net: watch::Sender<Net>,
    /// Bumped to reset every live connection.
    resets: watch::Sender<u64>,
    /// Bumped to reset the connections that had bytes held in the current stall.
    held_resets: watch::Sender<u64>,
    /// Which stall this is (bumped as each begins): connections note the stall they held bytes in.
    stall: AtomicU64,
    hits: Hits,
}

/// The proxy: processes connect to `127.0.0.1:`[`port`](FaultProxy::port) instead of the
/// server. It runs on the runtime that started it until that runtime ends.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listens on a free port and forwards each connection to `host:port`.
    pub async fn start(host: &str, port: u16) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let shared = Arc::new(Shared {
            upstream: (host.to_owned(), port),
            net: watch::Sender::new(Net::Healthy),
            resets: watch::Sender::new(0),
            held_resets: watch::Sender::new(0),
            stall: AtomicU64::new(0),
            hits: Hits::default(),
        });
        let proxy = FaultProxy {
            port: listener.local_addr()?.port(),
            shared: shared.clone(),
        };
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(connection(client, shared.clone()));
            }
        });
        Ok(proxy)
    }

    /// The port processes connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sets the network's condition from now on.
    pub fn set(&self, net: Net) {
        if matches!(net, Net::Stalled | Net::Partitioned) {
            self.shared.stall.fetch_add(1, Ordering::SeqCst);
        }
        self.shared.net.send_replace(net);
    }

    /// Resets the connections that had bytes held in the current stall or partition.
    pub fn reset_held(&self) {
        self.shared.held_resets.send_modify(|n| *n += 1);
    }

    /// Resets every live connection at once (an RST to both sides).
    pub fn reset(&self) {
        self.shared.resets.send_modify(|n| *n += 1);
    }

    /// What the faults hit so far.
    pub fn hits(&self) -> &Hits {
        &self.shared.hits
    }
}

/// A socket error (the server went away, say): the other side is reset likewise.
struct Broken;

async fn connection(client: TcpStream, shared: Arc<Shared>) {
    let _ = client.set_nodelay(true);
    if *shared.net.borrow() == Net::Partitioned {
        shared.hits.refused.fetch_add(1, Ordering::Relaxed);
        return abort(&client);
    }
    let Ok(server) = TcpStream::connect((shared.upstream.0.as_str(), shared.upstream.1)).await
    else {
        return abort(&client);
    };
    let _ = server.set_nodelay(true);
    let mut resets = shared.resets.subscribe();
    resets.mark_unchanged();
    let mut held_resets = shared.held_resets.subscribe();
    held_resets.mark_unchanged();
    // The stall this connection last had bytes held in (0: none).
    let held = AtomicU64::new(0);
    let mut client = client;
    let mut server = server;
    {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let both = async {
            tokio::try_join!(
                pump(client_read, server_write, &shared, &held),
                pump(server_read, client_write, &shared, &held),
            )
        };
        tokio::pin!(both);
        loop {
            tokio::select! {
                ended = &mut both => if ended.is_ok() {
                    return;
                } else {
                    break;
                },
                _ = resets.changed() => {
                    shared.hits.reset.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                _ = held_resets.changed() => {
                    if held.load(Ordering::SeqCst) == shared.stall.load(Ordering::SeqCst) {
                        break;
                    }
                }
            }
        }
    }
    abort(&client);
    abort(&server);
}

/// Forwards `from` to `to` under the network's condition until `from` ends.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    shared: &Shared,
    held: &AtomicU64,
) -> Result<(), Broken> {
    let mut net = shared.net.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await.map_err(|_| Broken)?;
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        loop {
            let now = *net.borrow_and_update();
            match now {
                Net::Healthy => break,
                Net::Slow(delay) => {
                    shared.hits.delayed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(delay).await;
                    break;
                }
                Net::Stalled | Net::Partitioned => {
                    let stall = shared.stall.load(Ordering::SeqCst);
                    if held.swap(stall, Ordering::SeqCst) != stall {
                        shared.hits.stalled.fetch_add(1, Ordering::Relaxed);
                    }
                    if net.changed().await.is_err() {
                        return Err(Broken);
                    }
                }
            }
        }
        to.write_all(&buf[..n]).await.map_err(|_| Broken)?;
    }
}

/// Ends `stream` with a reset rather than an orderly close: its peer sees "connection reset".
fn abort(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}
