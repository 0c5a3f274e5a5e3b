//! The dashboard in a real headless Chromium, against a real PostgreSQL: log in, read the
//! overview, follow a dead job to its page, retry it and see it run; a key that is markup
//! renders as text. The pages' screenshots are `screenshots.rs`'s.

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

/// What reached a dashboard: each request's method, path, the status it was answered with,
/// and whether the guard answered (its refusals are plain text; the pages' are HTML).
type Seen = Arc<std::sync::Mutex<Vec<(String, String, u16, bool)>>>;

/// Serves `dashboard` as `Dashboard::serve` does, with the requests that reach it written down
/// (outside its guard, so a refused request is seen too).
async fn serve_watched(dashboard: idem_ui::Dashboard) -> (String, Seen) {
    use axum::extract::Request;
    use axum::middleware::{from_fn, Next};
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let app = dashboard
        .router()
        .layer(from_fn(move |request: Request, next: Next| {
            let log = log.clone();
            async move {
                let (method, path) = (
                    request.method().to_string(),
                    request.uri().path().to_owned(),
                );
                let response = next.run(request).await;
                let by_guard = response
                    .headers()
                    .get("content-type")
                    .is_some_and(|t| t.as_bytes().starts_with(b"text/plain"));
                let entry = (method, path, response.status().as_u16(), by_guard);
                log.lock().unwrap().push(entry);
                response
            }
        }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

/// Serves `html` at `/` on `localhost` (another site than the dashboard's 127.0.0.1).
async fn serve_page(html: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let html = html.clone();
            async move { axum::response::Html(html) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://localhost:{port}/")
}

/// Waits until `seen` holds a request to `path` with `method`; its status, and whether the
/// guard answered it.
async fn status_of(seen: &Seen, method: &str, path: &str) -> (u16, bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let found = seen
            .lock()
            .unwrap()
            .iter()
            .find(|(m, p, _, _)| m == method && p == path)
            .map(|(_, _, status, by_guard)| (*status, *by_guard));
        if let Some(status) = found {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the browser never sent {method} {path}: {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A page on another site that the operator visits makes their browser ask the dashboard for
/// an expensive list (an image and a fetch) and submit an action (a form): every one of those
/// requests reaches the dashboard and is refused, in both modes (open on loopback without a
/// token, and with a token while the operator is logged in), and nothing is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_a_page_on_another_site_makes_the_browser_send_are_refused() {
    let (test, queue) = store_with_records("ui_cross_site").await;
    let browser = Browser::start().await;
    let client = &browser.client;
    for with_token in [false, true] {
        let mut dashboard =
            idem_ui::Dashboard::new(Arc::new(test.store.clone())).queue(queue.clone());
        if with_token {
            dashboard = dashboard.token(TOKEN.to_owned());
        }
        let (base, seen) = serve_watched(dashboard).await;
        if with_token {
            browser.log_in(&base, TOKEN).await;
            browser.on("overview").await;
        } else {
            // The operator's own visit is answered.
            client.goto(&format!("{base}/")).await.unwrap();
            browser.on("overview").await;
        }
        seen.lock().unwrap().clear();
        let reads = serve_page(format!(
            r#"<html><body>
               <img src="{base}/records?state=stale">
               <script>fetch("{base}/jobs?state=dead", {{mode: "no-cors", credentials: "include"}});</script>
               </body></html>"#
        ))
        .await;
        client.goto(&reads).await.unwrap();
        let image = status_of(&seen, "GET", "/records").await;
        assert_eq!(image, (403, true), "the image");
        let fetched = status_of(&seen, "GET", "/jobs").await;
        assert_eq!(fetched, (403, true), "the fetch");
        let form = serve_page(format!(
            r#"<html><body>
               <form id="f" method="post" action="{base}/actions/pause">
                 <input name="csrf" value="guess"><input name="name" value="nightly-report">
               </form>
               <script>document.getElementById("f").submit();</script>
               </body></html>"#
        ))
        .await;
        client.goto(&form).await.unwrap();
        assert_eq!(
            status_of(&seen, "POST", "/actions/pause").await,
            (403, true),
            "the form, refused by the guard (not only for want of the login)"
        );
        assert!(!queue.schedules().await.unwrap()[0].paused);
        let refused = seen.lock().unwrap().clone();
        assert!(
            refused
                .iter()
                .all(|(_, _, status, by_guard)| *status == 403 && *by_guard),
            "token {with_token}: every request from the other site was refused: {refused:?}"
        );
    }
    browser.client.clone().close().await.unwrap();
}
