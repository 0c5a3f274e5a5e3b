//! What the examples share: connecting to PostgreSQL so that a wrong address fails at once and
//! says why. Not part of idem's API.

use std::time::Duration;

use idem_store_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use idem_store_postgres::sqlx::{ConnectOptions, Connection, PgPool};

/// How long the first connection may take before the example gives up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A pool of `max_connections` on `url`, or, when the server cannot be reached, an exit with
/// status 1 and a message that names the address and the connection's error (rather than
/// waiting out the pool's timeout and panicking with `PoolTimedOut`).
pub async fn connect(url: &str, max_connections: u32) -> PgPool {
    match try_connect(url, max_connections).await {
        Ok(pool) => pool,
        Err(message) => {
            eprintln!("error: {message}");
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
