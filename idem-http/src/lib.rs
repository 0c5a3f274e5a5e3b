//! # idem-http: `Idempotency-Key` for tower and axum, on any idem store
//!
//! Clients retry POSTs: a timeout after the server charged the card, a retry after a slow
//! answer. With an `Idempotency-Key` header (IETF httpapi draft "The Idempotency-Key HTTP
//! Header Field", as Stripe's API uses it) the server can answer the retry with the first
//! answer instead of charging again. [`IdempotencyLayer`] does that for any tower service, on
//! any idem [`Store`](idem_core::Store) (`MemoryStore`, `PgStore`, ...): one atomic claim before
//! the inner service runs, its lease renewed while it runs, the response recorded after.
//!
//! ```
//! use axum::extract::Request;
//! use axum::http::StatusCode;
//! use axum::middleware::{self, Next};
//! use axum::response::Response;
//! use axum::{routing::post, Router};
//! use idem_core::MemoryStore;
//! use idem_http::{Caller, IdempotencyLayer};
//!
//! /// Your authentication: refuses a request without valid credentials, and names its caller.
//! async fn auth(mut request: Request, next: Next) -> Result<Response, StatusCode> {
//!     let user = user_of(&request).ok_or(StatusCode::UNAUTHORIZED)?;
//!     request.extensions_mut().insert(Caller::new(user));
//!     Ok(next.run(request).await)
//! }
//! # fn user_of(_: &Request) -> Option<String> { Some("user-7".into()) }
//!
//! let app: Router = Router::new()
//!     .route("/charges", post(|| async { (StatusCode::CREATED, "charged") }))
//!     .layer(IdempotencyLayer::new(MemoryStore::new())) // inner: runs second
//!     .layer(middleware::from_fn(auth)); // outer: runs first
//! ```
//!
//! ## What each request gets
//!
//! Requests whose method the layer handles (default POST and PATCH):
//!
//! | the request | the answer |
//! | --- | --- |
//! | the scope function names no caller (by default: no [`Caller`] and no `Authorization`) | 401, nothing runs |
//! | no `Idempotency-Key` | 400 (or passes through with `require_key(false)`) |
//! | a malformed key: empty, over 255 characters, not visible ASCII, bad quoting, repeated | 400 |
//! | a body over the limit (default 1 MiB) | 413, nothing claimed |
//! | a new key, with [`max_running`](IdempotencyLayer::max_running) requests running | waits (with its client) for one to end; nothing is claimed meanwhile |
//! | a new key | the inner service runs; its answer is recorded if kept (below) |
//! | a completed key, same request | the recorded status, headers and body, plus `Idempotent-Replayed: true` |
//! | a completed or running key, the same method and path, another query or body | 422, nothing runs |
//! | a key whose first request is still running | 409 with `Retry-After` (or, with `wait(d)`, the first answer once it is there) |
//! | the client goes away before the answer | the request runs to its end and its answer is recorded for the retry (with `finish_when_client_leaves(false)`: it stops where it was and the key is freed) |
//! | the store cannot be reached | 503 with `Retry-After`; nothing runs (fail closed) |
//!
//! **What is kept.** 2xx, 3xx and 4xx answers except [`RELEASED_STATUSES`] (401, 403, 407,
//! 408, 409, 425 and 429) are recorded and replayed ([`default_records`], see
//! [`IdempotencyLayer::records`]); 5xx and those seven release the key so a retry runs again.
//! An authentication failure is never stored, so nobody can send a victim's predictable key
//! first and have it refused for them. Streaming answers (no exact length) and answers over
//! [`max_response_body`](IdempotencyLayer::max_response_body) are sent but not recorded: the key
//! is released and a warning logged. Hop-by-hop headers, `Set-Cookie` and `Date` are not
//! replayed ([`NOT_REPLAYED`]) unless named with [`IdempotencyLayer::replay_header`].
//!
//! **Who shares a key: nobody.** A record's key is the caller's scope, the method, the path
//! and the client's key, so two callers sending one key, or one caller sending it to two
//! endpoints, never see each other's answers. The scope names the caller ([`scope`]):
//!
//! - by default ([`scope::authenticated`]), the [`Caller`] extension your auth layer set;
//!   without one, the `Authorization` header as a credential; without either, 401. A request
//!   without credentials never shares a scope with anyone: there is no "anonymous" scope;
//! - [`scope::extension`] reads the user your auth layer stored under a type of its own;
//!   [`scope::cookie`] a session cookie, for cookie-authenticated applications;
//!   [`scope::bearer_token`] the bearer token only;
//! - [`scope::shared`] puts every request in one scope, on purpose, for an endpoint a single
//!   caller uses (server to server).
//!
//! A credential (a token, a header, a cookie) is stored as an HMAC-SHA256 under a server
//! secret, never in clear nor as a bare hash that a reader of the records (or of the
//! dashboard) could test password guesses against offline. The secret is yours
//! ([`IdempotencyLayer::secret`]) or, by default, one the layer makes once and keeps in the
//! store (a record in the scope `idem_http`, read again every minute), so every server on the
//! store keys a credential alike. Someone who reads the whole store reads a kept secret too:
//! if your credentials can be weak (Basic-auth passwords), give a secret of your own. An empty
//! caller id or credential names nobody (401), and so do two `Authorization` headers or two
//! cookies of the scope's name.
//!
//! **Where the layer goes: inside your authentication.** The layer answers a known key from
//! its record *before* the inner service runs, so anything inside it (an auth check in the
//! handler, or an auth layer added before it) is skipped by a replay. Add your auth layer
//! *after* the idempotency layer (axum and tower run the last-added layer first), as in the
//! example above: a request without valid credentials is refused before the layer looks at
//! its key, so it can never receive a stored answer. The scope then keeps authenticated
//! callers apart. Placed the other way round, the default scope still refuses requests with
//! no credentials (401) and keys the others by their credential, and authentication
//! failures are not recorded: a wrong credential gets its own scope and its own 401.
//!
//! **Bounded work.** A run goes on after its client leaves (below), so an outer
//! `ConcurrencyLimitLayer` or `TimeoutLayer`, which let go when the client's future is
//! dropped, do not bound the runs. The layer bounds them itself:
//! [`max_running`](IdempotencyLayer::max_running) (default [`DEFAULT_MAX_RUNNING`]) requests
//! at once, claim to answer; the next waits with its client before claiming, and a client that
//! leaves while waiting runs nothing. Set it to what the inner service can run at once; outer
//! limit and timeout layers then bound the waiting clients and their wait.
//!
//! **When the client goes away.** A client that gives up before the answer (a timeout, a
//! closed connection: hyper drops the request's future) does not cut its request short: the
//! layer runs each request it handles on a Tokio task of its own, which goes on to the end. The
//! inner service finishes, its answer is recorded (if kept), and the client's retry with the
//! same key gets 409 while it runs and then that answer with `Idempotent-Replayed: true`. The
//! work happens once. This costs one task spawn per handled request; see
//! [`finish_when_client_leaves`](IdempotencyLayer::finish_when_client_leaves). With
//! `finish_when_client_leaves(false)` the inner service is dropped wherever it was when the
//! client left and the key is freed at once: the retry runs it again, and whatever it did
//! before the cut is done again.
//!
//! **Stopping the server.** A request whose client left, and a recorded answer still on its
//! way to the store, run on tasks that a runtime shutting down drops. After the server's
//! graceful shutdown, drain them before `main` returns, so that finished work is recorded and
//! not done again by the retry:
//!
//! ```no_run
//! # async fn run(app: axum::Router, listener: tokio::net::TcpListener) -> std::io::Result<()> {
//! # let signal = async {};
//! axum::serve(listener, app).with_graceful_shutdown(signal).await?;
//! if let Err(unfinished) = idem_core::pending::drain(std::time::Duration::from_secs(10)).await {
//!     eprintln!("{unfinished}");
//! }
//! # Ok(()) }
//! ```
//!
//! **Leases.** The claim's lease (default 30 s) is renewed while the inner service runs. If the
//! service panics, the key is freed at once (and the panic goes on to the server, as without
//! the layer); if the server dies, a retry runs again once the lease lapses. Recorded answers
//! are replayed for [`keep`](IdempotencyLayer::keep) (default 24 h).
//!
//! Every answer the layer makes itself is `application/problem+json` (RFC 9457). Its `type` is
//! `about:blank` (the status and `detail` say what happened) unless
//! [`problem_base`](IdempotencyLayer::problem_base) names your documentation: then it links to
//! the entry for the rule broken (`#idempotency-key-reused`, ...; this table, to copy into it):
//!
//! | anchor (`type`) | the request | the answer |
//! | --- | --- | --- |
//! | <a id="idempotency-caller-unknown"></a>`idempotency-caller-unknown` | the scope function names no caller | **401**; nothing runs |
//! | <a id="idempotency-key-missing"></a>`idempotency-key-missing` | no `Idempotency-Key` | **400** (`require_key(false)`: passes through) |
//! | <a id="idempotency-key-malformed"></a>`idempotency-key-malformed` | not 1 to 255 visible ASCII characters, as an sf-string or a bare token; or repeated | **400** |
//! | <a id="idempotency-body-too-large"></a>`idempotency-body-too-large` | a body over `max_request_body` (1 MiB) | **413**, nothing claimed |
//! | <a id="idempotency-body-unreadable"></a>`idempotency-body-unreadable` | the body broke off while it was read | **400**, nothing claimed |
//! | <a id="idempotency-key-reused"></a>`idempotency-key-reused` | a known key with another query, body or fingerprinted header | **422**; nothing runs |
//! | <a id="idempotency-in-progress"></a>`idempotency-in-progress` | the key's first request is still running | **409** with `Retry-After` (or, with `wait(d)`, its answer) |
//! | <a id="idempotency-store-unavailable"></a>`idempotency-store-unavailable` | the store cannot be reached | **503** with `Retry-After`; nothing runs |
//! | <a id="idempotency-replay-unreadable"></a>`idempotency-replay-unreadable` | the recorded answer cannot be read back | **500**; nothing runs again |
//! | <a id="idempotency-response-failed"></a>`idempotency-response-failed` | the inner service's body failed while it was recorded | **500**; the key is released |
//! | <a id="idempotency-unexpected"></a>`idempotency-unexpected` | an error the layer has no rule for | **500** |
//!
//! ## Options
//!
//! | option | default | what it does |
//! | --- | --- | --- |
//! | [`methods`](IdempotencyLayer::methods) | POST, PATCH | the methods the layer applies to |
//! | [`require_key`](IdempotencyLayer::require_key) | `true` | 400 for a request without a key, or pass it through |
//! | [`scope`](IdempotencyLayer::scope) | [`scope::authenticated`]: [`Caller`], else `Authorization` | names the caller; `None` is 401 |
//! | [`secret`](IdempotencyLayer::secret) | made once, kept in the store | the HMAC key of credential scopes |
//! | [`max_running`](IdempotencyLayer::max_running) | [`DEFAULT_MAX_RUNNING`] (1,024) | requests run at once, counting those whose client left |
//! | [`fingerprint_header`](IdempotencyLayer::fingerprint_header) | none | adds a request header to the fingerprint (method, path, query, SHA-256 of the body) |
//! | [`wait`](IdempotencyLayer::wait) | none (409 at once) | waits for an in-flight first request's answer |
//! | [`lease`](IdempotencyLayer::lease) | 30 s | how long a claim holds unrenewed; a dead server's key is free after it |
//! | [`keep`](IdempotencyLayer::keep) | 24 h | how long answers are replayed |
//! | [`max_request_body`](IdempotencyLayer::max_request_body) | 1 MiB | larger bodies get 413 |
//! | [`max_response_body`](IdempotencyLayer::max_response_body) | 1 MiB | larger answers are sent, not recorded |
//! | [`records`](IdempotencyLayer::records) | [`default_records`] | which statuses are kept |
//! | [`replay_header`](IdempotencyLayer::replay_header) | none | replays a header of [`NOT_REPLAYED`] |
//! | [`retry_after`](IdempotencyLayer::retry_after) | 1 s | the `Retry-After` of 409 and 503 |
//! | [`problem_base`](IdempotencyLayer::problem_base) | none (`about:blank`) | where problem `type` links point |
//! | [`finish_when_client_leaves`](IdempotencyLayer::finish_when_client_leaves) | `true` | a request whose client goes away runs to its end |
//!
//! **Limits.** The layer records the answer *after* the inner service returns: a server that
//! dies between the side effect and the record repeats it on the retry after the lease. Pass
//! the request's key to your provider, or journal the effect, so that repeat is absorbed. The
//! whole request body is read before the claim (to fingerprint it), so the body limit bounds
//! the memory per request.
//!
//! ## The draft, requirement by requirement
//!
//! Checked against draft-ietf-httpapi-idempotency-key-header-06, the latest text in the
//! working group's repository.
//!
//! | the draft | what the layer does |
//! | --- | --- |
//! | the header is an Item Structured Field whose value is a String | reads an sf-string (`"abc"`, with `\"` and `\\` escapes) and, as Stripe's clients send it, a bare token; 1 to 255 characters; anything else 400 |
//! | uniqueness of the key is defined by the resource owner; a UUID is recommended | any key in the limits; a record is per caller, method and path, so one key sent to two endpoints is two requests |
//! | the key MUST NOT be reused with a different request payload; a reuse SHOULD get 422 | 422 for the same method and path with another query, body or fingerprinted header |
//! | the server MAY expire keys and SHOULD publish its expiry policy | [`keep`](IdempotencyLayer::keep) (default 24 h); after it the key is new |
//! | a fingerprint MAY be used with the key | method, path, query and SHA-256 of the body, plus any headers named |
//! | a first request is processed and its result stored; a retry gets the stored result | one atomic claim before the inner service runs; the answer recorded after; retries get it with `Idempotent-Replayed: true` |
//! | a missing key on an endpoint that requires one SHOULD get 400 | 400, as problem details |
//! | a retry while the first request is still processing SHOULD get 409 | 409 with `Retry-After`, or with [`wait`](IdempotencyLayer::wait) the first answer |
//! | error bodies MAY use problem details (RFC 9457) | every answer of the layer's own |
//! | security: combine the key with client-specific attributes | the caller's scope is part of the record's key; a request naming no caller is refused; credentials stored only as an HMAC under a server secret |
//! | security: bound what an attacker can make the server store | the request body limit (413), the response record limit, `keep`, authentication failures never stored, `max_running` |
//!
//! Inside the inner service, [`idem_core::context::current`] is the request's call: hand its
//! key (or a [`sub_key`](idem_core::context::CallContext::sub_key)) to a payment provider as
//! its idempotency key.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod config;
mod detached;
mod header;
mod layer;
mod problem;
mod request;
pub mod scope;
mod secret;
mod service;
mod stored;

pub use config::{
    default_records, DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_RESPONSE_BODY, DEFAULT_MAX_RUNNING,
    DEFAULT_RETRY_AFTER, RELEASED_STATUSES,
};
pub use header::{BadKey, IDEMPOTENCY_KEY, MAX_CLIENT_KEY_LEN};
pub use layer::IdempotencyLayer;
pub use problem::PROBLEM_JSON;
pub use scope::Caller;
pub use secret::MIN_SECRET_LEN;
pub use service::{Idempotency, RequestBody, ResponseBody};
pub use stored::{IDEMPOTENT_REPLAYED, NOT_REPLAYED};

/// The README's example, compiled with the doc tests so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
