//! Throwaway Redis servers for idem's tests, from the `redis-server` binary on `PATH` (or
//! `/usr/bin`, `/usr/local/bin`): one for the whole run (`scripts/test`, through the
//! `idem-testdb redis-start` command, when `REDIS_URL` is unset), servers a test stops and
//! starts itself (the restart test), and a 3-master Redis Cluster (`redis-cluster-start`, when
//! `REDIS_CLUSTER_URLS` is unset).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::error::{fail, ClusterError};
use crate::port::free_port;

/// The server Redis tests use: `REDIS_URL`, which `scripts/test` sets (starting a throwaway
/// server when it was unset). A Redis test without a server fails, loudly, with this message.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "REDIS_URL is not set. Redis tests need a real server: run them with \
             `scripts/test`, which starts a throwaway redis-server, or set \
             REDIS_URL=redis://127.0.0.1:6379"
        )
    })
}

/// How to install Redis, for the error when it is not found.
pub const REDIS_INSTALL_HINT: &str = "no redis-server binary was found on PATH, /usr/bin or \
/usr/local/bin. Install it (Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install \
redis`), or point the tests at a running server with REDIS_URL=redis://host:port";

fn find(binary: &str) -> Result<PathBuf, ClusterError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin".into(), "/usr/local/bin".into()])
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| fail(REDIS_INSTALL_HINT))
}

/// A throwaway `redis-server` (no persistence, unless [`durable`](RedisServer::start_durable))
/// in a directory of its own, on a free port; stopped when dropped if this value started it.
#[derive(Debug)]
pub struct RedisServer {
    dir: PathBuf,
    port: u16,
    cluster: bool,
    owned: bool,
    durable: bool,
}

impl RedisServer {
    /// Starts a server in a new temporary directory; stopped and deleted when dropped.
    pub fn start() -> Result<RedisServer, ClusterError> {
        let dir = std::env::temp_dir().join(format!(
            "idem-redis-{}-{}",
            std::process::id(),
            free_port()?
        ));
        let mut server = RedisServer::start_in(&dir, false)?;
        server.owned = true;
        Ok(server)
    }

    /// [`start`](Self::start), with an append-only file synced at every write
    /// (`appendfsync always`), as idem's Redis store needs for an acknowledged claim or
    /// completion to survive a crash: a [`kill`](Self::kill) and
    /// [`start_again`](Self::start_again) lose nothing acknowledged (a crash of the process
    /// alone would spare what the file had written; the sync also covers one of the host).
    pub fn start_durable() -> Result<RedisServer, ClusterError> {
        let dir = std::env::temp_dir().join(format!(
            "idem-redis-durable-{}-{}",
            std::process::id(),
            free_port()?
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| fail(format!("create {}: {e}", dir.display())))?;
        let server = RedisServer {
            dir: dir.clone(),
            port: free_port()?,
            cluster: false,
            owned: true,
            durable: true,
        };
        server.start_again()?;
        Ok(server)
    }

    /// Starts a server in `dir` (created), detached: it outlives this process until
    /// [`stop`](Self::stop) (as `idem-testdb redis-stop DIR` does).
    pub fn start_in(dir: &Path, cluster: bool) -> Result<RedisServer, ClusterError> {
        std::fs::create_dir_all(dir).map_err(|e| fail(format!("create {}: {e}", dir.display())))?;
        let server = RedisServer {
            dir: dir.to_owned(),
            port: free_port()?,
            cluster,
            owned: false,
            durable: false,
        };
        std::fs::write(dir.join("port"), server.port.to_string())
            .map_err(|e| fail(format!("write the port file: {e}")))?;
        server.start_again()?;
        Ok(server)
    }

    /// The server started in `dir` by [`start_in`](Self::start_in).
    pub fn open(dir: &Path) -> Result<RedisServer, ClusterError> {
        let port = std::fs::read_to_string(dir.join("port"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| fail(format!("no redis server was started in {}", dir.display())))?;
        Ok(RedisServer {
            dir: dir.to_owned(),
            port,
            cluster: false,
            owned: false,
            durable: false,
        })
    }

    /// Starts the server (again, after [`stop`](Self::stop)) on its port, and waits until it
    /// answers.
    pub fn start_again(&self) -> Result<(), ClusterError> {
        let mut command = Command::new(find("redis-server")?);
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", ""])
            .args(if self.durable {
                ["--appendonly", "yes", "--appendfsync", "always"].as_slice()
            } else {
                ["--appendonly", "no"].as_slice()
            })
            .args(["--daemonize", "yes", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--pidfile")
            .arg(self.dir.join("redis.pid"))
            .arg("--logfile")
            .arg(self.dir.join("redis.log"));
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
                .arg("--cluster-config-file")
                .arg(self.dir.join("nodes.conf"));
        }
        let output = command
            .output()
            .map_err(|e| fail(format!("run redis-server: {e}")))?;
        if !output.status.success() {
            return Err(fail(format!(
                "redis-server failed to start: {}",
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.cli(&["ping"]).is_ok_and(|o| o.trim() == "PONG") {
            if Instant::now() > deadline {
                return Err(fail(format!(
                    "redis-server on port {} did not answer within 20 s (see {})",
                    self.port,
                    self.dir.join("redis.log").display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Stops the server (without saving), and waits until it is gone.
    pub fn stop(&self) -> Result<(), ClusterError> {
        let _ = self.cli(&["shutdown", "nosave"]);
        self.until_gone("stop")
    }

    /// Waits (up to 20 s) until nothing answers on the server's port; `what` names the step
    /// in the error.
    fn until_gone(&self, what: &str) -> Result<(), ClusterError> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            if Instant::now() > deadline {
                return Err(fail(format!(
                    "redis-server on port {} did not {what}",
                    self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Kills the server with SIGKILL (it ends without saving or closing its files), and waits
    /// until it is gone.
    pub fn kill(&self) -> Result<(), ClusterError> {
        let pid = std::fs::read_to_string(self.dir.join("redis.pid"))
            .map_err(|e| fail(format!("read the pid file: {e}")))?;
        let status = Command::new("kill")
            .args(["-KILL", pid.trim()])
            .status()
            .map_err(|e| fail(format!("run kill: {e}")))?;
        if !status.success() {
            return Err(fail(format!("kill -KILL {} failed", pid.trim())));
        }
        self.until_gone("die")?;
        let _ = std::fs::remove_file(self.dir.join("redis.pid"));
        Ok(())
    }

    /// Runs `redis-cli` against the server and returns what it printed.
    pub fn cli(&self, args: &[&str]) -> Result<String, ClusterError> {
        let output = Command::new(find("redis-cli")?)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .map_err(|e| fail(format!("run redis-cli: {e}")))?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.owned {
            let _ = self.stop();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The Redis Cluster that cluster tests use: `REDIS_CLUSTER_URLS` (its nodes, comma-separated),
/// which `scripts/test` sets, starting a throwaway 3-master cluster when it was unset. A cluster
/// test without one fails, loudly, with this message.
pub fn redis_cluster_urls() -> Vec<String> {
    let urls = std::env::var("REDIS_CLUSTER_URLS").unwrap_or_else(|_| {
        panic!(
            "REDIS_CLUSTER_URLS is not set. Redis Cluster tests need a real cluster: run them \
             with `scripts/test`, which starts a throwaway 3-master cluster, or set \
             REDIS_CLUSTER_URLS=redis://host:port,redis://host:port,.. to the nodes of one"
        )
    });
    urls.split(',').map(str::to_owned).collect()
}

/// A Redis Cluster of three masters (no replicas) on free ports, started from `redis-server`
/// and joined with `redis-cli --cluster create`.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the three masters in `dir` (`node0`..`node2`), detached, assigns the slots, and
    /// waits until the cluster is `ok`. [`stop`](Self::stop) stops them.
    pub fn start_in(dir: &Path) -> Result<RedisCluster, ClusterError> {
        let mut nodes = Vec::new();
        for i in 0..3 {
            nodes.push(RedisServer::start_in(&dir.join(format!("node{i}")), true)?);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        nodes[0].cli(&args)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = nodes.iter().all(|n| {
                n.cli(&["cluster", "info"])
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            });
            if ok {
                return Ok(RedisCluster { nodes });
            }
            if Instant::now() > deadline {
                return Err(fail(
                    "the Redis Cluster did not reach cluster_state:ok in 30 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The cluster started in `dir` by [`start_in`](Self::start_in).
    pub fn open(dir: &Path) -> Result<RedisCluster, ClusterError> {
        let nodes = (0..3)
            .map(|i| RedisServer::open(&dir.join(format!("node{i}"))))
            .collect::<Result<_, _>>()?;
        Ok(RedisCluster { nodes })
    }

    /// Stops every node.
    pub fn stop(&self) -> Result<(), ClusterError> {
        for node in &self.nodes {
            node.stop()?;
        }
        Ok(())
    }

    /// The nodes' URLs (`redis://127.0.0.1:PORT`).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}
