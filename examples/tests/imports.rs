//! No import circles: in every crate of the workspace, no module imports a module that imports
//! it, directly or through others. What two modules both need lives in a third below them, and
//! a child module never imports its parent.
//!
//! A module's imports are read from its source: paths through `crate::` and `super::` (an item
//! re-exported by `pub use` counts as an import of the module that defines it), and a parent's
//! paths into its own children. Test modules (`#[cfg(test)] mod tests`), comments and paths that
//! macros write (`$crate::`) are left out: they are not the module's structure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("examples/ sits in the workspace")
        .to_owned()
}

/// A crate's modules, by path (`crate`, `a`, `a::b`), with their source.
fn modules(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, src: &Path, found: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                // Binaries under src/bin are crates of their own.
                if rel != "bin" {
                    walk(&path, src, found);
                }
            } else if let Some(stem) = rel.strip_suffix(".rs") {
                let name = match stem {
                    "lib" | "main" => "crate".to_owned(),
                    _ => stem.trim_end_matches("/mod").replace('/', "::"),
                };
                found.insert(name, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut found = BTreeMap::new();
    walk(src, src, &mut found);
    found
}

/// `source` without its test module and comments.
fn structure(source: &str) -> String {
    let tests = Regex::new(r"#\[cfg\(test\)\]\s*mod tests").unwrap();
    let source = tests.split(source).next().unwrap_or_default();
    let comment = Regex::new(r"//.*").unwrap();
    comment.replace_all(source, "").into_owned()
}

struct Crate {
    modules: BTreeMap<String, String>,
    /// Per module, the items it re-exports: name -> the module that defines it.
    reexports: BTreeMap<String, BTreeMap<String, String>>,
}

impl Crate {
    fn new(src: &Path) -> Crate {
        Crate::of(modules(src))
    }

    /// The crate of `modules` (path -> source).
    fn of(modules: BTreeMap<String, String>) -> Crate {
        let modules: BTreeMap<String, String> = modules
            .into_iter()
            .map(|(name, source)| (name, structure(&source)))
            .collect();
        let mut krate = Crate {
            modules,
            reexports: BTreeMap::new(),
        };
        let reexport =
            Regex::new(r"pub(?:\([^)]*\))?\s+use\s+([\w:]+?)::(\{[^}]*\}|\w+)\s*;").unwrap();
        let mut found = BTreeMap::new();
        for (module, source) in &krate.modules {
            for c in reexport.captures_iter(source) {
                let Some(target) = krate.resolve_use(module, &c[1]) else {
                    continue;
                };
                for item in c[2].trim_matches(['{', '}']).split(',') {
                    let item = item.trim();
                    if item.is_empty() || item.contains("::") {
                        continue;
                    }
                    let name = item.rsplit(" as ").next().unwrap().trim().to_owned();
                    found
                        .entry(module.clone())
                        .or_insert_with(BTreeMap::new)
                        .insert(name, target.clone());
                }
            }
        }
        krate.reexports = found;
        krate
    }

    /// The path segments of `module` (none for the crate's root).
    fn segments(module: &str) -> Vec<&str> {
        if module == "crate" {
            Vec::new()
        } else {
            module.split("::").collect()
        }
    }

    /// The deepest module named by a prefix of `base` + `parts`.
    fn deepest(&self, base: &[&str], parts: &[&str]) -> (String, usize) {
        let mut best = ("crate".to_owned(), 0);
        for i in 0..=parts.len() {
            let path = [base, &parts[..i]].concat().join("::");
            let path = if path.is_empty() {
                "crate".to_owned()
            } else {
                path
            };
            if self.modules.contains_key(&path) {
                best = (path, i);
            }
        }
        best
    }

    /// The module a `crate::` or `super::` path in `module` reaches.
    fn resolve(&self, module: &str, path: &str) -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        let base: Vec<&str> = match parts[0] {
            "crate" => Vec::new(),
            "super" => {
                let mut own = Crate::segments(module);
                own.pop();
                own
            }
            _ => return None,
        };
        let rest = &parts[1..];
        let (found, used) = self.deepest(&base, rest);
        // An item that module re-exports counts as its defining module's.
        Some(
            rest.get(used)
                .and_then(|item| self.reexports.get(&found)?.get(*item))
                .cloned()
                .unwrap_or(found),
        )
    }

    /// The module a `use` path in `module` names: through `crate::`/`super::`, or a child.
    fn resolve_use(&self, module: &str, path: &str) -> Option<String> {
        if path.starts_with("crate") || path.starts_with("super") {
            return self.resolve(module, path);
        }
        let parts: Vec<&str> = path.trim_start_matches("self::").split("::").collect();
        let (found, used) = self.deepest(&Crate::segments(module), &parts);
        (used > 0).then_some(found)
    }

    /// Each module's imports of other modules.
    fn imports(&self) -> BTreeMap<String, BTreeSet<String>> {
        let path = Regex::new(r"(?:^|[^$\w])((?:crate|super)(?:::\w+)+)").unwrap();
        let group = Regex::new(r"(?:^|[^$\w])(crate|super)::\{([^}]*)\}").unwrap();
        let mut imports = BTreeMap::new();
        for (module, source) in &self.modules {
            let mut to = BTreeSet::new();
            for c in path.captures_iter(source) {
                to.extend(self.resolve(module, &c[1]));
            }
            for c in group.captures_iter(source) {
                for item in c[2].split(',') {
                    let item = item.split_whitespace().next().unwrap_or_default();
                    if !item.is_empty() {
                        to.extend(self.resolve(module, &format!("{}::{item}", &c[1])));
                    }
                }
            }
            // A module's own children, named without a prefix.
            let prefix = if module == "crate" {
                String::new()
            } else {
                format!("{module}::")
            };
            for child in self.modules.keys() {
                let Some(short) = child.strip_prefix(&prefix) else {
                    continue;
                };
                if child == "crate" || short.is_empty() || short.contains("::") {
                    continue;
                }
                let named = Regex::new(&format!(r"(?:^|[^\w:])(?:self::)?{short}::")).unwrap();
                if named.is_match(source) {
                    to.insert(child.clone());
                }
            }
            to.remove(module);
            imports.insert(module.clone(), to);
        }
        imports
    }
}

/// A circle of imports in `imports`, if there is one: the modules around it, the first again
/// at the end.
fn circle(imports: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        imports: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.to_owned());
            return Some(circle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in imports.get(module).into_iter().flatten() {
            if let Some(circle) = visit(next, imports, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    imports
        .keys()
        .find_map(|module| visit(module, imports, &mut Vec::new(), &mut done))
}

/// The workspace's crates' source directories.
fn crates() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(root())
        .unwrap()
        .map(|entry| entry.unwrap().path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    found.sort();
    found
}

#[test]
fn no_crate_has_an_import_circle() {
    let crates = crates();
    assert!(
        crates.len() >= 10,
        "found the workspace's crates: {crates:?}"
    );
    let mut circles = Vec::new();
    for src in &crates {
        let krate = Crate::new(src);
        if let Some(circle) = circle(&krate.imports()) {
            circles.push(format!("{}: {}", src.display(), circle.join(" -> ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The reader sees circles where there are some: a module and its child importing each other,
/// and three modules in a ring through `crate::` paths and a re-export.
#[test]
fn circles_are_found() {
    let krate = |files: &[(&str, &str)]| {
        Crate::of(
            files
                .iter()
                .map(|(m, s)| (m.to_string(), s.to_string()))
                .collect(),
        )
    };
    let parent_child = krate(&[
        ("crate", "mod a;"),
        ("a", "mod b; use b::Thing;"),
        ("a::b", "use super::Other;"),
    ]);
    assert!(circle(&parent_child.imports()).is_some());
    let ring = krate(&[
        ("crate", "mod a; mod b; mod c; pub use c::Thing;"),
        ("a", "use crate::b::X;"),
        ("b", "fn f() -> crate::Thing { todo!() }"),
        ("c", "use crate::a::{Y, Z};"),
    ]);
    assert_eq!(
        circle(&ring.imports()).map(|c| c.len()),
        Some(4),
        "{:?}",
        ring.imports()
    );
    let tree = krate(&[
        ("crate", "mod a; mod b;"),
        ("a", "use crate::b::X; // use crate::a::Y;"),
        ("b", "macro_rules! m { () => { $crate::a::Y } }"),
    ]);
    assert_eq!(circle(&tree.imports()), None, "{:?}", tree.imports());
}
