//! A daily reminder email on the embedded in-memory store: a scheduler delivers
//! `send-reminder` jobs at least once, and idem makes every repeat a no-op.
//!
//! ```text
//! cargo run --example quickstart
//! RUST_LOG=idem_core=info cargo run --example quickstart   # also print each call's span
//! ```

use idem_core::{idempotent, Error, MemoryStore, Outcome};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct App {
    store: MemoryStore,
    mailer: Mailer,
}

/// A stand-in for an email API: counts what it sends, and fails once when told to.
#[derive(Default)]
struct Mailer {
    sent: AtomicU32,
    fail_next: AtomicU32,
}

#[derive(Debug)]
struct MailError(&'static str);

impl std::fmt::Display for MailError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl Mailer {
    async fn send(&self, user_id: u64) -> Result<(), MailError> {
        tokio::time::sleep(Duration::from_millis(100)).await; // the slow part
        if self.fail_next.swap(0, Ordering::SeqCst) == 1 {
            return Err(MailError("smtp timeout"));
        }
        self.sent.fetch_add(1, Ordering::SeqCst);
        println!("    (mailer) email sent to user {user_id}");
        Ok(())
    }
}

/// The handler: the key names the work (who, which day), not the delivery.
/// `wait` makes a delivery that arrives while the first is still sending wait for its outcome.
#[idempotent(key = "reminder:user{user_id}:{day}", store = app.store, wait = "5s")]
async fn send_reminder(app: &App, user_id: u64, day: &str) -> Result<(), MailError> {
    app.mailer.send(user_id).await
}

async fn deliver(app: &App, label: &str, user_id: u64, day: &str) -> String {
    let status = match send_reminder(app, user_id, day).await {
        Ok(Outcome::Executed(())) => "sent".to_owned(),
        Ok(Outcome::Duplicate { .. }) => "duplicate, skipped".to_owned(),
        Ok(Outcome::InProgress { .. }) => "in progress elsewhere, skipped".to_owned(),
        Err(Error::Handler(e)) => format!("failed ({e}); the key was released, retry later"),
        Err(e) => format!("refused: {e}"),
    };
    let day = day.escape_debug().to_string();
    println!("{label:<44} reminder:user{user_id}:{day:<12} -> {status}");
    status
}

/// Runs the scenario and returns each delivery's status and the number of emails sent.
async fn scenario() -> (Vec<String>, u32) {
    let app = Arc::new(App {
        store: MemoryStore::new(),
        mailer: Mailer::default(),
    });
    let mut statuses = Vec::new();
    statuses.push(deliver(&app, "1. scheduler fires", 42, "2026-11-01").await);
    statuses.push(
        deliver(
            &app,
            "2. scheduler retries (its timeout was short)",
            42,
            "2026-11-01",
        )
        .await,
    );

    println!("3. two servers fire the same cron, in parallel:");
    let (a, b) = tokio::join!(
        deliver(&app, "   server A", 7, "2026-11-01"),
        deliver(&app, "   server B", 7, "2026-11-01"),
    );
    statuses.extend([a, b]);

    app.mailer.fail_next.store(1, Ordering::SeqCst);
    statuses.push(deliver(&app, "4. first try, provider fails", 9, "2026-11-01").await);
    statuses.push(deliver(&app, "5. retry with backoff", 9, "2026-11-01").await);
    statuses.push(deliver(&app, "6. the next day is new work", 42, "2026-11-02").await);
    statuses.push(deliver(&app, "7. a bad key is refused", 1, "line\nbreak").await);

    let sent = app.mailer.sent.load(Ordering::SeqCst);
    println!("emails sent: {sent} (one per user and day)");
    (statuses, sent)
}

/// The quickstart takes no flags (set `RUST_LOG=info` to see each call's span): an unknown flag
/// exits with status 2 and the usage.
#[derive(Debug, clap::Parser)]
#[command(about = "idem's quickstart on the embedded store")]
struct Args {}

#[tokio::main]
async fn main() {
    let Args {} = clap::Parser::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        // One line per call as its span closes, with the key, fence and outcome.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .init();
    }
    scenario().await;
}

#[cfg(test)]
mod tests {
    /// The example does what its README section says it prints.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn quickstart_sends_one_email_per_user_and_day() {
        let (statuses, sent) = super::scenario().await;
        assert_eq!(statuses[0], "sent");
        assert_eq!(statuses[1], "duplicate, skipped");
        let mut parallel = [statuses[2].as_str(), statuses[3].as_str()];
        parallel.sort();
        assert_eq!(parallel, ["duplicate, skipped", "sent"]);
        assert!(statuses[4].starts_with("failed (smtp timeout)"));
        assert_eq!(statuses[5], "sent");
        assert_eq!(statuses[6], "sent");
        assert!(statuses[7].starts_with("refused: invalid idempotency key"));
        assert_eq!(sent, 4);
    }

    /// It takes no flags, and refuses unknown ones (exit status 2).
    #[test]
    fn unknown_flags_are_refused() {
        use clap::Parser;
        assert!(super::Args::try_parse_from(["quickstart"]).is_ok());
        let error = super::Args::try_parse_from(["quickstart", "--fast"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }
}
