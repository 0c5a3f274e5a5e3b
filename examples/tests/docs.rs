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
