//! `RedisStore`: the claim lifecycle in Redis, each operation one Lua script (one round trip),
//! on a single node (through the `redis` crate's reconnecting connection manager) or a Redis
//! Cluster (through its cluster connection, which routes each script by its key's slot).

use async_trait::async_trait;
use idem_core::{
    Claim, ClaimRequest, Completion, EffectEntry, EffectRecord, EffectState, Fence, Fenced,
    Fingerprint, Key, Operation, Purge, Record, RecordState, Store, StoreError,
};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::keys;
use crate::scripts;

/// The prefix of every key the store writes, by default: `idem`.
pub const DEFAULT_PREFIX: &str = "idem";

/// How long a record (or journal entry) stays readable after it stops counting, by default
/// (10 minutes): long enough that a claim after a lapsed lease is reported as a takeover and
/// `get` shows what lapsed; Redis deletes it after that (or [`Purge`] sooner).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(600);

/// An idem store in Redis: every operation is one round trip (a Lua script run atomically by
/// the server), leases and keep are Redis expiries, and the records of one key share a hash
/// slot, so it runs on a single node and on Redis Cluster alike.
///
/// What a Redis crash can cost depends on its persistence (see the crate's documentation): a
/// claim or completion lost with the server makes the work run again (a repeat), never a skip.
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) conn: Conn,
    pub(crate) prefix: Arc<str>,
    grace: Duration,
}

#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.conn {
            Conn::Single(_) => "single node",
            Conn::Cluster(_) => "cluster",
        };
        f.debug_struct("RedisStore")
            .field("connection", &kind)
            .field("prefix", &self.prefix)
            .field("grace", &self.grace)
            .finish()
    }
}

pub(crate) fn store_error(e: redis::RedisError) -> StoreError {
    StoreError::new("the Redis store failed", e)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 4)
}

fn at(us: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us.max(0) as u64)
}

fn int(v: &Value) -> Result<i64, StoreError> {
    match v {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected(other)),
    }
}

fn bytes(v: &Value) -> Result<Vec<u8>, StoreError> {
    match v {
        Value::BulkString(b) => Ok(b.clone()),
        Value::SimpleString(s) => Ok(s.clone().into_bytes()),
        Value::Okay => Ok(b"OK".to_vec()),
        other => Err(unexpected(other)),
    }
}

fn unexpected(v: &Value) -> StoreError {
    StoreError::msg(format!(
        "the Redis store got an answer it does not understand: {v:?} (another program writing \
         under the store's prefix?)"
    ))
}

fn items(v: Value) -> Result<Vec<Value>, StoreError> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(unexpected(&other)),
    }
}

fn applied(v: i64) -> Fenced {
    if v == 1 {
        Fenced::Applied
    } else {
        Fenced::Lost
    }
}

impl RedisStore {
    /// Connects to one Redis server (`redis://host:port/db`), through a connection manager
    /// that reconnects by itself after the server goes away (calls fail with `StoreError`
    /// meanwhile).
    pub async fn connect(url: &str) -> Result<RedisStore, StoreError> {
        let client =
            redis::Client::open(url).map_err(|e| store_error(e).during(Operation::Setup))?;
        let manager = client
            .get_connection_manager()
            .await
            .map_err(|e| store_error(e).during(Operation::Setup))?;
        Ok(RedisStore::new(manager))
    }

    /// Connects to a Redis Cluster through any of its nodes (`redis://host:port` each).
    pub async fn connect_cluster(nodes: &[&str]) -> Result<RedisStore, StoreError> {
        let client = redis::cluster::ClusterClient::new(nodes.to_vec())
            .map_err(|e| store_error(e).during(Operation::Setup))?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| store_error(e).during(Operation::Setup))?;
        Ok(RedisStore::new_cluster(conn))
    }

    /// A store on your own connection manager, with the default prefix and grace.
    pub fn new(manager: ConnectionManager) -> RedisStore {
        RedisStore::with_conn(Conn::Single(manager))
    }

    /// A store on your own cluster connection, with the default prefix and grace.
    pub fn new_cluster(conn: ClusterConnection) -> RedisStore {
        RedisStore::with_conn(Conn::Cluster(conn))
    }

    fn with_conn(conn: Conn) -> RedisStore {
        RedisStore {
            conn,
            prefix: Arc::from(DEFAULT_PREFIX),
            grace: DEFAULT_GRACE,
        }
    }

    /// The prefix of every key the store writes (default [`DEFAULT_PREFIX`]), so several stores
    /// (or tests) share a server. It may not hold `{`, `}` or control characters.
    ///
    /// # Panics
    ///
    /// On a prefix with `{`, `}` or control characters (they would break the hash tags).
    pub fn prefix(mut self, prefix: &str) -> RedisStore {
        assert!(
            !prefix.is_empty()
                && !prefix
                    .chars()
                    .any(|c| c == '{' || c == '}' || c.is_control()),
            "a RedisStore prefix may not be empty or hold braces or control characters: {prefix:?}"
        );
        self.prefix = Arc::from(prefix);
        self
    }

    /// How long records stay readable after they stop counting (default [`DEFAULT_GRACE`]).
    pub fn grace(mut self, grace: Duration) -> RedisStore {
        self.grace = grace;
        self
    }

    fn grace_ms(&self) -> u64 {
        u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX / 4)
    }

    pub(crate) async fn fenced(
        &self,
        script: &redis::Script,
        key: &Key,
        args: &[u64],
    ) -> Result<Fenced, StoreError> {
        let mut invocation = script.key(keys::record(&self.prefix, key));
        for arg in args {
            invocation.arg(*arg);
        }
        let done: i64 = invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(applied(done))
    }

    /// Every key under the prefix, on every node (`SCAN`, in batches).
    pub(crate) async fn scan(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        self.scan_matching(&format!("{}:*", self.prefix)).await
    }

    /// Every key matching `pattern`, on every node.
    pub(crate) async fn scan_matching(&self, pattern: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut found = Vec::new();
        match &self.conn {
            Conn::Single(manager) => {
                let mut conn = manager.clone();
                let mut cursor: u64 = 0;
                loop {
                    let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut conn)
                        .await
                        .map_err(store_error)?;
                    found.extend(batch);
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
            }
            Conn::Cluster(conn) => {
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let mut conn = conn.clone();
                for (host, port) in masters(&mut conn).await? {
                    let node = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port,
                    });
                    let mut cursor: u64 = 0;
                    loop {
                        let mut scan = redis::cmd("SCAN");
                        scan.arg(cursor)
                            .arg("MATCH")
                            .arg(pattern)
                            .arg("COUNT")
                            .arg(1000);
                        let answer = conn
                            .route_command(scan, node.clone())
                            .await
                            .map_err(store_error)?;
                        let (next, batch): (u64, Vec<Vec<u8>>) = redis::from_redis_value(answer)
                            .map_err(|e| {
                                StoreError::new("the Redis store could not read a SCAN answer", e)
                            })?;
                        found.extend(batch);
                        if next == 0 {
                            break;
                        }
                        cursor = next;
                    }
                }
            }
        }
        Ok(found)
    }
}

/// The primaries of a cluster, from `CLUSTER SLOTS` (each slot range's first node).
async fn masters(conn: &mut ClusterConnection) -> Result<Vec<(String, u16)>, StoreError> {
    use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
    let answer = conn
        .route_command(
            redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await
        .map_err(store_error)?;
    let mut masters = std::collections::BTreeSet::new();
    for range in items(answer)? {
        let range = items(range)?;
        let Some(primary) = range.get(2).cloned() else {
            return Err(unexpected(&Value::Array(range)));
        };
        let primary = items(primary)?;
        match primary.as_slice() {
            [host, port, ..] => {
                let host = String::from_utf8_lossy(&bytes(host)?).into_owned();
                masters.insert((host, int(port)? as u16));
            }
            _ => return Err(unexpected(&Value::Array(primary))),
        }
    }
    Ok(masters.into_iter().collect())
}

#[async_trait]
impl Store for RedisStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let answer: Value = scripts::CLAIM
            .key(keys::record(&self.prefix, request.key))
            .arg(request.fingerprint.map_or("", Fingerprint::as_str))
            .arg(request.token.map_or(String::new(), |t| t.0.to_string()))
            .arg(micros(request.lease))
            .arg(self.grace_ms())
            .arg(idem_core::holder())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        let answer = items(answer)?;
        let kind = answer.first().map(int).transpose()?.unwrap_or(0);
        Ok(match (kind, answer.as_slice()) {
            (1, [_, fence, expires, taken]) => Claim::Acquired {
                fence: Fence(int(fence)? as u64),
                lease_expires_at: at(int(expires)?),
                taken_over: int(taken)? == 1,
            },
            (2, [_, expires]) => Claim::InProgress {
                lease_expires_at: at(int(expires)?),
            },
            (3, [_, completed, has_output, output]) => Claim::Completed {
                completed_at: at(int(completed)?),
                output: (int(has_output)? == 1).then(|| bytes(output)).transpose()?,
            },
            (4, [_]) => Claim::Mismatch,
            _ => return Err(unexpected(&Value::Array(answer))),
        })
    }

    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        let done: i64 = scripts::COMPLETE
            .key(keys::record(&self.prefix, key))
            .arg(fence.0)
            .arg(micros(completion.keep))
            .arg(self.grace_ms())
            .arg(u8::from(completion.output.is_some()))
            .arg(completion.output.unwrap_or_default())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(applied(done))
    }

    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        self.fenced(&scripts::RELEASE, key, &[fence.0]).await
    }

    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        self.fenced(
            &scripts::RENEW,
            key,
            &[fence.0, micros(lease), self.grace_ms()],
        )
        .await
    }

    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        let fields: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(keys::record(&self.prefix, key))
            .arg(&["f", "fp", "d", "x", "c", "o"])
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        let text = |i: usize| fields[i].as_deref().map(String::from_utf8_lossy);
        let number = |i: usize| text(i).and_then(|t| t.parse::<i64>().ok());
        let Some(fence) = number(0) else {
            return Ok(None);
        };
        let expires = number(3).unwrap_or(0);
        let state = if text(2).as_deref() == Some("1") {
            RecordState::Completed {
                completed_at: at(number(4).unwrap_or(0)),
                expires_at: at(expires),
                output: fields[5].clone(),
            }
        } else {
            RecordState::InProgress {
                lease_expires_at: at(expires),
            }
        };
        Ok(Some(Record {
            key: key.clone(),
            fence: Fence(fence as u64),
            fingerprint: text(1)
                .filter(|fp| !fp.is_empty())
                .map(|fp| Fingerprint::from_stored(fp.into_owned())),
            state,
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

    async fn effect(&self, key: &Key, effect: &str) -> Result<Option<EffectEntry>, StoreError> {
        let answer: Value = scripts::EFFECT
            .key(keys::effect(&self.prefix, key, effect))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| store_error(e).during(Operation::JournalRead))?;
        let answer = items(answer)?;
        match answer.as_slice() {
            [found] if int(found)? == 0 => Ok(None),
            [_, state, fence, has_output, output] => Ok(Some(EffectEntry {
                state: if int(state)? == 1 {
                    EffectState::Done
                } else {
                    EffectState::Started
                },
                fence: Fence(int(fence)? as u64),
                output: (bytes(has_output)? == b"1")
                    .then(|| bytes(output))
                    .transpose()?,
            })),
            _ => Err(unexpected(&Value::Array(answer))),
        }
    }

    async fn record_effect(
        &self,
        key: &Key,
        fence: Fence,
        record: EffectRecord<'_>,
    ) -> Result<Fenced, StoreError> {
        let state = match record.state {
            EffectState::Started => 0u8,
            EffectState::Done => 1,
        };
        let done: i64 = scripts::RECORD_EFFECT
            .key(keys::record(&self.prefix, key))
            .key(keys::effect(&self.prefix, key, record.effect))
            .arg(fence.0)
            .arg(state)
            .arg(micros(record.keep))
            .arg(self.grace_ms())
            .arg(u8::from(record.output.is_some()))
            .arg(record.output.unwrap_or_default())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| store_error(e).during(Operation::JournalWrite))?;
        Ok(applied(done))
    }
}

/// Redis deletes expired records by itself, a [grace](RedisStore::grace) after they stop
/// counting. `purge_expired` deletes them sooner: it walks the prefix's keys with `SCAN` (on
/// every node of a cluster) and deletes each that has expired, one script per key.
#[async_trait]
impl Purge for RedisStore {
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        let failed = |e| store_error(e).during(Operation::Purge);
        let (mut records, mut effects) = (0usize, 0usize);
        for name in self.scan().await.map_err(|e| e.during(Operation::Purge))? {
            let is_record = keys::is_record(&self.prefix, &name);
            let count = if is_record {
                &mut records
            } else {
                &mut effects
            };
            if *count >= limit {
                continue;
            }
            let deleted: i64 = scripts::PURGE_ONE
                .key(name.as_slice())
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(failed)?;
            *count += deleted as usize;
            if records >= limit && effects >= limit {
                break;
            }
        }
        Ok((records + effects) as u64)
    }
}
