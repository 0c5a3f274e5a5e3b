//! The examples' DynamoDB: `DYNAMODB_URL`, or a local server (moto's, `scripts/dynamodb-local.py`)
//! started for as long as the returned guard lives, with the Python in `IDEM_PYTHON` or
//! `python3` (which needs `pip install 'moto[server]' waitress`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A local server this example started; stopped when dropped.
pub struct LocalServer(Child);

impl Drop for LocalServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server's URL, and the guard of the one started here, if any.
pub fn local_dynamodb() -> Result<(String, Option<LocalServer>), String> {
    if let Ok(url) = std::env::var("DYNAMODB_URL") {
        return Ok((url, None));
    }
    let python = std::env::var("IDEM_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/dynamodb-local.py");
    let mut child = Command::new(&python)
        .arg(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("could not start {python} {script}: {e}"))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let url = line.trim().to_owned();
    if !url.starts_with("http://") {
        let _ = child.kill();
        return Err(format!(
            "the local DynamoDB server did not start (install it with `pip install \
             'moto[server]' waitress`, or set DYNAMODB_URL to a server of yours); it printed {url:?}"
        ));
    }
    Ok((url, Some(LocalServer(child))))
}
