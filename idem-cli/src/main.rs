//! `idem`: see the crate's documentation (`idem --help`).

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let status = idem_cli::run(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
    .await;
    std::process::exit(status);
}
