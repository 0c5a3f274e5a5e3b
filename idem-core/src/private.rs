//! Not public API. What `#[idempotent]` expands to, behind one path that carries the version of
//! the contract between the macro and the runtime (`__private_v1`): an expansion written for
//! another contract fails to resolve instead of miscompiling.
//!
//! The expansion only builds a [`Call`] and hands it the body; every step of running it lives
//! in the runtime (`execute.rs`, `transactional.rs`), written once for the attribute
//! and for direct users of [`Call`].

use core::future::Future;

pub use crate::call::Call;
pub use crate::codec::{Codec, NoReplay};
pub use crate::error::{CodecError, Error};
pub use crate::fingerprint::Fingerprint;
pub use crate::key::{InvalidKey, Key};
pub use crate::keyed::KeyedClient;
pub use crate::outcome::Outcome;
pub use crate::store::Store;
pub use crate::transactional::{handoff, TransactionalStore, TxReceiver, TxSender};
pub use core::result::Result;
pub use core::time::Duration;

use crate::codec::{JsonReplay, Replayable};

/// The room a rendered key gets at once, so a usual key is written without growing its string.
/// `format!` sizes its string at twice the template's literal text, which a usual key such as
/// `reminder:{user_id}:{day}` (about 25 bytes from 10 literal ones) outgrows, so it would grow
/// once more on every call. The string lives only as long as the call.
const KEY_CAPACITY: usize = 64;

/// Renders a key template's arguments into a validated key.
#[inline]
pub fn render_key(args: core::fmt::Arguments<'_>) -> Result<Key, InvalidKey> {
    match args.as_str() {
        Some(fixed) => Key::new(fixed),
        None => {
            use core::fmt::Write;
            let mut key = String::with_capacity(KEY_CAPACITY);
            // As `format!` does: writing to a `String` fails only if a `Display` impl does.
            key.write_fmt(args)
                .expect("a formatting trait implementation returned an error");
            Key::new(key)
        }
    }
}

/// A placeholder's value, rendered with `Display` and escaped: each character of `reserved`
/// (the key template's separators, and `%`) is written as `%XX` for each of its UTF-8 bytes, so
/// a value cannot forge a separator and distinct values render distinct keys. Values without
/// reserved characters (integers, dates, UUIDs, words, for the usual `:` separators) are
/// written unchanged.
pub struct Escaped<'a, T: ?Sized>(pub &'a T, pub &'static str);

impl<T: core::fmt::Display + ?Sized> core::fmt::Display for Escaped<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use core::fmt::Write;
        struct Escaping<'w, 'f> {
            out: &'w mut core::fmt::Formatter<'f>,
            reserved: &'static str,
        }
        impl Write for Escaping<'_, '_> {
            fn write_str(&mut self, s: &str) -> core::fmt::Result {
                let mut rest = s;
                while let Some(at) = rest.find(|c| self.reserved.contains(c)) {
                    self.out.write_str(&rest[..at])?;
                    let c = rest[at..].chars().next().expect("found a character");
                    let mut bytes = [0u8; 4];
                    for byte in c.encode_utf8(&mut bytes).bytes() {
                        write!(self.out, "%{byte:02X}")?;
                    }
                    rest = &rest[at + c.len_utf8()..];
                }
                self.out.write_str(rest)
            }
        }
        write!(
            Escaping {
                out: f,
                reserved: self.1
            },
            "{}",
            self.0
        )
    }
}

/// Views any kind of store (a concrete store, a reference, `&dyn Store`, `Arc<dyn Store>`,
/// `Box<dyn Store>`) as `&dyn Store`. A non-store expression fails here, with the error on it.
#[inline]
pub fn as_store<S: Store>(store: &S) -> &dyn Store {
    store
}

/// Checks that a `transaction = ..` store supports transactions. A store that does not fails
/// here, with the error on the `store` expression.
#[inline]
pub fn as_transactional<S: TransactionalStore>(store: &S) -> &S {
    store
}

/// A call of the handler `name` with its rendered key, in `scope`.
#[inline]
pub fn call<'s, S: Store + ?Sized>(
    store: &'s S,
    key: Result<Key, InvalidKey>,
    name: &'static str,
    scope: &'static str,
) -> Call<'s, S> {
    Call::from_rendered(store, key).name(name).scope(scope)
}

/// Sets the fingerprint built from `fingerprint(..)`'s parameters, or the error building it.
#[inline]
pub fn with_fingerprint<'s, S: Store + ?Sized>(
    mut call: Call<'s, S>,
    fingerprint: Result<Fingerprint, CodecError>,
) -> Call<'s, S> {
    call.spec.fingerprint = fingerprint.map(Some);
    call
}

/// The codec of `replay`: the one place the expansion requires `T: Replayable`, so a
/// non-serializable output is one error, on `T`. (The return type carries no bound, so the
/// rest of the expansion adds no second error.)
#[inline]
pub fn replay_codec<T: Replayable>() -> &'static (dyn Codec<T> + Sync) {
    &JsonReplay
}

/// Lease mode: runs `work` if the call claims its key.
#[inline]
pub fn run<'s, S, T, E, C, F>(
    call: Call<'s, S>,
    codec: C,
    work: F,
) -> impl Future<Output = Result<Outcome<T>, Error<E>>> + use<'s, S, T, E, C, F>
where
    S: Store + ?Sized,
    C: Codec<T>,
    F: Future<Output = Result<T, E>>,
{
    call.run_with(codec, work)
}

/// Transactional mode: claims in a transaction, hands it to `body` through `sender`, then
/// commits or rolls back.
#[inline]
pub async fn run_in_transaction<S, T, E, C, B>(
    call: Call<'_, S>,
    codec: C,
    sender: TxSender<S::Transaction>,
    body: B,
) -> Result<Outcome<T>, Error<E>>
where
    S: TransactionalStore + ?Sized,
    C: Codec<T>,
    B: Future<Output = (S::Transaction, Result<T, E>)>,
{
    crate::transactional::execute_in_transaction(call.store, call.spec, codec, sender, body).await
}

/// `client`'s keyed view for the current call; a client that has none fails here, with the
/// error on its name in `clients(..)`.
pub fn keyed<C: KeyedClient>(client: &C) -> C::Keyed<'_> {
    client.keyed(current_key())
}

/// The current call's key, for rebinding `clients(..)` inside the body.
pub fn current_key() -> Key {
    crate::context::current()
        .map(|call| call.key().clone())
        .expect("`clients(..)` rebinding runs inside the claimed body")
}
