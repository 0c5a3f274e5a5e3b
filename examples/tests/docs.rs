//! The user's documentation holds together: the README stays a front page (under 300 lines),
//! and no Markdown page of the repository links to a file that does not exist or to a
//! placeholder domain. (The README's code is compiled as doc-tests of this crate; rustdoc's own
//! links are checked by `cargo doc -D warnings`.)

use std::path::{Path, PathBuf};

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("examples/ sits in the workspace")
        .to_owned()
}

/// Every Markdown file of the repository outside `target/` and hidden directories.
fn markdown_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            markdown_files(&path, found);
        } else if name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// The targets of `[text](target)` links in `text`, outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    found
}

/// Domains that exist only as placeholders.
const PLACEHOLDERS: [&str; 4] = [
    "example.invalid",
    "example.com",
    "example.org",
    "example.net",
];

#[test]
fn the_readme_is_a_front_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 300,
        "README.md has {lines} lines: the manual is rustdoc"
    );
}

#[test]
fn markdown_links_reach_files_that_exist_and_no_placeholder() {
    let mut files = Vec::new();
    markdown_files(&root(), &mut files);
    assert!(files.len() >= 5, "found {files:?}");
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for placeholder in PLACEHOLDERS {
            if text.contains(placeholder) {
                broken.push(format!("{}: names {placeholder}", file.display()));
            }
        }
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") || link.starts_with('#')
            {
                continue;
            }
            let path = link.split('#').next().unwrap();
            let target = file.parent().unwrap().join(path);
            if !target.exists() {
                broken.push(format!("{}: {link} does not exist", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// `a, b and c`.
fn listed(statuses: &[u16]) -> String {
    let words: Vec<String> = statuses.iter().map(u16::to_string).collect();
    match words.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// A duration as the README writes it: `24 h`, `15 min`, `30 s`.
fn human(duration: std::time::Duration) -> String {
    match duration.as_secs() {
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// What the README states of the code that rustdoc cannot link there: each default, status
/// list and metric name is rendered from the constant the code uses, and must appear as the
/// README writes it; and every metric name the README mentions is one the code records.
#[test]
fn the_readme_states_the_codes_defaults_lists_and_names() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut retried = vec![];
    retried.extend(idem_queue::http::RETRIED_STATUSES);
    let mut released = vec![];
    released.extend(idem_http::RELEASED_STATUSES);
    let stated = [
        format!("retried on 5xx, {}", listed(&retried)),
        format!(
            "2xx-4xx but {}",
            released
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!(
            "`max_request_body` ({} MiB)",
            idem_http::DEFAULT_MAX_REQUEST_BODY >> 20
        ),
        format!(
            "`catch_up` (default {})",
            human(idem_queue::DEFAULT_CATCH_UP)
        ),
        format!("`grace` (default {})", human(idem_queue::DEFAULT_GRACE)),
        format!("`keep`** (default {})", human(idem_core::DEFAULT_KEEP)),
    ];
    for statement in &stated {
        assert!(
            readme.contains(statement.as_str()),
            "README.md should say {statement:?}, as the code does"
        );
    }
    let metrics = [
        idem_core::metrics::CALLS,
        idem_core::metrics::STORE_ERRORS,
        idem_core::metrics::LOST_CLAIMS,
        idem_core::metrics::CLAIM_SECONDS,
        idem_core::metrics::BODY_SECONDS,
        idem_queue::metrics::JOBS,
        idem_queue::metrics::JOB_SECONDS,
        idem_queue::metrics::JOBS_IN_STATE,
        idem_queue::metrics::SCHEDULE_MISSED,
        idem_queue::metrics::SCHEDULE_LAST_SUCCESS,
        idem_queue::metrics::SCHEDULE_MISSED_NOW,
    ];
    let named = regex::Regex::new(r"\bidem_[a-z_]+\b").unwrap();
    let mut mentioned = 0;
    for found in named.find_iter(&readme) {
        let name = found.as_str();
        let rust_path = [
            "idem_core",
            "idem_queue",
            "idem_http",
            "idem_store_postgres",
        ]
        .iter()
        .any(|krate| name == *krate || name.starts_with(&format!("{krate}_")));
        if rust_path || readme[found.end()..].starts_with("::") || name == "idem_records" {
            continue;
        }
        mentioned += 1;
        assert!(
            metrics.contains(&name),
            "README.md names a metric {name:?} that the code does not record"
        );
    }
    assert!(
        mentioned >= 4,
        "the README's metric names were not found ({mentioned})"
    );
}
