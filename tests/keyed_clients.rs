//! `clients(..)` hands the key to side-effect clients: with the `reqwest` feature, requests carry
//! `Idempotency-Key: <job key>/<effect>`, checked here against a real HTTP server that records
//! the header it receives.

use idem_core::{idempotent, Error, MemoryStore};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A provider stand-in: answers 200 to everything and records each request's
/// `Idempotency-Key` header (or `-` when there is none).
async fn recording_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let record = record.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&request).to_string();
                let key = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("idempotency-key")
                            .then(|| value.trim().to_owned())
                    })
                    .unwrap_or_else(|| "-".into());
                record.lock().unwrap().push(key);
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (base, seen)
}

#[idempotent(key = "invoice-run:{period}", store = store, clients(http))]
async fn invoice_run(
    store: &MemoryStore,
    period: &str,
    http: &reqwest::Client,
    base: &str,
    fail_after_charges: bool,
) -> Result<(), String> {
    for customer in ["cust_42", "cust_7"] {
        let response = http
            .post(format!("{base}/charges"), &format!("charge:{customer}"))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        assert!(response.status().is_success());
    }
    if fail_after_charges {
        return Err("the run failed after charging".into());
    }
    Ok(())
}

#[tokio::test]
async fn requests_carry_a_stable_key_per_effect() {
    let (base, seen) = recording_server().await;
    let store = MemoryStore::new();
    let http = reqwest::Client::new();
    assert!(matches!(
        invoice_run(&store, "2026-11", &http, &base, true).await,
        Err(Error::Handler(_))
    ));
    assert!(invoice_run(&store, "2026-11", &http, &base, false)
        .await
        .unwrap()
        .is_executed());
    assert!(invoice_run(&store, "2026-11", &http, &base, false)
        .await
        .unwrap()
        .is_duplicate());
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "invoice-run:2026-11/charge:cust_42",
            "invoice-run:2026-11/charge:cust_7",
            // The retry sends the same keys, so the provider returns the first charges.
            "invoice-run:2026-11/charge:cust_42",
            "invoice-run:2026-11/charge:cust_7",
        ],
        "each charge has its own key, the same on every retry; the duplicate sends nothing"
    );
}
