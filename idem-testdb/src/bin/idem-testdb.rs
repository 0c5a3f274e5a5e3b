//! `idem-testdb start DIR` creates and starts a throwaway cluster in DIR and prints its URL;
//! `idem-testdb stop DIR` stops it. Used by `scripts/test` when `DATABASE_URL` is unset.

use idem_testdb::Cluster;
use std::path::PathBuf;
use std::process::ExitCode;

/// Throwaway PostgreSQL clusters. Unknown commands exit with status 2 and the usage.
#[derive(Debug, clap::Parser)]
#[command(about = "Throwaway PostgreSQL clusters for idem's tests")]
enum Command {
    /// Create a cluster in DIR, start it, and print its URL.
    Start { dir: PathBuf },
    /// Stop the cluster in DIR.
    Stop { dir: PathBuf },
}

fn main() -> ExitCode {
    let result = match clap::Parser::parse() {
        Command::Start { dir } => Cluster::init(&dir).and_then(|cluster| {
            cluster.start_again()?;
            println!("{}", cluster.url());
            Ok(())
        }),
        Command::Stop { dir } => Cluster::open(&dir).and_then(|cluster| cluster.stop()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idem-testdb: {e}");
            ExitCode::FAILURE
        }
    }
}
