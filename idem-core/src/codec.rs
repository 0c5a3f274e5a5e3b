//! How `replay` outputs are stored: JSON, or nothing.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::CodecError;

/// Encodes a handler's `Ok` value for the store and decodes it for duplicates.
pub trait Codec<T> {
    /// The bytes to store with the completion, if any.
    fn encode(&self, value: &T) -> Result<Option<Vec<u8>>, CodecError>;
    /// The value to hand a duplicate, if any.
    fn decode(&self, stored: Option<Vec<u8>>) -> Result<Option<T>, CodecError>;
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

impl<T: Serialize + DeserializeOwned> Replayable for T {}
