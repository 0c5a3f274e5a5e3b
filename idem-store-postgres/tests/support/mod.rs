//! Test support for PostgreSQL tests: a real server from `DATABASE_URL`, and a fresh schema per
//! test so tests run in parallel without seeing each other's keys (from `idem-testdb`, which
//! builds every test store).

#![allow(dead_code, unused_imports)]

pub mod wire;

pub use idem_testdb::{database_url, pool, unique_schema, TestStore};
