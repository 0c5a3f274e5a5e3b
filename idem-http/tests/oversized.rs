//! An oversized request body, sent whole by a client that writes before it reads (as most do),
//! gets its 413: the layer reads and drops up to another limit's worth before answering, so
//! the connection is still open for the answer, and for the next request. A body declared at
//! more than twice the limit is refused before it is sent.

mod support;

use axum::routing::post;
use axum::Router;
use idem_core::MemoryStore;
use idem_http::IdempotencyLayer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The default limit: a body this large is still being written when a refusal that did not
/// read it would close the connection.
const LIMIT: usize = 1024 * 1024;

async fn server() -> String {
    let router = Router::new()
        .route("/charges", post(|| async { "charged" }))
        .layer(IdempotencyLayer::new(MemoryStore::new()).max_request_body(LIMIT));
    support::serve(router).await
}

fn request(key: &str, body: &str, declared: usize, close: bool) -> String {
    let connection = if close { "close" } else { "keep-alive" };
    format!(
        "POST /charges HTTP/1.1\r\nhost: test\r\nidempotency-key: {key}\r\n\
         authorization: Bearer caller\r\n\
         content-length: {declared}\r\nconnection: {connection}\r\n\r\n{body}"
    )
}

/// Everything the server sends until it closes the connection.
async fn exchange(base: &str, sent: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(sent.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn an_oversized_body_is_read_and_dropped_so_its_413_and_the_next_answer_arrive() {
    let base = server().await;
    let big = "x".repeat(LIMIT + 500);
    // Two requests on one connection: the oversized one, then one within the limit.
    let sent = request("big", &big, big.len(), false) + &request("small", "{}", 2, true);
    let answer = exchange(&base, &sent).await;
    let statuses: Vec<&str> = answer
        .match_indices("HTTP/1.1 ")
        .filter_map(|(at, _)| answer[at..].split("\r\n").next())
        .collect();
    assert_eq!(
        statuses,
        ["HTTP/1.1 413 Payload Too Large", "HTTP/1.1 200 OK"],
        "{answer}"
    );
    assert!(answer.ends_with("charged"), "{answer}");
}

#[tokio::test]
async fn a_body_declared_over_twice_the_limit_is_refused_before_it_is_sent() {
    let base = server().await;
    // Only the head: the answer comes without the body.
    let answer = exchange(&base, &request("huge", "", 2 * LIMIT + 1, false)).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
}
