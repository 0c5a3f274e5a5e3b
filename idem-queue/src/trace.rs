//! Trace context from enqueue to run: the W3C `traceparent` of the span that enqueued a job
//! travels with it, and the span that runs it links to that span. Captured and linked through
//! `tracing-opentelemetry` with the `opentelemetry` feature; without it, a `traceparent` given
//! to [`NewJob::traceparent`](crate::NewJob::traceparent) still travels, for the handler to
//! read ([`Job::traceparent`](crate::Job::traceparent)).

/// The current span's `traceparent`, when it belongs to an OpenTelemetry trace.
#[cfg(feature = "opentelemetry")]
pub(crate) fn current() -> Option<String> {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut fields = std::collections::HashMap::new();
    opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .inject_context(&context, &mut fields);
    fields.remove("traceparent")
}

/// Without OpenTelemetry there is no current trace to capture.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn current() -> Option<String> {
    None
}

/// Links `span` (a job's) to the span `traceparent` names.
#[cfg(feature = "opentelemetry")]
pub(crate) fn link(span: &tracing::Span, traceparent: &str) {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let fields =
        std::collections::HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let context = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&fields);
    let linked = context.span().span_context().clone();
    if linked.is_valid() {
        span.add_link(linked);
    }
}

/// Without OpenTelemetry there is no span to link.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn link(_span: &tracing::Span, _traceparent: &str) {}

/// Whether `value` has the shape of a W3C `traceparent` (version 00): `00-`, 32 hex digits,
/// `-`, 16 hex digits, `-`, 2 hex digits.
pub(crate) fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    parts.len() == 4
        && parts[0] == "00"
        && [32, 16, 2]
            .iter()
            .zip(&parts[1..])
            .all(|(len, part)| part.len() == *len && part.bytes().all(|b| b.is_ascii_hexdigit()))
}
