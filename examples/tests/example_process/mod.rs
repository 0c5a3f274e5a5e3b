//! Running an example as a process: `cargo test` builds the examples' binaries next to the test
//! binaries, and the tests that need a whole process (signals, several processes) run them.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::ChildStdout;

/// The built binary of example `name`.
pub fn example_binary(name: &str) -> PathBuf {
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/examples/<name>
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test` (which builds the examples) or \
         `cargo build --example {name}` first",
        path.display()
    );
    path
}

/// Reads lines until one starts with `prefix`; returns it, trimmed.
pub fn read_until(out: &mut BufReader<ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "the process ended before printing {prefix:?}");
        if line.starts_with(prefix) {
            return line.trim().to_owned();
        }
    }
}
