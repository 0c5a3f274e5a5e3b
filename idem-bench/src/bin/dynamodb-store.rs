//! `DynamoDbStore` side by side with Powertools for AWS Lambda (Python) on the same local
//! DynamoDB server, in one run:
//! `cargo run --release -p idem-bench --bin dynamodb-store -- [--calls 2000] [--python PATH]`
//! (`--python`: a Python with `moto[server]`, `waitress`, `aws-lambda-powertools` and `boto3`, such as the
//! one `scripts/test` makes under the target directory; without `DYNAMODB_URL` the local server
//! is started from it).
//!
//! Both clients talk to the server through a proxy (a process of its own) that counts the
//! requests that reach the server, so requests per call are counted where they hit, the same
//! way for both. The server (moto, one request at a time) bounds calls per second; the figures
//! per call are the point: requests, and the client's CPU time.

use idem_core::{Call, Outcome};
use idem_store_dynamodb::testing::local_client;
use idem_store_dynamodb::{create_table, DynamoDbStore, TableLayout};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// DynamoDbStore against Powertools (Python). Unknown flags exit with status 2.
#[derive(Debug, clap::Parser)]
struct Args {
    /// Calls per row.
    #[arg(long, default_value_t = 2_000)]
    calls: u64,
    /// The Python with moto, Powertools and boto3 (default: `IDEM_PYTHON`, else `python3`).
    #[arg(long)]
    python: Option<String>,
    /// Internal: run as the counting proxy in front of this server.
    #[arg(long, hide = true)]
    proxy_to: Option<String>,
}

/// The header every DynamoDB request carries once (`X-Amz-Target: DynamoDB_20120810.PutItem`).
const TARGET: &[u8] = b"x-amz-target:";

/// The counting proxy: forwards every connection to `upstream`, counts the requests the
/// clients send (by their `X-Amz-Target` header), prints its port, then the count once for
/// every line read on standard input.
async fn proxy(upstream: String) {
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap().port());
    let count = Arc::new(AtomicU64::new(0));
    let reported = count.clone();
    std::thread::spawn(move || {
        for _ in std::io::stdin().lines() {
            println!("{}", reported.load(Ordering::SeqCst));
        }
        std::process::exit(0);
    });
    loop {
        let (client, _) = listener.accept().await.unwrap();
        let (upstream, count) = (upstream.clone(), count.clone());
        tokio::spawn(async move {
            let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let up = async move {
                let mut buffer = vec![0u8; 64 * 1024];
                // The last bytes of the previous read, so a header split between reads counts.
                let mut tail: Vec<u8> = Vec::new();
                loop {
                    let n = match client_read.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let mut window = std::mem::take(&mut tail);
                    let carried = window.len();
                    window.extend_from_slice(&buffer[..n]);
                    let lower = window.to_ascii_lowercase();
                    let found = lower
                        .windows(TARGET.len())
                        .enumerate()
                        .filter(|(at, w)| *w == TARGET && at + TARGET.len() > carried)
                        .count();
                    count.fetch_add(found as u64, Ordering::SeqCst);
                    tail = window[window.len().saturating_sub(TARGET.len() - 1)..].to_vec();
                    if server_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
            };
            let down = async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            };
            tokio::join!(up, down);
        });
    }
}

struct Proxy {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    url: String,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--proxy-to", upstream])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the counting proxy");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut port = String::new();
        stdout.read_line(&mut port).unwrap();
        Proxy {
            child,
            stdin,
            stdout,
            url: format!("http://127.0.0.1:{}", port.trim()),
        }
    }

    /// Requests counted so far.
    fn count(&mut self) -> u64 {
        writeln!(self.stdin).unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().parse().unwrap()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One row's figures.
struct Row {
    rate: f64,
    requests: f64,
    cpu_us: f64,
}

/// `calls` sequential idem calls (distinct keys, or one key done before).
async fn idem_row(store: &DynamoDbStore, proxy: &mut Proxy, calls: u64, fresh: bool) -> Row {
    let prefix = format!("idem-{}-{fresh}", std::process::id());
    let call = |i: u64| {
        let key = format!("{prefix}:{}", if fresh { i } else { 0 });
        async move {
            Call::new(store, key.clone())
                .run_replay(async { Ok::<_, std::io::Error>(json!({ "sent": key })) })
                .await
                .expect("call")
        }
    };
    if !fresh {
        assert!(
            call(0).await.is_executed(),
            "the duplicated key is done first"
        );
    }
    let before = proxy.count();
    let (cpu, started) = (idem_bench::cpu::client_seconds().0, Instant::now());
    let mut executed = 0;
    for i in 0..calls {
        if let Outcome::Executed(_) = call(i).await {
            executed += 1;
        }
    }
    let (seconds, cpu) = (
        started.elapsed().as_secs_f64(),
        idem_bench::cpu::client_seconds().0 - cpu,
    );
    assert_eq!(
        executed,
        if fresh { calls } else { 0 },
        "each body ran once"
    );
    Row {
        rate: calls as f64 / seconds,
        requests: (proxy.count() - before) as f64 / calls as f64,
        cpu_us: cpu * 1e6 / calls as f64,
    }
}

/// The SDK's own floor: `calls` sequential conditional `PutItem`s refused with the old item
/// returned, the one request a duplicate makes, with no idem around them.
async fn sdk_row(store: &DynamoDbStore, proxy: &mut Proxy, calls: u64) -> Row {
    use idem_store_dynamodb::aws_sdk_dynamodb::types::{
        AttributeValue, ReturnValuesOnConditionCheckFailure,
    };
    let put = || {
        store
            .client()
            .put_item()
            .table_name(store.table())
            .item("id", AttributeValue::S("sdk-floor".into()))
            .item("status", AttributeValue::S("COMPLETED".into()))
            .item("data", AttributeValue::S("{\"sent\":\"sdk-floor\"}".into()))
            .condition_expression("attribute_not_exists(#id)")
            .expression_attribute_names("#id", "id")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
    };
    let _ = put().await;
    let before = proxy.count();
    let (cpu, started) = (idem_bench::cpu::client_seconds().0, Instant::now());
    for _ in 0..calls {
        assert!(put().await.is_err(), "the put is refused: the item exists");
    }
    let (seconds, cpu) = (
        started.elapsed().as_secs_f64(),
        idem_bench::cpu::client_seconds().0 - cpu,
    );
    Row {
        rate: calls as f64 / seconds,
        requests: (proxy.count() - before) as f64 / calls as f64,
        cpu_us: cpu * 1e6 / calls as f64,
    }
}

fn python_row(python: &str, proxy: &mut Proxy, table: &str, calls: u64, fresh: bool) -> Row {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/powertools/bench_dynamodb.py");
    let prefix = format!("pt-{}-{fresh}", std::process::id());
    let url = proxy.url.clone();
    let run = |mode: &str, calls: u64| -> Value {
        let out = Command::new(python)
            .args([script, &url, table, mode, &calls.to_string(), &prefix])
            .output()
            .expect("run Python");
        assert!(
            out.status.success(),
            "bench_dynamodb.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("its JSON line")
    };
    if !fresh {
        run("warm", 1);
    }
    let before = proxy.count();
    let measured = run(if fresh { "fresh" } else { "duplicates" }, calls);
    let requests = (proxy.count() - before) as f64 / calls as f64;
    Row {
        rate: calls as f64 / measured["seconds"].as_f64().unwrap(),
        requests,
        cpu_us: measured["cpu_seconds"].as_f64().unwrap() * 1e6 / calls as f64,
    }
}

fn main() {
    let args: Args = clap::Parser::parse();
    if let Some(upstream) = args.proxy_to {
        return tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(proxy(upstream));
    }
    // One thread, as a Lambda function's sequential invocations use it (and as Powertools runs):
    // a multi-threaded runtime would add its threads' wake-ups to every call's CPU time.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let python = args
        .python
        .or_else(|| std::env::var("IDEM_PYTHON").ok())
        .unwrap_or_else(|| "python3".into());
    let mut server = None;
    let upstream = match std::env::var("DYNAMODB_URL") {
        Ok(url) => url,
        Err(_) => {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/dynamodb-local.py");
            let mut child = Command::new(&python)
                .arg(script)
                .stdout(Stdio::piped())
                .spawn()
                .expect("start the local DynamoDB server");
            let mut url = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut url)
                .unwrap();
            server = Some(child);
            url.trim().to_owned()
        }
    };
    let mut proxy = Proxy::start(&upstream);
    let client = local_client(&proxy.url);
    let run = std::process::id();
    let (idem_table, pt_table) = (format!("bench-idem-{run}"), format!("bench-pt-{run}"));
    runtime.block_on(async {
        create_table(&client, &idem_table, &TableLayout::default())
            .await
            .unwrap();
        create_table(&client, &pt_table, &TableLayout::default())
            .await
            .unwrap();
    });
    let store = DynamoDbStore::new(client, &idem_table);
    let calls = args.calls;
    println!(
        "### DynamoDbStore and Powertools (Python) on one local DynamoDB server ({calls} sequential calls per row)\n"
    );
    println!("| workload | library | calls/s | requests per call | client CPU per call (µs) |");
    println!("| --- | --- | ---: | ---: | ---: |");
    let mut rows = Vec::new();
    for (label, fresh) in [("fresh keys", true), ("only duplicates", false)] {
        let idem = runtime.block_on(idem_row(&store, &mut proxy, calls, fresh));
        let powertools = python_row(&python, &mut proxy, &pt_table, calls, fresh);
        for (library, row) in [("idem", &idem), ("Powertools", &powertools)] {
            println!(
                "| {label} | {library} | {:.0} | {:.2} | {:.0} |",
                row.rate, row.requests, row.cpu_us
            );
        }
        rows.push((label, idem, powertools));
    }
    let floor = runtime.block_on(sdk_row(&store, &mut proxy, calls));
    println!(
        "| a duplicate's request alone (a refused conditional `PutItem`), no idem | AWS SDK for Rust | {:.0} | {:.2} | {:.0} |",
        floor.rate, floor.requests, floor.cpu_us
    );
    println!();
    for (label, idem, powertools) in &rows {
        println!(
            "- {label}: requests per call, idem {:.2} vs Powertools {:.2}; Powertools' client CPU per call / idem's: **{:.1}x**",
            idem.requests,
            powertools.requests,
            powertools.cpu_us / idem.cpu_us
        );
    }
    let (_, idem_duplicate, powertools_duplicate) = &rows[1];
    println!(
        "- the SDK's own request costs {:.0} µs of client CPU: at most **{:.1}x** below Powertools' duplicate for any library on this SDK; idem adds {:.0} µs to it",
        floor.cpu_us,
        powertools_duplicate.cpu_us / floor.cpu_us,
        idem_duplicate.cpu_us - floor.cpu_us
    );
    drop(proxy);
    if let Some(mut server) = server {
        let _ = server.kill();
        let _ = server.wait();
    }
}
