//! The campaign's ledger: what the work did, written by the worker processes to files of their
//! own, apart from every table and key idem keeps, and read back once they have stopped.
//!
//! Each line is one write to a file opened for appending, so the lines of processes writing at
//! once never interleave, their order in the file is the order they were written in, and a
//! line written survives a SIGKILL of its writer.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// A ledger file, opened for appending.
pub struct Ledger(Mutex<std::fs::File>);

/// A new id for a run of this process: `pid.n`.
pub fn run_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "{}.{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// One line: a delivery of `key` is about to be made (`A`), an effect of `key` began (`E`, with
/// the run's id), or the caller was told the work was done (`D`, with the id of the run whose
/// answer it got, where the workload tracks answers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `'A'`, `'E'` or `'D'`.
    pub kind: char,
    /// The work's key.
    pub key: String,
    /// Microseconds since the Unix epoch, when it was written.
    pub micros: u64,
    /// The run's id (`E`), the answer's (`D`), or empty.
    pub run: String,
}

/// Microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Ledger {
    /// Opens (or creates) the ledger at `path`.
    pub fn open(path: &Path) -> std::io::Result<Ledger> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Ledger(Mutex::new(file)))
    }

    /// Notes that a delivery of `key` is about to be made: the key must end up done.
    pub fn attempt(&self, key: &str) {
        self.write('A', key, "");
    }

    /// Notes that an effect of `key` begins. Written before the effect, so an effect cut short
    /// by a kill is still counted: the ledger counts at most more effects than happened. It is
    /// the body's first line, right after idem's last check of the claim: a process stopped
    /// between the two past its lease, while another run finished the key, would show as a
    /// repeat after completion (a window of a few instructions, which no lease can close).
    pub fn effect(&self, key: &str, run: &str) {
        self.write('E', key, run);
    }

    /// Notes that `key`'s caller was told the work is done (executed, or a duplicate of work
    /// done), with the answer of run `run` (empty where answers are not tracked).
    pub fn done(&self, key: &str, run: &str) {
        self.write('D', key, run);
    }

    fn write(&self, kind: char, key: &str, run: &str) {
        let line = format!("{kind} {key} {} {run}\n", now_micros());
        self.0
            .lock()
            .unwrap()
            .write_all(line.as_bytes())
            .expect("write the ledger");
    }
}

/// Every entry of the ledger at `path`, in the order written (none if it does not exist).
pub fn read(path: &Path) -> Vec<Entry> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let kind = fields.next()?.chars().next()?;
            let key = fields.next()?.to_owned();
            let micros = fields.next()?.parse().ok()?;
            let run = fields.next().unwrap_or_default().to_owned();
            Some(Entry {
                kind,
                key,
                micros,
                run,
            })
        })
        .collect()
}
