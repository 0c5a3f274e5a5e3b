//! Not public API. What `#[idempotent]` expands to, behind one path that can change with
//! idem-core's version without breaking generated code.

pub use crate::call::Call;
pub use crate::error::{CodecError, Error};
pub use crate::fingerprint::Fingerprint;
pub use crate::key::{InvalidKey, Key};
pub use crate::outcome::Outcome;
pub use crate::store::Store;
pub use core::result::Result;
pub use core::time::Duration;

/// Renders a key template's arguments into a validated key.
#[inline]
pub fn render_key(args: core::fmt::Arguments<'_>) -> Result<Key, InvalidKey> {
    match args.as_str() {
        Some(fixed) => Key::new(fixed),
        None => Key::new(std::fmt::format(args)),
    }
}

/// Views any kind of store (a concrete store, a reference, `&dyn Store`, `Arc<dyn Store>`,
/// `Box<dyn Store>`) as `&dyn Store`. A non-store expression fails here, with the error on it.
#[inline]
pub fn as_store<S: Store>(store: &S) -> &dyn Store {
    store
}
