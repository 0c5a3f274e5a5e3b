//! Which part of an event is its idempotency key: a typed closure, or a JMESPath expression
//! (Powertools' `event_key_jmespath`, with its `powertools_json()` function).

use idem_core::Key;
use jmespath::functions::{ArgumentType, CustomFunction, Signature};
use jmespath::{Runtime, Variable};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::{Arc, LazyLock};

/// How a key is taken from an event of type `E`.
///
/// ```
/// use idem_lambda::EventKey;
/// use serde::Serialize;
///
/// #[derive(Serialize)]
/// struct Order { order_id: String }
///
/// // A typed closure:
/// let by_id = EventKey::from_fn(|order: &Order| order.order_id.clone());
/// assert_eq!(by_id.key_of(&Order { order_id: "o-1".into() }).unwrap().as_str(), "o-1");
///
/// // A JMESPath expression, as Powertools' `event_key_jmespath`:
/// let by_path = EventKey::<Order>::path("order_id").unwrap();
/// assert_eq!(by_path.key_of(&Order { order_id: "o-1".into() }).unwrap().as_str(), "o-1");
/// ```
pub struct EventKey<E> {
    pick: Arc<Pick<E>>,
}

/// What an [`EventKey`] runs on an event.
type Pick<E> = dyn Fn(&E) -> Result<Key, KeyError> + Send + Sync;

impl<E> Clone for EventKey<E> {
    fn clone(&self) -> Self {
        EventKey {
            pick: self.pick.clone(),
        }
    }
}

impl<E> fmt::Debug for EventKey<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventKey")
    }
}

/// Why an event has no key idem can use. The invocation fails: running it without a key would
/// make it run again on every delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The expression selects nothing (or `null`) in this event.
    Missing {
        /// The expression.
        path: String,
    },
    /// The expression could not be evaluated on this event.
    Search {
        /// The expression.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The closure returned a key idem refuses (empty, over
    /// [`MAX_KEY_LEN`](idem_core::MAX_KEY_LEN) bytes, or with
    /// control characters).
    Invalid {
        /// Why.
        reason: String,
    },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Missing { path } => write!(
                f,
                "the event has no idempotency key at `{path}`; it was not run (a delivery \
                 without a key would run again on every retry)"
            ),
            KeyError::Search { path, reason } => {
                write!(
                    f,
                    "the idempotency key expression `{path}` failed on the event: {reason}"
                )
            }
            KeyError::Invalid { reason } => {
                write!(f, "the event's idempotency key is invalid: {reason}")
            }
        }
    }
}

impl std::error::Error for KeyError {}

/// An expression that cannot be compiled.
#[derive(Debug, Clone)]
pub struct InvalidPath(String);

impl fmt::Display for InvalidPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidPath {}

/// JMESPath's built-in functions and Powertools' `powertools_json(text)`, which parses a JSON
/// string (an SQS body, an API Gateway body) so the expression can look inside it.
static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    let mut runtime = Runtime::new();
    runtime.register_builtin_functions();
    runtime.register_function(
        "powertools_json",
        Box::new(CustomFunction::new(
            Signature::new(vec![ArgumentType::String], None),
            Box::new(|args, _| {
                let text = args[0].as_string().cloned().unwrap_or_default();
                let parsed = Variable::from_json(&text).unwrap_or(Variable::Null);
                Ok(Arc::new(parsed))
            }),
        )),
    );
    runtime
});

/// Whether a selected value names no key: `null`, an empty string, or a list or object that is
/// empty or holds only `null`s (Powertools' rule). Hashed, each of these would be one constant
/// key, and every event without its key a duplicate of the first.
fn is_missing(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Null => true,
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.iter().all(Value::is_null),
        Value::Object(fields) => fields.values().all(Value::is_null),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

/// The key a selected value names: a string as it is (when idem accepts it as a key), anything
/// else (a number, an object of several fields) by the SHA-256 of its JSON with sorted keys, as
/// Powertools hashes what its expression selects.
fn key_of_value(value: &serde_json::Value) -> Result<Key, KeyError> {
    if let serde_json::Value::String(text) = value {
        if let Ok(key) = Key::new(text.as_str()) {
            return Ok(key);
        }
    }
    let canonical = serde_json::to_string(value).map_err(|e| KeyError::Invalid {
        reason: e.to_string(),
    })?;
    let digest = Sha256::digest(canonical.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Key::new(format!("sha256:{hex}")).map_err(|e| KeyError::Invalid {
        reason: e.to_string(),
    })
}

impl<E> EventKey<E> {
    /// The key the closure returns.
    pub fn from_fn<K, F>(pick: F) -> EventKey<E>
    where
        F: Fn(&E) -> K + Send + Sync + 'static,
        K: Into<String>,
    {
        EventKey {
            pick: Arc::new(move |event| {
                Key::new(pick(event).into()).map_err(|e| KeyError::Invalid {
                    reason: e.to_string(),
                })
            }),
        }
    }

    /// The key a JMESPath expression selects in the event, as JSON: a string as it is,
    /// anything else hashed (see the crate's guide). `powertools_json(body)` parses a JSON
    /// string, as in Powertools. Nothing selected is an error: the invocation fails.
    pub fn path(expression: &str) -> Result<EventKey<E>, InvalidPath>
    where
        E: Serialize,
    {
        let compiled = RUNTIME
            .compile(expression)
            .map_err(|e| InvalidPath(format!("invalid key expression `{expression}`: {e}")))?;
        let path = expression.to_owned();
        Ok(EventKey {
            pick: Arc::new(move |event| {
                let search = |reason: String| KeyError::Search {
                    path: path.clone(),
                    reason,
                };
                let json = serde_json::to_value(event).map_err(|e| search(e.to_string()))?;
                let found = compiled.search(json).map_err(|e| search(e.to_string()))?;
                let value = serde_json::to_value(&*found).map_err(|e| search(e.to_string()))?;
                if is_missing(&value) {
                    return Err(KeyError::Missing { path: path.clone() });
                }
                key_of_value(&value)
            }),
        })
    }

    /// The key of `event`.
    pub fn key_of(&self, event: &E) -> Result<Key, KeyError> {
        (self.pick)(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_path_reads_inside_a_json_body_as_powertools_json_does() {
        let key = EventKey::<serde_json::Value>::path("powertools_json(body).order_id").unwrap();
        let event = json!({"body": "{\"order_id\": \"o-7\", \"total\": 3}"});
        assert_eq!(key.key_of(&event).unwrap().as_str(), "o-7");
    }

    #[test]
    fn an_object_of_several_fields_is_one_key_whatever_their_order() {
        let key = EventKey::<serde_json::Value>::path("payment").unwrap();
        let a = key
            .key_of(&json!({"payment": {"user": 1, "order": "x"}}))
            .unwrap();
        let b = key
            .key_of(&json!({"payment": {"order": "x", "user": 1}}))
            .unwrap();
        assert_eq!(a, b);
        assert!(a.as_str().starts_with("sha256:"));
        let other = key
            .key_of(&json!({"payment": {"user": 2, "order": "x"}}))
            .unwrap();
        assert_ne!(a, other);
    }

    #[test]
    fn empty_and_all_null_selections_are_missing_not_one_shared_key() {
        let pair = EventKey::<serde_json::Value>::path("[user, order]").unwrap();
        assert!(matches!(
            pair.key_of(&json!({"other": 1})),
            Err(KeyError::Missing { .. })
        ));
        let id = EventKey::<serde_json::Value>::path("id").unwrap();
        for empty in [
            json!(""),
            json!([]),
            json!({}),
            json!([null]),
            json!({"a": null}),
        ] {
            assert!(
                matches!(
                    id.key_of(&json!({"id": empty})),
                    Err(KeyError::Missing { .. })
                ),
                "{empty} names no key"
            );
        }
    }

    #[test]
    fn an_event_without_its_key_is_refused() {
        let key = EventKey::<serde_json::Value>::path("order_id").unwrap();
        assert_eq!(
            key.key_of(&json!({"other": 1})),
            Err(KeyError::Missing {
                path: "order_id".into()
            })
        );
        assert!(EventKey::<serde_json::Value>::path("[").is_err());
    }
}
