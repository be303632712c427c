//! `spindle queue schedules`: list, put, remove and fire the store's periodic jobs.

use clap::Subcommand;
use serde_json::{Value, json};
use spindle::{Cadence, CatchUp, NewItem, Page, Schedule, ScheduleInfo, Store};

use crate::common::{CliError, Output, human_time, parse_duration_ms};
use crate::names::owned_by_run;

/// What `spindle queue schedules` does (default: list).
#[derive(Subcommand)]
pub enum ScheduleCmd {
    /// Every schedule: its cadence, queue, catch-up, next and last tick.
    List,
    /// Create or replace a schedule: its item is enqueued into QUEUE once per tick, whichever
    /// process fires it. Putting the same cadence again keeps its ticks.
    Put(Box<PutArgs>),
    /// Remove a schedule; the items it enqueued stay.
    Remove {
        /// The schedule's name.
        name: String,
    },
    /// Fire the ticks due now (the store and worker pools do so by themselves).
    Run,
}

/// What `spindle queue schedules put` takes.
#[derive(clap::Args)]
pub struct PutArgs {
    /// The schedule's name.
    name: String,
    /// The queue its items go to (a run's queue is refused).
    #[arg(long)]
    queue: String,
    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week), 6 with
    /// seconds first, 7 with a year last; or a nickname (@hourly, @daily, ..).
    #[arg(long, conflicts_with = "every", required_unless_present = "every")]
    cron: Option<String>,
    /// The time zone the cron expression reads the wall clock of (an IANA name).
    #[arg(long, requires = "cron", default_value = "UTC")]
    tz: String,
    /// A fixed interval instead (`30s`, `15m`, `1h`, `1d`), at its multiples since the Unix
    /// epoch.
    #[arg(long)]
    every: Option<String>,
    /// The item's payload, as JSON.
    #[arg(long, default_value = "{}")]
    payload: String,
    /// The item's priority (higher first).
    #[arg(long, default_value_t = 0)]
    priority: i64,
    /// The item's attempts before it is dead-lettered.
    #[arg(long, default_value_t = 3)]
    max_attempts: u32,
    /// A tag of the item (repeat for more).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// The item's metadata, a JSON object (each tick's item also gets `schedule`).
    #[arg(long)]
    metadata: Option<String>,
    /// How long a worker pool lets one attempt of the item run (`30s`, `10m`, ..).
    #[arg(long)]
    run_timeout: Option<String>,
    /// After downtime, enqueue the latest N missed ticks (default: only the latest).
    #[arg(long)]
    backfill: Option<u32>,
}

impl ScheduleCmd {
    /// Whether the command writes.
    pub fn writes(&self) -> bool {
        !matches!(self, ScheduleCmd::List)
    }
}

/// Runs `action`.
pub fn schedules(store: &Store, action: ScheduleCmd, out: &Output) -> Result<(), CliError> {
    match action {
        ScheduleCmd::List => list(store, out),
        ScheduleCmd::Put(args) => put(store, args, out),
        ScheduleCmd::Remove { name } => {
            let removed = store.queue().remove_schedule(&name)?;
            if out.json {
                out.print_json(&json!({ "name": name, "removed": removed }));
            } else if removed {
                println!("removed schedule {name}");
            } else {
                println!("no schedule {name}");
            }
            Ok(())
        }
        ScheduleCmd::Run => {
            let fired = store.queue().run_schedules()?;
            if out.json {
                out.print_json(&json!({ "enqueued": fired }));
            } else {
                println!("enqueued {fired} item(s)");
            }
            Ok(())
        }
    }
}

/// Puts the schedule `args` describe; reports it as kept.
fn put(store: &Store, args: Box<PutArgs>, out: &Output) -> Result<(), CliError> {
    owned_by_run(&args.queue, "schedule").map_err(CliError::Bad)?;
    let payload = json_arg("--payload", &args.payload)?;
    let mut item =
        NewItem::new(args.queue, payload).priority(args.priority).max_attempts(args.max_attempts);
    item.tags = args.tags;
    if let Some(metadata) = &args.metadata {
        item = item.metadata(json_arg("--metadata", metadata)?);
    }
    if let Some(timeout) = &args.run_timeout {
        item = item.run_timeout_ms(parse_duration_ms(timeout)?);
    }
    let mut schedule = match (args.cron, args.every) {
        (Some(cron), _) => Schedule::cron(args.name, cron, item).time_zone(args.tz),
        (None, Some(every)) => Schedule::every(args.name, parse_duration_ms(&every)?, item),
        (None, None) => return Err(CliError::Bad("give --cron or --every".into())),
    };
    if let Some(ticks) = args.backfill {
        schedule = schedule.backfill(ticks);
    }
    let info = store.queue().put_schedule(schedule)?;
    report(out, &info);
    Ok(())
}

/// The JSON text of the option `flag`.
fn json_arg(flag: &str, text: &str) -> Result<Value, CliError> {
    serde_json::from_str(text)
        .map_err(|error| CliError::Bad(format!("{flag} is not JSON: {error}")))
}

/// Every schedule, as a table or as JSON.
fn list(store: &Store, out: &Output) -> Result<(), CliError> {
    let schedules = all_schedules(store)?;
    if out.json {
        out.print_json(&Value::Array(schedules.iter().map(schedule_json).collect()));
        return Ok(());
    }
    if schedules.is_empty() {
        println!("no schedules (spindle queue schedules put NAME --queue Q --cron EXPR)");
        return Ok(());
    }
    println!(
        "{:<28} {:<24} {:<32} {:<12} {:<20} LAST TICK",
        "NAME", "QUEUE", "CADENCE", "CATCH-UP", "NEXT TICK"
    );
    for info in &schedules {
        println!(
            "{:<28} {:<24} {:<32} {:<12} {:<20} {}",
            info.name,
            info.item.queue,
            cadence_text(&info.cadence),
            catch_up_text(info.catch_up),
            info.next_tick_ms.map_or_else(|| "none".to_owned(), human_time),
            info.last_tick_ms.map_or_else(|| "-".to_owned(), human_time),
        );
    }
    Ok(())
}

/// Every schedule of the tenant, read a page at a time (a tenant keeps at most
/// `SCHEDULES_MAX`).
fn all_schedules(store: &Store) -> spindle::Result<Vec<ScheduleInfo>> {
    let mut all: Vec<ScheduleInfo> = Vec::new();
    loop {
        let page = match all.last() {
            Some(last) => Page::after(last.name.clone(), PAGE),
            None => Page::first(PAGE),
        };
        let read = store.queue().schedules(page)?;
        let done = read.len() < PAGE;
        all.extend(read);
        if done {
            return Ok(all);
        }
    }
}

/// Schedules read per call.
const PAGE: usize = 100;

/// What `put` kept, as a line or as JSON.
fn report(out: &Output, info: &ScheduleInfo) {
    if out.json {
        out.print_json(&schedule_json(info));
    } else {
        let next = info.next_tick_ms.map_or_else(|| "none".to_owned(), human_time);
        println!(
            "schedule {} ({}) into {}: next tick {next}",
            info.name,
            cadence_text(&info.cadence),
            info.item.queue
        );
    }
}

/// A schedule as JSON (the command's and the dashboard's).
pub fn schedule_json(info: &ScheduleInfo) -> Value {
    let cadence = match &info.cadence {
        Cadence::Cron { expression, time_zone } => {
            json!({ "cron": expression, "time_zone": time_zone })
        }
        Cadence::Every { interval_ms } => json!({ "every_ms": interval_ms }),
        _ => json!({}),
    };
    json!({
        "name": info.name,
        "queue": info.item.queue,
        "cadence": cadence,
        "catch_up": catch_up_text(info.catch_up),
        "payload": info.item.payload,
        "priority": info.item.priority,
        "max_attempts": info.item.max_attempts,
        "tags": info.item.tags,
        "metadata": info.item.metadata,
        "run_timeout_ms": info.item.run_timeout_ms,
        "backoff": { "base_ms": info.item.backoff.base_ms, "max_ms": info.item.backoff.max_ms },
        "next_tick_ms": info.next_tick_ms,
        "last_tick_ms": info.last_tick_ms,
        "created_at_ms": info.created_at_ms,
        "updated_at_ms": info.updated_at_ms,
    })
}

/// `cron "0 3 * * *" Europe/Paris` or `every 1h`.
fn cadence_text(cadence: &Cadence) -> String {
    match cadence {
        Cadence::Cron { expression, time_zone } => format!("cron {expression:?} {time_zone}"),
        Cadence::Every { interval_ms } => {
            format!("every {}", crate::common::human_duration(*interval_ms))
        }
        _ => "?".to_owned(),
    }
}

/// `skip` or `backfill:N`.
fn catch_up_text(catch_up: CatchUp) -> String {
    match catch_up {
        CatchUp::Backfill(n) => format!("backfill:{n}"),
        _ => "skip".to_owned(),
    }
}
