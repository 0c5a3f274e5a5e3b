//! Fences taken from the records' sequence in blocks, for claims whose statement cannot return
//! the fence it wrote (a fresh transactional claim sent with its `BEGIN`).

use sqlx::PgConnection;
use std::sync::Mutex;

/// How many fences one round trip takes from the sequence for fresh transactional claims.
pub(crate) const FENCE_BLOCK: i64 = 64;

/// Fences taken from the sequence and not yet used.
#[derive(Debug, Default)]
pub(crate) struct Fences(Mutex<Vec<i64>>);

impl Fences {
    /// A fence no other claim has, taking a block from the sequence on `conn` when none is left.
    pub(crate) async fn next(
        &self,
        sql: &str,
        conn: &mut PgConnection,
    ) -> Result<i64, sqlx::Error> {
        if let Some(fence) = self.lock().pop() {
            return Ok(fence);
        }
        let mut block: Vec<i64> = sqlx::query_scalar(sql).fetch_all(&mut *conn).await?;
        let fence = block
            .pop()
            .ok_or_else(|| sqlx::Error::Protocol("the sequence gave no fence".into()))?;
        self.lock().extend(block);
        Ok(fence)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<i64>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
