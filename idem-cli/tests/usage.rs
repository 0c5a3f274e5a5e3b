//! The command's usage as the documentation shows it: the help snapshots in `tests/cmd` are
//! the binary's own output, and every `idem` command line written in the documentation (the
//! README, the crates' guides and READMEs, the examples) is one the command accepts.

use std::path::{Path, PathBuf};

use clap::Parser;
use idem_cli::Args;

#[test]
fn the_help_snapshots_are_the_binarys_output() {
    trycmd::TestCases::new()
        .register_bin("idem", trycmd::cargo::cargo_bin!("idem"))
        .case("tests/cmd/*.md");
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The files whose `idem` command lines are checked, from the workspace root.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut found = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    for entry in std::fs::read_dir(&root).expect("the workspace") {
        let dir = entry.expect("an entry").path();
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("idem-") {
            for file in ["README.md", "src/lib.rs"] {
                if dir.join(file).exists() {
                    found.push(dir.join(file));
                }
            }
        }
    }
    for entry in std::fs::read_dir(root.join("examples")).expect("the examples") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

/// Sample values for the placeholders the documentation writes in capitals.
fn sample(word: &str) -> &str {
    match word {
        "KEY" | "ID" => "job:1",
        "NAME" => "daily-report",
        "EXPR" => "0 6 * * *",
        "URL" => "postgres://localhost/app",
        "N" => "10",
        "DUR" => "5m",
        "ZONE" => "Europe/Paris",
        "JSON" => "{}",
        "TOKEN" => "0123456789abcdef0123",
        "S" | "T" | "P" | "TEXT" => "x",
        other => other,
    }
}

/// `idem` command lines in `text`: lines of code that start with `idem ` (after a doc
/// comment's `//!` and a `$ ` prompt), or `cargo run -p idem-cli -- ` and what follows, and
/// each `` `idem ...` `` in a table row; comments and `<placeholders>` dropped, optional
/// `[..]` parts kept with their first alternative.
fn command_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for raw in text.lines() {
        let line = raw.trim_start_matches("//!").trim();
        let line = line.strip_prefix("$ ").unwrap_or(line);
        // `NAME=value idem ..`: the environment's part is the shell's, the rest the command's.
        let mut line = line;
        while let Some((first, rest)) = line.split_once(' ') {
            let assignment = first.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            });
            if !assignment {
                break;
            }
            line = match first.contains("=$(") {
                // A value made by a command: up to its closing parenthesis.
                true => line.split_once(") ").map_or("", |(_, rest)| rest),
                false => rest,
            }
            .trim_start();
        }
        let found: Vec<String> = if line.starts_with('|') {
            line.split('`')
                .skip(1)
                .step_by(2)
                .filter(|span| span.starts_with("idem "))
                .map(str::to_owned)
                .collect()
        } else if let Some(rest) = line.split("cargo run -p idem-cli -- ").nth(1) {
            vec![format!("idem {rest}")]
        } else if line.starts_with("idem ") {
            vec![line.to_owned()]
        } else {
            vec![]
        };
        for command in found {
            let command = command.split(" #").next().unwrap_or("").trim().to_owned();
            if command.contains('<') {
                continue;
            }
            // `a / b` in a table cell: two commands of one group.
            let mut parts = command.split(" / ");
            let first = parts.next().unwrap_or("").to_owned();
            let group: Vec<&str> = first.split_whitespace().take(2).collect();
            lines.push(first.clone());
            for more in parts {
                lines.push(format!("{} {more}", group.join(" ")));
            }
        }
    }
    lines
}

/// The words of `command`, optional parts opened and each `a\|b` alternative its first.
fn words(command: &str) -> Vec<String> {
    command
        .replace(['[', ']'], " ")
        .split_whitespace()
        .map(|word| word.split("\\|").next().unwrap_or(word))
        .map(|word| sample(word).to_owned())
        .collect()
}

#[test]
fn every_documented_command_line_parses() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for document in documents() {
        let text = std::fs::read_to_string(&document).expect("readable");
        for command in command_lines(&text) {
            let words = words(&command);
            checked += 1;
            if let Err(e) = Args::try_parse_from(&words) {
                failures.push(format!(
                    "{}: `{command}`: {}",
                    document.strip_prefix(root()).unwrap_or(&document).display(),
                    e.render()
                ));
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} command lines found: the search broke"
    );
    assert!(
        failures.is_empty(),
        "documented commands the command refuses:\n{}",
        failures.join("\n")
    );
}

/// The help names the environment variables but never shows their values: a `DATABASE_URL`
/// may hold a password, and help output lands in terminals, logs and issue reports.
#[test]
fn help_never_shows_the_database_url_or_the_token() {
    for args in [
        &["--help"][..],
        &["ui", "--help"],
        &["jobs", "list", "--help"],
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(args)
            .env(
                "DATABASE_URL",
                "postgres://app:hunter2-secret@db.internal/app",
            )
            .env("IDEM_UI_TOKEN", "token-hunter2-secret")
            .output()
            .expect("the binary runs");
        let shown = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "idem {args:?} failed");
        assert!(
            !shown.contains("hunter2"),
            "idem {args:?} printed a secret from the environment:\n{shown}"
        );
    }
}
