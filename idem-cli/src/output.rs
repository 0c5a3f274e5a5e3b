//! How answers are printed: an aligned table (or `key: value` lines) for people, one JSON
//! document for scripts.

use serde_json::{Map, Value};
use std::io::Write;

/// Exit status: done.
pub const OK: i32 = 0;
/// Exit status: no such key or job.
pub const NOT_FOUND: i32 = 1;
/// Exit status: a usage error (clap's).
pub const USAGE: i32 = 2;
/// Exit status: refused, for safety (a live claim without --force, a forget without --yes).
pub const REFUSED: i32 = 3;
/// Exit status: the database failed.
pub const FAILED: i32 = 4;

/// Where the command prints.
pub struct Out<'a> {
    pub json: bool,
    pub w: &'a mut (dyn Write + Send),
}

impl Out<'_> {
    /// Rows (JSON objects with the same fields) as a table, or as `{"<what>": [...]}`.
    pub fn rows(&mut self, what: &str, columns: &[&str], rows: &[Map<String, Value>]) {
        if self.json {
            let doc = serde_json::json!({ what: rows });
            let _ = writeln!(self.w, "{doc}");
            return;
        }
        if rows.is_empty() {
            let _ = writeln!(self.w, "(no {what})");
            return;
        }
        let cell = |row: &Map<String, Value>, column: &str| match row.get(column) {
            None | Some(Value::Null) => "-".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        let widths: Vec<usize> = columns
            .iter()
            .map(|c| {
                rows.iter()
                    .map(|r| cell(r, c).chars().count())
                    .chain([c.len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<String>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
        };
        let _ = writeln!(
            self.w,
            "{}",
            line(columns.iter().map(|c| c.to_uppercase()).collect())
        );
        for row in rows {
            let _ = writeln!(
                self.w,
                "{}",
                line(columns.iter().map(|c| cell(row, c)).collect())
            );
        }
    }

    /// One object as `field: value` lines, or as JSON.
    pub fn object(&mut self, object: &Map<String, Value>) {
        if self.json {
            let _ = writeln!(self.w, "{}", Value::Object(object.clone()));
            return;
        }
        for (field, value) in object {
            let shown = match value {
                Value::Null => "-".to_owned(),
                Value::String(s) => s.clone(),
                Value::Array(items) if items.is_empty() => "(none)".to_owned(),
                other => other.to_string(),
            };
            let _ = writeln!(self.w, "{field}: {shown}");
        }
    }

    /// A one-line message: what was changed, or why nothing was. In JSON, `{"message": ..}` plus
    /// the given fields.
    pub fn message(&mut self, message: &str, mut fields: Map<String, Value>) {
        if self.json {
            fields.insert("message".into(), Value::String(message.to_owned()));
            let _ = writeln!(self.w, "{}", Value::Object(fields));
        } else {
            let _ = writeln!(self.w, "{message}");
        }
    }
}
