//! The `#[idempotent]` attribute. Use it through `idem-core`, which re-exports it and holds
//! the runtime it expands to; see that crate for the full documentation.
//!
//! This crate only forwards: `attr` parses the arguments, `validate` checks them against
//! the function, `expand` writes the code.

mod attr;
mod duration;
mod expand;
mod template;
mod validate;

use proc_macro::TokenStream;

/// Makes an async handler idempotent; see the `idem-core` crate documentation.
///
/// ```text
/// #[idempotent(key = "reminder:{user_id}:{day}", store = app.store)]
/// async fn send_reminder(app: &App, user_id: u64, day: Date) -> Result<(), MailError> { .. }
/// ```
///
/// With `detach`, the call runs in a task of its own: a caller that goes away (a timeout, an
/// aborted task) no longer stops the body, which runs to its end and is recorded once. The body
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
