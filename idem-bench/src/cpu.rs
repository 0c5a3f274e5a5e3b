//! CPU time, read from `/proc`: the benchmark's own (and its waited-for children's, such as
//! pgbench), and the PostgreSQL server's when it runs on this machine, so that a row can say
//! what a call costs the client and the server, and how much of the machine the run used.

use idem_store_postgres::sqlx::{self, PgPool, Row};

/// Clock ticks per second of the times in `/proc` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// The fields of `/proc/<pid>/stat` the benchmark reads, in seconds where they are times.
struct Stat {
    ppid: u32,
    /// utime + stime.
    own: f64,
    /// cutime + cstime: the waited-for children's.
    children: f64,
}

fn stat(pid: &str) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses) start at ") ".
    let (_, rest) = text.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let at =
        |i: usize| -> Option<f64> { Some(fields.get(i)?.parse::<f64>().ok()? / TICKS_PER_SECOND) };
    // ppid is field 4 of the whole line (1 after the name); utime, stime, cutime and cstime
    // are fields 14-17 (11-14 after the name).
    Some(Stat {
        ppid: fields.get(1)?.parse().ok()?,
        own: at(11)? + at(12)?,
        children: at(13)? + at(14)?,
    })
}

/// CPU time (user + system) of this process, and of its waited-for children, in seconds.
pub fn client_seconds() -> (f64, f64) {
    stat("self").map_or((0.0, 0.0), |s| (s.own, s.children))
}

/// The PostgreSQL server, where its processes are visible in this machine's `/proc`.
pub struct Server {
    postmaster: u32,
}

impl Server {
    /// The server `pool` connects to, if it runs on this machine: a backend's parent is the
    /// postmaster. `None` for a remote server (or one in another PID namespace).
    pub async fn find(pool: &PgPool) -> Option<Self> {
        let backend: i32 = sqlx::query("SELECT pg_backend_pid()")
            .fetch_one(pool)
            .await
            .ok()?
            .get(0);
        let postmaster = stat(&backend.to_string())?.ppid;
        // A PID reused by another process of this machine would have another parent.
        let comm = std::fs::read_to_string(format!("/proc/{postmaster}/comm")).ok()?;
        comm.starts_with("postgres").then_some(Self { postmaster })
    }

    /// CPU seconds the server has used: the postmaster's own and its reaped children's, and
    /// its running children's (backends, autovacuum, the WAL writer, ...). A backend that exits
    /// between two readings moves from the second term to the first, so a difference of two
    /// readings counts it once.
    pub fn seconds(&self) -> f64 {
        let mut total = stat(&self.postmaster.to_string()).map_or(0.0, |s| s.own + s.children);
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return total;
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            if let Some(s) = stat(pid).filter(|s| s.ppid == self.postmaster) {
                total += s.own;
            }
        }
        total
    }
}

/// The whole machine's idle and stolen CPU time, in seconds (`/proc/stat`): time no process
/// of this machine ran, and time its virtual CPUs waited for the host's.
pub fn machine_idle_and_stolen() -> (f64, f64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // The first line, "cpu  user nice system idle iowait irq softirq steal ...", sums every CPU.
    let fields: Vec<f64> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse::<f64>().unwrap_or(0.0) / TICKS_PER_SECOND)
        .collect();
    let at = |i: usize| fields.get(i).copied().unwrap_or(0.0);
    (at(3) + at(4), at(7))
}
