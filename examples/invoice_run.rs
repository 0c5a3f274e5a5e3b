//! A scheduled invoice run, compressed in time (1 unit = 10 ms): a scheduler calls
//! `send-invoices` with a 30-unit timeout, the handler takes 35, the scheduler retries with
//! backoff, and the first run finishes anyway. Without idem the invoices go out twice; with idem
//! once.
//!
//! ```text
//! cargo run --example invoice_run
//! ```

use idem_core::{idempotent, MemoryStore, Outcome};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

const UNIT: Duration = Duration::from_millis(10);
const CUSTOMERS: u32 = 10;

#[derive(Default)]
struct Billing {
    store: MemoryStore,
    invoices_sent: AtomicU32,
}

/// The slow part: 35 units to send every customer's invoice.
async fn send_invoices(billing: &Billing) {
    for _ in 0..CUSTOMERS {
        tokio::time::sleep(UNIT * 35 / CUSTOMERS).await;
        billing.invoices_sent.fetch_add(1, Ordering::SeqCst);
    }
}

/// The handler as a first version has it, with no idempotency.
async fn plain_handler(billing: Arc<Billing>, _period: String) -> &'static str {
    send_invoices(&billing).await;
    "sent"
}

/// The same handler, idempotent on the period it bills.
#[idempotent(key = "invoice-run:{period}", store = billing.store, lease = "100ms")]
async fn idem_handler(billing: &Billing, period: &str) -> Result<(), std::convert::Infallible> {
    send_invoices(billing).await;
    Ok(())
}

async fn idem_endpoint(billing: Arc<Billing>, period: String) -> &'static str {
    match idem_handler(&billing, &period).await {
        Ok(Outcome::Executed(())) => "sent",
        Ok(Outcome::Duplicate { .. }) => "duplicate, skipped",
        Ok(Outcome::InProgress { .. }) => "in progress, skipped",
        Err(_) => "error",
    }
}

/// A scheduler with a 30-unit timeout that retries once, after a backoff. The handler runs as
/// its own task, like a server that keeps working after the caller hung up.
async fn scheduler<F, Fut>(label: &str, billing: Arc<Billing>, endpoint: F) -> u32
where
    F: Fn(Arc<Billing>, String) -> Fut,
    Fut: std::future::Future<Output = &'static str> + Send + 'static,
{
    println!("{label}:");
    let mut backoff = 5;
    for attempt in 1..=2 {
        let handler = tokio::spawn(endpoint(billing.clone(), "2026-11".to_owned()));
        match tokio::time::timeout(UNIT * 30, handler).await {
            Ok(answer) => {
                println!("  attempt {attempt}: {}", answer.unwrap());
                break;
            }
            Err(_) => {
                if attempt == 1 {
                    println!(
                        "  attempt {attempt}: timed out after 30 units; retrying in {backoff}"
                    );
                } else {
                    println!("  attempt {attempt}: timed out after 30 units; giving up");
                }
                tokio::time::sleep(UNIT * backoff).await;
                backoff *= 2;
            }
        }
    }
    // Let every handler that is still running finish, as the server would.
    tokio::time::sleep(UNIT * 50).await;
    let sent = billing.invoices_sent.load(Ordering::SeqCst);
    println!("  invoices sent: {sent} for {CUSTOMERS} customers");
    sent
}

async fn run() -> (u32, u32) {
    let without = scheduler("without idem", Arc::new(Billing::default()), plain_handler).await;
    let with = scheduler("with idem", Arc::new(Billing::default()), idem_endpoint).await;
    (without, with)
}

#[tokio::main]
async fn main() {
    let Args {} = clap::Parser::parse();
    run().await;
}

/// The story takes no flags: an unknown flag exits with status 2 and the usage.
#[derive(Debug, clap::Parser)]
#[command(about = "A scheduled invoice run, compressed in time")]
struct Args {}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn invoices_go_out_twice_without_idem_and_once_with_it() {
        let (without, with) = super::run().await;
        assert_eq!(
            without,
            2 * super::CUSTOMERS,
            "the retry sent every invoice again"
        );
        assert_eq!(with, super::CUSTOMERS, "idem: once");
    }

    /// It takes no flags, and refuses unknown ones (exit status 2).
    #[test]
    fn unknown_flags_are_refused() {
        use clap::Parser;
        assert!(super::Args::try_parse_from(["invoice_run"]).is_ok());
        let error = super::Args::try_parse_from(["invoice_run", "--fast"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }
}
