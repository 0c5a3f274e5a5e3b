//! The campaign's coordinator (`idem-faults run`): it starts the servers, the proxies and the
//! worker processes, injects the schedule's faults, settles what the faults left, and counts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_core::{Call, Inspect, Outcome, RecordState, Store};
use idem_queue::{NewJob, Queue};
use idem_store_postgres::sqlx::{self, postgres::PgPoolOptions, PgPool};
use idem_store_postgres::PgStore;
use idem_store_redis::RedisStore;
use idem_store_sqlite::SqliteStore;
use idem_testdb::{Cluster, RedisServer};

use super::ledger::{self, Entry, Ledger};
use super::plan::{self, Fault, Planned, Target};
use super::proxy::{FaultProxy, Net};
use super::tally::Tally;
use super::worker;
use super::workload::{Workload, LEASE, SCHEMA};

/// The coordinator's flags.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// How long the run lasts, faults and the quiet end together (s).
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// How long the run ends without faults, for the work they left to settle (s).
    #[arg(long, default_value_t = 8)]
    pub quiet: u64,
    /// Seeds the fault schedule and the processes: the same seed, the same schedule.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker processes per workload.
    #[arg(long, default_value_t = 2)]
    pub processes: usize,
    /// Calls (or jobs) each process runs at once.
    #[arg(long, default_value_t = 4)]
    pub tasks: usize,
    /// Where the ledgers and the processes' logs go (by default a new temporary directory,
    /// removed after a run that passed).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// A fault as it went.
struct Injected {
    target: Target,
    fault: Fault,
    /// What the fault was seen to hit (chunks delayed, connections reset or held, a process
    /// killed or stopped, a server down): 0 when it reached nothing.
    hit: u64,
    /// The workloads it reached, with how many of their processes.
    reached: Vec<(Workload, usize)>,
    /// When it began and ended (µs since the Unix epoch, as the ledger's).
    window: (u64, u64),
    /// The process it hit, for a fault of a process.
    pid: Option<u32>,
}

impl Injected {
    /// Whether this fault explains a repeat of a run of `workload` in process `pid` whose
    /// first effect began at `first` and whose repeat began at `repeat`: it hit, it hit that
    /// process (or the network to that process's server), and it was under way between the
    /// two (or ended less than a lease before the first: connections it broke are found
    /// broken by the next statements).
    /// A process's fault explains a repeat when it hit either run's process (a stalled run
    /// that resumes after another took its key over is the repeat's), or any process of a
    /// SQLite workload: one stopped while it holds the file's write lock stalls every other.
    fn explains(
        &self,
        workload: Workload,
        pids: [Option<u32>; 2],
        first: u64,
        repeat: u64,
    ) -> bool {
        let lease = LEASE.as_micros() as u64;
        let reaches = match self.target {
            Target::Process => {
                let shared_lock = workload == Workload::SqliteLease
                    && self
                        .reached
                        .iter()
                        .any(|(w, _)| *w == Workload::SqliteLease);
                self.pid.is_some() && (pids.contains(&self.pid) || shared_lock)
            }
            server => workload.server() == Some(server),
        };
        self.hit > 0 && reaches && self.window.0 <= repeat && first <= self.window.1 + lease
    }
}

/// One worker process's place: a new process takes it when one is killed.
struct Slot {
    workload: Workload,
    child: Child,
    started: u64,
    /// The port an HTTP server listens on (0 for other workloads).
    port: u16,
}

struct Campaign {
    args: RunArgs,
    dir: PathBuf,
    postgres: Arc<Cluster>,
    redis: Arc<RedisServer>,
    pg_proxy: FaultProxy,
    redis_proxy: FaultProxy,
    slots: Mutex<Vec<Slot>>,
}

/// Runs the campaign and prints its report. Returns whether the promise held and every kind of
/// fault injected hit something.
pub async fn run(args: RunArgs) -> bool {
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("idem-faults-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).expect("create the run's directory");
    let postgres = Arc::new(Cluster::start().expect("start a throwaway PostgreSQL"));
    let redis = Arc::new(RedisServer::start_durable().expect("start a throwaway Redis"));
    let pg_proxy = FaultProxy::start("127.0.0.1", postgres.port())
        .await
        .expect("start the PostgreSQL proxy");
    let redis_proxy = FaultProxy::start("127.0.0.1", redis.port())
        .await
        .expect("start the Redis proxy");
    let direct = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&postgres.url())
        .await
        .expect("connect to PostgreSQL");
    let store = PgStore::builder(direct.clone())
        .schema(SCHEMA.to_owned())
        .build()
        .expect("a valid schema");
    store.migrate().await.expect("migrate the records");
    Queue::new(&store)
        .migrate()
        .await
        .expect("migrate the queue");
    sqlx::raw_sql(&format!(
        "CREATE TABLE \"{SCHEMA}\".effects (key text NOT NULL, micros bigint NOT NULL, run text NOT NULL)"
    ))
    .execute(&direct)
    .await
    .expect("create the effects table");
    SqliteStore::open(dir.join("faults.sqlite"))
        .await
        .expect("open the SQLite store")
        .migrate()
        .await
        .expect("migrate the SQLite store");

    let campaign = Arc::new(Campaign {
        args,
        dir,
        postgres,
        redis,
        pg_proxy,
        redis_proxy,
        slots: Mutex::new(Vec::new()),
    });
    let seconds = Duration::from_secs(campaign.args.seconds);
    let faults_end = seconds.saturating_sub(Duration::from_secs(campaign.args.quiet));
    let schedule = plan::schedule(campaign.args.seed, Duration::from_secs(2), faults_end);
    println!(
        "idem-faults: seed {}, {} s, {} faults scheduled until {} s; ledgers and logs in {}",
        campaign.args.seed,
        campaign.args.seconds,
        schedule.len(),
        faults_end.as_secs(),
        campaign.dir.display()
    );
    campaign.start_processes();
    let epoch = Instant::now();
    let started = std::time::SystemTime::now();
    let enqueuer = tokio::spawn(enqueue_until(Queue::new(&store), epoch + faults_end));
    let http_clients = tokio::spawn(super::http::run(
        campaign.http_ports(),
        Ledger::open(&campaign.dir.join(Workload::Http.ledger())).expect("open the ledger"),
        campaign.args.tasks,
        epoch + faults_end,
        epoch + seconds + Duration::from_secs(30),
    ));
    let injections: Vec<_> = schedule
        .into_iter()
        .map(|planned| {
            let campaign = campaign.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until((epoch + planned.at).into()).await;
                campaign.inject(planned).await
            })
        })
        .collect();
    let mut injected = Vec::new();
    for injection in injections {
        injected.push(injection.await.expect("an injection"));
    }
    let enqueued = enqueuer.await.expect("the enqueuer");

    // Every tick due by the time the last fault ended must run; later ones may not have had
    // their time before the processes stop.
    let ticks = Ticks {
        from: started,
        until: std::time::SystemTime::now(),
    };
    let last_tick = ticks.keys().last().cloned().unwrap_or_default();
    // The quiet end: queued work (those ticks included) drains, then every process is told
    // to stop.
    let queue_deadline = epoch + seconds.max(faults_end + LEASE * 4) + Duration::from_secs(30);
    while Instant::now() < queue_deadline && unfinished_jobs(&direct, &last_tick).await != Some(0) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let http_held = http_clients.await.expect("the HTTP clients");
    tokio::time::sleep_until((epoch + seconds).into()).await;
    let unstopped = campaign.stop_processes().await;

    let mut report = Vec::new();
    for workload in Workload::ALL {
        let (mut tally, entries) = campaign.settle(workload, &direct, http_held, &ticks).await;
        let pid = |run: &str| run.split('.').next().and_then(|p| p.parse::<u32>().ok());
        tally.excuse_stalled(&entries, |done, effect| {
            let slack = 200_000;
            injected.iter().any(|i| {
                matches!(i.fault, Fault::Stop { .. })
                    && i.hit > 0
                    && i.pid.is_some()
                    && i.pid == pid(&effect.run)
                    && i.window.0 <= done.micros
                    && done.micros <= i.window.1
                    && i.window.1 <= effect.micros + slack
            })
        });
        tally.explain(&entries, |first, repeat| {
            let pids = [pid(&first.run), pid(&repeat.run)];
            injected
                .iter()
                .any(|i| i.explains(workload, pids, first.micros, repeat.micros))
        });
        // Per fault that hit: what it can catch at once in each process it reached, for each
        // lease it lasted (work started meanwhile is caught too).
        tally.bound = injected
            .iter()
            .filter(|i| i.hit > 0)
            .flat_map(|i| i.reached.iter().map(move |reached| (i, reached)))
            .filter(|(_, (reached, _))| *reached == workload)
            .map(|(i, (_, processes))| {
                let leases = (i.window.1 - i.window.0)
                    .div_ceil(LEASE.as_micros() as u64)
                    .max(1);
                workload.repeatable_per_process(campaign.args.tasks) * *processes as u64 * leases
            })
            .sum();
        report.push((workload, tally));
    }
    print_report(&injected, &report, enqueued);
    let mut ok = unstopped == 0;
    if unstopped > 0 {
        println!("FAILED: {unstopped} worker processes did not stop on SIGTERM");
    }
    for (workload, tally) in &report {
        for broken in tally.violations() {
            println!("FAILED: {}: {broken}", workload.name());
            ok = false;
        }
        if !tally.violations().is_empty() {
            for example in &tally.examples {
                println!("  {example}");
            }
        }
    }
    for (target, kind, count, hit, _) in by_kind(&injected) {
        if hit == 0 {
            println!("FAILED: {count} {kind} faults on {target:?}, and none hit anything");
            ok = false;
        }
    }
    direct.close().await;
    if ok && campaign.args.dir.is_none() {
        let _ = std::fs::remove_dir_all(&campaign.dir);
    }
    ok
}

impl Campaign {
    fn start_processes(&self) {
        let mut slots = self.slots.lock().unwrap();
        for workload in Workload::ALL {
            for _ in 0..self.args.processes {
                let started = slots.len() as u64;
                let port = if workload == Workload::Http {
                    idem_testdb::free_port().expect("a free port")
                } else {
                    0
                };
                slots.push(Slot {
                    workload,
                    child: self.spawn(workload, started, port),
                    started,
                    port,
                });
            }
        }
    }

    /// The HTTP servers' ports.
    fn http_ports(&self) -> Vec<u16> {
        let slots = self.slots.lock().unwrap();
        slots.iter().map(|s| s.port).filter(|p| *p != 0).collect()
    }

    fn spawn(&self, workload: Workload, nth: u64, port: u16) -> Child {
        let url = match workload.server() {
            Some(Target::Redis) => format!("redis://127.0.0.1:{}", self.redis_proxy.port()),
            Some(_) => format!(
                "postgres://postgres@127.0.0.1:{}/postgres",
                self.pg_proxy.port()
            ),
            None => self.dir.join("faults.sqlite").display().to_string(),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{workload:?}.log")))
            .expect("open the process log");
        Command::new(std::env::current_exe().expect("this binary"))
            .arg("worker")
            .arg(
                clap::ValueEnum::to_possible_value(&workload)
                    .expect("every workload has a name")
                    .get_name(),
            )
            .args(["--url", &url])
            .arg("--ledger")
            .arg(self.dir.join(workload.ledger()))
            .args(["--tasks", &self.args.tasks.to_string()])
            .args(["--seed", &(self.args.seed * 1_000 + nth).to_string()])
            .args(["--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start a worker process")
    }

    /// Injects `planned` and reports what it hit.
    async fn inject(&self, planned: Planned) -> Injected {
        let Planned {
            target,
            fault,
            victim,
            ..
        } = planned;
        if target == Target::Process {
            return self.signal(fault, victim).await;
        }
        let proxy = match target {
            Target::Redis => &self.redis_proxy,
            _ => &self.pg_proxy,
        };
        let hits = proxy.hits();
        let counted = || match fault {
            Fault::Latency { .. } => hits.delayed.load(Ordering::Relaxed),
            Fault::Reset => hits.reset.load(Ordering::Relaxed),
            Fault::HalfOpen { .. } | Fault::Stall { .. } => hits.stalled.load(Ordering::Relaxed),
            _ => hits.stalled.load(Ordering::Relaxed) + hits.refused.load(Ordering::Relaxed),
        };
        let before = counted();
        let from = ledger::now_micros();
        let settle = Duration::from_millis(200);
        let hit = match fault {
            Fault::Latency { delay, lasting } => {
                proxy.set(Net::Slow(delay));
                tokio::time::sleep(lasting).await;
                proxy.set(Net::Healthy);
                counted() - before
            }
            Fault::Reset => {
                proxy.reset();
                tokio::time::sleep(settle).await;
                counted() - before
            }
            Fault::HalfOpen { lasting }
            | Fault::Partition { lasting }
            | Fault::Stall { lasting } => {
                proxy.set(if matches!(fault, Fault::Partition { .. }) {
                    Net::Partitioned
                } else {
                    Net::Stalled
                });
                tokio::time::sleep(lasting).await;
                if !matches!(fault, Fault::Stall { .. }) {
                    proxy.reset_held();
                    tokio::time::sleep(settle).await;
                }
                proxy.set(Net::Healthy);
                tokio::time::sleep(settle).await;
                counted() - before
            }
            Fault::Restart { down } => self.restart(target, down).await,
            Fault::Kill | Fault::Stop { .. } => unreachable!("faults of processes"),
        };
        let reached = Workload::ALL
            .into_iter()
            .filter(|w| w.server() == Some(target))
            .map(|w| (w, self.args.processes))
            .collect();
        Injected {
            target,
            fault,
            hit,
            reached,
            window: (from, ledger::now_micros()),
            pid: None,
        }
    }

    /// Ends the server at once, keeps it down for `down`, and starts it again. Hits 1 when it
    /// went down and came back.
    async fn restart(&self, target: Target, down: Duration) -> u64 {
        let (postgres, redis) = (self.postgres.clone(), self.redis.clone());
        let stopped = tokio::task::spawn_blocking(move || match target {
            Target::Redis => redis.kill().is_ok(),
            _ => postgres.stop().is_ok(),
        })
        .await
        .unwrap_or(false);
        tokio::time::sleep(down).await;
        let (postgres, redis) = (self.postgres.clone(), self.redis.clone());
        tokio::task::spawn_blocking(move || match target {
            Target::Redis => redis.start_again(),
            _ => postgres.start_again(),
        })
        .await
        .expect("a restart")
        .expect("the server starts again");
        u64::from(stopped)
    }

    /// SIGKILLs (and replaces) or SIGSTOPs (and later continues) a worker process. Hits 1 when
    /// the process was seen killed or stopped.
    async fn signal(&self, fault: Fault, victim: u64) -> Injected {
        let (pid, workload, port) = {
            let slots = self.slots.lock().unwrap();
            let slot = &slots[(victim % slots.len() as u64) as usize];
            (slot.child.id(), slot.workload, slot.port)
        };
        let from = ledger::now_micros();
        let hit = match fault {
            Fault::Kill => {
                let index = {
                    let mut slots = self.slots.lock().unwrap();
                    let index = (victim % slots.len() as u64) as usize;
                    let _ = slots[index].child.kill();
                    index
                };
                // Reaped without blocking the runtime (the proxies run on it).
                let killed = loop {
                    let status = self.slots.lock().unwrap()[index].child.try_wait();
                    match status {
                        Ok(Some(status)) => {
                            break std::os::unix::process::ExitStatusExt::signal(&status) == Some(9)
                        }
                        Ok(None) => tokio::time::sleep(Duration::from_millis(10)).await,
                        Err(_) => break false,
                    }
                };
                let mut slots = self.slots.lock().unwrap();
                let nth = slots.iter().map(|s| s.started).max().unwrap_or(0) + 1;
                let child = self.spawn(workload, nth, port);
                let slot = &mut slots[index];
                slot.child = child;
                slot.started = nth;
                u64::from(killed)
            }
            Fault::Stop { lasting } => {
                let stopped = send(pid, "STOP") && stops(pid).await;
                tokio::time::sleep(lasting).await;
                send(pid, "CONT");
                u64::from(stopped)
            }
            _ => unreachable!("faults of the network"),
        };
        // A SQLite process stopped with the file's write lock stalls every SQLite process.
        let reached = match workload {
            Workload::SqliteLease => self.args.processes,
            _ => 1,
        };
        Injected {
            target: Target::Process,
            fault,
            hit,
            reached: vec![(workload, reached)],
            window: (from, ledger::now_micros()),
            pid: Some(pid),
        }
    }

    /// Sends SIGTERM to every process and waits for them; returns how many had to be killed
    /// after 30 s. Waits without blocking the runtime, whose threads run the proxies that the
    /// processes' last statements go through.
    async fn stop_processes(&self) -> usize {
        let pids: Vec<u32> = self
            .slots
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.child.id())
            .collect();
        for pid in pids {
            send(pid, "TERM");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut unstopped = 0;
        let count = self.slots.lock().unwrap().len();
        for index in 0..count {
            while !self.exited(index, Instant::now() > deadline) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if Instant::now() > deadline {
                unstopped += 1;
            }
        }
        unstopped
    }

    /// Whether slot `index`'s process has exited; with `kill`, it is killed first, and has.
    fn exited(&self, index: usize, kill: bool) -> bool {
        let mut slots = self.slots.lock().unwrap();
        let child = &mut slots[index].child;
        if kill {
            let _ = child.kill();
            let _ = child.wait();
            return true;
        }
        matches!(child.try_wait(), Ok(Some(_)))
    }

    /// Delivers once more, straight to the server, every key a call workload left unfinished
    /// (as a scheduler's retry would), then counts its ledger.
    /// Returns the tally and the entries it counted, in the order they happened.
    async fn settle(
        &self,
        workload: Workload,
        direct: &PgPool,
        http_held: u64,
        ticks: &Ticks,
    ) -> (Tally, Vec<Entry>) {
        let path = self.dir.join(workload.ledger());
        if workload.is_queue() {
            return queue_tally(workload, &path, direct, ticks).await;
        }
        if workload == Workload::Http {
            // Its clients delivered every key they took until it was answered.
            let mut entries = ledger::read(&path);
            entries.sort_by_key(|e| e.micros);
            let mut tally = Tally::count(&entries, []);
            tally.held = http_held;
            tally.lost -= http_held.min(tally.lost);
            return (tally, entries);
        }
        let ledger = Ledger::open(&path).expect("open the ledger");
        let entries = ledger::read(&path);
        let mut unfinished: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
        unfinished.sort_unstable();
        unfinished.dedup();
        let done: std::collections::BTreeSet<&str> = entries
            .iter()
            .filter(|e| e.kind == 'D')
            .map(|e| e.key.as_str())
            .collect();
        unfinished.retain(|key| !done.contains(key));
        let pg = PgStore::builder(direct.clone())
            .schema(SCHEMA.to_owned())
            .build()
            .expect("a valid schema");
        let (store, inspect): (Arc<dyn Store>, Arc<dyn Inspect>) = match workload {
            Workload::RedisLease => {
                let redis = RedisStore::connect(&self.redis.url())
                    .await
                    .expect("connect to Redis")
                    .prefix("faults");
                (Arc::new(redis.clone()), Arc::new(redis))
            }
            Workload::SqliteLease => {
                let sqlite = SqliteStore::open(self.dir.join("faults.sqlite"))
                    .await
                    .expect("open the SQLite store");
                (Arc::new(sqlite.clone()), Arc::new(sqlite))
            }
            _ => (Arc::new(pg.clone()), Arc::new(pg.clone())),
        };
        let scope = match workload {
            Workload::PgTransaction => "faults-transaction",
            _ => "faults-lease",
        };
        let mut held = 0;
        for key in &unfinished {
            for _ in 0..5 {
                let wait = LEASE + Duration::from_secs(2);
                let outcome = if workload == Workload::PgTransaction {
                    let key = key.to_string();
                    Call::new(&pg, key.as_str())
                        .scope(scope)
                        .wait(wait)
                        .run_in_transaction_replay(move |tx| {
                            Box::pin(async move {
                                let run = ledger::run_id();
                                worker::record_effect(tx, &key, &run).await.map(|()| run)
                            })
                        })
                        .await
                } else {
                    Call::new(&*store, *key)
                        .scope(scope)
                        .lease(LEASE)
                        .wait(wait)
                        .run_replay(async {
                            let run = ledger::run_id();
                            ledger.effect(key, &run);
                            Ok::<_, sqlx::Error>(run)
                        })
                        .await
                };
                if let Ok(Outcome::InProgress { .. }) = outcome {
                    held += 1;
                    break;
                }
                match worker::answer(outcome) {
                    Some(run) => {
                        ledger.done(key, &run);
                        break;
                    }
                    None => eprintln!("settling {key} of {}: failed", workload.name()),
                }
            }
        }
        let mut entries = ledger::read(&path);
        if workload == Workload::PgTransaction {
            entries.retain(|e| e.kind != 'E');
            entries.extend(effects(direct).await);
        }
        let completions = completions(&*inspect, scope, &entries).await;
        entries.extend(completions);
        entries.sort_by_key(|e| e.micros);
        let mut tally = Tally::count(&entries, []);
        tally.held = held;
        tally.lost -= held.min(tally.lost);
        (tally, entries)
    }
}

/// When the store completed each key with more than one effect, as `D` entries: a caller told
/// "done" may have been killed before it noted so, and an effect begun after the store's
/// completion is a repeat after completion, whoever was told. (Records read back this way
/// carry no output: the answers are checked where callers got them.)
async fn completions(inspect: &dyn Inspect, scope: &str, entries: &[Entry]) -> Vec<Entry> {
    let mut effects: std::collections::BTreeMap<&str, u32> = Default::default();
    for entry in entries.iter().filter(|e| e.kind == 'E') {
        *effects.entry(entry.key.as_str()).or_default() += 1;
    }
    let mut completed = Vec::new();
    for (key, _) in effects.into_iter().filter(|(_, n)| *n > 1) {
        let records = inspect
            .find(key, Some(scope))
            .await
            .expect("read a record back");
        for found in records {
            if let RecordState::Completed { completed_at, .. } = found.record.state {
                completed.push(Entry {
                    kind: 'D',
                    key: key.to_owned(),
                    micros: completed_at
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_micros() as u64),
                    run: String::new(),
                });
            }
        }
    }
    completed
}

/// The effects committed by transactional calls.
async fn effects(direct: &PgPool) -> Vec<Entry> {
    let rows: Vec<(String, i64, String)> = sqlx::query_as(&format!(
        "SELECT key, micros, run FROM \"{SCHEMA}\".effects"
    ))
    .fetch_all(direct)
    .await
    .expect("read the effects");
    rows.into_iter()
        .map(|(key, micros, run)| Entry {
            kind: 'E',
            key,
            micros: micros as u64,
            run,
        })
        .collect()
}

/// A queue workload's tally: its effects against its jobs' completions, every job enqueued
/// required done. A job still running (its claim held) counts as held, not lost.
/// For the schedule's ticks, `ticks` gives the ones that must have run: every tick from the
/// first enqueued to the last before the cut-off, none skipped (later ticks, which the run may
/// have stopped before, are left out).
async fn queue_tally(
    workload: Workload,
    path: &Path,
    direct: &PgPool,
    ticks: &Ticks,
) -> (Tally, Vec<Entry>) {
    let mut jobs: Vec<(String, String, Option<i64>, i32)> = sqlx::query_as(&format!(
        "SELECT key, state::text, (extract(epoch FROM finished_at) * 1000000)::bigint, attempts
         FROM \"{SCHEMA}\".idem_records_queue WHERE queue = $1"
    ))
    .bind(workload.queue_name())
    .fetch_all(direct)
    .await
    .expect("read the jobs");
    let mut entries = ledger::read(path);
    let mut required: Vec<String> = jobs.iter().map(|(key, ..)| key.clone()).collect();
    if workload == Workload::Schedules {
        // From the first tick enqueued (a scheduler starts firing once it reaches the
        // database), but no later than the first due after a start-up allowance: a schedule
        // that never fired, or began late, has lost the ticks it skipped.
        let expected = ticks.keys();
        let allowance = ticks.key_after(Duration::from_secs(10));
        let first = jobs.iter().map(|(key, ..)| key.clone()).min();
        let from = match first {
            Some(first) => first.min(allowance),
            None => allowance,
        };
        required = expected.into_iter().filter(|key| *key >= from).collect();
        let last = required.last().cloned().unwrap_or_default();
        jobs.retain(|(key, ..)| *key <= last);
        entries.retain(|e| e.key <= last);
    }
    entries.extend(jobs.iter().filter(|(_, state, _, _)| state == "done").map(
        |(key, _, finished, _)| Entry {
            kind: 'D',
            key: key.clone(),
            micros: finished.unwrap_or(0) as u64,
            run: String::new(),
        },
    ));
    let store = PgStore::builder(direct.clone())
        .schema(SCHEMA.to_owned())
        .build()
        .expect("a valid schema");
    let completions = completions(&store, idem_queue::QUEUE_SCOPE, &entries).await;
    entries.extend(completions);
    entries.sort_by_key(|e| e.micros);
    let mut tally = Tally::count(&entries, required.iter().map(String::as_str));
    tally.held = jobs
        .iter()
        .filter(|(_, state, ..)| state == "running")
        .count() as u64;
    tally.lost -= tally.held.min(tally.lost);
    for example in &mut tally.examples {
        let key = example.split(": ").next().unwrap_or_default().to_owned();
        if let Some((_, state, _, attempts)) = jobs.iter().find(|(k, ..)| *k == key) {
            example.push_str(&format!(" (the job: {state}, attempts {attempts})"));
        }
    }
    (tally, entries)
}

/// The ticks the schedule must have run: one a second from the run's start to the cut-off.
struct Ticks {
    from: std::time::SystemTime,
    until: std::time::SystemTime,
}

impl Ticks {
    /// The key of the first tick due `after` the start.
    fn key_after(&self, after: Duration) -> String {
        let schedule = super::workload::tick_schedule();
        let at = schedule
            .next_after(self.from + after)
            .expect("an interval schedule always has a next tick");
        schedule.tick_key(at)
    }

    /// Their jobs' keys, in order.
    fn keys(&self) -> Vec<String> {
        let schedule = super::workload::tick_schedule();
        let mut keys = Vec::new();
        let mut at = self.from;
        while let Some(next) = schedule.next_after(at).filter(|next| *next <= self.until) {
            keys.push(schedule.tick_key(next));
            at = next;
        }
        keys
    }
}

/// Jobs the campaign enqueued, and ticks up to `last_tick`, not yet finished, or `None` when
/// the server cannot say.
async fn unfinished_jobs(direct: &PgPool, last_tick: &str) -> Option<i64> {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{SCHEMA}\".idem_records_queue
         WHERE (queue IN ('plain', 'prefetch') OR (queue = 'ticks' AND key <= $1))
           AND state NOT IN ('done', 'dead', 'cancelled')"
    ))
    .bind(last_tick)
    .fetch_one(direct)
    .await
    .ok()
}

/// Enqueues jobs for both queue workloads, 10 each every 100 ms, until `until`. Returns how
/// many were enqueued. A batch refused by a fault is enqueued again on the next turn (its keys
/// are the same, so a batch that did commit is not stored twice).
async fn enqueue_until(queue: Queue, until: Instant) -> u64 {
    let mut next = 0u64;
    let mut enqueued = 0;
    while Instant::now() < until {
        let jobs = [Workload::Queue, Workload::QueuePrefetch]
            .into_iter()
            .flat_map(|workload| {
                (next..next + 10).map(move |n| {
                    NewJob::new(format!("{}:{n}", workload.queue_name()).as_str(), &n)
                        .expect("a valid job")
                        .queue(workload.queue_name())
                        .max_attempts(100)
                })
            })
            .collect();
        if let Ok(answers) = queue.enqueue_many(jobs).await {
            enqueued += answers.iter().filter(|a| a.is_ok()).count() as u64;
            next += 10;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    enqueued
}

/// `kill -SIGNAL pid`; whether it was sent.
fn send(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether process `pid` is seen stopped (`T` in `/proc`) within 3 s: a signal is delivered
/// a moment after `kill` returns, later on a starved machine.
async fn stops(pid: u32) -> bool {
    let state = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')').next()?.trim_start().chars().next()
    };
    for _ in 0..300 {
        if state() == Some('T') {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Each target's faults by kind: (target, kind, injected, of them hit, counted hits).
fn by_kind(injected: &[Injected]) -> Vec<(Target, &'static str, u64, u64, u64)> {
    let mut kinds: std::collections::BTreeMap<(Target, &'static str), (u64, u64, u64)> =
        Default::default();
    for i in injected {
        let entry = kinds.entry((i.target, i.fault.kind())).or_default();
        entry.0 += 1;
        entry.1 += u64::from(i.hit > 0);
        entry.2 += i.hit;
    }
    kinds
        .into_iter()
        .map(|((target, kind), (count, hit, counted))| (target, kind, count, hit, counted))
        .collect()
}

fn print_report(injected: &[Injected], report: &[(Workload, Tally)], enqueued: u64) {
    println!();
    println!("| target | fault | injected | hit | counted where it hit |");
    println!("|---|---|---:|---:|---|");
    for (target, kind, count, hit, counted) in by_kind(injected) {
        let unit = match kind {
            "latency spike" => "chunks delayed at the proxy",
            "connection reset" => "connections reset at the proxy",
            "half-open" => "connections held at the proxy, then reset",
            "stall, then late delivery" => "connections held at the proxy, then let through",
            "partition" => "connections held or refused at the proxy",
            "server restart" => "server seen down",
            "SIGKILL" => "processes seen killed",
            _ => "processes seen stopped",
        };
        println!("| {target:?} | {kind} | {count} | {hit} | {counted} {unit} |");
    }
    println!();
    println!("{enqueued} jobs enqueued.");
    println!();
    println!(
        "| workload | keys | effects | repeats after completion | of a process stopped across it | lost | answers that differ | held past a lease | in-flight repeats (bound) | of them unexplained |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (workload, t) in report {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} |",
            workload.name(),
            t.keys,
            t.effects,
            t.after_done,
            t.stalled_after_done,
            t.lost,
            t.differing,
            t.held,
            t.in_flight,
            t.bound,
            t.unexplained
        );
    }
}
