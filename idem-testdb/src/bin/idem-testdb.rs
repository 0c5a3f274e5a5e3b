//! `idem-testdb start DIR` creates and starts a throwaway cluster in DIR and prints its URL;
//! `idem-testdb stop DIR` stops it. Used by `scripts/test` when `DATABASE_URL` is unset.

use idem_testdb::Cluster;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [command, dir] if command == "start" => {
            Cluster::init(&PathBuf::from(dir)).and_then(|cluster| {
                cluster.start_again()?;
                println!("{}", cluster.url());
                Ok(())
            })
        }
        [command, dir] if command == "stop" => {
            Cluster::open(&PathBuf::from(dir)).and_then(|cluster| cluster.stop())
        }
        _ => {
            eprintln!("usage: idem-testdb start DIR | idem-testdb stop DIR");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idem-testdb: {e}");
            ExitCode::FAILURE
        }
    }
}
