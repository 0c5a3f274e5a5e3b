//! The headers every response carries: the page runs no script and loads nothing from
//! elsewhere, cannot be framed, leaks no URL to another site (its own forms still carry their
//! `Origin`, which the guard checks on browsers that send no `Sec-Fetch-Site`), and is kept by
//! no cache.

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, STRICT_TRANSPORT_SECURITY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::HeaderValue;
use axum::Router;
use tower_http::set_header::SetResponseHeaderLayer;

/// The Content-Security-Policy: styles from the dashboard's own stylesheet, images inline
/// (the plots are SVG in the page), forms only to the dashboard, and no script at all.
pub(crate) const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
                              form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// With `https`, browsers are also told to reach the dashboard over HTTPS only from now on.
pub(crate) fn secured(router: Router, https: bool) -> Router {
    let router = if https {
        router.layer(SetResponseHeaderLayer::overriding(
            STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        ))
    } else {
        router
    };
    router
        .layer(SetResponseHeaderLayer::overriding(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        // Pages hold payloads, errors and form tokens: no cache keeps them.
        .layer(SetResponseHeaderLayer::overriding(
            CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
}
