//! `idem ui` as a process against a real PostgreSQL: it refuses a non-loopback address
//! without a token, serves the dashboard on the address it prints, prints the token actions
//! need when given none (never in a URL), asks every visitor for the token given in
//! `IDEM_UI_TOKEN`, and stops on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use idem_core::Call;
use idem_store_postgres::testing::TestStore;

fn idem(test: &TestStore, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
    command
        .args([
            "--database-url",
            &idem_store_postgres::testing::database_url(),
            "--schema",
            &test.schema,
        ])
        .args(args)
        .env_remove("IDEM_UI_TOKEN");
    command
}

/// The dashboard's process and the lines it printed before serving.
fn start(mut command: Command, lines: usize) -> (Child, Vec<String>) {
    let mut child = command.stdout(Stdio::piped()).spawn().expect("run idem ui");
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let printed: Vec<String> = stdout.lines().take(lines).map(Result::unwrap).collect();
    (child, printed)
}

fn stop(mut child: Child) -> i32 {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    child.wait().unwrap().code().expect("exited")
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_reachable_address_needs_a_token() {
    let test = TestStore::new("cli_ui_bind", 2).await;
    let output = idem(&test, &["ui", "--addr", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("--token"), "{said}");
}

#[tokio::test]
async fn it_serves_the_dashboard_and_prints_the_token_actions_need() {
    let test = TestStore::new("cli_ui", 2).await;
    idem_queue::Queue::new(&test.store).migrate().await.unwrap();
    let outcome = Call::new(&test.store, "invoice:7")
        .scope("billing".to_owned())
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(outcome.is_executed());

    let (child, printed) = start(idem(&test, &["ui", "--addr", "127.0.0.1:0"]), 2);
    let url = printed[0]
        .rsplit(" at ")
        .next()
        .expect("the address it serves")
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{printed:?}");
    let token = printed[1]
        .rsplit(": ")
        .next()
        .expect("the token")
        .to_owned();
    assert!(!url.contains(&token), "the token is never in a URL");
    let page = reqwest::get(&url).await.unwrap().text().await.unwrap();
    assert!(
        page.contains("billing") && page.contains("Jobs by queue"),
        "{page}"
    );
    let login = no_redirects()
        .post(format!("{url}login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), reqwest::StatusCode::SEE_OTHER);
    assert!(login.headers().contains_key("set-cookie"));
    assert_eq!(stop(child), 0, "SIGTERM stops it");

    // A token of the operator's, from the environment: every page asks for it.
    let mut command = idem(&test, &["ui", "--addr", "127.0.0.1:0", "--read-only"]);
    command.env("IDEM_UI_TOKEN", "from-the-environment");
    let (child, printed) = start(command, 1);
    let url = printed[0].rsplit(" at ").next().unwrap().to_owned();
    let answer = no_redirects().get(&url).send().await.unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::SEE_OTHER);
    assert_eq!(answer.headers()["location"], "/login");
    assert_eq!(stop(child), 0);
}
