//! Keyed clients: hand the idempotency key to every side-effect client, so the payment provider
//! or email API drops repeats too (as with the `Idempotency-Key` header payment APIs take).
//!
//! `#[idempotent(.., clients(payments, mailer))]` rebinds each named parameter, before the body
//! runs, to `client.keyed(key)`: the client's keyed view for this call. A client supports this
//! by implementing [`KeyedClient`]; [`Keyed`] is a ready-made view for clients that only need the
//! key at hand:
//!
//! ```
//! use idem_core::keyed::{Keyed, KeyedClient};
//! use idem_core::{idempotent, Key, MemoryStore};
//!
//! struct Payments;
//!
//! /// The keyed view: the client and the job's key.
//! struct KeyedPayments<'a>(Keyed<'a, Payments>);
//!
//! impl KeyedClient for Payments {
//!     type Keyed<'a> = KeyedPayments<'a>;
//!     fn keyed(&self, key: Key) -> KeyedPayments<'_> {
//!         KeyedPayments(Keyed::new(self, key))
//!     }
//! }
//!
//! impl KeyedPayments<'_> {
//!     /// A charge, sent with its own provider key: `<job key>/charge:<customer>`.
//!     async fn charge(&self, customer: &str) -> String {
//!         self.0.sub_key(&format!("charge:{customer}")).unwrap().into_string()
//!     }
//! }
//!
//! #[idempotent(key = "invoice-run:{period}", store = store, clients(payments))]
//! async fn invoice_run(
//!     store: &MemoryStore,
//!     period: &str,
//!     payments: &Payments,
//! ) -> Result<Vec<String>, std::io::Error> {
//!     // `payments` is a `KeyedPayments` here.
//!     Ok(vec![payments.charge("cust_42").await, payments.charge("cust_7").await])
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let sent = invoice_run(&MemoryStore::new(), "2026-11", &Payments).await.unwrap();
//! assert_eq!(
//!     sent.into_value().unwrap(),
//!     ["invoice-run:2026-11/charge:cust_42", "invoice-run:2026-11/charge:cust_7"]
//! );
//! # }
//! ```

use std::ops::Deref;

use crate::key::{InvalidKey, Key};

/// A client that can send an idempotency key with its requests.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot take an idempotency key",
    label = "`clients(..)` names a parameter whose type does not implement `KeyedClient`",
    note = "implement `idem_core::keyed::KeyedClient` for it (the `reqwest` feature does so for \
            `reqwest::Client`), or remove it from `clients(..)`"
)]
pub trait KeyedClient {
    /// The view of the client that knows the current call's key.
    type Keyed<'a>
    where
        Self: 'a;

    /// The keyed view for the call whose key is `key`.
    fn keyed(&self, key: Key) -> Self::Keyed<'_>;
}

/// A reference to a keyed client is one too, so `clients(..)` takes `client: &C` parameters.
#[diagnostic::do_not_recommend]
impl<C: KeyedClient + ?Sized> KeyedClient for &C {
    type Keyed<'a>
        = C::Keyed<'a>
    where
        Self: 'a;

    fn keyed(&self, key: Key) -> Self::Keyed<'_> {
        (**self).keyed(key)
    }
}

/// A client together with the current call's key. Derefs to the client.
#[derive(Debug, Clone)]
pub struct Keyed<'a, C: ?Sized> {
    client: &'a C,
    key: Key,
}

impl<'a, C: ?Sized> Keyed<'a, C> {
    /// Pairs `client` with `key`.
    pub fn new(client: &'a C, key: Key) -> Keyed<'a, C> {
        Keyed { client, key }
    }

    /// The call's key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// A named sub-key for one request: `<key>/<name>`. Stable across retries of the same work,
    /// different per effect, so two requests of one run never share a provider key.
    pub fn sub_key(&self, name: &str) -> Result<Key, InvalidKey> {
        Key::new(format!("{}/{name}", self.key))
    }

    /// The client itself.
    pub fn client(&self) -> &'a C {
        self.client
    }
}

impl<C: ?Sized> Deref for Keyed<'_, C> {
    type Target = C;
    fn deref(&self) -> &C {
        self.client
    }
}

#[cfg(feature = "reqwest")]
mod reqwest_client {
    use super::{Keyed, KeyedClient};
    use crate::key::Key;

    /// With the `reqwest` feature: requests made through the keyed view carry
    /// `Idempotency-Key: <job key>/<effect>`.
    impl KeyedClient for reqwest::Client {
        type Keyed<'a> = Keyed<'a, reqwest::Client>;
        fn keyed(&self, key: Key) -> Keyed<'_, reqwest::Client> {
            Keyed::new(self, key)
        }
    }

    impl Keyed<'_, reqwest::Client> {
        /// A request to `url` carrying `Idempotency-Key: <job key>/<effect>`, where `effect`
        /// names this request within the job (`charge:cust_42`).
        pub fn request(
            &self,
            method: reqwest::Method,
            url: impl reqwest::IntoUrl,
            effect: &str,
        ) -> reqwest::RequestBuilder {
            let builder = self.client().request(method, url);
            match self.sub_key(effect) {
                Ok(key) => builder.header("Idempotency-Key", key.as_str()),
                // An over-long key fails the request rather than sending it unkeyed.
                Err(e) => builder.header("Idempotency-Key", format!("invalid key: {e}\n")),
            }
        }

        /// `POST` with the effect's idempotency key; see [`request`](Self::request).
        pub fn post(&self, url: impl reqwest::IntoUrl, effect: &str) -> reqwest::RequestBuilder {
            self.request(reqwest::Method::POST, url, effect)
        }
    }
}
