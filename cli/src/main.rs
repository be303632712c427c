//! `spindle`: runs durable pipelines of shell commands and inspects any store: a file, or (built
//! with the `postgres` feature) a PostgreSQL database; `spindle migrate` copies a file there.
//!
//! Exit codes: 0 the run completed (or the command succeeded), 1 the run failed, 2 bad input
//! (a bad pipeline or arguments), 3 a store error, 130 a run stopped by Ctrl-C (resumable).
//! Errors are one line on stderr.
#![forbid(unsafe_code)]

mod commands;
mod common;
mod log_reader;
mod logging;
mod names;
mod pipeline;
mod run;
mod ui;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands::admin::{self, TenantCmd, TokenCmd};
use crate::commands::{backup, inspect, postgres, schedules};
use crate::common::{Access, CliError, ColorChoice, Location, Output, open};
use crate::pipeline::draw::{self, ShowFormat};
use crate::pipeline::file as pipeline_file;
use crate::run::{attempt, logs, runs};

#[derive(Parser)]
#[command(name = "spindle", version, about = "Durable pipelines and a store inspector")]
struct Cli {
    /// The store: a file, or a PostgreSQL database as a `postgres://` URL (with the
    /// `postgres` feature; the schema as `?options=-csearch_path%3DNAME`).
    #[arg(long, env = "SPINDLE_DB", default_value = "spindle.db", global = true)]
    db: PathBuf,
    /// Where runs' outputs directories go: `<db>.runs` beside a store file, `spindle.runs` in
    /// the current directory for a PostgreSQL store, unless given.
    #[arg(long, env = "SPINDLE_RUNS_DIR", global = true, value_name = "DIR")]
    runs_dir: Option<PathBuf>,
    /// Print listings as JSON.
    #[arg(long, global = true)]
    json: bool,
    /// Print only results and errors: no notes, progress or per-attempt lines.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Colour status words: on a terminal unless NO_COLOR is set (auto), always, or never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    color: ColorChoice,
    /// The tenant to act for.
    #[arg(long, default_value = spindle::DEFAULT_TENANT, global = true)]
    tenant: String,
    /// Tell what the store does on stderr: -v recovery, refusals and slow batches, -vv every
    /// batch and checkpoint, -vvv every op. RUST_LOG (`spindle=debug`, `warn`) overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a pipeline file (or resume its unfinished run).
    Run {
        /// The pipeline file (`.json` or `.toml`).
        pipeline: PathBuf,
        /// Commands run at once (1 to 256).
        #[arg(short = 'j', long, default_value_t = 4,
              value_parser = clap::value_parser!(u16).range(1..=256))]
        jobs: u16,
        /// Start a new run even if an unfinished one exists (it is cancelled).
        #[arg(long)]
        fresh: bool,
        /// Check the file and print the graph it becomes, without opening the store.
        #[arg(long)]
        dry_run: bool,
        /// How --dry-run prints the plan (`--json` is `--format json`).
        #[arg(long, value_enum, requires = "dry_run")]
        format: Option<PlanFormat>,
    },
    /// Re-run the failed nodes of a finished run (or one named failed node) and what was
    /// skipped because of them, keeping every node that succeeded; an unfinished run resumes.
    Retry {
        /// The run: its id, a unique prefix of it, or a pipeline name (its latest run).
        run: String,
        /// Retry only this failed node.
        #[arg(long)]
        node: Option<String>,
        /// Commands run at once (1 to 256).
        #[arg(short = 'j', long, default_value_t = 4,
              value_parser = clap::value_parser!(u16).range(1..=256))]
        jobs: u16,
    },
    /// One line per run: name, status, started, duration, the node that failed it.
    Runs {
        /// Only runs in this status (pending, running, complete, failed, cancelled).
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this pipeline.
        #[arg(long)]
        name: Option<String>,
        /// Only runs created within this long (`30m`, `12h`, `1d`).
        #[arg(long)]
        since: Option<String>,
    },
    /// What a run's commands printed (the last 64 KiB of each node's last attempt).
    Logs {
        /// The run: its id, a unique prefix of it, or a pipeline name (its latest run).
        run: String,
        /// Only this node (under a header); otherwise every node, lines prefixed by its name.
        node: Option<String>,
        /// Keep printing nodes as they finish until the run ends (also a run another process
        /// drives).
        #[arg(long)]
        follow: bool,
    },
    /// Serve the live web dashboard of this store (pages and their JSON API under /api/),
    /// on a loopback address by default (port 0: any free port; the address is printed).
    Ui {
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:7433")]
        addr: String,
        /// Allow queue actions (requeue, purge, cancel, pause, resume) to pages signed in with a writer or
        /// admin API token of the tenant.
        #[arg(long)]
        allow_actions: bool,
        /// Every page and API call needs a session signed in with an API token of the tenant
        /// (needed for --allow-actions on an address other machines reach).
        #[arg(long)]
        require_token: bool,
        /// Another name this server answers to (the `Host` of a request), beside its address
        /// (and `localhost` on loopback); repeatable.
        #[arg(long = "host", value_name = "NAME")]
        hosts: Vec<String>,
    },
    /// List the graphs (runs) in the store.
    Graphs,
    /// Show one graph.
    Graph {
        #[command(subcommand)]
        action: GraphCmd,
    },
    /// Print events: every stream, or one (`graph:ID`, `queue:NAME`, `custom:NAME`, ..).
    Events {
        /// The stream, as KIND:ID.
        #[arg(long)]
        stream: Option<String>,
        /// Print events after this position (or seq, with --stream).
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Keep printing new events, also those written by other processes.
        #[arg(long)]
        follow: bool,
    },
    /// Inspect and repair the work queue.
    Queue {
        #[command(subcommand)]
        action: QueueCmd,
    },
    /// Delete completed and cancelled queue items, finished processes with their events, and
    /// the live logs, dead items and outputs directories of finished runs, older than a
    /// duration (`7d`, `12h`, `30m`). `--json`: `{"pruned"` (queue items), `"processes",
    /// "process_events", "log_events", "output_dirs"}`.
    Prune {
        #[arg(long)]
        older_than: String,
    },
    /// List processes: the running ones (waiting ones included), or every one with `--all`.
    ///
    /// A table of id, kind, label, status (`running (waiting)` while a running process waits)
    /// and when it last changed (epoch milliseconds); with `--json`, an array of the records.
    Processes {
        /// Every status: completed, failed and cancelled processes too.
        #[arg(long)]
        all: bool,
    },
    /// Check the store: integrity, foreign keys, schema version, pragmas, graph counters, and
    /// the kept counts (queues, graphs, processes, workflows) against a recount (on
    /// PostgreSQL: the schema's version record, graph counters and kept counts).
    Check,
    /// Copy the store, while it is in use, into the new file DEST: one consistent snapshot
    /// (every write acknowledged before the copy began), written beside DEST and linked in
    /// whole (a copy cut off leaves nothing at DEST). DEST must not exist. On PostgreSQL, use
    /// pg_dump of the store's schema.
    Backup {
        /// The new file.
        dest: PathBuf,
    },
    /// Put a copy of the backup SRC in the place of the store file --db (made if missing),
    /// after checking it (a Spindle store of a version this build opens, SQLite's integrity
    /// check). Refused while a store has --db open; the old store is replaced only once the
    /// copy is whole.
    Restore {
        /// The backup file (`spindle backup` made it).
        src: PathBuf,
    },
    /// Copy a store file into a PostgreSQL database (every tenant and domain, positions, seqs
    /// and fences kept), then verify the copy table by table (rows and digests). The target's
    /// schema must hold no store data yet. Needs the `postgres` feature.
    Migrate {
        /// The store file to copy (opened once first: an older one is migrated to the current
        /// schema).
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
        /// The PostgreSQL database: `postgres://USER@HOST/DB?options=-csearch_path%3DSCHEMA`
        /// (or a key=value connection string).
        #[arg(long, value_name = "URL")]
        to: String,
    },
    /// List tenants (or create, suspend, activate one).
    Tenants {
        #[command(subcommand)]
        action: Option<TenantCmd>,
    },
    /// Create, list or revoke API tokens of the tenant.
    Tokens {
        #[command(subcommand)]
        action: TokenCmd,
    },
    /// Print a shell's completion script: `spindle completions bash > /etc/bash_completion.d/spindle`,
    /// `spindle completions zsh > ~/.zfunc/_spindle`, `spindle completions fish >
    /// ~/.config/fish/completions/spindle.fish`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Runs one attempt of a node's command for `run` (not for people: see run/attempt.rs).
    #[command(name = "__guard", hide = true)]
    Guard {
        /// The command, for `sh -c`.
        #[arg(last = true)]
        command: String,
    },
}

#[derive(Subcommand)]
enum GraphCmd {
    /// A graph's nodes, their status, attempts and errors.
    Show {
        /// The graph: its id, or a RUN (a run id prefix, or a pipeline name for its latest run).
        id: String,
        /// A table; JSON (nodes and edges with their status, as `--json`); or a drawing with
        /// each node's status and each edge's condition (Graphviz DOT, Mermaid).
        #[arg(long, value_enum)]
        format: Option<ShowFormat>,
    },
}

/// How `run --dry-run` prints the plan.
#[derive(Clone, Copy, clap::ValueEnum)]
enum PlanFormat {
    /// The file's nodes: predecessors, retries, timeout, matrix instances.
    Table,
    /// The graph it becomes, as Graphviz DOT.
    Dot,
    /// The nodes as checked and the graph they become.
    Json,
}

#[derive(Subcommand)]
enum QueueCmd {
    /// Counts per queue.
    Stats,
    /// Dead-lettered items (of one queue, or of every queue).
    Dead { queue: Option<String> },
    /// Give a dead item (or every dead item of a queue) fresh attempts. A run's queue
    /// (`run:RUN`) is refused: its items are the run's (`spindle retry RUN` runs its failed
    /// nodes again).
    Requeue {
        /// The item.
        id: Option<String>,
        /// Requeue every dead item of this queue.
        #[arg(long, conflicts_with = "id")]
        all: Option<String>,
    },
    /// A page of a queue's items of one status, in id order, optionally only those with a tag
    /// and metadata.
    Items {
        /// The queue.
        queue: String,
        /// pending (due now), scheduled, claimed, dead, completed or cancelled.
        #[arg(long, default_value = "pending")]
        status: String,
        /// Only the items with this tag.
        #[arg(long)]
        tag: Option<String>,
        /// Only the items whose metadata has KEY equal to VALUE (a top-level key; given again,
        /// every condition must hold, at most 8). VALUE is JSON if it parses as JSON, else a
        /// string: `n=1` is the number 1, `ok=true` true, `n='"1"'` the string "1", `plan=pro`
        /// the string "pro". Values of other JSON types never match (1 is not "1" or true).
        #[arg(long = "meta", value_name = "KEY=VALUE")]
        meta: Vec<String>,
        /// The items after this id (the last of the page before).
        #[arg(long)]
        after: Option<String>,
        /// How many (at most 1,000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Pause a queue: no worker of any process claims its items until it is resumed; its
    /// claimed items run to their end. A run's queue is refused.
    Pause {
        /// The queue.
        queue: String,
    },
    /// Resume a paused queue.
    Resume {
        /// The queue.
        queue: String,
    },
    /// Limit how many items of a queue are claimed at once, by every worker together (1: one
    /// at a time), or lift the limit with `none`. A run's queue is refused.
    Concurrency {
        /// The queue.
        queue: String,
        /// The limit (at least 1), or `none`.
        limit: String,
    },
    /// Periodic jobs: list them (the default), put, remove, or fire the ticks due now.
    Schedules {
        #[command(subcommand)]
        action: Option<schedules::ScheduleCmd>,
    },
    /// Cancel a live item: a pending one is never run; a claimed one is cancelled under its
    /// running handler (a pool's handler is told, its outcome refused; never retried). A run's
    /// item is refused.
    Cancel {
        /// The item.
        id: String,
    },
    /// Put a claimed item off: pending again, due after DURATION (`30s`, `10m`, ..), its
    /// attempt refunded. Its holder's later writes are refused (LeaseLost). A run's item is
    /// refused.
    Snooze {
        /// The item.
        id: String,
        /// How long until it is due again.
        duration: String,
        /// The fence of the claim to snooze (default: its current one).
        #[arg(long)]
        fence: Option<u64>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(warning) = logging::install(cli.verbose, std::env::var("RUST_LOG").ok()) {
        eprintln!("spindle: {warning}");
    }
    let out = Output::new(cli.json, cli.quiet, cli.color);
    match dispatch(cli, &out) {
        Ok(code) => ExitCode::from(code),
        Err(CliError::Bad(message)) => {
            eprintln!("spindle: {message}");
            ExitCode::from(2)
        }
        Err(CliError::Store(error)) => {
            eprintln!("spindle: store error: {error}{}", store_hint(&error));
            ExitCode::from(3)
        }
        Err(CliError::Internal(message)) => {
            eprintln!("spindle: {message}");
            ExitCode::from(3)
        }
    }
}

/// What to do about a store error.
fn store_hint(error: &spindle::Error) -> &'static str {
    match error {
        spindle::Error::Busy => " (another process is writing the store: try again)",
        spindle::Error::Corrupt(_) => " (`spindle check` says what is wrong with the file)",
        spindle::Error::Forbidden(_) | spindle::Error::TenantSuspended(_) => {
            " (`spindle tenants` shows the tenants and their status)"
        }
        _ => "",
    }
}

/// A run's exit code: 0 complete, 1 failed, 130 stopped by Ctrl-C.
fn exit_code(ending: &run::Ending) -> u8 {
    match ending {
        run::Ending::Complete => 0,
        run::Ending::Failed => 1,
        run::Ending::Interrupted => 130,
    }
}

/// Prints the plan of a checked pipeline (`run --dry-run`).
fn print_plan(pipeline: &pipeline::Pipeline, format: PlanFormat, out: &Output) {
    match format {
        PlanFormat::Table => print!("{}", draw::plan_table(pipeline)),
        PlanFormat::Dot => print!("{}", draw::dot(&draw::of_plan(pipeline))),
        PlanFormat::Json => out.print_json(&draw::plan_json(pipeline)),
    }
}

fn dispatch(cli: Cli, out: &Output) -> Result<u8, CliError> {
    if let Cmd::Guard { command } = &cli.command {
        return Ok(attempt::guard(command));
    }
    if let Cmd::Completions { shell } = &cli.command {
        let mut command = <Cli as clap::CommandFactory>::command();
        clap_complete::generate(*shell, &mut command, "spindle", &mut std::io::stdout());
        return Ok(0);
    }
    let db = Location::of(&cli.db);
    if let Cmd::Run { pipeline, jobs, fresh, dry_run, format } = &cli.command {
        // The file is checked before the store is even opened: bad input writes nothing.
        let pipeline =
            pipeline_file::read(pipeline).map_err(|bad| CliError::Bad(bad.to_string()))?;
        if *dry_run {
            let json = if out.json { PlanFormat::Json } else { PlanFormat::Table };
            print_plan(&pipeline, format.unwrap_or(json), out);
            return Ok(0);
        }
        let store = open(&db, &cli.tenant, Access::Runner)?;
        let runs = db.runs_dir(cli.runs_dir.as_deref())?;
        let request =
            run::Request { pipeline, jobs: usize::from(*jobs), fresh: *fresh, runs: &runs };
        let ending = run::run(&store, request, out)?;
        store.close()?;
        return Ok(exit_code(&ending));
    }
    if let Cmd::Retry { run, node, jobs } = &cli.command {
        // Checked on a read-only view first: bad input is refused before the store is opened
        // to run (which recovers interrupted runs, and so writes).
        let reader = open(&db, &cli.tenant, Access::Reader)?;
        let plan = runs::plan_retry(&reader, run, node.as_deref())?;
        reader.close()?;
        let store = open(&db, &cli.tenant, Access::Runner)?;
        let runs = db.runs_dir(cli.runs_dir.as_deref())?;
        let ending = runs::retry(&store, plan, usize::from(*jobs), &runs, out)?;
        store.close()?;
        return Ok(exit_code(&ending));
    }
    if let Cmd::Check = cli.command {
        return inspect::check(&db, &cli.tenant, out);
    }
    if let Cmd::Backup { dest } = &cli.command {
        backup::backup(&db, &cli.tenant, dest, out)?;
        return Ok(0);
    }
    if let Cmd::Restore { src } = &cli.command {
        backup::restore(src, &db, out)?;
        return Ok(0);
    }
    if let Cmd::Migrate { from, to } = &cli.command {
        postgres::migrate(from, to, out)?;
        return Ok(0);
    }
    let access = match cli.command {
        Cmd::Tenants { action: Some(TenantCmd::Create { .. }) }
        | Cmd::Tokens { action: TokenCmd::Create { .. } } => Access::Administrator,
        Cmd::Tenants { .. } | Cmd::Tokens { .. } => Access::Writer,
        Cmd::Prune { .. }
        | Cmd::Queue {
            action:
                QueueCmd::Requeue { .. }
                | QueueCmd::Pause { .. }
                | QueueCmd::Resume { .. }
                | QueueCmd::Concurrency { .. }
                | QueueCmd::Cancel { .. }
                | QueueCmd::Snooze { .. },
        } => Access::Writer,
        Cmd::Queue { action: QueueCmd::Schedules { action: Some(ref action) } }
            if action.writes() =>
        {
            Access::Writer
        }
        Cmd::Ui { allow_actions: true, .. } => Access::Writer,
        _ => Access::Reader,
    };
    let store = open(&db, &cli.tenant, access)?;
    match cli.command {
        Cmd::Runs { status, name, since } => {
            runs::list(&store, &runs::Filter { status, name, since }, out)?;
        }
        Cmd::Logs { run, node, follow } => logs::logs(&store, &run, node.as_deref(), follow, out)?,
        Cmd::Ui { addr, allow_actions, require_token, hosts } => {
            let settings = ui::Settings { addr, allow_actions, require_token, hosts };
            ui::serve(&store, settings, out)?;
        }
        Cmd::Graphs => inspect::graphs(&store, out)?,
        Cmd::Graph { action: GraphCmd::Show { id, format } } => {
            let json = if out.json { ShowFormat::Json } else { ShowFormat::Table };
            let id = runs::graph_or_run(&store, &id)?;
            inspect::graph(&store, &id, format.unwrap_or(json), out)?;
        }
        Cmd::Events { stream, after, follow } => {
            inspect::events(&store, stream.as_deref(), after, follow, out)?;
        }
        Cmd::Queue { action: QueueCmd::Stats } => inspect::queue_stats(&store, out)?,
        Cmd::Queue { action: QueueCmd::Dead { queue } } => {
            inspect::dead(&store, queue.as_deref(), out)?;
        }
        Cmd::Queue { action: QueueCmd::Requeue { id, all } } => {
            inspect::requeue(&store, id.as_deref(), all.as_deref(), out)?;
        }
        Cmd::Queue { action: QueueCmd::Pause { queue } } => {
            inspect::set_paused(&store, &queue, true, out)?;
        }
        Cmd::Queue { action: QueueCmd::Resume { queue } } => {
            inspect::set_paused(&store, &queue, false, out)?;
        }
        Cmd::Queue { action: QueueCmd::Concurrency { queue, limit } } => {
            inspect::set_concurrency(&store, &queue, &limit, out)?;
        }
        Cmd::Queue { action: QueueCmd::Cancel { id } } => inspect::cancel(&store, &id, out)?,
        Cmd::Queue { action: QueueCmd::Schedules { action } } => {
            let action = action.unwrap_or(schedules::ScheduleCmd::List);
            schedules::schedules(&store, action, out)?;
        }
        Cmd::Queue { action: QueueCmd::Items { queue, status, tag, meta, after, limit } } => {
            let tag = tag.as_deref();
            let page = inspect::ItemsPage { status: &status, tag, meta: &meta, after, limit };
            inspect::items(&store, &queue, page, out)?;
        }
        Cmd::Queue { action: QueueCmd::Snooze { id, duration, fence } } => {
            inspect::snooze(&store, &id, &duration, fence, out)?;
        }
        Cmd::Processes { all } => inspect::processes(&store, all, out)?,
        Cmd::Prune { older_than } => {
            let runs = db.runs_dir(cli.runs_dir.as_deref())?;
            inspect::prune(&store, &runs, &older_than, out)?;
        }
        Cmd::Tenants { action } => admin::tenants(&store, action.unwrap_or(TenantCmd::List), out)?,
        Cmd::Tokens { action } => admin::tokens(&store, action, out)?,
        Cmd::Run { .. }
        | Cmd::Retry { .. }
        | Cmd::Check
        | Cmd::Backup { .. }
        | Cmd::Restore { .. }
        | Cmd::Migrate { .. }
        | Cmd::Guard { .. }
        | Cmd::Completions { .. } => {}
    }
    store.close()?;
    Ok(0)
}
