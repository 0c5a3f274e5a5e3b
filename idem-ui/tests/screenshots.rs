//! Every page an operator looks at, on a believable day's data, in a real headless Chromium:
//! each page loads and shows what it should. With `IDEM_UI_SCREENSHOTS=DIR` each page's
//! full-length screenshot is written there as `NAME.png`: `IDEM_UI_SCREENSHOTS=$PWD/screenshots
//! cargo test -p idem-ui --test screenshots` from `idem-ui/` remakes the READMEs' images.

mod support;

use std::sync::Arc;

use idem_queue::Queue;
use idem_store_postgres::testing::TestStore;
use support::{serve, showcase, Browser, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_an_operator_reads_shows_a_believable_day() {
    let test = TestStore::new("ui_shots", 8).await;
    let queue = Queue::new(&test.store);
    queue.migrate().await.unwrap();
    showcase(&test, &queue).await;
    let dashboard = idem_ui::Dashboard::new(Arc::new(test.store.clone()))
        .queue(queue.clone())
        .token(TOKEN.to_owned());
    let base = serve(dashboard).await;
    let browser = Browser::start().await;
    browser.log_in(&base, TOKEN).await;
    browser.on("overview").await;
    let into = std::env::var_os("IDEM_UI_SCREENSHOTS").map(std::path::PathBuf::from);
    let pages: [(&str, &str, &[&str]); 7] = [
        (
            "overview",
            "/",
            &[
                "invoice-run:2026-12",
                "billing-worker-2:31337",
                "welcome-email:19311",
            ],
        ),
        (
            "records",
            "/records?scope=billing",
            &["charge:order-8812", "invoice-run:2026-12"],
        ),
        (
            "record",
            "/record?key=invoice-run%3A2026-12&scope=billing",
            &["billing-worker-2:31337", "stale"],
        ),
        (
            "jobs",
            "/jobs",
            &["receipt:order-8813", "pdf:invoice-2026-12-0042"],
        ),
        (
            "job",
            "/job?key=welcome-email%3A19311",
            &["dead", "try again later", "ana@partner-mail.net"],
        ),
        (
            "schedules",
            "/schedules",
            &["nightly-report", "invoice-run", "sync-exchange-rates"],
        ),
        ("schedule", "/schedule?name=invoice-run", &["0 6 1 * *"]),
    ];
    for (name, path, shown) in pages {
        browser.client.goto(&format!("{base}{path}")).await.unwrap();
        browser.on(name).await;
        let text = browser.text().await;
        for expected in shown {
            assert!(
                text.contains(expected),
                "{expected:?} missing from {name}:\n{text}"
            );
        }
        let Some(dir) = &into else { continue };
        // Measured in a short window: a page no taller than the window reports the window's.
        browser.client.set_window_size(1280, 600).await.unwrap();
        let height = browser
            .client
            .execute("return document.documentElement.scrollHeight", vec![])
            .await
            .unwrap()
            .as_u64()
            .expect("a height");
        browser
            .client
            .set_window_size(
                1280,
                u32::try_from(height).unwrap_or(4000).clamp(600, 4000) + 140,
            )
            .await
            .unwrap();
        let png = browser.client.screenshot().await.unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}
