//! Every call is one `tracing` span named `idem` that carries the key and the outcome.

use idem_core::{idempotent, MemoryStore};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// One span's id and fields.
type SpanFields = (u64, HashMap<String, String>);

/// Collects the fields of every `idem` span, in creation order.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<SpanFields>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() == "idem" {
            let mut fields = HashMap::new();
            attrs.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().push((id.into_u64(), fields));
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some((_, fields)) = spans.iter_mut().rev().find(|(i, _)| *i == id.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
}

#[idempotent(key = "traced:{id}", store = store)]
async fn traced(store: &MemoryStore, id: u32, fail: bool) -> Result<(), std::io::Error> {
    if fail {
        return Err(std::io::Error::other("boom"));
    }
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn each_call_is_one_span_with_key_and_outcome() {
    let spans = Spans::default();
    let _guard = tracing_subscriber::registry()
        .with(spans.clone())
        .set_default();
    let store = MemoryStore::new();
    let _ = traced(&store, 1, true).await;
    let _ = traced(&store, 1, false).await;
    let _ = traced(&store, 1, false).await;
    let seen = spans.0.lock().unwrap().clone();
    let outcomes: Vec<(&str, &str)> = seen
        .iter()
        .map(|(_, f)| (f["key"].as_str(), f["outcome"].as_str()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("traced:1", "handler_error"),
            ("traced:1", "executed"),
            ("traced:1", "duplicate")
        ]
    );
    assert!(seen[1].1["handler"].ends_with("tracing_spans::traced"));
    assert!(
        seen[1].1.contains_key("fence"),
        "the executed call records its fence"
    );
}
