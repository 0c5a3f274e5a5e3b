//! The layer read as an attacker would: a caller without credentials, or with someone else's
//! key, never receives another caller's stored answer; nobody can poison a key for its owner;
//! credentials are stored keyed, never as a bare hash; and clients that leave at once cannot
//! pile up runs past the layer's bound. Each test runs on a real server and port with a real
//! client, on every store the layer is tested on.

mod support;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{from_fn, from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use idem_http::{scope, Caller, IdempotencyLayer};
use sha2::Sha256;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{backends, serve, try_send, Answer, Runs};
use tokio::io::AsyncWriteExt;
use tokio::sync::{watch, Notify};

const BODY: &str = r#"{"amount":100}"#;

/// A request as a given caller: `auth` is its `Authorization` (empty: none), `cookie` its
/// `Cookie` (empty: none).
async fn post_as(url: &str, key: &str, auth: &str, cookie: &str) -> Answer {
    try_send(
        "POST",
        url,
        Some(key),
        BODY,
        &[("authorization", auth), ("cookie", cookie)],
        Duration::from_secs(30),
    )
    .await
    .expect("an answer")
}

/// A handler that authenticates by session cookie itself (as many browser-facing APIs do):
/// 401 without the session, otherwise a charge for the session's user.
async fn charge_by_cookie(State(runs): State<Arc<Runs>>, headers: HeaderMap) -> Response {
    let cookies = headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(user) = cookies.strip_prefix("session=") else {
        return (StatusCode::UNAUTHORIZED, "log in").into_response();
    };
    let n = runs.next();
    (StatusCode::CREATED, format!("charge {n} for {user}")).into_response()
}

/// The attack on the old default: an application that authenticates by cookie and adds the
/// layer in one line. Caller B, with no cookie and no credentials, sends caller A's key and
/// body: B must not receive A's stored answer, and nothing runs for B.
#[tokio::test]
async fn a_caller_without_credentials_never_gets_another_callers_answer_by_default() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let app = Router::new()
            .route("/charges", post(charge_by_cookie))
            .layer(IdempotencyLayer::new(backend.store.clone()))
            .with_state(runs.clone());
        let url = format!("{}/charges", serve(app).await);
        // A's browser: a session cookie, and (as a browser would not send one without being
        // told) no Authorization. The default scope names no caller for it either: the
        // application must say how its callers are named.
        let a = post_as(&url, "order-1", "", "session=alice").await;
        assert_eq!(a.status, 401, "{}: {}", backend.name, a.body);
        assert!(a.body.contains("caller"), "{}", a.body);
        // With a caller named by the cookie (the documented choice for such applications), A
        // is served, and B (no cookie) is refused before the key is looked up.
        let runs = Arc::new(Runs::default());
        let app = Router::new()
            .route("/charges", post(charge_by_cookie))
            .layer(IdempotencyLayer::new(backend.store.clone()).scope(scope::cookie("session")))
            .with_state(runs.clone());
        let url = format!("{}/charges", serve(app).await);
        let a = post_as(&url, "order-1", "", "session=alice").await;
        assert_eq!((a.status, a.body.as_str()), (201, "charge 1 for alice"));
        let b = post_as(&url, "order-1", "", "").await;
        assert_eq!(b.status, 401, "{}", backend.name);
        assert!(!b.replayed() && !b.body.contains("alice"), "{b:?}");
        // B with a cookie of its own: its own scope, so its own run.
        let b = post_as(&url, "order-1", "", "session=bob").await;
        assert_eq!((b.status, b.body.as_str()), (201, "charge 2 for bob"));
        assert!(!b.replayed());
        // A's retry still gets A's answer.
        let retry = post_as(&url, "order-1", "", "session=alice").await;
        assert_eq!(retry.body, "charge 1 for alice");
        assert!(retry.replayed());
        assert_eq!(runs.get(), 2, "{}", backend.name);
    }
}

/// The documented setup: the application's auth layer runs before the idempotency layer and
/// names the caller with [`Caller`]. No request without valid credentials ever receives a
/// stored answer, whatever key and body it sends.
#[tokio::test]
async fn in_the_documented_setup_no_request_without_valid_credentials_receives_a_stored_answer() {
    async fn auth(mut request: Request, next: Next) -> Result<Response, StatusCode> {
        let user = match request.headers().get(header::AUTHORIZATION) {
            Some(v) if v == "Bearer alice-token" => "alice",
            Some(v) if v == "Bearer bob-token" => "bob",
            _ => return Err(StatusCode::UNAUTHORIZED),
        };
        request.extensions_mut().insert(Caller::new(user));
        Ok(next.run(request).await)
    }
    async fn charge(State(runs): State<Arc<Runs>>) -> (StatusCode, String) {
        (StatusCode::CREATED, format!("charge {}", runs.next()))
    }
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let app = Router::new()
            .route("/charges", post(charge))
            .layer(IdempotencyLayer::new(backend.store.clone()))
            .layer(from_fn(auth))
            .with_state(runs.clone());
        let url = format!("{}/charges", serve(app).await);
        let a = post_as(&url, "order-1", "Bearer alice-token", "").await;
        assert_eq!((a.status, a.body.as_str()), (201, "charge 1"));
        for (who, auth) in [
            ("no credentials", ""),
            ("a wrong token", "Bearer mallory"),
            ("a malformed header", "Basic"),
            (
                "the token's hash",
                "Bearer 2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90",
            ),
        ] {
            let b = post_as(&url, "order-1", auth, "").await;
            assert_eq!(b.status, 401, "{}: {who}", backend.name);
            assert!(!b.replayed() && b.body.is_empty(), "{who}: {b:?}");
        }
        let b = post_as(&url, "order-1", "Bearer bob-token", "").await;
        assert_eq!(
            (b.status, b.body.as_str()),
            (201, "charge 2"),
            "bob's own run"
        );
        let retry = post_as(&url, "order-1", "Bearer alice-token", "").await;
        assert_eq!(retry.body, "charge 1");
        assert!(retry.replayed());
        assert_eq!(runs.get(), 2);
    }
}

/// An authentication failure is not recorded: an attacker who sends a victim's predictable key
/// first (here on a shared scope, where they would share a record) gets the 401, and the
/// victim's request with the same key still runs.
#[tokio::test]
async fn authentication_failures_are_not_stored_so_nobody_poisons_a_key_for_its_owner() {
    for backend in backends().await {
        for status in [401, 403, 407] {
            let runs = Arc::new(Runs::default());
            let handler = move |State(runs): State<Arc<Runs>>, headers: HeaderMap| async move {
                if headers.get(header::AUTHORIZATION).is_none() {
                    return (StatusCode::from_u16(status).unwrap(), "refused".to_owned());
                }
                (StatusCode::CREATED, format!("charge {}", runs.next()))
            };
            let app = Router::new()
                .route("/charges", post(handler))
                .layer(IdempotencyLayer::new(backend.store.clone()).scope(scope::shared))
                .with_state(runs.clone());
            let url = format!("{}/charges", serve(app).await);
            let key = format!("invoice-{status}");
            let attacker = post_as(&url, &key, "", "").await;
            assert_eq!(attacker.status, status);
            let victim = post_as(&url, &key, "Bearer victim", "").await;
            assert_eq!(
                (victim.status, victim.body.as_str(), victim.replayed()),
                (201, "charge 1", false),
                "{}: a {status} was stored for the victim's key",
                backend.name
            );
        }
    }
}

/// A credential scope is stored as an HMAC-SHA256 under the layer's secret: the stored scope
/// is exactly that, so it holds neither the credential nor a bare hash of it (a Basic-auth
/// password could be cracked offline from a bare hash, by anyone who reads the table).
#[tokio::test]
async fn credentials_are_stored_as_an_hmac_under_the_secret_never_bare() {
    let secret = [42u8; 32];
    let pg = idem_store_postgres::testing::TestStore::new("idem_t_http_sec", 4).await;
    let app = Router::new()
        .route("/charges", post(|| async { (StatusCode::CREATED, "ok") }))
        .layer(IdempotencyLayer::new(pg.store.clone()).secret(secret));
    let url = format!("{}/charges", serve(app).await);
    let basic = "Basic YWxpY2U6aHVudGVyMg=="; // alice:hunter2
    assert_eq!(post_as(&url, "k-1", basic, "").await.status, 201);
    let found = idem_core::Inspect::find(&pg.store, "POST /charges k-1", None)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    let stored = found[0].record.key.scope().to_owned();
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret).unwrap();
    mac.update(basic.as_bytes());
    let expected = format!("http:key:{}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(stored, expected);
    let bare = hex::encode(<Sha256 as sha2::Digest>::digest(basic.as_bytes()));
    assert!(!stored.contains(&bare) && !stored.contains("YWxpY2U6aHVudGVyMg"));
}

/// Without a secret of the application's, the layer keeps one in the store: two servers on one
/// store key a credential alike, so a retry that reaches the other server is answered from
/// the record rather than run again.
#[tokio::test]
async fn servers_sharing_a_store_share_the_kept_secret_so_a_retry_elsewhere_replays() {
    for backend in backends().await {
        let runs = Arc::new(Runs::default());
        let server = || {
            let runs = runs.clone();
            Router::new()
                .route(
                    "/charges",
                    post(|State(runs): State<Arc<Runs>>| async move {
                        (StatusCode::CREATED, format!("charge {}", runs.next()))
                    }),
                )
                .layer(IdempotencyLayer::new(backend.store.clone()).scope(scope::bearer_token))
                .with_state(runs)
        };
        let one = format!("{}/charges", serve(server()).await);
        let two = format!("{}/charges", serve(server()).await);
        let first = post_as(&one, "k", "Bearer tok", "").await;
        let retry = post_as(&two, "k", "Bearer tok", "").await;
        assert_eq!((first.status, retry.status), (201, 201), "{}", backend.name);
        assert!(
            retry.replayed(),
            "{}: ran again on the other server",
            backend.name
        );
        assert_eq!(runs.get(), 1);
    }
}

/// Counts the handlers running now and the most that ever ran at once; they wait at a gate.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
    started: AtomicUsize,
    /// Requests that reached the layer.
    entered: AtomicUsize,
    /// Requests whose future the server dropped before they were answered.
    dropped: AtomicUsize,
    changed: Notify,
    open: Notify,
}

impl Gauge {
    async fn wait_for(&self, what: impl Fn(&Gauge) -> bool) {
        loop {
            let changed = self.changed.notified();
            if what(self) {
                return;
            }
            if tokio::time::timeout(Duration::from_secs(60), changed)
                .await
                .is_err()
            {
                panic!(
                    "the server never got there: {} running, {} started, {} dropped",
                    self.now.load(Ordering::SeqCst),
                    self.started.load(Ordering::SeqCst),
                    self.dropped.load(Ordering::SeqCst)
                );
            }
        }
    }
}

/// The handler: counts itself in, waits for the test to open the gate, counts itself out.
async fn gated(State(gauge): State<Arc<Gauge>>) -> StatusCode {
    let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
    gauge.most.fetch_max(now, Ordering::SeqCst);
    gauge.started.fetch_add(1, Ordering::SeqCst);
    let open = gauge.open.notified();
    gauge.changed.notify_waiters();
    open.await;
    gauge.now.fetch_sub(1, Ordering::SeqCst);
    gauge.changed.notify_waiters();
    StatusCode::CREATED
}

/// Outside the layer: counts the requests that reach it, and those whose future the server
/// dropped (their client left).
async fn watch_drops(State(gauge): State<Arc<Gauge>>, request: Request, next: Next) -> Response {
    struct Unanswered(Option<Arc<Gauge>>);
    impl Drop for Unanswered {
        fn drop(&mut self) {
            if let Some(gauge) = self.0.take() {
                gauge.dropped.fetch_add(1, Ordering::SeqCst);
                gauge.changed.notify_waiters();
            }
        }
    }
    gauge.entered.fetch_add(1, Ordering::SeqCst);
    gauge.changed.notify_waiters();
    let mut unanswered = Unanswered(Some(gauge));
    let response = next.run(request).await;
    unanswered.0 = None;
    response
}

/// A thousand clients send fresh keys and leave at once, once the server has read every
/// request. Runs go on after their client leaves, so an outer concurrency limit would not bound
/// them; the layer's own bound does: never more handlers at once than the cap, and the requests
/// that waited for a place when their client left never run.
#[tokio::test]
async fn a_thousand_clients_that_leave_at_once_never_run_more_handlers_than_the_cap() {
    const CLIENTS: usize = 1000;
    const CAP: usize = 16;
    let gauge = Arc::new(Gauge::default());
    let app = Router::new()
        .route("/charges", post(gated))
        .layer(
            IdempotencyLayer::new(idem_core::MemoryStore::new())
                .scope(scope::shared)
                .max_running(CAP),
        )
        .layer(from_fn_with_state(gauge.clone(), watch_drops))
        .with_state(gauge.clone());
    let base = serve(app).await;
    let addr = base.trim_start_matches("http://").to_owned();
    let (sent, mut all_sent) = watch::channel(0usize);
    for i in 0..CLIENTS {
        let (addr, sent, gauge) = (addr.clone(), sent.clone(), gauge.clone());
        tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let request = format!(
                "POST /charges HTTP/1.1\r\nhost: {addr}\r\nidempotency-key: fresh-{i}\r\n\
                 content-length: 0\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            gauge
                .wait_for(|g| g.entered.load(Ordering::SeqCst) == CLIENTS)
                .await;
            drop(stream); // every client leaves at once
            sent.send_modify(|n| *n += 1);
        });
    }
    all_sent.wait_for(|n| *n == CLIENTS).await.unwrap();
    // Every client is gone and the server has dropped every request's future: the runs that
    // had a place go on, the rest were cut before they claimed.
    gauge
        .wait_for(|g| g.dropped.load(Ordering::SeqCst) == CLIENTS)
        .await;
    gauge
        .wait_for(|g| g.now.load(Ordering::SeqCst) == CAP)
        .await;
    assert_eq!(
        gauge.most.load(Ordering::SeqCst),
        CAP,
        "more than the cap ran"
    );
    // The runs whose clients left still hold their places: clients that come now and stay
    // wait for them, and start none until they end.
    const STAYING: usize = 4;
    let staying: Vec<_> = (0..STAYING)
        .map(|i| {
            let url = format!("{base}/charges");
            tokio::spawn(async move {
                let key = format!("staying-{i}");
                support::send("POST", &url, Some(&key), "").await
            })
        })
        .collect();
    gauge
        .wait_for(|g| g.entered.load(Ordering::SeqCst) == CLIENTS + STAYING)
        .await;
    let started_more = tokio::time::timeout(
        Duration::from_millis(500),
        gauge.wait_for(|g| g.started.load(Ordering::SeqCst) > CAP),
    )
    .await;
    assert!(
        started_more.is_err(),
        "a client that stayed ran beside the runs whose clients left"
    );
    // Let them finish: the ones cut while waiting never run; the staying ones run after.
    while staying.iter().any(|answer| !answer.is_finished()) {
        gauge.open.notify_waiters();
        tokio::task::yield_now().await;
    }
    for answer in staying {
        assert_eq!(answer.await.unwrap().status, 201);
    }
    assert_eq!(gauge.most.load(Ordering::SeqCst), CAP);
    assert_eq!(gauge.started.load(Ordering::SeqCst), CAP + STAYING);
}

/// An auth layer that names guests with an empty id (`unwrap_or_default()`, say) would put every
/// guest in one scope: an empty caller names nobody, and is refused like no caller.
#[tokio::test]
async fn an_empty_caller_id_names_nobody() {
    async fn guests_as_empty(mut request: Request, next: Next) -> Response {
        request.extensions_mut().insert(Caller::new(""));
        next.run(request).await
    }
    let runs = Arc::new(Runs::default());
    let app = Router::new()
        .route(
            "/charges",
            post(|State(runs): State<Arc<Runs>>| async move {
                (StatusCode::CREATED, format!("charge {}", runs.next()))
            }),
        )
        .layer(IdempotencyLayer::new(idem_core::MemoryStore::new()).scope(scope::caller))
        .layer(from_fn(guests_as_empty))
        .with_state(runs.clone());
    let url = format!("{}/charges", serve(app).await);
    let guest = post_as(&url, "order-1", "", "").await;
    assert_eq!(guest.status, 401);
    assert_eq!(runs.get(), 0);
}
