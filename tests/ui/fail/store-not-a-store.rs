#![allow(unused_variables)]

use idem_core::idempotent;

struct App {
    db: String,
}

#[idempotent(key = "job:{id}", store = app.db)]
async fn job(app: &App, id: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
