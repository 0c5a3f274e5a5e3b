//! The queue's database layer: every statement the queue sends, with its parameters and the
//! decoding of its rows. Nothing outside this module writes SQL.

pub(crate) mod schedules;
pub(crate) mod statements;
