//! # idem-ui: a web dashboard for idem
//!
//! What is stuck right now, what failed overnight, did the 6:00 schedule run: one page for the
//! operator, beside the `idem` command. It shows a store's records (claimed, stale, completed,
//! by scope, with who holds each claim), and on PostgreSQL the work queue (jobs by state per
//! named queue, dead jobs, every attempt with its error) and the schedules (next tick, last
//! outcome, missed ticks). Its actions are the `idem` command's, with the same safety rules:
//! release a stale claim (a live lease needs an explicit force), forget a record, retry or
//! discard a dead job, cancel a job, pause or resume a schedule.
//!
//! Most users run it from the `idem` command:
//!
//! ```sh
//! idem --database-url postgres://localhost/app ui                 # http://127.0.0.1:7780
//! IDEM_UI_TOKEN=$(openssl rand -hex 16) idem --database-url URL ui --addr 0.0.0.0:7780
//! idem --database-url URL ui --read-only
//! ```
//!
//! Or serve it from a program. [`Dashboard::serve`] applies the command's rules (a token for
//! any address other hosts reach, the peer's address for the guard). Give it a pool of its
//! own whose statements time out, as the `idem ui` command does, so that no page keeps a scan
//! running on the application's connections:
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use idem_store_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
//!
//! let options: PgConnectOptions = "postgres://localhost/app".parse()?;
//! let pool = PgPoolOptions::new()
//!     .max_connections(2)
//!     .connect_with(options.options([("statement_timeout", "5000")]))
//!     .await?;
//! let store = idem_store_postgres::PgStore::new(pool);
//! let dashboard = idem_ui::Dashboard::new(Arc::new(store.clone()))
//!     .queue(idem_queue::Queue::new(&store))
//!     .token(std::env::var("IDEM_UI_TOKEN")?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7780").await?;
//! dashboard.serve(listener, std::future::pending()).await?;
//! # Ok(()) }
//! ```
//!
//! ## Pages
//!
//! - **Overview** (`/`): records by status per scope, stale claims with their holder, jobs by
//!   state per named queue, the newest dead jobs, the schedules, and plots of calls and jobs
//!   completed per minute and jobs dead-lettered per minute over the last three hours.
//! - **Lists** (`/records`, `/jobs`, `/schedules`) with filters (status or state, scope or queue, key prefix)
//!   and keyset paging: each page starts where the last ended, from an index range, so page
//!   1,000 of ten million records costs what the first does (the query plans are checked by
//!   the plan tests of idem-store-postgres and idem-queue). Finished jobs are listed newest first, the rest in key order.
//! - **Detail** (`/record`, `/job`, `/schedule`): a record's fence, holder, lease, output size
//!   and journal; a job's payload, attempt log with errors, and timings; a schedule's recent
//!   ticks and their jobs.
//!
//! ## Security
//!
//! A dashboard on a loopback port is still reachable from every web page its operator visits,
//! and it reads and changes a production database. What it guards against:
//!
//! - **Other sites.** Every route refuses a request a page on another site made the browser
//!   send (an `<img>`, a `fetch`, a self-submitting form): `Sec-Fetch-Site` other than
//!   `same-origin` or `none`, or (from browsers too old to send it) an `Origin` that is not the
//!   dashboard's. Requests with neither, from `curl` say, are not a page's and pass.
//! - **Other hosts, without a token.** Without a token of the operator's, pages are open but
//!   answer only requests from a loopback peer, addressed to `localhost` or a loopback address
//!   (a page elsewhere cannot reach them through a name it rebinds to 127.0.0.1), that did not
//!   come through a proxy: a proxy on the same machine would make every visitor loopback, so
//!   requests with `Forwarded`, `X-Forwarded-*`, `X-Real-IP` or `Via`, and HTTP/1.0 requests
//!   (nginx's default `proxy_pass` adds no header but speaks HTTP/1.0; no browser does), are
//!   refused. A bare TCP forwarder (socat, `ssh -R`), or a proxy set to speak HTTP/1.1 and add
//!   no header, leaves no trace: give the dashboard a token before you put anything in front
//!   of it. A token made at start is printed for the login
//!   that actions need; it never travels in a URL. [`Dashboard::serve`] and the `idem ui`
//!   command refuse an address other hosts reach without a token ([`check_bind`]), and on a
//!   loopback address refuse any `Host` but a loopback one, token or not;
//!   [`Dashboard::router`] served without the peers' addresses refuses every request.
//! - **Guessing the token.** A token has at least [`MIN_TOKEN_LEN`] characters. Each peer (an
//!   IPv4 address, an IPv6 /64) may fail five logins; then each further failure makes it wait
//!   twice as long as the last (from one second to fifteen minutes), and while it waits every
//!   login from it is refused, the right token too. Ten thousand peers are remembered, each
//!   for an hour after its last failure; while all places are taken, new peers wait too. A
//!   failure is logged when it opens a wait, not at every try. The limit prefers refusing
//!   logins to letting guesses through: behind a proxy every login comes from its address, so
//!   a guesser makes everyone wait, and one who fails from ten thousand addresses within the
//!   hour makes new peers wait. Sessions already open are not affected.
//! - **Sessions.** A login opens a session: a random id in a cookie (`HttpOnly`,
//!   `SameSite=Strict`; with [`https`](Dashboard::https), `Secure` and named `__Host-`, and
//!   pages carry `Strict-Transport-Security`), kept by the dashboard for twelve hours or until
//!   logout, which ends it for every copy of the cookie. Each action is a POST carrying the
//!   session's form token (an HMAC of its id).
//! - **Actions.** `read_only` refuses every action (and shows none). Actions follow the `idem`
//!   command's rules: a live claim is released only with "force", forgetting needs a "yes",
//!   only dead jobs are retried.
//! - **Markup and leaks.** Every value from the store (keys, payloads, error text) is escaped by
//!   the templates: a key `<script>alert(1)</script>` renders as text. Pages carry a
//!   Content-Security-Policy that allows no script at all (the dashboard uses none),
//!   `Cache-Control: no-store`, `X-Content-Type-Options: nosniff`, `Referrer-Policy:
//!   same-origin` and `X-Frame-Options: DENY`. A store error is logged in full and shown as
//!   plain words: its text can name hosts, users and tables.
//! - **Load.** Each page costs a bounded amount of the database's time (below), and the
//!   `idem ui` command's connections stop any statement after five seconds.
//!
//! What it leaves to you: the token's secrecy, TLS, and who may reach the port.
//!
//! ## From another machine
//!
//! The dashboard speaks plain HTTP; reach it from elsewhere through TLS, never with the token
//! and cookie in clear. Either of:
//!
//! 1. **An SSH tunnel** (nothing to configure on the server). Serve on loopback as usual, then
//!    from your machine:
//!
//!    ```sh
//!    ssh -N -L 7780:127.0.0.1:7780 you@server     # leave it running
//!    # open http://127.0.0.1:7780/ and log in with the printed token
//!    ```
//!
//! 2. **A TLS proxy** (for a team). Serve with a token on loopback, with `--https` so the
//!    session cookie is `Secure`, and put a proxy that terminates TLS in front. It must pass
//!    the original `Host` on (the guard compares it with the browser's `Origin`):
//!
//!    ```sh
//!    IDEM_UI_TOKEN="$(openssl rand -hex 16)" idem --database-url URL ui --https
//!    ```
//!
//!    ```text
//!    # Caddy (certificates and the Host header are handled for you)
//!    dashboard.example.com {
//!        reverse_proxy 127.0.0.1:7780
//!    }
//!
//!    # nginx
//!    server {
//!        listen 443 ssl;
//!        server_name dashboard.example.com;
//!        ssl_certificate     /etc/ssl/dashboard.pem;
//!        ssl_certificate_key /etc/ssl/dashboard.key;
//!        location / {
//!            proxy_pass http://127.0.0.1:7780;
//!            proxy_set_header Host $host;
//!        }
//!    }
//!    ```
//!
//!    Behind a proxy every login comes from the proxy's address, so the login limit is shared
//!    by everyone (a guesser makes everyone wait); a token of 32 random hex characters is out
//!    of reach of guessing anyway.
//!
//! ## Costs
//!
//! Lists and detail pages read index ranges: the primary key from the page's start (or the
//! finished jobs' index, newest first). A filter the index does not order by (a status, a
//! scope, a queue, a key prefix, whose matches the database's collation need not keep
//! together) is checked row by row along that range, so a page of rare matches reads further,
//! up to [`PAGE_SCAN`](idem_core::PAGE_SCAN) rows; then it stops, says so, and its "Next
//! page" searches on from there. The overview counts records by scope and status over at most
//! [`SUMMARY_ROWS`](idem_core::SUMMARY_ROWS) records, and finished jobs over at most
//! [`COUNTS_FINISHED`](idem_queue::COUNTS_FINISHED) (waiting and running jobs all, from their
//! own indexes), saying so when there are more; its plot of completed calls reads the
//! records table, and those of jobs the last three hours of finished jobs from their index.
//! `idem-bench`'s `ui-pages` times every page on a million records and a million jobs. On
//! Redis every page reads every record of the prefix.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod actions;
mod auth;
mod bind;
mod format;
mod frame;
mod guard;
mod headers;
mod login_limit;
mod pages;
mod plot;
mod source;
mod viewer;

use std::sync::Arc;

use idem_core::Inspect;
use idem_queue::Queue;

pub use bind::{check_bind, MIN_TOKEN_LEN};

/// The dashboard over a store's records and, where there is one, its work queue and schedules.
/// [`router`](Dashboard::router) serves it.
#[derive(Clone)]
pub struct Dashboard {
    records: Arc<dyn Inspect>,
    queue: Option<Queue>,
    token: Option<String>,
    generated: String,
    read_only: bool,
    https: bool,
}

impl Dashboard {
    /// A dashboard over `records` (any store: PostgreSQL, SQLite, Redis), with no token of the
    /// operator's: pages are open, actions need the [`generated_token`](Self::generated_token).
    pub fn new(records: Arc<dyn Inspect>) -> Dashboard {
        Dashboard {
            records,
            queue: None,
            token: None,
            generated: auth::random_hex(16),
            read_only: false,
            https: false,
        }
    }

    /// Shows the work queue and the schedules of `queue` too (PostgreSQL only).
    pub fn queue(mut self, queue: Queue) -> Dashboard {
        self.queue = Some(queue);
        self
    }

    /// Every page and action needs `token` (a login form takes it; an empty one is ignored).
    /// Use a random one: it is all that guards the pages on an address others reach.
    ///
    /// # Panics
    ///
    /// When `token` is not empty and shorter than [`MIN_TOKEN_LEN`] characters: a guessable
    /// token would open every page.
    pub fn token(mut self, token: String) -> Dashboard {
        let chars = token.chars().count();
        assert!(
            token.is_empty() || chars >= MIN_TOKEN_LEN,
            "idem-ui: the dashboard's token has {chars} characters; use a random one of at least \
             {MIN_TOKEN_LEN} (`openssl rand -hex 16`)"
        );
        self.token = Some(token).filter(|t| !t.is_empty());
        self
    }

    /// The operator reaches the dashboard over HTTPS (a TLS proxy in front of it): its session
    /// cookie is then `Secure` (and named with the `__Host-` prefix), so a browser never sends
    /// it over plain HTTP.
    pub fn https(mut self, https: bool) -> Dashboard {
        self.https = https;
        self
    }

    /// Refuses every action, and shows none.
    pub fn read_only(mut self, read_only: bool) -> Dashboard {
        self.read_only = read_only;
        self
    }

    /// The token actions need when the operator gave none (print it for them), or `None`.
    pub fn generated_token(&self) -> Option<&str> {
        self.token.is_none().then_some(self.generated.as_str())
    }

    /// The dashboard's routes, with its guard and security headers. Prefer
    /// [`serve`](Self::serve). Served here without the peers' addresses
    /// (`into_make_service_with_connect_info::<SocketAddr>()`), a dashboard without a token
    /// refuses every request (it cannot tell that they come from this machine), and one with a
    /// token counts every failed login as one peer's: a guesser then makes everyone wait. The
    /// check that a loopback dashboard is addressed by a loopback name is `serve`'s (the
    /// router does not know where it listens).
    pub fn router(self) -> axum::Router {
        self.routes(false)
    }

    fn routes(self, loopback_bound: bool) -> axum::Router {
        let auth = auth::Auth::new(
            self.token.clone().unwrap_or_else(|| self.generated.clone()),
            self.token.is_some(),
            self.read_only,
            self.https,
            loopback_bound,
        );
        let https = self.https;
        let state = source::Source {
            records: self.records,
            queue: self.queue,
            auth: Arc::new(auth),
        };
        let routes = pages::routes()
            .merge(actions::routes())
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                guard::guard,
            ))
            .with_state(state);
        headers::secured(routes, https)
    }

    /// Serves the dashboard on `listener` until `shutdown` completes, with the `idem ui`
    /// command's rules: a listener on an address other hosts reach needs a token
    /// ([`check_bind`]), each request's peer address is known to the guard (and to the login
    /// limit), and on a loopback address every request must name a loopback `Host`, token or
    /// not, unless [`https`](Self::https) says a TLS proxy in front passes its public name on.
    ///
    /// ```no_run
    /// # async fn run(store: idem_store_postgres::PgStore) -> std::io::Result<()> {
    /// let dashboard = idem_ui::Dashboard::new(std::sync::Arc::new(store));
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:7780").await?;
    /// dashboard.serve(listener, std::future::pending()).await
    /// # }
    /// ```
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let addr = listener.local_addr()?;
        check_bind(addr, self.token.as_deref()).map_err(std::io::Error::other)?;
        // On loopback, only this machine's browser asks, by a loopback name; unless a TLS
        // proxy is in front (`https`), which passes the public name on.
        let loopback_bound = addr.ip().is_loopback() && !self.https;
        let app = self
            .routes(loopback_bound)
            .into_make_service_with_connect_info::<std::net::SocketAddr>();
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
    }
}
