//! `examples/metrics.rs` as a process: deliveries are counted by outcome on `/metrics`, in
//! Prometheus' text format.

mod example_process;

use example_process::{example_binary, read_until};
use std::io::BufReader;
use std::process::{Command, Stdio};

#[tokio::test]
async fn deliveries_are_counted_by_outcome_on_the_metrics_endpoint() {
    let mut child = Command::new(example_binary("metrics"))
        .args(["--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let base = read_until(&mut out, "LISTENING ")
        .trim_start_matches("LISTENING ")
        .to_owned();
    let client = reqwest::Client::new();
    for _ in 0..3 {
        client
            .post(format!("{base}/welcome/42"))
            .send()
            .await
            .unwrap();
    }
    client
        .post(format!("{base}/welcome/7"))
        .send()
        .await
        .unwrap();
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        text.contains(r#"idem_calls_total{handler="metrics::send_welcome",outcome="executed"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"idem_calls_total{handler="metrics::send_welcome",outcome="duplicate"} 2"#),
        "{text}"
    );
    assert!(text.contains("idem_claim_seconds"), "{text}");
}
