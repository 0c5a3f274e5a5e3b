//! The command line: every command and flag, with its help text.

use clap::{Parser, Subcommand, ValueEnum};

/// The operator's command for idem's stores (PostgreSQL, SQLite, Redis): what is stuck, what
/// failed, and release or retry one safely. Exit status: 0 done, 1 no such key or job, 2 usage
/// error, 3 refused (a live claim without --force, a forget without --yes), 4 the database failed.
#[derive(Debug, Parser)]
#[command(name = "idem", version)]
pub struct Args {
    /// The store: a PostgreSQL URL, `sqlite://PATH`, or `redis://host:port` (several,
    /// comma-separated: a Redis Cluster's nodes).
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// The store's schema.
    #[arg(long, default_value = "public", global = true)]
    pub schema: String,
    /// The store's table.
    #[arg(long, default_value = "idem_records", global = true)]
    pub table: String,
    /// The key prefix of a Redis store (`RedisStore::prefix`).
    #[arg(long, default_value = "idem", global = true)]
    pub redis_prefix: String,
    /// Print one JSON document instead of a table (fields listed in the crate documentation).
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the store's migrations (the ones its `migrate()` runs; nothing on Redis).
    Migrate,
    /// One key's records: state, fence, lease or completion, holder, fingerprint, output size,
    /// journal entries.
    Show(KeyArgs),
    /// Records, newest first.
    List {
        /// Only records in this state (`stale`: claimed, lease lapsed: its run died).
        #[arg(long, value_enum)]
        state: Option<State>,
        /// Only records in this scope.
        #[arg(long)]
        scope: Option<String>,
        /// Only keys starting with this.
        #[arg(long)]
        prefix: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Free a claim so the next delivery runs it. Refuses a live lease unless --force.
    Release {
        /// The key.
        #[command(flatten)]
        key: KeyArgs,
        /// Release even a live claim: its run may still be going, and the next delivery then runs
        /// beside it (a double run).
        #[arg(long)]
        force: bool,
    },
    /// Delete a completed record so the work runs again on its next delivery. Asks for --yes.
    Forget {
        /// The key.
        #[command(flatten)]
        key: KeyArgs,
        /// Really delete it.
        #[arg(long)]
        yes: bool,
    },
    /// A key's effect journal: each effect, its state, when.
    Effects(KeyArgs),
    /// Delete expired records and journal entries, in batches, printing counts.
    Purge {
        /// Only count what would be deleted.
        #[arg(long)]
        dry_run: bool,
        /// Rows per batch.
        #[arg(long, default_value_t = 10_000)]
        batch: usize,
    },
    /// The work queue.
    #[command(subcommand)]
    Jobs(Jobs),
    /// The work queue's schedules (PostgreSQL).
    #[command(subcommand)]
    Schedules(Schedules),
    /// Run the stored schedules (`schedules add`) and their HTTP jobs until SIGTERM, then drain.
    /// Every replica may run it: each tick runs once. It serves the named queue `idem-http` only,
    /// where `schedules add` puts the ticks' jobs, so a program's jobs are never its to run.
    Worker {
        /// Jobs run at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
    },
    /// Serve the web dashboard until SIGTERM: records (every store), and on PostgreSQL the work
    /// queue and schedules, with the actions of these commands. Without --token it binds only a
    /// loopback address, and prints a token made at start that actions need.
    Ui {
        /// The address to listen on (port 0: any free port, printed).
        #[arg(long, default_value = "127.0.0.1:7780")]
        addr: std::net::SocketAddr,
        /// Every page and action needs this token (a login form asks for it). Prefer the
        /// environment variable: a command line is visible to every user of the machine.
        #[arg(long, env = "IDEM_UI_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Refuse every action.
        #[arg(long)]
        read_only: bool,
        /// Operators reach the dashboard over HTTPS (a TLS proxy in front of it): the session
        /// cookie is `Secure`, so no browser sends it over plain HTTP.
        #[arg(long)]
        https: bool,
    },
}

/// The schedules' commands.
#[derive(Debug, Subcommand)]
pub enum Schedules {
    /// Every schedule: what it fires on, its last and next tick, missed ticks, last success,
    /// whether it is paused.
    List,
    /// Store a schedule that POSTs to a URL on every tick (`idem worker` runs it), replacing a
    /// stored one of the same name. The request carries `Idempotency-Key: <the tick's key>`,
    /// the same on every attempt of one tick.
    Add {
        /// The schedule's name.
        name: String,
        /// A 5- or 6-field (seconds first) cron expression.
        #[arg(long)]
        cron: String,
        /// The IANA time zone the expression is read in.
        #[arg(long, default_value = "UTC")]
        tz: String,
        /// The URL each tick POSTs to.
        #[arg(long)]
        post: String,
        /// The JSON body of each POST.
        #[arg(long, default_value = "{}")]
        body: String,
        /// How far back ticks missed while no worker ran are still run (`30s`, `5m`, `1h`).
        #[arg(long, value_parser = humantime::parse_duration)]
        catch_up: Option<std::time::Duration>,
    },
    /// Pause a schedule without a deploy: its ticks are passed over, neither run nor missed.
    Pause {
        /// The schedule's name.
        name: String,
    },
    /// Resume a paused schedule from its next tick.
    Resume {
        /// The schedule's name.
        name: String,
    },
    /// Delete a schedule's state (for one removed from the code; its jobs stay).
    Remove {
        /// The schedule's name.
        name: String,
    },
}

/// A key, and the scope it is in (all scopes when not given, where that is unambiguous).
#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    /// The key.
    pub key: String,
    /// Its scope (a handler's name, or a scope given with `scope = ".."`).
    #[arg(long)]
    pub scope: Option<String>,
}

/// Record states for `list --state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum State {
    /// Claimed, lease live: running now.
    Claimed,
    /// Claimed, lease lapsed: its run died or stalled; the next delivery takes it over.
    Stale,
    /// Completed.
    Completed,
}

/// The work queue's commands.
#[derive(Debug, Subcommand)]
pub enum Jobs {
    /// Counts of jobs by state.
    Stats,
    /// Jobs, newest first.
    List {
        /// Only jobs in this state.
        #[arg(long, value_enum)]
        state: Option<JobState>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// One job.
    Show {
        /// The job's key.
        id: String,
    },
    /// Put a dead job back in the queue (its attempts start again).
    Retry {
        /// The job's key.
        #[arg(required_unless_present = "all_dead", conflicts_with = "all_dead")]
        id: Option<String>,
        /// Every dead job.
        #[arg(long)]
        all_dead: bool,
    },
    /// Delete a dead or cancelled job.
    Discard {
        /// The job's key.
        id: String,
    },
    /// Cancel a job: one waiting to run never runs; a running one is told to stop (its
    /// handler hears it at the next lease renewal) and ends cancelled unless it finishes first.
    Cancel {
        /// The job's key.
        id: String,
        /// Why, kept as the job's last error.
        #[arg(long, default_value = "cancelled by an operator")]
        reason: String,
    },
}

/// Job states for `jobs list --state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobState {
    /// Waiting to run.
    Queued,
    /// Claimed by a worker.
    Running,
    /// Claimed, its lease lapsed: the worker died or stalled (`worker` names it), and the next
    /// claim takes the job again. (A job's record is written only when its run needs one, so
    /// `idem list --state stale` may not show it.)
    Stale,
    /// Finished.
    Done,
    /// Failed its last attempt.
    Dead,
    /// Cancelled: it will not run again.
    Cancelled,
}

impl From<JobState> for idem_queue::JobFilter {
    /// The queue's filter for the state named on the command line (which spells it as the
    /// filter does: [`JobFilter::as_str`](idem_queue::JobFilter::as_str)).
    fn from(state: JobState) -> Self {
        match state {
            JobState::Queued => Self::Queued,
            JobState::Running => Self::Running,
            JobState::Stale => Self::Stale,
            JobState::Done => Self::Done,
            JobState::Dead => Self::Dead,
            JobState::Cancelled => Self::Cancelled,
        }
    }
}
