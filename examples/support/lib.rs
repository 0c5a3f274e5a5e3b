//! What the examples share: picking the store a `--database-url` names (PostgreSQL, SQLite, or
//! the embedded memory store without one), connecting so that a wrong address fails at once and
//! says why, and serving HTTP. Not part of idem's API.

use std::time::Duration;

use idem_store_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use idem_store_postgres::sqlx::{ConnectOptions, Connection, PgPool};

/// The store `url` names, migrated, and its kind for the example's first line:
///
/// - none: the embedded `MemoryStore` (this process only; forgotten on exit);
/// - `sqlite://PATH` (or `sqlite:PATH`): a `SqliteStore` in that file, created if missing
///   (durable; shared by the processes of this machine);
/// - anything else: a PostgreSQL URL, a `PgStore` with `schema` (shared by every server).
///
/// A URL that cannot be opened exits with status 1 and says why: never a silent fallback to the
/// embedded store, where two servers would each do the same work.
pub async fn store(
    url: Option<&str>,
    schema: &str,
) -> (std::sync::Arc<dyn idem_core::Store>, &'static str) {
    use std::sync::Arc;
    let Some(url) = url else {
        return (Arc::new(idem_core::MemoryStore::new()), "memory");
    };
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        let opened = match idem_store_sqlite::SqliteStore::open(path).await {
            Ok(store) => store.migrate().await.map(|()| store),
            Err(e) => Err(e),
        };
        return match opened {
            Ok(store) => (Arc::new(store), "sqlite"),
            Err(e) => {
                eprintln!("error: cannot open the SQLite database {path:?}: {e}");
                std::process::exit(1);
            }
        };
    }
    let pool = connect(url, 16).await;
    // The defaults: up to half the pool held by the store, claims batched.
    let store = idem_store_postgres::PgStore::builder(pool)
        .schema(schema.to_owned())
        .build()
        .unwrap_or_else(|e| {
            eprintln!("error: {e}");
            std::process::exit(2);
        });
    store.migrate().await.expect("migrate");
    (Arc::new(store), "postgres")
}

/// The PostgreSQL an example needing one tries when neither `--database-url` nor
/// `DATABASE_URL` names another: a local server's default database (`scripts/test` starts one
/// there when none runs).
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@localhost:5432/postgres";

/// How long the first connection may take before the example gives up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A pool of `max_connections` on `url`, or, when the server cannot be reached, an exit with
/// status 1 and a message that names the address and the connection's error (rather than
/// waiting out the pool's timeout and panicking with `PoolTimedOut`).
pub async fn connect(url: &str, max_connections: u32) -> PgPool {
    match try_connect(url, max_connections).await {
        Ok(pool) => pool,
        Err(message) => {
            eprintln!(
                "error: {message}\nThis example needs PostgreSQL: start one there, or name \
                 yours with --database-url or DATABASE_URL."
            );
            std::process::exit(1);
        }
    }
}

async fn try_connect(url: &str, max_connections: u32) -> Result<PgPool, String> {
    let options: PgConnectOptions = url
        .parse()
        .map_err(|e| format!("--database-url is not a PostgreSQL URL: {e}"))?;
    let address = format!(
        "{}:{} (database {:?})",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("default")
    );
    // One connection first, to learn the real error (refused, unknown host, authentication)
    // quickly: the pool would retry it until its acquire timeout and report only that.
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Err(_) => {
            return Err(format!(
                "cannot connect to PostgreSQL at {address}: no answer within {CONNECT_TIMEOUT:?}"
            ))
        }
        Ok(Err(e)) => return Err(format!("cannot connect to PostgreSQL at {address}: {e}")),
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
        }
    }
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(options)
        .await
        .map_err(|e| format!("cannot connect to PostgreSQL at {address}: {e}"))
}

/// How long a client may take to send a request's headers before the connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client may take to send a request's body before it is answered with an error.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `shutdown` resolves, then lets the requests in flight
/// finish and idem's background work settle (for up to `drain` in all): a request whose
/// client left runs on, and its completion is written before this returns. Unlike `axum::serve`, slow or idle clients are cut off: a client
/// that has not sent its headers within [`HEADER_READ_TIMEOUT`] is disconnected, and a body
/// not sent within [`BODY_READ_TIMEOUT`] fails the request, so half-open connections are not
/// held.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::server::graceful::GracefulShutdown;
    use hyper_util::service::TowerToHyperService;

    let router = router.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        BODY_READ_TIMEOUT,
    ));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // A connection that failed before it was accepted (or no descriptor was free):
                // keep serving the others, without spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    drop(listener);
    let deadline = tokio::time::Instant::now() + drain;
    let _ = tokio::time::timeout_at(deadline, graceful.shutdown()).await;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    if let Err(unfinished) = idem_core::pending::drain(left).await {
        eprintln!("{unfinished}");
    }
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C: when a server example stops taking requests.
pub async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// The repository README's examples, compiled as doc-tests (the complete one also runs), so
/// that the front page's code cannot drift from the crates.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
