//! How outputs are stored for duplicates: JSON (`replay`), nothing (the default), or a codec of
//! your own.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::CodecError;

/// Encodes a handler's `Ok` value for the store and decodes it for duplicates.
///
/// [`Call::run_with`](crate::Call::run_with) takes one. A crate that stores values of its own
/// shape supplies its own, for example raw bytes:
///
/// ```
/// use idem_core::{Call, Codec, CodecError, MemoryStore};
///
/// struct Bytes;
///
/// impl Codec<Vec<u8>> for Bytes {
///     fn encode(&self, value: &Vec<u8>) -> Result<Option<Vec<u8>>, CodecError> {
///         Ok(Some(value.clone()))
///     }
///     fn decode(&self, stored: Option<Vec<u8>>) -> Result<Option<Vec<u8>>, CodecError> {
///         Ok(stored)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStore::new();
/// let work = || async { Ok::<_, std::io::Error>(b"body".to_vec()) };
/// Call::new(&store, "k").run_with(Bytes, work()).await.unwrap();
/// let again = Call::new(&store, "k").run_with(Bytes, work()).await.unwrap();
/// assert_eq!(again.into_value().as_deref(), Some(&b"body"[..]));
/// # }
/// ```
pub trait Codec<T> {
    /// The bytes to store with the completion, if any.
    fn encode(&self, value: &T) -> Result<Option<Vec<u8>>, CodecError>;
    /// The value to hand a duplicate, if any.
    fn decode(&self, stored: Option<Vec<u8>>) -> Result<Option<T>, CodecError>;
}

impl<T, C: Codec<T> + ?Sized> Codec<T> for &C {
    fn encode(&self, value: &T) -> Result<Option<Vec<u8>>, CodecError> {
        (**self).encode(value)
    }
    fn decode(&self, stored: Option<Vec<u8>>) -> Result<Option<T>, CodecError> {
        (**self).decode(stored)
    }
}

/// No replay: nothing stored, duplicates carry no value.
#[derive(Debug, Clone, Copy)]
pub struct NoReplay;

impl<T> Codec<T> for NoReplay {
    fn encode(&self, _: &T) -> Result<Option<Vec<u8>>, CodecError> {
        Ok(None)
    }
    fn decode(&self, _: Option<Vec<u8>>) -> Result<Option<T>, CodecError> {
        Ok(None)
    }
}

/// Replay as JSON (`serde_json`), which round-trips `()`, `0`, `""`, `false`, `None` and empty
/// collections exactly; a value is stored even when it is "falsy".
#[derive(Debug, Clone, Copy)]
pub struct JsonReplay;

impl<T: Replayable> Codec<T> for JsonReplay {
    fn encode(&self, value: &T) -> Result<Option<Vec<u8>>, CodecError> {
        serde_json::to_vec(value)
            .map(Some)
            .map_err(|e| CodecError::new("cannot encode the handler's output for replay", e))
    }
    fn decode(&self, stored: Option<Vec<u8>>) -> Result<Option<T>, CodecError> {
        match stored {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                CodecError::new(
                    "cannot decode the replayed output (did the output type change since it was \
                     stored?)",
                    e,
                )
            }),
        }
    }
}

/// Output types that `replay` can store: anything `Serialize + DeserializeOwned`, as JSON.
///
/// JSON keeps `()`, `0`, `""`, `false`, `None` and empty collections apart from each other.
/// Two values do not survive it: `Some(None)` of an `Option<Option<T>>` comes back as `None`,
/// and non-finite floats (`NaN`, infinities) are stored as `null` and fail to decode.
#[diagnostic::on_unimplemented(
    message = "`replay` needs the handler's output `{Self}` to be serializable",
    label = "`{Self}` must implement `serde::Serialize` and `serde::de::DeserializeOwned`",
    note = "derive them with `#[derive(serde::Serialize, serde::Deserialize)]`, or remove `replay`"
)]
pub trait Replayable: Serialize + DeserializeOwned {}

#[diagnostic::do_not_recommend]
impl<T: Serialize + DeserializeOwned> Replayable for T {}
