//! Placeholders need text between them (or two value pairs would render one key), and that
//! text may not start with `%` (the escape character of values).
#![allow(unused_variables)]

use idem_core::{idempotent, MemoryStore};

#[idempotent(key = "job:{a}{b}", store = store)]
async fn adjacent(store: &MemoryStore, a: u32, b: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[idempotent(key = "job:{a}%{b}", store = store)]
async fn percent(store: &MemoryStore, a: u32, b: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
