//! The queue's database layer: every statement the queue sends, each with its parameters and
//! the decoding of its rows, as typed calls (River's `riverdriver` is the model). Nothing
//! outside this module writes SQL or binds a parameter.
//!
//! The statements are written once per [`Queue`](crate::Queue) from its store's validated
//! names, split by concern: `enqueue.rs` storing jobs, `claim.rs` claiming them (and the parts
//! every claiming statement is built of), `complete.rs` completing their calls (and claiming
//! the next jobs in the same statement) and renewing them, `settle.rs` every other end of a
//! claim, `admin.rs` and `browse.rs` what operators read and do, `schedules.rs` the schedules'
//! table. `fragments.rs` is what they share. Where a statement touches a job's idempotency
//! record, it goes through the store's records interface
//! ([`RecordsSql`](idem_postgres_core::extend::RecordsSql)) rather than spelling the records
//! SQL again.

pub(crate) mod admin;
pub(crate) mod browse;
pub(crate) mod claim;
pub(crate) mod complete;
pub(crate) mod enqueue;
pub(crate) mod fragments;
pub(crate) mod schedules;
pub(crate) mod settle;

use idem_store_postgres::PgStore;

use admin::AdminSql;
use browse::BrowseSql;
use claim::{ClaimSql, Claiming};
use complete::CompleteSql;
use enqueue::EnqueueSql;
use fragments::Table;
use schedules::ScheduleSql;
use settle::SettleSql;

/// Every statement of one queue, by concern.
#[derive(Debug)]
pub struct QueueSql {
    /// `schema.table`: the queue's name in notifications, locks and metrics.
    pub name: String,
    /// Storing jobs.
    pub enqueue: EnqueueSql,
    /// Claiming jobs.
    pub claim: ClaimSql,
    /// Completing and renewing jobs' calls.
    pub complete: CompleteSql,
    /// Every other end of a claim.
    pub settle: SettleSql,
    /// What operators read and do to single jobs.
    pub admin: AdminSql,
    /// What dashboards page through.
    pub browse: BrowseSql,
    /// The schedules' table.
    pub schedules: ScheduleSql,
}

impl QueueSql {
    /// The statements of `store`'s queue.
    pub(crate) fn new(store: &PgStore) -> QueueSql {
        let table = Table::new(store);
        let claiming = Claiming::new(&table);
        let (schema, name) = store.names();
        QueueSql {
            enqueue: EnqueueSql::new(&table),
            claim: ClaimSql::new(&table, &claiming),
            complete: CompleteSql::new(&table, &claiming),
            settle: SettleSql::new(&table),
            admin: AdminSql::new(&table),
            browse: BrowseSql::new(&table),
            schedules: ScheduleSql::new(schema, name),
            name: table.name,
        }
    }

    /// Every statement on the queue's table, by name: what the plan tests read.
    #[cfg(feature = "testing")]
    pub fn named(&self) -> Vec<(&'static str, &str)> {
        [
            self.enqueue.named(),
            self.claim.named(),
            self.complete.named(),
            self.settle.named(),
            self.admin.named(),
            self.browse.named(),
        ]
        .concat()
    }
}
