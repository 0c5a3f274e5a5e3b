//! What every request passes before any page, asset or action: the refusals of requests a web
//! page elsewhere could make the operator's browser send, and, without a token of the
//! operator's, of anything but the operator's own machine asking directly.
//!
//! A dashboard on a loopback port is still reachable from every page its operator visits: an
//! `<img>`, a `fetch` or a self-submitting form on another site makes the browser send a request
//! with the operator's cookies. Browsers say where a request comes from (`Sec-Fetch-Site`, and
//! `Origin` on everything but simple GETs); those from another origin are refused on every
//! route, in every mode. Without a token, the peer must be a loopback address, the `Host` a
//! loopback name (a page that rebinds its own name to 127.0.0.1 names itself in `Host`), and
//! the request must not have come through a proxy (which would make every peer loopback):
//! proxies say so in their headers, or (nginx's default `proxy_pass`) speak HTTP/1.0, which no
//! browser does. A bare TCP forwarder (socat, `ssh -R`) leaves no trace: a dashboard reached
//! through one needs a token.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::source::Source;

/// Headers a proxy adds: a request carrying one did not come straight from this machine.
const FORWARDED: [&str; 6] = [
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    "via",
];

/// Who the guard lets through.
#[derive(Clone, Copy)]
pub(crate) struct Rules {
    /// The operator gave a token: pages need the login, so the peer may be anywhere.
    pub needs_login: bool,
    /// Served on a loopback address with no TLS proxy in front: requests must name a loopback
    /// `Host` even with a token (a page that rebinds its name to 127.0.0.1 could otherwise
    /// spend the login limit of the operator's own address).
    pub loopback_bound: bool,
}

/// Refuses the request before it reaches a route, or passes it on.
pub(crate) async fn guard(State(source): State<Source>, request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    let rules = Rules {
        needs_login: source.auth.view_needs_login,
        loopback_bound: source.auth.loopback_bound,
    };
    let http10 = request.version() < axum::http::Version::HTTP_11;
    if holds_nul(request.uri().query()) {
        // PostgreSQL takes no NUL in text: refused here, not as a store error in the log.
        return (
            StatusCode::BAD_REQUEST,
            "refused: a parameter holds a NUL character, which no key, scope or queue name has",
        )
            .into_response();
    }
    match refusal(request.headers(), http10, peer, rules) {
        Some((status, why)) => {
            tracing::warn!(
                peer = ?peer,
                path = request.uri().path(),
                "idem-ui: a request was refused: {why}"
            );
            (status, why).into_response()
        }
        None => next.run(request).await,
    }
}

/// Why a request is refused, if it is. `http10`: it came over HTTP/1.0, which no browser
/// speaks but nginx's `proxy_pass` does by default.
fn refusal(
    headers: &HeaderMap,
    http10: bool,
    peer: Option<SocketAddr>,
    rules: Rules,
) -> Option<(StatusCode, &'static str)> {
    if let Some(why) = cross_site(headers) {
        return Some((StatusCode::FORBIDDEN, why));
    }
    if rules.needs_login {
        return (rules.loopback_bound && !loopback_host(headers)).then_some((
            StatusCode::MISDIRECTED_REQUEST,
            "refused: the dashboard listens on a loopback address and answers only requests \
             addressed to localhost or a loopback address",
        ));
    }
    if http10
        || FORWARDED
            .iter()
            .any(|name| headers.contains_key(HeaderName::from_static(name)))
    {
        return Some((
            StatusCode::FORBIDDEN,
            "refused: this request came through a proxy; without a token the dashboard answers \
             only a browser on its own machine (give it a token to serve it behind a proxy)",
        ));
    }
    match peer {
        None => {
            return Some((
                StatusCode::FORBIDDEN,
                "refused: the dashboard was served without its peers' addresses, so without a \
                 token it cannot tell that a request comes from this machine (serve it with \
                 Dashboard::serve)",
            ))
        }
        Some(peer) if !peer.ip().is_loopback() => {
            return Some((
                StatusCode::FORBIDDEN,
                "refused: without a token the dashboard answers only requests from this machine",
            ))
        }
        Some(_) => {}
    }
    if !loopback_host(headers) {
        return Some((
            StatusCode::MISDIRECTED_REQUEST,
            "refused: without a token the dashboard answers only requests addressed to \
             localhost or a loopback address",
        ));
    }
    None
}

/// Whether a query string holds an encoded NUL (a raw one cannot be in a URI).
fn holds_nul(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.as_bytes()
            .windows(3)
            .any(|w| w.eq_ignore_ascii_case(b"%00"))
    })
}

/// Why a request that a page on another origin made the browser send is refused. Browsers
/// say where a request comes from in `Sec-Fetch-Site`; those too old to send it send `Origin`
/// on everything but simple GETs (the pages' `Referrer-Policy: same-origin` keeps it set on
/// the dashboard's own forms). Requests with neither (from `curl`, say) are not a page's and
/// pass.
fn cross_site(headers: &HeaderMap) -> Option<&'static str> {
    match headers.get("sec-fetch-site").map(|v| v.as_bytes()) {
        // The dashboard's own pages, or the operator typing its address.
        Some(b"same-origin") | Some(b"none") => return None,
        Some(_) => {
            return Some(
                "refused: a page on another site asked for this (the dashboard answers only \
                 its own pages and addresses typed into the browser)",
            )
        }
        None => {}
    }
    let origin = headers.get(ORIGIN)?;
    let host = headers.get(HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin.to_str().ok().and_then(|o| {
        o.strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"))
    });
    match (origin_host, host) {
        (Some(origin_host), Some(host)) if origin_host.eq_ignore_ascii_case(host) => None,
        _ => Some(
            "refused: a page on another origin sent this (its Origin is not the dashboard's; \
             behind a proxy, pass the original Host on)",
        ),
    }
}

/// The names a request may address the dashboard by when it is open without a token: its
/// loopback addresses only, so a page elsewhere cannot reach it through a name it rebinds to
/// 127.0.0.1 (DNS rebinding).
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn rules(needs_login: bool) -> Rules {
        Rules {
            needs_login,
            loopback_bound: false,
        }
    }

    const LOCAL: Option<SocketAddr> = Some(SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        50000,
    ));

    #[test]
    fn requests_from_other_sites_are_refused_in_every_mode() {
        for needs_login in [false, true] {
            for site in ["cross-site", "same-site"] {
                let h = headers(&[("host", "127.0.0.1:7780"), ("sec-fetch-site", site)]);
                assert!(
                    refusal(&h, false, LOCAL, rules(needs_login)).is_some(),
                    "{site}"
                );
            }
            for origin in ["http://evil.example", "null", "http://127.0.0.1:9999"] {
                let h = headers(&[("host", "127.0.0.1:7780"), ("origin", origin)]);
                assert!(
                    refusal(&h, false, LOCAL, rules(needs_login)).is_some(),
                    "{origin}"
                );
            }
            let own = headers(&[
                ("host", "127.0.0.1:7780"),
                ("origin", "http://127.0.0.1:7780"),
                ("sec-fetch-site", "same-origin"),
            ]);
            assert_eq!(refusal(&own, false, LOCAL, rules(needs_login)), None);
            let typed = headers(&[("host", "localhost:7780"), ("sec-fetch-site", "none")]);
            assert_eq!(refusal(&typed, false, LOCAL, rules(needs_login)), None);
        }
    }

    #[test]
    fn without_a_token_only_this_machine_asking_directly_is_answered() {
        let open = rules(false);
        let h = headers(&[("host", "127.0.0.1:7780")]);
        assert_eq!(refusal(&h, false, LOCAL, open), None);
        assert!(
            refusal(&h, true, LOCAL, open).is_some(),
            "HTTP/1.0: a proxy"
        );
        let remote = Some("10.0.0.5:40000".parse().unwrap());
        assert!(refusal(&h, false, remote, open).is_some());
        assert!(refusal(&h, false, None, open).is_some());
        assert_eq!(
            refusal(&h, false, remote, rules(true)),
            None,
            "a token guards it instead"
        );
        for proxy in FORWARDED {
            let h = headers(&[("host", "127.0.0.1:7780"), (proxy, "203.0.113.9")]);
            assert!(refusal(&h, false, LOCAL, open).is_some(), "{proxy}");
        }
        let rebound = headers(&[("host", "attacker.example:7780")]);
        assert_eq!(
            refusal(&rebound, false, LOCAL, open).map(|r| r.0),
            Some(StatusCode::MISDIRECTED_REQUEST)
        );
    }

    #[test]
    fn a_query_with_a_nul_is_refused() {
        assert!(holds_nul(Some("after_key=a%00b")));
        assert!(holds_nul(Some("prefix=%00")));
        assert!(!holds_nul(Some("prefix=a%2500")));
        assert!(!holds_nul(Some("after=100:job")));
        assert!(!holds_nul(None));
    }

    #[test]
    fn with_a_token_on_loopback_a_rebound_name_is_refused_too() {
        let rebound = headers(&[("host", "attacker.example:7780")]);
        let on_loopback = Rules {
            needs_login: true,
            loopback_bound: true,
        };
        assert!(refusal(&rebound, false, LOCAL, on_loopback).is_some());
        assert_eq!(refusal(&rebound, false, LOCAL, rules(true)), None);
        let own = headers(&[("host", "localhost:7780")]);
        assert_eq!(refusal(&own, false, LOCAL, on_loopback), None);
    }
}
