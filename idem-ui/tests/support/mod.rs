//! What the dashboard's tests share: the dashboard served on a real port, a store with
//! records, jobs and a schedule in it, and a real headless Chromium driven over WebDriver.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idem_queue::{Queue, Schedule};
use idem_store_postgres::sqlx;
use idem_store_postgres::testing::TestStore;

/// The token the tests' dashboards ask for.
pub const TOKEN: &str = "a-test-token-of-some-length";

/// A key no page may run as markup.
pub const XSS_KEY: &str = "<script>alert(1)</script>";

/// Serves `dashboard` on a free loopback port; its base URL.
pub async fn serve(dashboard: idem_ui::Dashboard) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        dashboard
            .serve(listener, std::future::pending())
            .await
            .unwrap()
    });
    format!("http://{addr}")
}

/// A PostgreSQL store with a completed record, a stale claim (held by `host-a:4242`), a
/// record whose key is markup, and a schedule; its queue migrated.
pub async fn store_with_records(name: &str) -> (TestStore, Queue) {
    let test = TestStore::new(name, 8).await;
    let queue = Queue::new(&test.store);
    queue.migrate().await.unwrap();
    sqlx::raw_sql(&format!(
        "INSERT INTO {t} (key, scope, fence, completed_at, expires_at, purge_at, holder) VALUES
           ('invoice:7', 'billing', 1, now(), now() + interval '1 day', now(), NULL),
           ('report:9', 'reports', 2, NULL, now() - interval '1 minute', now(), 'host-a:4242'),
           ($${XSS_KEY}$$, 'billing', 3, now(), now() + interval '1 day', now(), NULL)",
        t = test.store.table()
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    let schedule = Schedule::every("nightly-report", Duration::from_secs(3600)).unwrap();
    queue
        .scheduler(vec![schedule])
        .unwrap()
        .declare_at(std::time::SystemTime::now())
        .await
        .unwrap();
    (test, queue)
}

/// Three hours of history, so the overview's plots have something to show: calls completed
/// (scope `api`) and jobs done and dead-lettered (queue `mail`), spread over the window.
pub async fn history(test: &TestStore) {
    sqlx::raw_sql(&format!(
        "INSERT INTO {t} (key, scope, fence, completed_at, expires_at, purge_at)
             SELECT 'call:' || i, 'api', 1000 + i, at, at + interval '1 day', at
             FROM generate_series(1, 2400) i,
                  LATERAL (SELECT now() - (i * 4 + (i % 17) * 9) * interval '1 second') AS w(at);
         INSERT INTO \"{schema}\".idem_records_queue (key, payload, max_attempts, state, attempts, queue, created_at,
                                available_at, finished_at, last_error)
             SELECT 'mail:' || i, '{{}}', 5, CASE WHEN i % 40 = 0 THEN 'dead' ELSE 'done' END,
                    1, 'mail', at, at, at,
                    CASE WHEN i % 40 = 0 THEN 'smtp: 421 try again later' END
             FROM generate_series(1, 1200) i,
                  LATERAL (SELECT now() - (600 + i * 8 + (i % 11) * 20) * interval '1 second')
                      AS w(at)",
        t = test.store.table(),
        schema = test.schema,
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
}

/// A program on PATH (or where `env` names it), or a panic that says how to get it.
fn program(env: &str, names: &[&str]) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in names {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "{} not found on PATH (nor in ${env}): the dashboard's browser tests need Debian's \
         chromium and chromium-driver (scripts/test installs them: apt-get install chromium \
         chromium-driver)",
        names.join(" or ")
    )
}

/// A headless Chromium, driven through chromedriver; both stop when it is dropped.
pub struct Browser {
    driver: Child,
    pub client: fantoccini::Client,
}

impl Browser {
    pub async fn start() -> Browser {
        let chromedriver = program("CHROMEDRIVER", &["chromedriver"]);
        let chromium = program(
            "CHROMIUM",
            &["chromium", "chromium-browser", "google-chrome"],
        );
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let mut command = Command::new(&chromedriver);
        command
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // Its own process group, so a failing test stops the browser it started too.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut driver = command
            .spawn()
            .unwrap_or_else(|e| panic!("{chromedriver:?}: {e}"));
        // It says when it listens.
        let stdout = driver.stdout.take().unwrap();
        let ready = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stdout).lines();
            let ready = lines
                .by_ref()
                .map_while(Result::ok)
                .any(|line| line.contains("started successfully"));
            // Keep reading, so its writes never block.
            std::thread::spawn(move || lines.for_each(drop));
            ready
        })
        .await
        .unwrap();
        assert!(ready, "chromedriver did not start");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1500"],
            }),
        );
        let client = fantoccini::ClientBuilder::new(
            hyper_util::client::legacy::connect::HttpConnector::new(),
        )
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a Chromium session");
        Browser { driver, client }
    }

    /// Logs in at `base` with `token`.
    pub async fn log_in(&self, base: &str, token: &str) {
        use fantoccini::Locator;
        self.client.goto(&format!("{base}/login")).await.unwrap();
        let field = self.client.find(Locator::Id("token")).await.unwrap();
        field.send_keys(token).await.unwrap();
        self.client
            .find(Locator::Id("login"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }

    /// Waits for the page `name` (its heading's id is `page-NAME`) to load.
    pub async fn on(&self, name: &str) {
        self.client
            .wait()
            .for_element(fantoccini::Locator::Id(&format!("page-{name}")))
            .await
            .unwrap_or_else(|e| panic!("no {name} page: {e}"));
    }

    /// Clicks the element `id`, then waits for the page `next`.
    pub async fn click(&self, locator: fantoccini::Locator<'_>, next: &str) {
        self.client
            .find(locator)
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        self.on(next).await;
    }

    /// The text of the page's body.
    pub async fn text(&self) -> String {
        use fantoccini::Locator;
        self.client
            .find(Locator::Css("body"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.driver.wait();
    }
}

/// A believable day of a small shop's idem, for the screenshots: HTTP calls completed (scope
/// `api`, keys as clients send them), a billing run whose worker died mid-claim, a live claim;
/// mail jobs done, a few retried and two dead (one after its five attempts, one refused for
/// good at once), jobs waiting and running; three schedules, one of which missed a tick.
pub async fn showcase(test: &TestStore, queue: &Queue) {
    let schedules = vec![
        Schedule::cron("nightly-report", "0 2 * * *").unwrap(),
        Schedule::cron("invoice-run", "0 6 1 * *").unwrap(),
        Schedule::every("sync-exchange-rates", Duration::from_secs(900)).unwrap(),
    ];
    queue
        .scheduler(schedules)
        .unwrap()
        .declare_at(std::time::SystemTime::now())
        .await
        .unwrap();
    let attempt_log = |n: i32, last: &str| {
        let entries: Vec<String> = (1..=n)
            .map(|a| {
                let (outcome, error) = if a < n {
                    ("retried", "smtp: 421 4.7.0 mx.partner-mail.net: try again later")
                } else {
                    (last, "smtp: 421 4.7.0 mx.partner-mail.net: try again later")
                };
                format!(
                    "jsonb_build_object('attempt', {a}, 'started_at', now() - interval '{m} minutes',
                         'ended_at', now() - interval '{m} minutes' + interval '2 seconds',
                         'outcome', '{outcome}', 'error', '{error}')",
                    m = 95 - a * 15
                )
            })
            .collect();
        format!("jsonb_build_array({})", entries.join(", "))
    };
    sqlx::raw_sql(&format!(
        "INSERT INTO {t} (key, scope, fence, completed_at, expires_at, purge_at, holder)
             SELECT substr(md5(i::text), 1, 8) || '-' || substr(md5(i::text), 9, 4) || '-4'
                        || substr(md5(i::text), 14, 3) || '-a' || substr(md5(i::text), 18, 3)
                        || '-' || substr(md5(i::text), 21, 12),
                    'api', 1000 + i, at, at + interval '1 day', at, NULL
             FROM generate_series(1, 2400) i,
                  LATERAL (SELECT now() - (power(i, 1.2) + (i % 17) * 3) * interval '1 second')
                      AS w(at);
         INSERT INTO {t} (key, scope, fence, completed_at, expires_at, purge_at, holder) VALUES
           ('invoice-run:2026-12', 'billing', 9001, NULL, now() - interval '3 minutes',
            now() - interval '3 minutes', 'billing-worker-2:31337'),
           ('charge:order-8812', 'billing', 9002, now() - interval '12 minutes',
            now() + interval '1 day', now() + interval '1 day', NULL),
           ('charge:order-8813', 'billing', 9003, now() - interval '9 minutes',
            now() + interval '1 day', now() + interval '1 day', NULL),
           ('reminder:42:2026-12-07', 'email', 9004, now() - interval '40 minutes',
            now() + interval '1 day', now() + interval '1 day', NULL),
           ('export:customers:2026-12-07', 'reports', 9005, NULL, now() + interval '25 seconds',
            now() + interval '25 seconds', 'web-1:812');
         INSERT INTO \"{schema}\".idem_records_queue
                (key, payload, max_attempts, state, attempts, queue, created_at, available_at,
                 attempted_at, finished_at)
             SELECT 'welcome-email:' || (20000 + i), jsonb_build_object('user', 20000 + i), 5,
                    'done', 1, 'mail', at, at, at, at + interval '300 milliseconds'
             FROM generate_series(1, 1200) i,
                  LATERAL (SELECT now() - (600 + i * 8 + (i % 11) * 20) * interval '1 second')
                      AS w(at);
         INSERT INTO \"{schema}\".idem_records_queue
                (key, payload, max_attempts, state, attempts, queue, created_at, available_at,
                 attempted_at, finished_at, last_error, attempt_log, worker, priority)
         VALUES
           ('welcome-email:19311', '{{\"user\": 19311, \"to\": \"ana@partner-mail.net\"}}', 5,
            'dead', 5, 'mail', now() - interval '95 minutes', now() - interval '20 minutes',
            now() - interval '95 minutes', now() - interval '20 minutes',
            'smtp: 421 4.7.0 mx.partner-mail.net: try again later', {dead_log}, NULL, 0),
           ('welcome-email:19388', '{{\"user\": 19388, \"to\": \"bob@exampel.com\"}}', 5,
            'dead', 1, 'mail', now() - interval '50 minutes', now() - interval '50 minutes',
            now() - interval '50 minutes', now() - interval '50 minutes',
            'smtp: 550 5.1.1 <bob@exampel.com>: no such mailbox (permanent)',
            jsonb_build_array(jsonb_build_object('attempt', 1,
                'started_at', now() - interval '50 minutes',
                'ended_at', now() - interval '50 minutes' + interval '1 second',
                'outcome', 'dead',
                'error', 'smtp: 550 5.1.1 <bob@exampel.com>: no such mailbox (permanent)')),
            NULL, 0),
           ('receipt:order-8813', '{{\"order\": 8813}}', 5, 'queued', 2, 'mail',
            now() - interval '3 minutes', now() + interval '40 seconds',
            now() - interval '2 minutes', NULL,
            'smtp: 421 4.7.0 mx.partner-mail.net: try again later', {retry_log}, NULL, 0),
           ('receipt:order-8814', '{{\"order\": 8814}}', 5, 'running', 1, 'mail',
            now() - interval '4 seconds', now() + interval '26 seconds', now() - interval '3 seconds',
            NULL, NULL, '[]', 'mail-worker-1:4711', 0),
           ('pdf:invoice-2026-12-0042', '{{\"invoice\": \"2026-12-0042\"}}', 3, 'running', 1,
            'default', now() - interval '9 seconds', now() + interval '21 seconds',
            now() - interval '8 seconds', NULL, NULL, '[]', 'mail-worker-1:4711', 5),
           ('pdf:invoice-2026-12-0043', '{{\"invoice\": \"2026-12-0043\"}}', 3, 'queued', 0,
            'default', now() - interval '2 seconds', now() - interval '2 seconds', NULL, NULL,
            NULL, '[]', NULL, 5);
         INSERT INTO \"{schema}\".idem_records_queue
                (key, payload, max_attempts, state, attempts, queue, created_at, available_at,
                 attempted_at, finished_at, last_error, attempt_log)
         SELECT 'schedule:' || name || ':' || to_char(at, 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
                jsonb_build_object('schedule', name), 5, state, attempts, 'default', at, at, at,
                at + interval '3 minutes', error, '[]'
         FROM (VALUES
             ('nightly-report', date_trunc('day', now()) + interval '2 hours', 'done', 1, NULL),
             ('sync-exchange-rates', date_trunc('minute', now()) - interval '4 minutes', 'done',
              1, NULL),
             ('invoice-run', date_trunc('month', now()) + interval '6 hours', 'dead', 5,
              'POST https://billing.internal/invoice-run answered 502 in 30012 ms: bad gateway')
         ) AS tick(name, at, state, attempts, error);
         UPDATE \"{schema}\".idem_records_schedules
            SET last_tick = date_trunc('day', now()) + interval '2 hours',
                last_success_at = date_trunc('day', now()) + interval '2 hours 3 minutes',
                next_tick = date_trunc('day', now()) + interval '1 day 2 hours'
            WHERE name = 'nightly-report';
         UPDATE \"{schema}\".idem_records_schedules
            SET last_tick = date_trunc('month', now()) + interval '6 hours',
                missed = 1, last_missed_at = date_trunc('month', now()) + interval '6 hours',
                last_success_at = date_trunc('month', now()) - interval '1 month'
                                  + interval '6 hours 12 minutes',
                next_tick = date_trunc('month', now()) + interval '1 month 6 hours'
            WHERE name = 'invoice-run';
         UPDATE \"{schema}\".idem_records_schedules
            SET last_tick = date_trunc('minute', now()) - interval '4 minutes',
                last_success_at = date_trunc('minute', now()) - interval '4 minutes'
                                  + interval '2 seconds',
                next_tick = date_trunc('minute', now()) + interval '11 minutes'
            WHERE name = 'sync-exchange-rates'",
        t = test.store.table(),
        schema = test.schema,
        dead_log = attempt_log(5, "dead"),
        retry_log = attempt_log(2, "retried"),
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
}
