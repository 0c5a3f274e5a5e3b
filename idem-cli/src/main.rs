//! `idem`: see the crate's documentation (`idem --help`).

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // What the queue and the scheduler log (retries, dead letters, missed ticks) goes to
    // stderr (the queue at `info`, the rest at `warn`, unless RUST_LOG says otherwise); stdout
    // stays the command's output.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,idem_queue=info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let status = idem_cli::run(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
    .await;
    std::process::exit(status);
}
