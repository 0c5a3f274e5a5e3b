//! The fault campaign: runs idem's workloads in worker processes while it injects network
//! faults, server restarts, SIGKILL and SIGSTOP, then prints what the faults hit and what the
//! work did, from a ledger of its own. Exits non-zero when the promise broke (a repeat after
//! completion, a lost or held key, in-flight repeats past their bound) or a kind of fault never
//! hit anything. Not part of idem's API.
//!
//! ```text
//! idem-faults run [--seconds 60] [--seed 1] [--processes 2] [--tasks 4] [--dir DIR]
//! idem-faults worker WORKLOAD --url URL --ledger FILE ..   (started by `run`)
//! ```

use clap::{Parser, Subcommand};
use idem_process_tests::faults::{campaign, worker};

#[derive(Debug, Parser)]
#[command(about = "idem's fault campaign")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the campaign and prints its report.
    Run(campaign::RunArgs),
    /// A worker process of the campaign.
    Worker(worker::WorkerArgs),
}

#[tokio::main]
async fn main() {
    match Args::parse().command {
        Command::Run(args) => {
            if !campaign::run(args).await {
                std::process::exit(1);
            }
        }
        Command::Worker(args) => worker::run(args).await,
    }
}
