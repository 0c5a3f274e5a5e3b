//! The `#[idempotent]` attribute of idem. Use it through idem-core, which re-exports it as
//! `idem_core::idempotent` and holds the runtime it expands to: depend on idem-core, not on this
//! crate. idem-core's crate documentation is the guide to the attribute: every option it takes
//! with its default, keys and scopes, what a duplicate gets, and what a call does.
//!
//! ## What it expands to
//!
//! The function keeps its name, parameters, visibility and other attributes. Its return type
//! `Result<T, E>` becomes `Result<idem_core::Outcome<T>, idem_core::Error<E>>` (idem-core's
//! `Idempotent<T, E>`), and its body becomes one idem-core `Call`, roughly:
//!
//! ```text
//! #[idempotent(key = "reminder:{user_id}:{day}", store = app.store, lease = "2m")]
//! async fn send_reminder(app: &App, user_id: u64, day: &str) -> Result<(), MailError> { BODY }
//!
//! // becomes
//! async fn send_reminder(app: &App, user_id: u64, day: &str)
//!     -> Result<idem_core::Outcome<()>, idem_core::Error<MailError>>
//! {
//!     Call::new(&app.store, /* "reminder:{user_id}:{day}", each value escaped */)
//!         .name(concat!(module_path!(), "::send_reminder")) // the handler in spans and metrics
//!         .scope("send_reminder")                          // `scope = ..`, else the function's name
//!         .lease(Duration::from_millis(120_000))           // each duration option given
//!         .run(async { BODY })                             // runs only once the key is claimed
//!         .await
//! }
//! ```
//!
//! The other options change that call: `replay` stores the output as JSON (`run_replay`),
//! `detach` moves the body into a task of its own (`run_detached`), `transaction = tx` claims
//! in a transaction and binds `tx` in the body (`run_in_transaction`), `fingerprint(..)` hashes
//! the named parameters into the call's fingerprint, and `clients(..)` rebinds each named
//! parameter to its keyed view at the top of the body. The generated code reaches idem-core
//! through one hidden module whose name carries the version of the contract between the two
//! crates, so a macro and a runtime of different contracts fail to build instead of
//! miscompiling.
//!
//! A mistake in the attribute is a compile error on the token at fault, saying how to fix it;
//! the function is still emitted with the signature callers expect, so that one error is not
//! followed by another in every caller.
//!
//! This crate only parses and writes code: `attr` parses the arguments, `validate` checks them
//! against the function, `expand` writes the code.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod attr;
mod duration;
mod expand;
mod template;
mod validate;

use proc_macro::TokenStream;

/// Makes an async handler idempotent: its body runs once per key, and later deliveries of the
/// key are answered as duplicates.
///
/// ```text
/// #[idempotent(key = "reminder:{user_id}:{day}", store = app.store)]
/// async fn send_reminder(app: &App, user_id: u64, day: Date) -> Result<(), MailError> { .. }
/// ```
///
/// The options: `key` and `store` (required), `scope`, `lease`, `keep`, `wait`,
/// `fingerprint(..)`, `replay`, `detach`, `transaction`, `clients(..)` and `crate`; idem-core's
/// crate documentation describes each, with its default.
///
/// With `detach`, the call runs in a task of its own: a caller that goes away (a timeout, an
/// aborted task) does not stop the body, which runs to its end and is recorded once. The body
/// then outlives its caller, so the parameters are owned (references are refused, with an error
/// on the parameter):
///
/// ```text
/// #[idempotent(key = "reminder:{user_id}:{day}", store = app.store, detach)]
/// async fn send_reminder(app: Arc<App>, user_id: u64, day: Date) -> Result<(), MailError> { .. }
/// ```
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::idempotent(args.into(), item.into()).into()
}
