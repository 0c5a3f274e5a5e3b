//! Connecting to the store a URL names: what every command works on.

use idem_store_postgres::sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use idem_store_postgres::sqlx::Connection;
use idem_store_postgres::PgStore;
use std::time::Duration;

use crate::backend::Backend;
use crate::output::{FAILED, USAGE};

/// What every command works on.
pub(crate) struct Ctx {
    pub backend: Backend,
}

/// How long one statement of the dashboard may run on PostgreSQL: a page that any web page the
/// operator visits might make their browser ask for must not keep a scan running on a
/// production database.
pub(crate) const UI_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the first connection to PostgreSQL may take: a server that does not answer by
/// then is reported unreachable, rather than left to the pool's longer wait.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The store `url` names: `redis://` (several, comma-separated: a cluster), `sqlite://PATH`
/// (or `sqlite:PATH`), else PostgreSQL, whose connections stop a statement after
/// `statement_timeout` if given.
pub(crate) async fn connect(
    url: &str,
    schema: &str,
    table: &str,
    prefix: &str,
    statement_timeout: Option<Duration>,
) -> Result<Backend, (i32, String)> {
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        let nodes: Vec<&str> = url.split(',').collect();
        let store = match nodes.as_slice() {
            [one] => idem_store_redis::RedisStore::connect(one).await,
            nodes => idem_store_redis::RedisStore::connect_cluster(nodes).await,
        }
        .map_err(|e| (FAILED, format!("cannot connect to Redis: {e}")))?;
        if prefix.is_empty() || prefix.contains(['{', '}']) {
            return Err((
                USAGE,
                format!("--redis-prefix {prefix:?} may not be empty or hold braces"),
            ));
        }
        return Ok(Backend::Redis {
            store: store.prefix(prefix),
        });
    }
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        if !std::path::Path::new(path).exists() {
            return Err((FAILED, format!("no SQLite database at {path:?}")));
        }
        let store = idem_store_sqlite::SqliteStore::open(path)
            .await
            .map_err(|e| {
                (
                    FAILED,
                    format!("cannot open the SQLite database {path:?}: {e}"),
                )
            })?;
        let store = idem_store_sqlite::SqliteStore::with_table(store.pool().clone(), table)
            .map_err(|e| (USAGE, e.to_string()))?;
        return Ok(Backend::Sqlite {
            store,
            table: table.to_owned(),
        });
    }
    let mut options: PgConnectOptions = url
        .parse()
        .map_err(|e| (USAGE, format!("not a PostgreSQL URL: {e}")))?;
    if let Some(timeout) = statement_timeout {
        let ms = timeout.as_millis().to_string();
        options = options.options([("statement_timeout", ms.as_str())]);
    }
    reach(&options).await?;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .map_err(|e| (FAILED, format!("cannot connect to the database: {e}")))?;
    let store = PgStore::builder(pool.clone())
        .schema(schema.to_owned())
        .table(table.to_owned())
        .through_pool()
        .build()
        .map_err(|e| (USAGE, e.to_string()))?;
    Ok(Backend::Postgres {
        pool,
        store,
        schema: schema.to_owned(),
        table: table.to_owned(),
    })
}

/// Opens one connection to the server `options` name, within [`CONNECT_TIMEOUT`], so that an
/// unreachable or refusing server is reported at once, with where it was looked for (host,
/// port, database and user, never the password) and what to check.
async fn reach(options: &PgConnectOptions) -> Result<(), (i32, String)> {
    let target = format!(
        "PostgreSQL at {}:{} (database {:?}, user {:?})",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or(options.get_username()),
        options.get_username()
    );
    let failed = |why: String| {
        (
            FAILED,
            format!(
                "cannot connect to {target}: {why}. Check that the server runs and is \
                 reachable from here, and the URL given with --database-url (or DATABASE_URL)."
            ),
        )
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(options)).await {
        Err(_) => Err(failed(format!(
            "no answer within {} s",
            CONNECT_TIMEOUT.as_secs()
        ))),
        Ok(Err(e)) => Err(failed(e.to_string())),
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
    }
}
