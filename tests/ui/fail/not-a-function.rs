#![allow(unused_variables)]

use idem_core::idempotent;

#[idempotent(key = "job", store = STORE)]
struct Job;

fn main() {}
