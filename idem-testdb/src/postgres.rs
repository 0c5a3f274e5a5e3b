//! Throwaway PostgreSQL clusters.

use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::error::{fail, ClusterError};
use crate::port::free_port;

/// How to install a server, for the error when none is found.
pub const INSTALL_HINT: &str = "no PostgreSQL server binaries (initdb, pg_ctl, postgres) were \
found on PATH or under /usr/lib/postgresql/*/bin. Install them (Debian/Ubuntu: `apt-get install \
postgresql`; macOS: `brew install postgresql`), or point the tests at a running server with \
DATABASE_URL=postgres://user@host:port/database";

/// The directory holding `initdb`, `pg_ctl` and `postgres`: on `PATH`, else under
/// `/usr/lib/postgresql/*/bin` (newest version first).
pub fn find_bin_dir() -> Result<PathBuf, ClusterError> {
    find_bin_dir_in(std::env::var_os("PATH"), Path::new("/usr/lib/postgresql"))
}

/// [`find_bin_dir`] over a given `PATH` value and versions directory.
pub fn find_bin_dir_in(
    path: Option<std::ffi::OsString>,
    versions_dir: &Path,
) -> Result<PathBuf, ClusterError> {
    let has_all = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|b| dir.join(b).is_file())
    };
    if let Some(path) = path {
        for dir in std::env::split_paths(&path) {
            if has_all(&dir) {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(versions_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_all(dir))
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, dir)| dir)
        .ok_or_else(|| fail(INSTALL_HINT))
}

/// The unprivileged user to run the server as, when running as root.
fn run_as() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { geteuid() } == 0;
    if !root {
        return None;
    }
    let exists = |user: &str| {
        Command::new("id")
            .arg("-u")
            .arg(user)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    Some(
        if exists("postgres") {
            "postgres"
        } else {
            "nobody"
        }
        .to_owned(),
    )
}

extern "C" {
    fn geteuid() -> u32;
}

/// A PostgreSQL cluster in a directory of its own, listening on 127.0.0.1.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    user: Option<String>,
    /// Stop (and delete) the cluster when dropped.
    owned: bool,
    /// Extra server options.
    extra: String,
}

impl Cluster {
    /// Creates and starts a cluster in a new temporary directory, on a free port. It is stopped
    /// and deleted when the `Cluster` is dropped.
    pub fn start() -> Result<Cluster, ClusterError> {
        Cluster::start_with(&[])
    }

    /// Like [`start`](Cluster::start), with extra server options (`"-c name=value"`), fixed
    /// for every later [`start_again`](Cluster::start_again).
    pub fn start_with(extra_options: &[&str]) -> Result<Cluster, ClusterError> {
        let base = std::env::temp_dir().join(format!(
            "idem-pg-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() ^ u128::from(free_port()?)
        ));
        let mut cluster = Cluster::init(&base)?;
        cluster.owned = true;
        cluster.extra = extra_options.join(" ");
        cluster.start_again()?;
        Ok(cluster)
    }

    /// Creates a cluster in `dir` (which must not exist) without starting it.
    pub fn init(dir: &Path) -> Result<Cluster, ClusterError> {
        let bin = find_bin_dir()?;
        let user = run_as();
        std::fs::create_dir_all(dir)
            .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
        if user.is_some() {
            // The unprivileged server user must be able to write here.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| fail(format!("cannot open up {}: {e}", dir.display())))?;
        }
        let cluster = Cluster {
            bin,
            dir: dir.to_owned(),
            port: free_port()?,
            user,
            owned: false,
            extra: String::new(),
        };
        let data = cluster.data_dir();
        let output = cluster.run(
            "initdb",
            &[
                "-D",
                path_str(&data)?,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ],
        )?;
        check(&output, "initdb")?;
        std::fs::write(dir.join("port"), cluster.port.to_string())
            .map_err(|e| fail(format!("cannot record the port: {e}")))?;
        Ok(cluster)
    }

    /// Re-opens a cluster that `init` created in `dir` (to start or stop it from another
    /// process).
    pub fn open(dir: &Path) -> Result<Cluster, ClusterError> {
        let port = std::fs::read_to_string(dir.join("port"))
            .map_err(|e| fail(format!("no cluster in {}: {e}", dir.display())))?
            .trim()
            .parse()
            .map_err(|e| fail(format!("bad port file in {}: {e}", dir.display())))?;
        Ok(Cluster {
            bin: find_bin_dir()?,
            dir: dir.to_owned(),
            port,
            user: run_as(),
            owned: false,
            extra: String::new(),
        })
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<Output, ClusterError> {
        let program_path = self.bin.join(program);
        let mut command = match &self.user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.arg("-u").arg(user).arg("--").arg(&program_path);
                c
            }
            None => Command::new(&program_path),
        };
        command
            .args(args)
            .current_dir(&self.dir)
            .output()
            .map_err(|e| fail(format!("cannot run {}: {e}", program_path.display())))
    }

    /// Starts (or restarts after [`stop`](Cluster::stop)) the server and waits until it
    /// accepts connections.
    ///
    /// `fsync` is off (the tests crash PostgreSQL, never the operating system, so the OS cache
    /// keeps every write), but `synchronous_commit` stays on: with it off, a commit that was
    /// acknowledged could vanish in an immediate stop, and the outage test would rightly see
    /// completions lost.
    pub fn start_again(&self) -> Result<(), ClusterError> {
        let data = self.data_dir();
        let log = self.dir.join("server.log");
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off \
             -c full_page_writes=off -c max_connections=300 -c shared_buffers=128MB {}",
            self.port,
            path_str(&self.dir)?,
            self.extra
        );
        let output = self.run(
            "pg_ctl",
            &[
                "-D",
                path_str(&data)?,
                "-l",
                path_str(&log)?,
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )?;
        if let Err(e) = check(&output, "pg_ctl start") {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(fail(format!("{e}\nserver log:\n{log}")));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() > deadline {
                return Err(fail("the server did not accept connections within 30s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Stops the server immediately (`pg_ctl stop -m immediate`): connections drop at once,
    /// as when a database host goes away.
    pub fn stop(&self) -> Result<(), ClusterError> {
        let data = self.data_dir();
        let output = self.run(
            "pg_ctl",
            &["-D", path_str(&data)?, "-m", "immediate", "-w", "stop"],
        )?;
        check(&output, "pg_ctl stop")
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for the `postgres` database as the `postgres` superuser.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Where the cluster lives.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.owned {
            let _ = self.stop();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn path_str(path: &Path) -> Result<&str, ClusterError> {
    path.to_str()
        .ok_or_else(|| fail(format!("path is not UTF-8: {}", path.display())))
}

fn check(output: &Output, what: &str) -> Result<(), ClusterError> {
    if output.status.success() {
        return Ok(());
    }
    Err(fail(format!(
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where no server can be found, the error says how to get one.
    #[test]
    fn missing_binaries_explain_how_to_install_them() {
        let empty = std::env::temp_dir().join(format!("idem-testdb-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let err = find_bin_dir_in(Some(empty.clone().into_os_string()), &empty).unwrap_err();
        assert!(
            err.to_string().contains("apt-get install postgresql"),
            "{err}"
        );
        assert!(err.to_string().contains("DATABASE_URL"), "{err}");
        let _ = std::fs::remove_dir_all(empty);
    }

    /// The newest version under the versions directory wins when PATH has none.
    #[test]
    fn newest_installed_version_is_found() {
        let root =
            std::env::temp_dir().join(format!("idem-testdb-versions-{}", std::process::id()));
        for version in ["9", "15", "13"] {
            let bin = root.join(version).join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            for name in ["initdb", "pg_ctl", "postgres"] {
                std::fs::write(bin.join(name), "").unwrap();
            }
        }
        let found = find_bin_dir_in(None, &root).unwrap();
        assert_eq!(found, root.join("15").join("bin"));
        let _ = std::fs::remove_dir_all(root);
    }
}
