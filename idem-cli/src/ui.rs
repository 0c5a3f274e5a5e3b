//! `idem ui`: the web dashboard over the store, until SIGTERM.

use crate::error::Failure;
use std::net::SocketAddr;
use std::sync::Arc;

use idem_core::Inspect;
use idem_ui::Dashboard;
use serde_json::{json, Map};

use crate::backend::Backend;
use crate::connect::Ctx;
use crate::output::{Out, FAILED, OK, REFUSED};
use crate::signal::shutdown_signal;

pub async fn run(
    ctx: &Ctx,
    out: &mut Out<'_>,
    addr: SocketAddr,
    token: Option<String>,
    read_only: bool,
    https: bool,
) -> Result<i32, Failure> {
    let token = token.filter(|t| !t.is_empty());
    if let Err(refusal) = idem_ui::check_bind(addr, token.as_deref()) {
        out.message(&refusal, Map::new());
        return Ok(REFUSED);
    }
    let records: Arc<dyn Inspect> = match &ctx.backend {
        Backend::Postgres { store, .. } => Arc::new(store.clone()),
        Backend::Sqlite { store, .. } => Arc::new(store.clone()),
        Backend::Redis { store } => Arc::new(store.clone()),
    };
    let mut dashboard = Dashboard::new(records).read_only(read_only).https(https);
    if let Some((_, store, _)) = ctx.backend.postgres() {
        dashboard = dashboard.queue(idem_queue::Queue::new(store));
    }
    if let Some(token) = token {
        dashboard = dashboard.token(token);
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            out.message(&format!("cannot listen on {addr}: {e}"), Map::new());
            return Ok(FAILED);
        }
    };
    let bound = listener.local_addr().unwrap_or(addr);
    let url = format!("http://{bound}/");
    let generated = dashboard.generated_token().map(str::to_owned);
    out.message(
        &format!("serving the dashboard of {} at {url}", ctx.backend.name()),
        Map::from_iter([("url".into(), json!(url))]),
    );
    if let Some(token) = &generated {
        // Printed, never put in a URL: the operator pastes it into the login form.
        out.message(
            &format!("actions need this token (log in with it): {token}"),
            Map::from_iter([("token".into(), json!(token))]),
        );
    }
    let _ = out.w.flush();
    dashboard.serve(listener, shutdown_signal()).await?;
    Ok(OK)
}
