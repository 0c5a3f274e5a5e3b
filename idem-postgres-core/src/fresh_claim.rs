//! A transactional call's claim of a fresh key in the round trip of its `BEGIN`, for a store
//! built with [`claim_with_begin`](crate::PgStoreBuilder::claim_with_begin).
//!
//! sqlx sends a statement only after the one before it has answered, so BEGIN and a claim
//! with parameters are two round trips. What it can send with the BEGIN is simple-protocol text
//! ([`sqlx::Connection::begin_with`]), whose rows it does not return. So the store sends
//! `BEGIN; EXECUTE ..(..)`: the claim is a statement each connection prepares once
//! ([`RecordsSql::claim_fresh_prepare`](crate::records::RecordsSql::claim_fresh_prepare), named
//! for the store's table), run with its values written as constants that no value can break
//! out of ([`text_literal`]). It answers by failing: it inserts the key's record, completed,
//! or fails when the key has one (or had one before scopes).
//!
//! - A claim that succeeded left the transaction open with the record written: the call's
//!   body runs at once, and the COMMIT completes the call. A fresh call is two round trips.
//! - A claim that failed left its transaction block failed: the store rolls it back and
//!   begins again in one round trip, and claims the key as usual. A duplicate then costs a
//!   round trip more than without this, and the server logs the failure (why it is opt-in);
//!   the store reads first above a quarter of duplicates (`duplicate_rate.rs`).
//! - On a connection that has not prepared the claim, it fails as not prepared; the store
//!   prepares it and claims again in the same round trip.
//!
//! The record's fence is not returned either, so the store takes fences from the sequence in
//! blocks ([`Fences`](crate::fences::Fences)), one round trip per [`FENCE_BLOCK`](crate::fences::FENCE_BLOCK) fresh calls.

use idem_core::{ClaimRequest, Fence, Fingerprint};
use sqlx::{Database, Postgres, TransactionManager};
use std::fmt::Write;
use std::time::Duration;

use crate::closing::ClosingTransaction;
use crate::error::is_connection_lost;
use crate::records::token_param;
use crate::store::PgStore;
use crate::time::duration_micros;
use crate::tx_conn::TxConn;

type Manager = <Postgres as Database>::TransactionManager;

/// `invalid_sql_statement_name`: the connection has not prepared the claim yet.
const NOT_PREPARED: &str = "26000";

/// The outcome of [`PgStore::claim_fresh`].
pub(crate) enum Fresh {
    /// The key was fresh: its record is written, completed, in the open transaction.
    Claimed(TxConn, Fence),
    /// The key has a record: a transaction is open, and the key is to be claimed in it.
    Open(TxConn),
}

/// The values of a fresh claim, in the order of the prepared statement's parameters.
pub(crate) struct FreshArgs<'a> {
    pub key: &'a str,
    pub scope: &'a str,
    pub fence: i64,
    pub fingerprint: Option<&'a str>,
    pub keep_us: i64,
    pub token: Option<i64>,
    pub holder: &'a str,
}

impl FreshArgs<'_> {
    /// The arguments of `EXECUTE`, as SQL constants (texts through [`text_literal`]).
    pub(crate) fn sql(&self) -> String {
        let null = || "NULL".to_owned();
        [
            text_literal(self.key),
            text_literal(self.scope),
            self.fence.to_string(),
            self.fingerprint.map_or_else(null, text_literal),
            self.keep_us.to_string(),
            self.token.map_or_else(null, |t| t.to_string()),
            text_literal(self.holder),
        ]
        .join(", ")
    }
}

#[cfg(any(test, feature = "testing"))]
impl<'a> FreshArgs<'a> {
    /// A claim of `key` in the default scope: fence 1, no fingerprint or token, kept 1 ms.
    pub(crate) fn example(key: &'a str) -> FreshArgs<'a> {
        FreshArgs {
            key,
            scope: "default",
            fence: 1,
            fingerprint: None,
            keep_us: 1000,
            token: None,
            holder: "holder",
        }
    }
}

/// `text` as an SQL string constant that no text can break out of: ASCII letters and digits
/// as they are, every other character as a Unicode escape (`E'\u0027'`, `E'\U0001f600'`),
/// which PostgreSQL converts to the server's encoding as it does a bound parameter. A
/// constant, unlike `convert_from(decode(..))` (a stable function, which the planner does not
/// fold: the check for a record from before scopes would then scan the whole table).
pub(crate) fn text_literal(text: &str) -> String {
    let mut literal = String::with_capacity(text.len() * 2 + 3);
    literal.push_str("E'");
    for c in text.chars() {
        let _ = match u32::from(c) {
            _ if c.is_ascii_alphanumeric() => write!(literal, "{c}"),
            code @ 0..=0xffff => write!(literal, "\\u{code:04x}"),
            code => write!(literal, "\\U{code:08x}"),
        };
    }
    literal.push('\'');
    literal
}

impl PgStore {
    /// Begins a transaction and claims `request`'s key in the same round trip when it is
    /// fresh; `None` when the store does not claim with the BEGIN
    /// ([`claim_with_begin`](crate::PgStoreBuilder::claim_with_begin)), or when the connection
    /// it took was found dead (the caller begins as usual, which replaces it). The transaction
    /// runs on a connection the store lends, else on one of the pool: the claim is prepared
    /// there too (by name, once per connection), so that the mode keeps its two round trips
    /// past the store's lendable connections.
    pub(crate) async fn claim_fresh(
        &self,
        request: &ClaimRequest<'_>,
        keep: Duration,
    ) -> Result<Option<Fresh>, sqlx::Error> {
        if !self.claims_with_begin() {
            return Ok(None);
        }
        let lent = match self.lender() {
            Some(lender) => lender.lend().await?,
            None => None,
        };
        let (mut conn, reused) = match lent {
            Some(lent) => {
                let reused = lent.reused();
                (TxConn::Lent(lent), reused)
            }
            None => {
                if let Some(direct) = self.lender() {
                    direct.hold_reserve().await?;
                }
                // The pool tested it as it handed it out.
                (
                    TxConn::Pooled(ClosingTransaction::on(self.pool().acquire().await?)),
                    false,
                )
            }
        };
        let sql = self.records();
        let fence = match self.fences().next(&sql.fence_block, conn.get()).await {
            Ok(fence) => fence,
            Err(e) if reused && is_connection_lost(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let args = FreshArgs {
            key: request.key.as_str(),
            scope: request.key.scope(),
            fence,
            fingerprint: request.fingerprint.map(Fingerprint::as_str),
            keep_us: duration_micros(keep),
            token: token_param(request.token),
            holder: idem_core::holder(),
        }
        .sql();
        let mut began = Manager::begin(conn.get(), Some(sql.claim_fresh(&args).into())).await;
        if matches!(&began, Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(NOT_PREPARED))
        {
            // The connection's first: prepare the statement (after ending the failed block;
            // a prepared statement outlives a rollback) and claim again, in one round trip.
            let first = format!(
                "ROLLBACK; {}; {}",
                sql.claim_fresh_prepare,
                sql.claim_fresh(&args)
            );
            began = Manager::begin(conn.get(), Some(first.into())).await;
        }
        match began {
            Ok(()) => Ok(Some(Fresh::Claimed(conn, Fence(fence.unsigned_abs())))),
            Err(sqlx::Error::Database(e)) => {
                tracing::trace!(error = %e, "not a fresh key; claiming it in a new transaction");
                // The failed statement left its transaction block open and failed: end it and
                // begin again, in one round trip.
                Manager::begin(conn.get(), Some("ROLLBACK; BEGIN".into())).await?;
                Ok(Some(Fresh::Open(conn)))
            }
            Err(e) if reused && is_connection_lost(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{text_literal, FreshArgs};

    /// A connection held from the pool goes back to it when its store is dropped and may serve
    /// another store next, with the first store's claim still prepared on it: the second
    /// store's claim names its own statement, so it fails as not prepared (and prepares its
    /// own) rather than writing into the first store's table.
    #[tokio::test]
    async fn a_store_never_executes_a_claim_another_store_prepared() {
        use crate::testing::TestStore;
        let a = TestStore::new("fresh_a", 4).await;
        let b = TestStore::new("fresh_b", 4).await;
        let (a, b) = (&a.store, &b.store);
        let mut conn = a.pool().acquire().await.unwrap();
        sqlx::raw_sql(&a.records().claim_fresh_prepare)
            .execute(&mut *conn)
            .await
            .unwrap();
        let args = FreshArgs::example("k").sql();
        let b_claim = b.records().claim_fresh(&args);
        let refused = sqlx::raw_sql(&b_claim).execute(&mut *conn).await;
        let code = match &refused {
            Err(sqlx::Error::Database(e)) => e.code().map(|c| c.into_owned()),
            other => panic!("store b ran store a's claim: {other:?}"),
        };
        assert_eq!(code.as_deref(), Some(super::NOT_PREPARED));
        sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.unwrap();
        // Store a's own claim, on the same connection, runs.
        sqlx::raw_sql(&a.records().claim_fresh(&args))
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.unwrap();
    }

    #[test]
    fn a_literal_is_letters_digits_and_escapes() {
        assert_eq!(text_literal("ab1"), "E'ab1'");
        assert_eq!(
            text_literal("o'\\;ü😀"),
            "E'o\\u0027\\u005c\\u003b\\u00fc\\U0001f600'"
        );
    }
}
