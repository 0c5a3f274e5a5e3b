//! The dashboard over HTTP, with a real client on a real port: who may look, who may act,
//! what each action refuses, the headers every page carries, keyset paging, and a store
//! without a queue.

mod support;

use std::sync::Arc;

use idem_core::Inspect;
use idem_queue::{JobState, NewJob};
use idem_store_postgres::sqlx;
use reqwest::header::{CONTENT_SECURITY_POLICY, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;
use reqwest::StatusCode;
use serde_json::json;
use support::{serve, store_with_records, TOKEN, XSS_KEY};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// Logs in at `base`; the session cookie and the form token its pages carry.
async fn log_in(base: &str, token: &str) -> (String, String) {
    let response = client()
        .post(format!("{base}/login"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let cookie = response.headers()[SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = client()
        .get(format!("{base}/"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a logged-in page carries the form token")
        .to_owned();
    (cookie, csrf)
}

async fn post(
    base: &str,
    path: &str,
    cookie: Option<&str>,
    form: &[(&str, &str)],
) -> (StatusCode, String) {
    let mut request = client().post(format!("{base}{path}")).form(form);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

async fn get(base: &str, path: &str, cookie: Option<&str>) -> (StatusCode, String) {
    let mut request = client().get(format!("{base}{path}"));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

#[tokio::test]
async fn with_a_token_nothing_is_shown_or_done_without_the_login_and_its_form_token() {
    let (test, queue) = store_with_records("ui_token").await;
    let dashboard = idem_ui::Dashboard::new(Arc::new(test.store.clone()))
        .queue(queue.clone())
        .token(TOKEN.to_owned());
    assert_eq!(dashboard.generated_token(), None);
    let base = serve(dashboard).await;

    for path in [
        "/",
        "/records",
        "/jobs",
        "/record?key=invoice:7&scope=billing",
    ] {
        let response = client().get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(response.headers()[LOCATION], "/login");
    }
    // A wrong token is refused, and sets no cookie.
    let wrong = client()
        .post(format!("{base}/login"))
        .form(&[("token", "guess")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get(SET_COOKIE).is_none());

    let (cookie, csrf) = log_in(&base, TOKEN).await;
    assert!(!csrf.is_empty());
    let (status, _) = get(&base, "/", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    // A forged cookie is no login.
    let (status, _) = get(&base, "/", Some("idem_session=0123")).await;
    assert_eq!(status, StatusCode::SEE_OTHER);

    // An action without the login, or without the form token, changes nothing.
    let _ = queue
        .enqueue(NewJob::new("waiting", &json!({})).unwrap())
        .await
        .unwrap();
    let (status, _) = post(
        &base,
        "/actions/cancel",
        None,
        &[("csrf", &csrf), ("key", "waiting")],
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "to the login");
    let (status, body) = post(
        &base,
        "/actions/cancel",
        Some(&cookie),
        &[("csrf", "forged"), ("key", "waiting")],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        queue.status("waiting").await.unwrap().unwrap().state,
        JobState::Queued
    );
    // With both, it is done.
    let (status, body) = post(
        &base,
        "/actions/cancel",
        Some(&cookie),
        &[("csrf", &csrf), ("key", "waiting")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        queue.status("waiting").await.unwrap().unwrap().state,
        JobState::Cancelled
    );
    let (status, _) = post(
        &base,
        "/actions/cancel",
        Some(&cookie),
        &[("csrf", &csrf), ("key", "waiting")],
    )
    .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a cancelled job is not cancelled again"
    );

    // Another login has its own form token; logging out ends the session for every copy of
    // its cookie.
    let (other_cookie, other_csrf) = log_in(&base, TOKEN).await;
    assert_ne!((&other_cookie, &other_csrf), (&cookie, &csrf));
    let pause = [("csrf", csrf.as_str()), ("name", "nightly-report")];
    let (status, _) = post(&base, "/actions/pause", Some(&other_cookie), &pause).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a form token is its session's"
    );
    let (status, _) = post(&base, "/logout", Some(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _) = get(&base, "/", Some(&cookie)).await;
    assert_eq!(
        status,
        StatusCode::SEE_OTHER,
        "the copied cookie no longer logs in"
    );
    let (status, _) = get(&base, "/", Some(&other_cookie)).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn without_a_token_pages_are_open_and_actions_need_the_printed_one() {
    let (test, queue) = store_with_records("ui_open").await;
    let dashboard = idem_ui::Dashboard::new(Arc::new(test.store.clone())).queue(queue.clone());
    let token = dashboard
        .generated_token()
        .expect("one made at start")
        .to_owned();
    assert!(token.len() >= 32);
    let base = serve(dashboard).await;

    let (status, page) = get(&base, "/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("host-a:4242"));
    // Only when addressed to a loopback name: a page elsewhere that rebinds its own name to
    // 127.0.0.1 is refused.
    for host in ["attacker.example", "attacker.example:7780", "10.0.0.5:7780"] {
        let response = client()
            .get(format!("{base}/"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::MISDIRECTED_REQUEST, "{host}");
    }
    for host in ["localhost:7780", "[::1]:7780", "127.0.0.1"] {
        let response = client()
            .get(format!("{base}/"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{host}");
    }
    assert!(
        !page.contains("action=\"/actions"),
        "no action is offered before the login"
    );
    let (status, _) = post(
        &base,
        "/actions/pause",
        None,
        &[("csrf", ""), ("name", "nightly-report")],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!queue.schedules().await.unwrap()[0].paused);

    let (cookie, csrf) = log_in(&base, &token).await;
    let (status, body) = post(
        &base,
        "/actions/pause",
        Some(&cookie),
        &[("csrf", &csrf), ("name", "nightly-report")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(queue.schedules().await.unwrap()[0].paused);
    let (status, page) = get(&base, "/schedule?name=nightly-report", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("Resume"));
    let (status, _) = post(
        &base,
        "/actions/resume",
        Some(&cookie),
        &[("csrf", &csrf), ("name", "nightly-report")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(!queue.schedules().await.unwrap()[0].paused);
}

#[tokio::test]
async fn every_dead_job_is_retried_at_once_with_a_yes() {
    let (test, queue) = store_with_records("ui_retry_all").await;
    for key in ["dead:1", "dead:2"] {
        let _ = queue
            .enqueue(NewJob::new(key, &json!({})).unwrap().max_attempts(1))
            .await
            .unwrap();
    }
    let workers = queue
        .worker(|_job: idem_queue::Job| async {
            Err::<(), _>(idem_queue::JobError::permanent("no"))
        })
        .start();
    workers.wait_idle().await;
    workers.shutdown(std::time::Duration::from_secs(5)).await;
    let base = serve(
        idem_ui::Dashboard::new(Arc::new(test.store.clone()))
            .queue(queue.clone())
            .token(TOKEN.to_owned()),
    )
    .await;
    let (cookie, csrf) = log_in(&base, TOKEN).await;
    let (_, page) = get(&base, "/jobs?state=dead", Some(&cookie)).await;
    assert!(page.contains("retry-all"), "{page}");
    let (status, _) = post(
        &base,
        "/actions/retry-all-dead",
        Some(&cookie),
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "not without a yes");
    let (status, body) = post(
        &base,
        "/actions/retry-all-dead",
        Some(&cookie),
        &[("csrf", &csrf), ("yes", "yes")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("2 dead jobs"), "{body}");
    for key in ["dead:1", "dead:2"] {
        assert_eq!(
            queue.status(key).await.unwrap().unwrap().state,
            JobState::Queued
        );
    }
}

#[tokio::test]
async fn read_only_refuses_every_action_and_offers_none() {
    let (test, queue) = store_with_records("ui_read_only").await;
    let base = serve(
        idem_ui::Dashboard::new(Arc::new(test.store.clone()))
            .queue(queue.clone())
            .token(TOKEN.to_owned())
            .read_only(true),
    )
    .await;
    let (cookie, csrf) = log_in(&base, TOKEN).await;
    let (_, page) = get(&base, "/record?key=report:9&scope=reports", Some(&cookie)).await;
    assert!(page.contains("read-only"));
    assert!(!page.contains("action=\"/actions"));
    let form = [
        ("csrf", csrf.as_str()),
        ("key", "report:9"),
        ("scope", "reports"),
        ("fence", "2"),
    ];
    let (status, body) = post(&base, "/actions/release", Some(&cookie), &form).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("read-only"));
    assert_eq!(
        test.store
            .find("report:9", Some("reports"))
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn releasing_follows_the_idem_commands_rules() {
    let (test, queue) = store_with_records("ui_release").await;
    sqlx::raw_sql(&format!(
        "INSERT INTO {t} (key, scope, fence, expires_at, purge_at, holder)
         VALUES ('live:1', 'billing', 5, now() + interval '1 hour', now(), 'host-b:7')",
        t = test.store.table()
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    let base = serve(
        idem_ui::Dashboard::new(Arc::new(test.store.clone()))
            .queue(queue)
            .token(TOKEN.to_owned()),
    )
    .await;
    let (cookie, csrf) = log_in(&base, TOKEN).await;
    let release = |key: &'static str, scope: &'static str, fence: &'static str, force: bool| {
        let (cookie, csrf, base) = (cookie.clone(), csrf.clone(), base.clone());
        async move {
            let mut form = vec![
                ("csrf", csrf.as_str()),
                ("key", key),
                ("scope", scope),
                ("fence", fence),
            ];
            if force {
                form.push(("force", "yes"));
            }
            post(&base, "/actions/release", Some(&cookie), &form).await
        }
    };
    // A live lease: refused, naming its holder, unless forced.
    let (status, body) = release("live:1", "billing", "5", false).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body.contains("host-b:7") && body.contains("double run"),
        "{body}"
    );
    assert_eq!(
        test.store
            .find("live:1", Some("billing"))
            .await
            .unwrap()
            .len(),
        1
    );
    // A fence other than the record's: it changed since the operator looked.
    let (status, body) = release("report:9", "reports", "99", false).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(body.contains("changed meanwhile"), "{body}");
    // A completed record is not a claim.
    let (status, body) = release("invoice:7", "billing", "1", false).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(body.contains("forget"), "{body}");
    // A stale claim goes; a live one with force.
    let (status, _) = release("report:9", "reports", "2", false).await;
    assert_eq!(status, StatusCode::OK);
    assert!(test
        .store
        .find("report:9", Some("reports"))
        .await
        .unwrap()
        .is_empty());
    let (status, _) = release("live:1", "billing", "5", true).await;
    assert_eq!(status, StatusCode::OK);
    assert!(test
        .store
        .find("live:1", Some("billing"))
        .await
        .unwrap()
        .is_empty());
    // Forget: a completed record only, and only with the operator's "yes".
    let mut form = vec![
        ("csrf", csrf.as_str()),
        ("key", "invoice:7"),
        ("scope", "billing"),
    ];
    let (status, body) = post(&base, "/actions/forget", Some(&cookie), &form).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(body.contains("yes"), "{body}");
    assert_eq!(
        test.store
            .find("invoice:7", Some("billing"))
            .await
            .unwrap()
            .len(),
        1
    );
    form.push(("yes", "yes"));
    let (status, _) = post(&base, "/actions/forget", Some(&cookie), &form).await;
    assert_eq!(status, StatusCode::OK);
    assert!(test
        .store
        .find("invoice:7", Some("billing"))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn every_page_carries_its_security_headers_and_escapes_the_store() {
    let (test, queue) = store_with_records("ui_headers").await;
    let _ = queue
        .enqueue(NewJob::new(XSS_KEY, &json!({ "html": "<img src=x onerror=alert(1)>" })).unwrap())
        .await
        .unwrap();
    let base = serve(idem_ui::Dashboard::new(Arc::new(test.store.clone())).queue(queue)).await;
    for path in [
        "/",
        "/records",
        "/jobs",
        "/schedules",
        "/login",
        "/no-such-page",
    ] {
        let response = client().get(format!("{base}{path}")).send().await.unwrap();
        let csp = response.headers()[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("default-src 'none'") && !csp.contains("script-src"),
            "{path}: {csp}"
        );
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
        assert_eq!(response.headers()["x-frame-options"], "DENY");
        assert_eq!(response.headers()["cache-control"], "no-store");
    }
    let (_, records) = get(&base, "/records", None).await;
    assert!(
        records.contains("&#60;script&#62;alert(1)&#60;/script&#62;")
            || records.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{records}"
    );
    assert!(!records.contains(XSS_KEY));
    let (_, job) = get(&base, "/job?key=%3Cscript%3Ealert(1)%3C%2Fscript%3E", None).await;
    assert!(
        !job.contains(XSS_KEY) && !job.contains("<img src=x"),
        "{job}"
    );
    // Bad input is a clear error.
    let (status, body) = get(&base, "/jobs?state=exploded", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("not a job state"));
    let (status, body) = get(&base, "/jobs?state=dead&after=nonsense", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("not where a page"), "{body}");
}

#[tokio::test]
async fn pages_follow_each_other_without_a_gap_or_a_repeat() {
    let (test, queue) = store_with_records("ui_paging").await;
    sqlx::raw_sql(&format!(
        "INSERT INTO {t} (key, scope, fence, completed_at, expires_at, purge_at)
         SELECT 'page:' || lpad(i::text, 4, '0'), s, i, now(), now() + interval '1 day', now()
         FROM generate_series(1, 60) i, unnest(ARRAY['a', 'b']) s",
        t = test.store.table()
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    let jobs: Vec<NewJob> = (0..120)
        .map(|i| NewJob::new(format!("job:{i:04}"), &json!(i)).unwrap())
        .collect();
    queue.enqueue_many(jobs).await.unwrap();
    let base = serve(idem_ui::Dashboard::new(Arc::new(test.store.clone())).queue(queue)).await;
    for (first, row) in [
        ("/records?prefix=page:", "/record?key=page"),
        ("/jobs?prefix=job:", "/job?key=job"),
    ] {
        let mut seen = Vec::new();
        let mut next = Some(first.to_owned());
        let mut pages = 0;
        while let Some(path) = next.take() {
            pages += 1;
            assert!(pages <= 3, "more pages than 120 rows fill: {path}");
            let path = path.replace("&#38;", "&").replace("&amp;", "&");
            let (status, page) = get(&base, &path, None).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            seen.extend(
                page.match_indices(row)
                    .map(|(i, _)| page[i..].split('"').next().unwrap().to_owned()),
            );
            next = page
                .split("id=\"next\"")
                .next()
                .filter(|_| page.contains("id=\"next\""))
                .and_then(|head| head.rsplit("href=\"").next())
                .map(|href| href.split('"').next().unwrap().to_owned());
        }
        // Pages of 50: the walk crossed two page boundaries, by the links the pages carry.
        assert_eq!(pages, 3, "{first}: three pages of 120 rows");
        let expected = 120;
        let mut unique = seen.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            (seen.len(), unique.len()),
            (expected, expected),
            "{first}: {seen:?}"
        );
    }
}

#[tokio::test]
async fn a_store_without_a_queue_shows_its_records_only() {
    let dir = std::env::temp_dir().join(format!("idem-ui-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("records.db");
    let store = idem_store_sqlite::SqliteStore::open(path.to_str().unwrap())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let base = serve(idem_ui::Dashboard::new(Arc::new(store))).await;
    let (status, page) = get(&base, "/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("Records by scope") && !page.contains("Jobs by queue"));
    assert!(!page.contains("href=\"/jobs\""));
    let (status, page) = get(&base, "/jobs", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(page.contains("need PostgreSQL"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_redis_store_shows_its_records_by_scope_and_in_pages() {
    use idem_core::Call;
    let url = idem_testdb::redis_url();
    let prefix = format!("idem-ui-{}", std::process::id());
    let store = idem_store_redis::RedisStore::connect(&url)
        .await
        .unwrap()
        .prefix(&prefix);
    for key in ["order:1", "order:2"] {
        let outcome = Call::new(&store, key)
            .scope("shop".to_owned())
            .run(async { Ok::<_, std::io::Error>(()) })
            .await
            .unwrap();
        assert!(outcome.is_executed());
    }
    let base = serve(idem_ui::Dashboard::new(Arc::new(store))).await;
    let (status, page) = get(&base, "/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(">shop<") && !page.contains("Jobs by queue"),
        "{page}"
    );
    let (_, page) = get(&base, "/records?scope=shop", None).await;
    let first = page.find("order:1").expect("order:1 listed");
    let second = page.find("order:2").expect("order:2 listed");
    assert!(first < second, "in key order");
    let (status, page) = get(&base, "/record?key=order:2&scope=shop", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("completed"), "{page}");
}
