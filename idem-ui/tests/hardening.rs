//! The dashboard read as an attacker would, over HTTP with a real client on a real port: a
//! proxy in front of a tokenless dashboard, a library user serving it on a public address or
//! with a short token, cookies over HTTPS, guessing the token, and store errors that would
//! tell a viewer about the database. Each protection's test fails without it.

mod support;

use std::sync::Arc;

use idem_store_postgres::PgStore;
use reqwest::header::{RETRY_AFTER, SET_COOKIE};
use reqwest::redirect::Policy;
use reqwest::StatusCode;
use support::{serve, store_with_records, TOKEN};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

async fn log_in(base: &str, token: &str) -> reqwest::Response {
    client()
        .post(format!("{base}/login"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
}

/// Everything the server answers `request` on a connection of its own.
async fn exchange(addr: &str, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn without_a_token_requests_through_a_proxy_or_without_a_known_peer_are_refused() {
    let (test, _queue) = store_with_records("ui_proxy").await;
    let base = serve(idem_ui::Dashboard::new(Arc::new(test.store.clone()))).await;
    let ok = client().get(format!("{base}/")).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    // A proxy on this machine keeps a loopback peer (and, with nginx's default proxy_pass, a
    // loopback Host): the forwarding headers most proxies add give it away...
    for header in [
        "x-forwarded-for",
        "forwarded",
        "x-real-ip",
        "x-forwarded-host",
        "via",
    ] {
        let response = client()
            .get(format!("{base}/records"))
            .header(header, "for=203.0.113.9")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{header}");
        assert!(response.text().await.unwrap().contains("proxy"));
    }
    // ... and nginx's default proxy_pass, which adds none, speaks HTTP/1.0 to the upstream,
    // as no browser does.
    let addr = base.trim_start_matches("http://").to_owned();
    let as_nginx = exchange(
        &addr,
        &format!("GET /records HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(as_nginx.starts_with("HTTP/1.0 403"), "{as_nginx}");
    let as_browser = exchange(
        &addr,
        &format!("GET /records HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(as_browser.starts_with("HTTP/1.1 200"), "{as_browser}");
    // Served by a library user without the peers' addresses: refused, not open.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let blind = format!("http://{}", listener.local_addr().unwrap());
    let router = idem_ui::Dashboard::new(Arc::new(test.store.clone())).router();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let response = client().get(format!("{blind}/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(response.text().await.unwrap().contains("Dashboard::serve"));
    // With a token, a proxy in front is the documented remote setup.
    let base =
        serve(idem_ui::Dashboard::new(Arc::new(test.store.clone())).token(TOKEN.into())).await;
    let response = log_in(&base, TOKEN).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn the_library_serves_with_the_commands_bind_rule() {
    let (test, _queue) = store_with_records("ui_bind").await;
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let refused = idem_ui::Dashboard::new(Arc::new(test.store.clone()))
        .serve(listener, std::future::pending())
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("--token"), "{refused}");
}

#[tokio::test]
#[should_panic(expected = "at least 16")]
async fn a_short_token_is_refused() {
    let store = idem_store_sqlite::SqliteStore::open(":memory:")
        .await
        .unwrap();
    let _ = idem_ui::Dashboard::new(Arc::new(store)).token("hunter2".to_owned());
}

#[tokio::test]
async fn over_https_the_session_cookie_is_secure_and_host_bound() {
    let (test, _queue) = store_with_records("ui_https").await;
    let plain =
        serve(idem_ui::Dashboard::new(Arc::new(test.store.clone())).token(TOKEN.into())).await;
    let cookie = log_in(&plain, TOKEN).await.headers()[SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(!cookie.contains("Secure"), "{cookie}");
    let page = client().get(format!("{plain}/login")).send().await.unwrap();
    assert!(!page.headers().contains_key("strict-transport-security"));
    let https = serve(
        idem_ui::Dashboard::new(Arc::new(test.store.clone()))
            .token(TOKEN.into())
            .https(true),
    )
    .await;
    let cookie = log_in(&https, TOKEN).await.headers()[SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("__Host-idem_session="), "{cookie}");
    let page = client().get(format!("{https}/login")).send().await.unwrap();
    assert!(page.headers().contains_key("strict-transport-security"));
    for attribute in ["; Secure", "; HttpOnly", "; SameSite=Strict", "; Path=/"] {
        assert!(cookie.contains(attribute), "{attribute} missing: {cookie}");
    }
    // Behind the TLS proxy the docs show, requests name the public host: answered.
    let proxied = client()
        .post(format!("{https}/login"))
        .header("host", "dashboard.example.com")
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(proxied.status(), StatusCode::SEE_OTHER);
    // The session it names opens the pages.
    let session = cookie.split(';').next().unwrap();
    let page = client()
        .get(format!("{https}/"))
        .header("cookie", session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
}

#[tokio::test]
async fn guessing_the_token_is_slowed_per_peer_and_the_right_token_waits_too() {
    let (test, _queue) = store_with_records("ui_guess").await;
    let base =
        serve(idem_ui::Dashboard::new(Arc::new(test.store.clone())).token(TOKEN.into())).await;
    for guess in 0..5 {
        let response = log_in(&base, &format!("guess-number-{guess}")).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "guess {guess}");
    }
    let response = log_in(&base, "guess-number-5").await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(response.headers()[RETRY_AFTER], "1");
    // While the peer waits, even the right token is not tried.
    let response = log_in(&base, TOKEN).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key(RETRY_AFTER));
    assert!(!response.headers().contains_key(SET_COOKIE));
}

#[tokio::test]
async fn a_store_error_is_shown_in_plain_words_without_its_internals() {
    let pool = idem_store_postgres::testing::pool(2).await;
    // A schema that does not exist: every statement fails, naming it.
    let store = PgStore::builder(pool)
        .schema("secret_internal_schema".to_owned())
        .build()
        .unwrap();
    let base = serve(idem_ui::Dashboard::new(Arc::new(store))).await;
    let response = client()
        .get(format!("{base}/records"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let page = response.text().await.unwrap();
    assert!(page.contains("did not answer"), "{page}");
    for internal in [
        "secret_internal_schema",
        "relation",
        "idem_records",
        "SQLSTATE",
    ] {
        assert!(!page.contains(internal), "{internal} shown: {page}");
    }
}

/// With a token, on a loopback address, a page that rebinds its own name to 127.0.0.1 still
/// cannot reach the dashboard (to spend the operator's login limit, say): its `Host` names it.
#[tokio::test]
async fn with_a_token_on_loopback_a_rebound_name_is_refused() {
    let (test, _queue) = store_with_records("ui_rebind").await;
    let base =
        serve(idem_ui::Dashboard::new(Arc::new(test.store.clone())).token(TOKEN.into())).await;
    let response = client()
        .post(format!("{base}/login"))
        .header("host", "attacker.example:7780")
        .form(&[("token", "guess")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(log_in(&base, TOKEN).await.status(), StatusCode::SEE_OTHER);
}
