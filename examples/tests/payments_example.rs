//! `examples/payments.rs` as processes: the demo prints what the README says, and a job killed
//! with SIGKILL after two charges and run again charges every customer once and sends one
//! receipt. (`cargo test` builds the example; this test runs its binary.)

mod example_process;

use example_process::{example_binary, read_until};
use std::io::BufReader;
use std::process::{Child, ChildStdout, Command, Stdio};

fn spawn(args: &[&str]) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(example_binary("payments"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run the payments example");
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

#[test]
fn the_demo_charges_each_customer_once() {
    let output = Command::new(example_binary("payments")).output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(r#"provider: {"charge_requests":5,"charges":3,"receipts":1}"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_job_killed_mid_run_and_run_again_charges_once() {
    let url = idem_store_postgres::testing::database_url();
    let schema = format!("idem_t_payments_{}", std::process::id());
    let (mut provider, mut provider_out) = spawn(&["provider"]);
    let base = read_until(&mut provider_out, "PROVIDER ")
        .trim_start_matches("PROVIDER ")
        .to_owned();
    let job_args = |pause: bool| {
        let mut args = vec![
            "job".to_owned(),
            "--provider".to_owned(),
            base.clone(),
            "--database-url".to_owned(),
            url.clone(),
            "--schema".to_owned(),
            schema.clone(),
        ];
        if pause {
            args.extend(["--pause-after".to_owned(), "2".to_owned()]);
        }
        args
    };

    // Run 1: killed with SIGKILL right after its second charge.
    let args = job_args(true);
    let (mut first, mut first_out) = spawn(&args.iter().map(String::as_str).collect::<Vec<_>>());
    read_until(&mut first_out, "PAUSED");
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();

    // Run 2: waits out the dead run's lease, takes the key over, finishes.
    let args = job_args(false);
    let (mut second, mut second_out) = spawn(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let done = read_until(&mut second_out, "DONE");
    assert_eq!(done, "DONE executed");
    assert!(second.wait().unwrap().success());

    let text = reqwest::get(format!("{base}/stats"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let stats: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(stats["charges"], 3, "each customer charged once: {stats}");
    assert_eq!(
        stats["charge_requests"], 5,
        "the retry re-sent 2 charges with their keys: {stats}"
    );
    assert_eq!(stats["receipts"], 1, "one receipt: {stats}");

    provider.kill().unwrap();
    provider.wait().unwrap();
    let pool = idem_store_postgres::sqlx::PgPool::connect(&url)
        .await
        .unwrap();
    let _ =
        idem_store_postgres::sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .execute(&pool)
            .await;
}
