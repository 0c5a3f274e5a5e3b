//! A TCP proxy between a test's pool and PostgreSQL that counts what the client sends:
//!
//! - statements: each `Execute` of the extended protocol and each simple `Query`;
//! - round trips: each `Sync` that ends a batch of statement messages, and each `Query`;
//! - pings: a `Sync` sent on its own, which is how sqlx 0.8's pool tests a connection when it
//!   is returned (no statement runs).

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use sqlx::PgPool;

const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

#[derive(Default)]
struct Counts {
    statements: AtomicU64,
    round_trips: AtomicU64,
    pings: AtomicU64,
}

/// The proxy: point a pool at `127.0.0.1:port` and read [`counts`](CountingProxy::counts).
pub struct CountingProxy {
    /// The port it listens on.
    pub port: u16,
    counts: Arc<Counts>,
}

impl CountingProxy {
    /// A pool of up to `max_connections` to `DATABASE_URL` through a new proxy. The pool does
    /// not ping a connection before lending it, so what the proxy counts is the store's own.
    pub async fn pool(max_connections: u32) -> (PgPool, CountingProxy) {
        let options = PgConnectOptions::from_str(&super::database_url()).unwrap();
        let proxy = CountingProxy::start(options.get_host().to_owned(), options.get_port()).await;
        let options = options
            .host("127.0.0.1")
            .port(proxy.port)
            .ssl_mode(PgSslMode::Disable);
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .unwrap();
        (pool, proxy)
    }

    /// Listens on a free port and forwards each connection to the server at `upstream_host`
    /// and `upstream_port`.
    pub async fn start(upstream_host: String, upstream_port: u16) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(Counts::default());
        let counter = counts.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let server = TcpStream::connect((upstream_host.as_str(), upstream_port))
                    .await
                    .expect("connect upstream");
                let counter = counter.clone();
                tokio::spawn(relay(client, server, counter));
            }
        });
        CountingProxy { port, counts }
    }

    /// (statements, round trips, pings) so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.counts.statements.load(Ordering::SeqCst),
            self.counts.round_trips.load(Ordering::SeqCst),
            self.counts.pings.load(Ordering::SeqCst),
        )
    }
}

async fn relay(client: TcpStream, server: TcpStream, counter: Arc<Counts>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    let mut pending: Vec<u8> = Vec::new();
    let mut started = false;
    let mut previous = b'S';
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client_read.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        // Count whole messages before forwarding, so a count read after an await that got its
        // answer always includes the request.
        loop {
            if !started {
                if pending.len() < 8 {
                    break;
                }
                let len = u32::from_be_bytes(pending[0..4].try_into().unwrap()) as usize;
                if pending.len() < len {
                    break;
                }
                let code = u32::from_be_bytes(pending[4..8].try_into().unwrap());
                if code != SSL_REQUEST && code != GSSENC_REQUEST {
                    started = true;
                }
                pending.drain(..len);
            } else {
                if pending.len() < 5 {
                    break;
                }
                let len = u32::from_be_bytes(pending[1..5].try_into().unwrap()) as usize;
                if pending.len() < 1 + len {
                    break;
                }
                let count = |c: &AtomicU64| c.fetch_add(1, Ordering::SeqCst);
                match pending[0] {
                    b'Q' => {
                        count(&counter.statements);
                        count(&counter.round_trips);
                    }
                    b'E' => {
                        count(&counter.statements);
                    }
                    b'S' if previous == b'S' => {
                        count(&counter.pings);
                    }
                    b'S' => {
                        count(&counter.round_trips);
                    }
                    _ => {}
                }
                previous = if pending[0] == b'Q' { b'S' } else { pending[0] };
                pending.drain(..1 + len);
            }
        }
        if server_write.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
