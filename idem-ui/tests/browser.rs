//! The dashboard in a real headless Chromium, against a real PostgreSQL: log in, read the
//! overview, follow a dead job to its page, retry it and see it run; a key that is markup
//! renders as text. The overview's screenshot is the README's (`IDEM_UI_SCREENSHOT=PATH`
//! writes it there).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use fantoccini::Locator;
use idem_queue::{Job, JobError, JobState, NewJob};
use serde_json::json;
use support::{history, serve, store_with_records, Browser, TOKEN, XSS_KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_dead_job_retries_it_and_sees_it_run() {
    let (test, queue) = store_with_records("ui_browser").await;
    history(&test).await;
    let _ = queue
        .enqueue(NewJob::new("email:42", &json!({ "to": "ada@example.com" })).unwrap())
        .await
        .unwrap();
    // The first run fails for good; once retried, it succeeds.
    let runs = Arc::new(AtomicUsize::new(0));
    let workers = || {
        let runs = runs.clone();
        queue
            .worker(move |_job: Job| {
                let runs = runs.clone();
                async move {
                    if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                        Err(JobError::permanent("the mail server said 550 <b>no</b>"))
                    } else {
                        Ok(json!({ "sent": true }))
                    }
                }
            })
            .start()
    };
    let first = workers();
    first.wait_idle().await;
    first.shutdown(std::time::Duration::from_secs(5)).await;
    assert_eq!(
        queue.status("email:42").await.unwrap().unwrap().state,
        JobState::Dead
    );

    let dashboard = idem_ui::Dashboard::new(Arc::new(test.store.clone()))
        .queue(queue.clone())
        .token(TOKEN.to_owned());
    let base = serve(dashboard).await;
    let browser = Browser::start().await;
    let client = &browser.client;

    // Every page needs the login when the dashboard has a token.
    client.goto(&format!("{base}/")).await.unwrap();
    browser.on("login").await;
    browser.log_in(&base, "not the token").await;
    client
        .wait()
        .for_element(Locator::Css("p.error"))
        .await
        .unwrap();
    assert!(browser.text().await.contains("not the dashboard's token"));
    browser.log_in(&base, TOKEN).await;
    browser.on("overview").await;

    // The overview: the stale claim with its holder, the dead job, the schedule.
    let overview = browser.text().await;
    for shown in [
        "report:9",
        "host-a:4242",
        "email:42",
        "550 <b>no</b>",
        "nightly-report",
    ] {
        assert!(
            overview.contains(shown),
            "{shown:?} missing from:\n{overview}"
        );
    }
    let png = client.screenshot().await.unwrap();
    assert_eq!(&png[1..4], b"PNG");
    if let Some(path) = std::env::var_os("IDEM_UI_SCREENSHOT") {
        std::fs::write(path, &png).unwrap();
    }

    // Follow the dead job to its page and retry it.
    browser.click(Locator::LinkText("email:42"), "job").await;
    let state = client.find(Locator::Id("state")).await.unwrap();
    assert_eq!(state.text().await.unwrap(), "dead");
    assert!(browser.text().await.contains("550 <b>no</b>"));
    browser.click(Locator::Id("retry"), "message").await;
    assert!(browser.text().await.contains("back in the queue"));

    // A worker runs it; its page says so.
    let second = workers();
    second.wait_idle().await;
    second.shutdown(std::time::Duration::from_secs(5)).await;
    browser
        .click(Locator::LinkText("Back to the job"), "job")
        .await;
    let state = client.find(Locator::Id("state")).await.unwrap();
    assert_eq!(state.text().await.unwrap(), "done");
    assert!(browser.text().await.contains("\"sent\": true"));
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // A key that is markup is text on every page: no script ran, no element was made.
    client
        .goto(&format!("{base}/records?scope=billing"))
        .await
        .unwrap();
    browser.on("records").await;
    let link = client.find(Locator::LinkText(XSS_KEY)).await.unwrap();
    assert_eq!(link.text().await.unwrap(), XSS_KEY);
    assert!(
        client.get_alert_text().await.is_err(),
        "an alert opened: the key ran as a script"
    );
    let scripts = client.find_all(Locator::Css("main script")).await.unwrap();
    assert!(scripts.is_empty());
    link.click().await.unwrap();
    browser.on("record").await;
    assert!(browser.text().await.contains(XSS_KEY));
    assert!(client.get_alert_text().await.is_err());
    browser.client.clone().close().await.unwrap();
}
