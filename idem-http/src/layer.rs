//! The layer and its options: what it applies to, how it names callers and requests, what it
//! keeps, and for how long.

use http::header::HeaderName;
use http::{Method, StatusCode};
use idem_core::Store;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tower_layer::Layer;

use crate::config::Config;
use crate::scope::Scope;
use crate::secret::Secret;
use crate::service::Idempotency;

/// A tower [`Layer`] that makes the requests it wraps idempotent per the `Idempotency-Key`
/// header (IETF httpapi draft "The Idempotency-Key HTTP Header Field"), on any idem [`Store`].
///
/// Every option has a default that is the safe one; see each method. The layer is cheap to
/// clone (its options are shared).
#[derive(Clone)]
pub struct IdempotencyLayer {
    pub(crate) config: Arc<Config>,
}

impl IdempotencyLayer {
    /// A layer recording requests in `store` (a `MemoryStore`, a `PgStore`, an
    /// `Arc<dyn Store>`: any idem store), with every option at its default.
    pub fn new<S: Store + 'static>(store: S) -> IdempotencyLayer {
        IdempotencyLayer {
            config: Arc::new(Config::new(Arc::new(store))),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> IdempotencyLayer {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// The methods the layer applies to (default POST and PATCH, the methods the draft names as
    /// not idempotent). Requests with other methods pass through untouched.
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> IdempotencyLayer {
        let methods = methods.into_iter().collect();
        self.with(|c| c.methods = methods)
    }

    /// Whether a request (of the layer's methods) without an `Idempotency-Key` is refused with
    /// 400 (default `true`). With `false` it passes through untouched, unprotected.
    pub fn require_key(self, require: bool) -> IdempotencyLayer {
        self.with(|c| c.require_key = require)
    }

    /// Names the caller a request comes from, so a stored answer is only ever replayed to the
    /// caller whose request caused it. A function that returns `None` refuses the request with
    /// 401 before anything runs. Default [`scope::authenticated`](crate::scope::authenticated):
    /// the [`Caller`](crate::Caller) your auth layer set, else the `Authorization` header as a
    /// credential, else 401. See [`scope`](crate::scope) for the others: an extension of your
    /// own type, a bearer token, a session cookie, and (on purpose only) one shared scope.
    ///
    /// The function returns a [`Scope`](crate::scope::Scope), or a `String` naming a caller by a
    /// stable id, stored as given (hashed only when over 123 bytes): never a secret. Return
    /// [`Scope::credential`](crate::scope::Scope::credential) for a secret: it is stored as an
    /// HMAC under the layer's [`secret`](Self::secret).
    pub fn scope<F, S>(self, scope: F) -> IdempotencyLayer
    where
        F: Fn(&http::request::Parts) -> Option<S> + Send + Sync + 'static,
        S: Into<Scope>,
    {
        self.with(|c| c.scope = Arc::new(move |parts| scope(parts).map(Into::into)))
    }

    /// The server secret credential scopes are keyed with (HMAC-SHA256; at least
    /// [`MIN_SECRET_LEN`](crate::MIN_SECRET_LEN) random bytes). Without one, the layer makes a
    /// secret the first time it needs one and keeps it in the store (a record in the scope
    /// `idem_http`, kept for as long as a store keeps anything), so that every server on the
    /// store keys a credential alike. Give one to keep it out of the store; changing it makes
    /// every credential's keys new.
    ///
    /// # Panics
    ///
    /// When `secret` is shorter than [`MIN_SECRET_LEN`](crate::MIN_SECRET_LEN) bytes.
    pub fn secret(self, secret: impl AsRef<[u8]>) -> IdempotencyLayer {
        let secret = Arc::new(Secret::given(secret.as_ref()));
        self.with(|c| c.secret = secret)
    }

    /// The most requests the layer runs at once, from claim to answer (default
    /// [`DEFAULT_MAX_RUNNING`](crate::DEFAULT_MAX_RUNNING)). A request past it waits, with its
    /// client, before it claims anything: a client that leaves meanwhile runs nothing.
    ///
    /// The bound matters because a run goes on after its client leaves
    /// ([`finish_when_client_leaves`](Self::finish_when_client_leaves)): an outer
    /// `ConcurrencyLimitLayer` frees its place, and an outer `TimeoutLayer` gives up, when the
    /// client's future is dropped, so clients that send fresh keys and leave at once would
    /// otherwise pile up runs without limit. Set it to what the inner service can run at once
    /// (the database connections it needs, say); an outer concurrency limit then bounds the
    /// waiting clients, and an outer timeout bounds their wait.
    ///
    /// # Panics
    ///
    /// When `max` is 0.
    pub fn max_running(self, max: usize) -> IdempotencyLayer {
        assert!(max > 0, "IdempotencyLayer::max_running takes at least 1");
        self.with(|c| {
            c.running = Arc::new(Semaphore::new(max));
            c.max_running = max;
        })
    }

    /// Adds a request header to the fingerprint (default: none; the fingerprint is the method,
    /// path, query and a SHA-256 of the body). The same key with another fingerprint gets 422.
    pub fn fingerprint_header(self, name: HeaderName) -> IdempotencyLayer {
        self.with(|c| c.fingerprint_headers.push(name))
    }

    /// On a request whose key is held by a live run, wait up to `wait` for that run's response
    /// and replay it (default: answer 409 at once, with `Retry-After`). Past `wait`, 409.
    pub fn wait(self, wait: Duration) -> IdempotencyLayer {
        self.with(|c| c.wait = Some(wait))
    }

    /// How long a claim holds without renewal (default 30 s). It is renewed every third of a
    /// lease while the inner service runs, so only a server that died (or stalled this long)
    /// loses its claim; then a retry runs the request again once the lease has lapsed.
    pub fn lease(self, lease: Duration) -> IdempotencyLayer {
        self.with(|c| c.lease = lease)
    }

    /// How long a recorded response is replayed (default 24 h, as Stripe keeps keys). After
    /// that the key is new again.
    pub fn keep(self, keep: Duration) -> IdempotencyLayer {
        self.with(|c| c.keep = keep)
    }

    /// The largest request body read (default 1 MiB): a larger one gets 413 before anything is
    /// claimed. The layer reads the whole body before it claims, to fingerprint it. Of an
    /// oversized body, up to as much again is read and dropped before the 413, so a client
    /// still sending it reads the answer rather than a closed connection; one declared
    /// (`Content-Length`) over twice the limit is refused before it is read.
    pub fn max_request_body(self, bytes: usize) -> IdempotencyLayer {
        self.with(|c| c.max_request_body = bytes)
    }

    /// The largest response body recorded (default 1 MiB). A larger response, and a streaming
    /// one (no exact length: SSE, chunked), is sent to the client but not recorded: its key is
    /// released (so a retry runs again) and a warning is logged.
    pub fn max_response_body(self, bytes: usize) -> IdempotencyLayer {
        self.with(|c| c.max_response_body = bytes)
    }

    /// Which statuses are recorded and replayed (default [`default_records`](crate::default_records)). A status it
    /// refuses releases the key, so a retry runs the request again.
    pub fn records<F>(self, records: F) -> IdempotencyLayer
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.with(|c| c.records = Arc::new(records))
    }

    /// Records and replays a header that is not replayed by default (one of
    /// [`NOT_REPLAYED`](crate::NOT_REPLAYED): hop-by-hop headers, `Set-Cookie`, `Date`).
    pub fn replay_header(self, name: HeaderName) -> IdempotencyLayer {
        self.with(|c| c.replay_headers.push(name))
    }

    /// The `Retry-After` (rounded up to whole seconds) of 409 and 503 answers (default 1 s).
    pub fn retry_after(self, after: Duration) -> IdempotencyLayer {
        self.with(|c| c.retry_after = after)
    }

    /// Whether a request whose client goes away (hyper drops the request's future) still runs
    /// to its end (default `true`).
    ///
    /// With `true`, the layer runs each request it handles (claim, inner service, recording the
    /// answer) on a task of its own, spawned on the current Tokio runtime, and the response
    /// future only awaits that task. A client that gives up does not cut the inner service
    /// short: it finishes, its answer is recorded, and the client's retry with the same key gets
    /// 409 while it runs and the recorded answer (`Idempotent-Replayed: true`) after. So the
    /// work is done once, whenever the client leaves. A panic in the inner service still reaches
    /// the server's connection as a panic. The cost is one task spawn per request the layer
    /// handles; requests it passes through (other methods, no key with `require_key(false)`)
    /// and requests it refuses before claiming (400, 401, 413) are not spawned. Outside a Tokio
    /// runtime requests run inline, as with `false`. A server's graceful shutdown waits for its
    /// connections, not for these tasks: a run whose client left is dropped when the runtime
    /// stops, and its claim abandoned as with `false`.
    ///
    /// With `false`, the request runs inside the response future: when the client goes away the
    /// inner service is dropped wherever it was, and its claim is abandoned (the store frees the
    /// key at once if it can, or when the lease lapses). A retry then runs the request again, so
    /// whatever the inner service did before it was cut is done twice unless it is idempotent
    /// itself.
    ///
    /// ```
    /// # use idem_core::MemoryStore;
    /// # use idem_http::IdempotencyLayer;
    /// // The inner service must tolerate being cut short: a retry runs it again.
    /// let layer = IdempotencyLayer::new(MemoryStore::new()).finish_when_client_leaves(false);
    /// ```
    pub fn finish_when_client_leaves(self, finish: bool) -> IdempotencyLayer {
        self.with(|c| c.finish_when_client_leaves = finish)
    }

    /// Where the `type` links of the layer's problem answers point: your documentation of the
    /// layer's rules. Each answer adds `#` and an anchor naming its rule, such as
    /// `#idempotency-key-reused` (the anchors of the table in the crate's guide). By default
    /// `type` is `about:blank`, RFC 9457's "no more than the status says".
    pub fn problem_base(self, base: impl Into<Cow<'static, str>>) -> IdempotencyLayer {
        let base = base.into();
        self.with(|c| c.problem_base = Some(base))
    }
}

impl fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("IdempotencyLayer")
            .field("store", &c.store)
            .field("methods", &c.methods)
            .field("require_key", &c.require_key)
            .field("fingerprint_headers", &c.fingerprint_headers)
            .field("wait", &c.wait)
            .field("lease", &c.lease)
            .field("keep", &c.keep)
            .field("max_request_body", &c.max_request_body)
            .field("max_response_body", &c.max_response_body)
            .field("replay_headers", &c.replay_headers)
            .field("finish_when_client_leaves", &c.finish_when_client_leaves)
            .field("max_running", &c.max_running)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = Idempotency<S>;

    fn layer(&self, inner: S) -> Idempotency<S> {
        Idempotency {
            inner,
            config: self.config.clone(),
        }
    }
}
