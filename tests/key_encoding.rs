//! Key rendering is injective: distinct parameter values always give distinct keys, so two
//! different units of work never share a record (issue: `a:{x}:{y}` rendered `x="1:2", y="3"`
//! and `x="1", y="2:3"` to the same key, and the second was a silent duplicate).

use idem_core::{context, idempotent, Error, InvalidKeyReason, MemoryStore, Outcome, MAX_KEY_LEN};
use proptest::prelude::*;

type Rendered = Result<String, ()>;

/// The key the call ran under, read inside the body.
fn current_key() -> Result<String, std::io::Error> {
    Ok(context::current()
        .expect("inside the call")
        .key()
        .as_str()
        .to_owned())
}

#[idempotent(key = "a:{x}:{y}", store = store)]
async fn colon(store: &MemoryStore, x: &str, y: &str) -> Result<String, std::io::Error> {
    current_key()
}

#[idempotent(key = "{x}-{y}", store = store)]
async fn dash(store: &MemoryStore, x: &str, y: &str) -> Result<String, std::io::Error> {
    current_key()
}

#[idempotent(key = "p/{x}::{y}/{z}", store = store)]
async fn three(store: &MemoryStore, x: &str, y: &str, z: &str) -> Result<String, std::io::Error> {
    current_key()
}

#[idempotent(key = "x{x}y{y}", store = store)]
async fn letters(store: &MemoryStore, x: &str, y: &str) -> Result<String, std::io::Error> {
    current_key()
}

#[idempotent(key = "reminder:{user}:{day}", store = store)]
async fn reminder(store: &MemoryStore, user: u64, day: &str) -> Result<String, std::io::Error> {
    current_key()
}

#[idempotent(key = "one:{x}", store = store)]
async fn single(store: &MemoryStore, x: &str) -> Result<String, std::io::Error> {
    current_key()
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// The rendered key, or `Err` when the key is invalid (control characters, too long): invalid
/// keys are refused, never rendered, so they cannot collide with anything.
fn rendered(outcome: Result<Outcome<String>, Error<std::io::Error>>) -> Rendered {
    match outcome {
        Ok(Outcome::Executed(key)) => Ok(key),
        Err(Error::InvalidKey(_)) => Err(()),
        other => panic!("a fresh store runs the body, got {other:?}"),
    }
}

fn render2(template: &str, x: &str, y: &str) -> Rendered {
    let store = MemoryStore::new();
    rendered(block_on(async {
        match template {
            "colon" => colon(&store, x, y).await,
            "dash" => dash(&store, x, y).await,
            "letters" => letters(&store, x, y).await,
            other => unreachable!("{other}"),
        }
    }))
}

/// Strings rich in separators, `%` and escape-like text, where collisions would show; and any
/// text at all.
fn value() -> impl Strategy<Value = String> {
    prop_oneof!["[a1:%3A/\\-xyD]{0,6}", any::<String>(),]
}

/// Reads the values back out of a key rendered from `prefix {v1} sep1 {v2} .. {vn} suffix`: each
/// value ends at the first character of the separator after it, and is then unescaped. That this
/// recovers every value is what makes rendering injective: distinct values, distinct keys.
fn decode(key: &str, prefix: &str, separators: &[&str], suffix: &str) -> Vec<String> {
    let mut rest = key.strip_prefix(prefix).expect("the prefix is kept");
    let mut values = Vec::new();
    for separator in separators {
        let end = rest
            .find(separator.chars().next().unwrap())
            .expect("the separator follows the value");
        values.push(unescape(&rest[..end]));
        rest = rest[end..]
            .strip_prefix(separator)
            .expect("the whole separator");
    }
    values.push(unescape(
        rest.strip_suffix(suffix).expect("the suffix is kept"),
    ));
    values
}

fn unescape(escaped: &str) -> String {
    let mut bytes = Vec::new();
    let mut rest = escaped.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'%' {
            let hex = std::str::from_utf8(&tail[..2]).expect("two hex digits");
            bytes.push(u8::from_str_radix(hex, 16).expect("hex"));
            rest = &tail[2..];
        } else {
            bytes.push(first);
            rest = tail;
        }
    }
    String::from_utf8(bytes).expect("escapes are whole UTF-8 characters")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn two_placeholder_templates_render_decodable_keys(x in value(), y in value()) {
        for (template, prefix, separator) in [("colon", "a:", ":"), ("dash", "", "-"), ("letters", "x", "y")] {
            if let Ok(key) = render2(template, &x, &y) {
                prop_assert_eq!(
                    decode(&key, prefix, &[separator], ""),
                    vec![x.clone(), y.clone()],
                    "template {} rendered {:?}", template, key
                );
            }
        }
    }

    #[test]
    fn three_placeholders_with_a_long_separator_render_decodable_keys(
        x in value(),
        y in value(),
        z in value(),
    ) {
        let store = MemoryStore::new();
        if let Ok(key) = rendered(block_on(three(&store, &x, &y, &z))) {
            prop_assert_eq!(decode(&key, "p/", &["::", "/"], ""), vec![x, y, z], "{}", key);
        }
    }

    /// The reported collision, generalised: moving a separator from one value into the next
    /// gives another key.
    #[test]
    fn moving_a_separator_between_values_changes_the_key(
        s1 in value(), s2 in value(), s3 in value(),
    ) {
        let a = render2("colon", &format!("{s1}:{s2}"), &s3);
        let b = render2("colon", &s1, &format!("{s2}:{s3}"));
        if let (Ok(a), Ok(b)) = (a, b) {
            prop_assert_ne!(a, b);
        }
    }

    /// With one placeholder nothing needs escaping: the value renders as it is.
    #[test]
    fn a_single_placeholder_renders_its_value_unchanged(x in "[^\\p{Cc}]{0,40}") {
        let store = MemoryStore::new();
        prop_assert_eq!(rendered(block_on(single(&store, &x))), Ok(format!("one:{x}")));
    }

    /// Integers and dates render unchanged in the usual `:`-separated template.
    #[test]
    fn common_values_render_unchanged(
        user in any::<u64>(),
        (y, m, d) in (1970u32..3000, 1u32..13, 1u32..29),
    ) {
        let day = format!("{y:04}-{m:02}-{d:02}");
        let store = MemoryStore::new();
        prop_assert_eq!(
            rendered(block_on(reminder(&store, user, &day))),
            Ok(format!("reminder:{user}:{day}"))
        );
    }
}

/// The reported case, and what its escaped keys look like.
#[test]
fn values_cannot_forge_a_separator() {
    let (first, second) = (render2("colon", "1:2", "3"), render2("colon", "1", "2:3"));
    assert_eq!(first.as_deref(), Ok("a:1%3A2:3"));
    assert_eq!(second.as_deref(), Ok("a:1:2%3A3"));
    // `%` itself is escaped, so an escape-like value is not confused with an escape.
    assert_eq!(render2("colon", "1%3A2", "3").as_deref(), Ok("a:1%253A2:3"));
}

/// The length limit applies to the rendered (escaped) key.
#[test]
fn the_length_limit_applies_to_the_rendered_key() {
    let x = ":".repeat(MAX_KEY_LEN / 3); // fits as written, three times as long escaped
    let store = MemoryStore::new();
    match block_on(colon(&store, &x, "y")) {
        Err(Error::InvalidKey(e)) => {
            assert!(matches!(e.reason(), InvalidKeyReason::TooLong { .. }))
        }
        other => panic!("an escaped key over the limit is refused, got {other:?}"),
    }
}
