//! The boxed future type the store's steps and transactional work share.

use std::future::Future;
use std::pin::Pin;

/// A boxed, `Send` future borrowing for `'a`: what a [`Store`](crate::Store) step returns (as
/// `async-trait` boxes it), and what transactional work returns
/// ([`Call::run_in_transaction`](crate::Call::run_in_transaction)).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
