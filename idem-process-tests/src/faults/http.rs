//! The HTTP workload's clients: the campaign's own (no fault reaches them), each delivering
//! keys to the server processes until it gets an answer, as a client that retries does: on a
//! timeout, a refused connection, a 409 (the key's first request still running) or a 503, it
//! tries again, on the other server, after a pause.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ledger::Ledger;

/// Runs `tasks` clients against the servers on `ports`: they take new keys (`h:0`, `h:1`, ..)
/// until `until`, and deliver each until it is answered or `deadline` passes. Returns how many
/// keys were still answered 409 (held by a claim) at the deadline.
pub async fn run(
    ports: Vec<u16>,
    ledger: Ledger,
    tasks: usize,
    until: Instant,
    deadline: Instant,
) -> u64 {
    let ledger = Arc::new(ledger);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .expect("an HTTP client");
    let next = Arc::new(AtomicU64::new(0));
    let held = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..tasks)
        .map(|_| {
            let (ports, ledger, client, next, held) = (
                ports.clone(),
                ledger.clone(),
                client.clone(),
                next.clone(),
                held.clone(),
            );
            tokio::spawn(async move {
                while Instant::now() < until {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    let key = format!("h:{n}");
                    ledger.attempt(&key);
                    if deliver(&client, &ports, &ledger, &key, n, deadline).await {
                        held.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for client in clients {
        let _ = client.await;
    }
    held.load(Ordering::SeqCst)
}

/// Delivers `key` until a 2xx answer (noted in the ledger with the run it names) or the
/// deadline; returns whether the last answer before the deadline was 409.
async fn deliver(
    client: &reqwest::Client,
    ports: &[u16],
    ledger: &Ledger,
    key: &str,
    n: u64,
    deadline: Instant,
) -> bool {
    let mut pause = Duration::from_millis(50);
    let mut in_progress = false;
    for attempt in n.. {
        if Instant::now() > deadline {
            break;
        }
        let port = ports[(attempt % ports.len() as u64) as usize];
        let answer = client
            .post(format!("http://127.0.0.1:{port}/work"))
            .header("Idempotency-Key", format!("\"{key}\""))
            .send()
            .await;
        in_progress = false;
        if let Ok(response) = answer {
            let status = response.status();
            in_progress = status == reqwest::StatusCode::CONFLICT;
            if status.is_success() {
                if let Ok(run) = response.text().await {
                    ledger.done(key, &run);
                    return false;
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
    in_progress
}
