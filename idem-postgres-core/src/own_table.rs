//! Claim, then process, for a table of your own: rows claimed with `SKIP LOCKED` on a lease.
//!
//! ```sql
//! UPDATE emails
//! SET status = 'sending', claimed_at = now()
//! WHERE id IN (
//!   SELECT id FROM emails
//!   WHERE status = 'queued'
//!   ORDER BY id
//!   LIMIT 100
//!   FOR UPDATE SKIP LOCKED
//! )
//! RETURNING id, recipient;
//! ```
//!
//! Each row is marked claimed in the same statement that selects it, so two overlapping runs get
//! different rows and a re-run picks up only what is left. [`ClaimBatch`] writes that statement
//! for your table from validated names, with the picked ids as an array
//! (`WHERE id = ANY(ARRAY(SELECT ..))`, so that a generic plan still finds the rows by id) and
//! the limit as a one-row subquery (`LIMIT (SELECT $3::bigint)::bigint`): with the server's
//! `plan_cache_mode = auto`, as on a pool's connections, a limit the planner could read would
//! make every custom plan look cheaper than the generic one, and the server would plan every
//! claim anew, which for a statement this short costs about as much as running it:
//!
//! ```no_run
//! # use idem_postgres_core as idem_store_postgres;
//! use idem_store_postgres::own_table::ClaimBatch;
//! use idem_store_postgres::sqlx::{PgPool, Row};
//!
//! # async fn run(pool: PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! let claim = ClaimBatch::builder("emails")
//!     .status("status", "queued", "sending")
//!     .claimed_at("claimed_at")
//!     .returning(["id", "recipient"])
//!     .build()?;
//! for row in claim.claim(&pool, 100).await? {
//!     let (id, recipient): (i64, String) = (row.get("id"), row.get("recipient"));
//!     // send, then mark the row sent (or run it through #[idempotent] keyed by its id)
//! }
//! # Ok(()) }
//! ```

use idem_core::StoreError;
use sqlx::postgres::PgRow;
use sqlx::{Executor, Postgres};

use crate::ident::validate_ident;
use crate::unseen::unseen;

/// A prepared claim-then-process statement for one table; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct ClaimBatch {
    sql: String,
    queued: String,
    claimed: String,
}

/// Builds a [`ClaimBatch`]. Defaults: `id`, `status` from `queued` to `claimed`, returning `id`.
#[derive(Debug, Clone)]
pub struct ClaimBatchBuilder {
    schema: Option<String>,
    table: String,
    id: String,
    status: String,
    queued: String,
    claimed: String,
    claimed_at: Option<String>,
    returning: Vec<String>,
}

impl ClaimBatch {
    /// Starts a claim on `table` (in the search path; see [`ClaimBatchBuilder::schema`]).
    pub fn builder(table: impl Into<String>) -> ClaimBatchBuilder {
        ClaimBatchBuilder {
            schema: None,
            table: table.into(),
            id: "id".into(),
            status: "status".into(),
            queued: "queued".into(),
            claimed: "claimed".into(),
            claimed_at: None,
            returning: vec!["id".into()],
        }
    }

    /// The statement, for logging or review.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Claims up to `limit` rows in one statement and returns them (the `returning` columns).
    /// Rows another claimer holds are skipped, never waited for.
    pub async fn claim<'e, E>(&self, executor: E, limit: i64) -> Result<Vec<PgRow>, sqlx::Error>
    where
        E: Executor<'e, Database = Postgres>,
    {
        sqlx::query(&self.sql)
            .bind(&self.claimed)
            .bind(&self.queued)
            .bind(limit)
            .fetch_all(executor)
            .await
    }
}

impl ClaimBatchBuilder {
    /// The table's schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The key column the batch is ordered by (default `id`).
    pub fn id(mut self, column: impl Into<String>) -> Self {
        self.id = column.into();
        self
    }

    /// The status column, the value of rows waiting, and the value a claim sets.
    pub fn status(
        mut self,
        column: impl Into<String>,
        queued: impl Into<String>,
        claimed: impl Into<String>,
    ) -> Self {
        self.status = column.into();
        self.queued = queued.into();
        self.claimed = claimed.into();
        self
    }

    /// A timestamp column the claim sets to `now()`.
    pub fn claimed_at(mut self, column: impl Into<String>) -> Self {
        self.claimed_at = Some(column.into());
        self
    }

    /// The columns to return for each claimed row.
    pub fn returning<I, S>(mut self, columns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.returning = columns.into_iter().map(Into::into).collect();
        self
    }

    /// Checks every name (plain lowercase identifiers only) and writes the statement. The status
    /// values are bound as parameters, never spliced into the SQL.
    pub fn build(self) -> Result<ClaimBatch, StoreError> {
        if let Some(schema) = &self.schema {
            validate_ident("schema", schema)?;
        }
        validate_ident("table", &self.table)?;
        for column in [&self.id, &self.status]
            .into_iter()
            .chain(self.claimed_at.as_ref())
            .chain(&self.returning)
        {
            validate_ident("column", column)?;
        }
        if self.returning.is_empty() {
            return Err(StoreError::msg(
                "`returning` names no column; list at least one",
            ));
        }
        let table = match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{}\"", self.table),
            None => format!("\"{}\"", self.table),
        };
        let (id, status) = (&self.id, &self.status);
        let claimed_at = self
            .claimed_at
            .as_ref()
            .map(|c| format!(", \"{c}\" = now()"))
            .unwrap_or_default();
        let returning: Vec<String> = self.returning.iter().map(|c| format!("\"{c}\"")).collect();
        // The picked ids are an array (`= ANY(ARRAY(..))` rather than the usual `IN (..)`):
        // the subquery then runs once, and in a generic plan (`plan_cache_mode =
        // force_generic_plan`) the update still looks the rows up by id, where `IN (..)` with
        // `LIMIT $3` was planned as a hash join over a sequential scan of the table. The limit
        // is `unseen`, so that a pool's connection keeps that generic plan instead of planning
        // the statement at every execution.
        let sql = format!(
            "UPDATE {table} SET \"{status}\" = $1{claimed_at}
             WHERE \"{id}\" = ANY(ARRAY(
               SELECT \"{id}\" FROM {table} WHERE \"{status}\" = $2
               ORDER BY \"{id}\" LIMIT {} FOR UPDATE SKIP LOCKED
             ))
             RETURNING {}",
            unseen("$3", "bigint"),
            returning.join(", ")
        );
        Ok(ClaimBatch {
            sql,
            queued: self.queued,
            claimed: self.claimed,
        })
    }
}
