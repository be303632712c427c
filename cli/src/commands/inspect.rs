//! The inspectors: graphs, one graph, events (followed across processes), the queue (and its
//! controls: pause, resume, a concurrency limit, snoozing an item), the process registry,
//! pruning, and the integrity check. Listings print a table, or JSON with
//! `--json`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use spindle::process::{ListFilter, ProcessRecord, StatusFilter};
use spindle::{Event, ItemFilter, ItemStatus, Page, Store, Stream};

use crate::common::{self, CliError, Location, Output, all_graphs, parse_duration_ms};
use crate::names::owned_by_run;
use crate::pipeline::draw;
use crate::pipeline::draw::ShowFormat;

/// Every graph, in creation order.
pub fn graphs(store: &Store, out: &Output) -> Result<(), CliError> {
    let graphs = all_graphs(store)?;
    if out.json {
        out.print_json(&serde_json::to_value(&graphs).map_err(spindle::Error::from)?);
        return Ok(());
    }
    println!(
        "{:<36} {:<9} {:<24} {:>6} {:>6} {:>6} {:>6}",
        "ID", "STATUS", "NAME", "NODES", "DONE", "FAILED", "SKIP"
    );
    for graph in &graphs {
        let name = graph.metadata["pipeline"].as_str().unwrap_or("-");
        let c = graph.counts;
        println!(
            "{:<36} {:<9} {name:<24} {:>6} {:>6} {:>6} {:>6}",
            graph.id,
            graph.status.as_str(),
            graph.node_count,
            c.complete,
            c.failed,
            c.skipped
        );
    }
    Ok(())
}

/// One graph: its nodes with status, runs and errors, as `format` says.
pub fn graph(store: &Store, id: &str, format: ShowFormat, out: &Output) -> Result<(), CliError> {
    let graph = store.graphs().get(id)?;
    let nodes = store.graphs().nodes(id)?;
    let edges = || store.graphs().edges(id);
    match format {
        ShowFormat::Table => {}
        ShowFormat::Json => {
            out.print_json(&json!({ "graph": graph, "nodes": nodes, "edges": edges()? }));
            return Ok(());
        }
        ShowFormat::Dot => {
            print!("{}", draw::dot(&draw::of_graph(&graph.id, &nodes, &edges()?)));
            return Ok(());
        }
        ShowFormat::Mermaid => {
            print!("{}", draw::mermaid(&draw::of_graph(&graph.id, &nodes, &edges()?)));
            return Ok(());
        }
    }
    println!(
        "graph {} {} ({} nodes, {} edges)",
        graph.id,
        graph.status.as_str(),
        graph.node_count,
        graph.edge_count
    );
    if let Some(error) = &graph.error {
        println!("error: {}", first_line(error));
    }
    println!("{:<32} {:<9} {:>5}  ERROR", "NODE", "STATUS", "FIRES");
    for node in &nodes {
        let error = node.error.as_deref().map(first_line).unwrap_or_default();
        println!("{:<32} {:<9} {:>5}  {error}", node.id, node.status.as_str(), node.fires);
    }
    Ok(())
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().chars().take(100).collect()
}

/// Events of every stream (by position) or of one (by seq); with `follow`, forever.
pub fn events(
    store: &Store,
    stream: Option<&str>,
    after: u64,
    follow: bool,
    out: &Output,
) -> Result<(), CliError> {
    let stream = stream.map(common::parse_stream).transpose().map_err(CliError::Bad)?;
    if follow {
        let mut subscription = match &stream {
            Some(stream) => store.subscribe(stream, after)?,
            None => store.subscribe_all(after)?,
        };
        loop {
            if let Some(event) = subscription.recv_timeout(Duration::from_secs(3600))? {
                print_event(&event, out);
            }
        }
    }
    let mut cursor = after;
    loop {
        let page = match &stream {
            Some(stream) => store.events().read(stream, cursor, 1000)?,
            None => store.events().read_all(cursor, 1000)?,
        };
        let Some(last) = page.last() else { return Ok(()) };
        cursor = if stream.is_some() { last.seq } else { last.position };
        page.iter().for_each(|event| print_event(event, out));
    }
}

fn print_event(event: &Event, out: &Output) {
    if out.json {
        let value = json!({
            "position": event.position,
            "stream": stream_name(&event.stream),
            "seq": event.seq,
            "type": event.event_type,
            "payload": event.payload,
            "created_at_ms": event.created_at_ms,
        });
        out.print_json(&value);
        return;
    }
    let (position, stream, seq) = (event.position, stream_name(&event.stream), event.seq);
    println!("{position:>8} {stream}#{seq} {} {}", event.event_type, event.payload);
}

fn stream_name(stream: &Stream) -> String {
    format!("{}:{}", stream.kind().as_str(), stream.id())
}

/// Counts per queue.
pub fn queue_stats(store: &Store, out: &Output) -> Result<(), CliError> {
    let stats = store.queue().stats()?;
    if out.json {
        out.print_json(&serde_json::to_value(&stats).map_err(spindle::Error::from)?);
        return Ok(());
    }
    println!(
        "{:<44} {:>8} {:>9} {:>8} {:>6} {:>9}  STATE",
        "QUEUE", "PENDING", "SCHEDULED", "CLAIMED", "DEAD", "COMPLETED"
    );
    for s in &stats {
        println!(
            "{:<44} {:>8} {:>9} {:>8} {:>6} {:>9}  {}",
            s.queue,
            s.pending,
            s.scheduled,
            s.claimed,
            s.dead,
            s.completed,
            queue_state(s)
        );
    }
    Ok(())
}

/// `paused`, `running`, with `limit N` when the queue has one.
fn queue_state(stats: &spindle::QueueStats) -> String {
    let state = if stats.paused { "paused" } else { "running" };
    match stats.concurrency_max {
        Some(max) => format!("{state}, limit {max}"),
        None => state.to_owned(),
    }
}

/// Pauses or resumes a queue; a run's queue is refused (exit 2: the run alone drives it).
pub fn set_paused(store: &Store, queue: &str, paused: bool, out: &Output) -> Result<(), CliError> {
    let what = if paused { "pause" } else { "resume" };
    owned_by_run(queue, what).map_err(CliError::Bad)?;
    if paused {
        store.queue().pause(queue)?;
    } else {
        store.queue().resume(queue)?;
    }
    report_setting(out, queue, json!({ "paused": paused }));
    Ok(())
}

/// Sets (a number, at least 1) or lifts (`none`) a queue's concurrency limit; a run's queue
/// is refused.
pub fn set_concurrency(
    store: &Store,
    queue: &str,
    limit: &str,
    out: &Output,
) -> Result<(), CliError> {
    owned_by_run(queue, "limit").map_err(CliError::Bad)?;
    let max = match limit {
        "none" => None,
        number => match number.parse::<u32>() {
            Ok(max) if max >= 1 => Some(max),
            _ => {
                return Err(CliError::Bad(format!(
                    "a limit is a number from 1, or none: {limit:?}"
                )));
            }
        },
    };
    store.queue().set_concurrency(queue, max)?;
    report_setting(out, queue, json!({ "concurrency_max": max }));
    Ok(())
}

/// Cancels a pending or claimed item; a run's item, or a finished one, is refused (exit 2,
/// nothing written).
pub fn cancel(store: &Store, id: &str, out: &Output) -> Result<(), CliError> {
    let item = store.queue().get(id)?;
    owned_by_run(&item.queue, "cancel").map_err(CliError::Bad)?;
    store.queue().cancel(id)?;
    let was = item.status.as_str();
    if out.json {
        out.print_json(&json!({ "id": id, "cancelled": true, "was": was }));
    } else {
        println!("cancelled {id} (it was {was})");
    }
    Ok(())
}

/// Snoozes a claimed item (under `fence`, or its current one) for `duration`. Refused (exit 2,
/// nothing written): a run's item, an item that is not claimed, a fence that no longer holds.
pub fn snooze(
    store: &Store,
    id: &str,
    duration: &str,
    fence: Option<u64>,
    out: &Output,
) -> Result<(), CliError> {
    let delay_ms = parse_duration_ms(duration)?;
    let item = store.queue().get(id)?;
    owned_by_run(&item.queue, "snooze").map_err(CliError::Bad)?;
    if item.status != ItemStatus::Claimed {
        let status = item.status.as_str();
        return Err(CliError::Bad(format!(
            "item {id} is {status}: only a claimed item is snoozed"
        )));
    }
    let fence = fence.unwrap_or(item.fence);
    let run_at_ms = match store.queue().snooze(id, fence, delay_ms) {
        Ok(run_at_ms) => run_at_ms,
        Err(spindle::Error::LeaseLost(_)) => {
            return Err(CliError::Bad(format!(
                "item {id} is not held under fence {fence} (its lease lapsed or moved on)"
            )));
        }
        Err(other) => return Err(other.into()),
    };
    if out.json {
        out.print_json(&json!({ "id": id, "fence": fence, "run_at_ms": run_at_ms }));
    } else {
        println!("snoozed {id} until {run_at_ms} (ms since the epoch), its attempt refunded");
    }
    Ok(())
}

/// What a setting command changed, as a line or as JSON (`{"queue": .., <setting>}`).
fn report_setting(out: &Output, queue: &str, setting: Value) {
    let mut report = json!({ "queue": queue });
    if let (Some(report), Some(setting)) = (report.as_object_mut(), setting.as_object()) {
        report.extend(setting.clone());
    }
    if out.json {
        out.print_json(&report);
    } else {
        println!("{queue}: {setting}");
    }
}

/// Which page of a queue's items `items` lists.
pub struct ItemsPage<'a> {
    /// pending (due now), scheduled, claimed, dead, completed or cancelled.
    pub status: &'a str,
    /// Only the items with this tag.
    pub tag: Option<&'a str>,
    /// Only the items whose metadata meets each of these `KEY=VALUE` conditions
    /// ([`common::parse_meta`]).
    pub meta: &'a [String],
    /// The items after this id.
    pub after: Option<String>,
    /// How many.
    pub limit: usize,
}

/// A page of a queue's items of one status (and tag, and metadata), in id order.
pub fn items(
    store: &Store,
    queue: &str,
    page: ItemsPage<'_>,
    out: &Output,
) -> Result<(), CliError> {
    let mut filter = match page.status {
        "pending" => ItemFilter::due(),
        "scheduled" => ItemFilter::scheduled(),
        "claimed" => ItemFilter::status(ItemStatus::Claimed),
        "dead" => ItemFilter::status(ItemStatus::Dead),
        "completed" => ItemFilter::status(ItemStatus::Completed),
        "cancelled" => ItemFilter::status(ItemStatus::Cancelled),
        other => {
            return Err(CliError::Bad(format!(
                "a status is pending, scheduled, claimed, dead, completed or cancelled, not {other:?}"
            )));
        }
    };
    if let Some(tag) = page.tag {
        filter = filter.tag(tag);
    }
    for condition in page.meta {
        let (key, value) = common::parse_meta(condition).map_err(CliError::Bad)?;
        filter = filter.metadata(key, value);
    }
    if !(1..=1000).contains(&page.limit) {
        return Err(CliError::Bad(format!("--limit is 1 to 1000, not {}", page.limit)));
    }
    let page = match page.after {
        Some(after) => Page::after(after, page.limit),
        None => Page::first(page.limit),
    };
    let items = store.queue().items(queue, filter, page)?;
    if out.json {
        out.print_json(&serde_json::to_value(&items).map_err(spindle::Error::from)?);
        return Ok(());
    }
    println!("{:<36} {:>7}  {:<30} PAYLOAD", "ID", "ATTEMPT", "TAGS");
    for item in &items {
        let tags = item.tags.join(",");
        println!("{:<36} {:>7}  {tags:<30} {}", item.id, item.attempt, item.payload);
    }
    Ok(())
}

/// Dead letters of one queue, or of every queue that has some.
pub fn dead(store: &Store, queue: Option<&str>, out: &Output) -> Result<(), CliError> {
    let queues: Vec<String> = match queue {
        Some(queue) => vec![queue.to_owned()],
        None => {
            store.queue().stats()?.into_iter().filter(|s| s.dead > 0).map(|s| s.queue).collect()
        }
    };
    let mut items = Vec::new();
    for queue in &queues {
        let mut page = Page::first(1000);
        loop {
            let dead = store.queue().dead_letters(queue, page.clone())?;
            let Some(last) = dead.last() else { break };
            page = Page::after(last.id.clone(), 1000);
            items.extend(dead);
        }
    }
    if out.json {
        out.print_json(&serde_json::to_value(&items).map_err(spindle::Error::from)?);
        return Ok(());
    }
    println!("{:<36} {:<30} {:>7}  LAST ERROR", "ID", "QUEUE", "ATTEMPT");
    for item in &items {
        let error = item.last_error.as_deref().map(first_line).unwrap_or_default();
        println!("{:<36} {:<30} {:>7}  {error}", item.id, item.queue, item.attempt);
    }
    Ok(())
}

/// Processes in id order: the running ones (waiting ones included), or every one with `all`.
pub fn processes(store: &Store, all: bool, out: &Output) -> Result<(), CliError> {
    let status = if all { StatusFilter::Any } else { StatusFilter::Running };
    let processes = all_processes(store, status)?;
    if out.json {
        out.print_json(&serde_json::to_value(&processes).map_err(spindle::Error::from)?);
        return Ok(());
    }
    println!("{:<36} {:<16} {:<24} {:<17} {:>13}", "ID", "KIND", "LABEL", "STATUS", "UPDATED_MS");
    for process in &processes {
        let label = process.identity.label.as_deref().unwrap_or("-");
        println!(
            "{:<36} {:<16} {label:<24} {:<17} {:>13}",
            process.id,
            process.identity.kind,
            process_status(process),
            process.updated_at_ms
        );
    }
    Ok(())
}

/// Every process of the view's tenant with `status`, a page at a time until a short page.
pub fn all_processes(store: &Store, status: StatusFilter) -> spindle::Result<Vec<ProcessRecord>> {
    let limit = store.limits().page_size_max;
    let mut all: Vec<ProcessRecord> = Vec::new();
    loop {
        let page = Page::new(all.last().map(|last| last.id.clone()), limit);
        let processes = store.processes().list(ListFilter::status(status).page(page))?;
        let short = processes.is_empty() || processes.len() < limit;
        all.extend(processes);
        if short {
            return Ok(all);
        }
    }
}

/// `running (waiting)` for a running process with a wait state, else the status's label.
fn process_status(process: &ProcessRecord) -> String {
    let label = process.status.label();
    if process.wait.is_some() && !process.is_terminal() {
        format!("{label} (waiting)")
    } else {
        label.to_owned()
    }
}

/// Requeues one dead item, or every dead item of a queue; a run's items are refused (exit 2:
/// they are the run's to settle, see `names::owned_by_run`).
pub fn requeue(
    store: &Store,
    id: Option<&str>,
    all: Option<&str>,
    out: &Output,
) -> Result<(), CliError> {
    let count = match (id, all) {
        (Some(id), None) => {
            let item = store.queue().get(id)?;
            owned_by_run(&item.queue, "requeue").map_err(CliError::Bad)?;
            store.queue().requeue(id)?;
            1
        }
        (None, Some(queue)) => {
            owned_by_run(queue, "requeue").map_err(CliError::Bad)?;
            let mut total = 0;
            loop {
                let requeued = store.queue().requeue_all(queue)?;
                total += requeued;
                if requeued == 0 {
                    break total;
                }
            }
        }
        _ => return Err(CliError::Bad("name an item, or --all QUEUE".into())),
    };
    report_count(out, "requeued", count);
    Ok(())
}

/// Deletes finished queue items, finished processes, and finished runs' live logs and outputs
/// directories (under `runs`, the runs directory, on this machine) older than a duration.
pub fn prune(store: &Store, runs: &Path, older_than: &str, out: &Output) -> Result<(), CliError> {
    let older_than_ms = parse_duration_ms(older_than)?;
    let mut queue_items = 0;
    loop {
        let pruned = store.queue().prune_completed(older_than_ms)?;
        queue_items += pruned;
        if pruned == 0 {
            break;
        }
    }
    let cutoff_ms = common::now_ms().saturating_sub(older_than_ms);
    let mut processes = spindle::process::PruneReport::default();
    loop {
        let pruned = store.processes().prune_terminal(cutoff_ms)?;
        processes.pruned_processes += pruned.pruned_processes;
        processes.pruned_events += pruned.pruned_events;
        if pruned.pruned_processes == 0 {
            break;
        }
    }
    let runs = crate::run::runs::prune(store, runs, cutoff_ms)?;
    queue_items += runs.dead_items;
    if out.json {
        out.print_json(&json!({
            "pruned": queue_items,
            "processes": processes.pruned_processes,
            "process_events": processes.pruned_events,
            "log_events": runs.log_events,
            "output_dirs": runs.output_dirs,
        }));
    } else {
        println!("pruned {queue_items} queue items");
        println!(
            "pruned {} finished processes ({} events)",
            processes.pruned_processes, processes.pruned_events
        );
        println!(
            "pruned {} live log events and {} outputs directories of finished runs",
            runs.log_events, runs.output_dirs
        );
    }
    Ok(())
}

fn report_count(out: &Output, what: &str, count: u64) {
    if out.json {
        out.print_json(&json!({ what: count }));
    } else {
        println!("{what} {count}");
    }
}

/// What `Graphs::audit` finds in every graph of the tenant.
fn audit_graphs(store: &Store) -> Result<Vec<String>, CliError> {
    let mut problems = Vec::new();
    for graph in all_graphs(store)? {
        for problem in store.graphs().audit(&graph.id)? {
            problems.push(format!("graph {}: {problem}", graph.id));
        }
    }
    Ok(problems)
}

/// Where the tenant's kept counts (queues, graphs, processes, workflows) differ from a recount
/// of their rows: one line each, empty when they agree.
fn audit_counts(store: &Store) -> Result<Vec<String>, CliError> {
    let mut problems = store.queue().audit_counts()?;
    problems.extend(store.graphs().audit_counts()?);
    problems.extend(store.processes().audit_counts()?);
    problems.extend(store.workflows().audit_counts()?);
    Ok(problems)
}

/// Checks the store at `db`: a file as `check_file` does, a PostgreSQL store as
/// `check_postgres` does.
pub fn check(db: &Location, tenant: &str, out: &Output) -> Result<u8, CliError> {
    match db {
        Location::File(path) => check_file(path, tenant, out),
        Location::Postgres(url) => check_postgres(db, url, tenant, out),
    }
}

/// A PostgreSQL store: its record of itself (application id, schema version; opening it
/// checked them), the tenant's graphs' counters and its kept counts against a recount. The
/// file checks (integrity, foreign keys, pragmas) are SQLite's own: the server keeps its pages
/// and foreign keys itself.
fn check_postgres(db: &Location, url: &str, tenant: &str, out: &Output) -> Result<u8, CliError> {
    let store = common::open(db, tenant, common::Access::Reader)?;
    let graph_problems = audit_graphs(&store)?;
    let count_problems = audit_counts(&store)?;
    store.close()?;
    out.note(
        "on PostgreSQL, the file checks (integrity_check, foreign_key_check, pragmas) are not \
         Spindle's: the server keeps its pages and foreign keys (see amcheck for its indexes)",
    );
    let healthy = graph_problems.is_empty() && count_problems.is_empty();
    let report = json!({
        "engine": "postgres",
        "meta": crate::commands::postgres::meta(url)?,
        "graph_problems": graph_problems,
        "count_problems": count_problems,
        "ok": healthy,
    });
    print_check(&report, out);
    Ok(if healthy { 0 } else { 3 })
}

/// Integrity and foreign-key check, schema version and pragmas, through a read-only
/// connection of its own (the store need not be idle); then the tenant's graphs' counters and
/// its kept counts against a recount, through a read-only store.
fn check_file(path: &Path, tenant: &str, out: &Output) -> Result<u8, CliError> {
    if !path.exists() {
        return Err(CliError::Bad(format!("no store at {}", path.display())));
    }
    // The store first: its open refuses a path that cannot hold one, and a read that would
    // leave beside it files its owner could not write, which the raw connection would make.
    let store = common::open(&Location::File(path.to_path_buf()), tenant, common::Access::Reader)?;
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let conn =
        rusqlite::Connection::open_with_flags(sqlite_name(path), flags).map_err(store_error)?;
    let integrity: Vec<String> = column(&conn, "PRAGMA integrity_check")?;
    let foreign_keys: Vec<String> = column(&conn, "PRAGMA foreign_key_check")?;
    let mut report = json!({
        "integrity": integrity,
        "foreign_key_violations": foreign_keys.len(),
    });
    for pragma in [
        "user_version",
        "application_id",
        "journal_mode",
        "page_size",
        "page_count",
        "freelist_count",
    ] {
        let value: Value = conn
            .query_row(&format!("PRAGMA {pragma}"), [], |row| {
                row.get::<_, rusqlite::types::Value>(0)
            })
            .map(sql_value)
            .map_err(store_error)?;
        report[pragma] = value;
    }
    drop(conn);
    let graph_problems = audit_graphs(&store)?;
    let count_problems = audit_counts(&store)?;
    store.close()?;
    report["graph_problems"] = json!(graph_problems);
    report["count_problems"] = json!(count_problems);
    let healthy = integrity == ["ok"]
        && foreign_keys.is_empty()
        && graph_problems.is_empty()
        && count_problems.is_empty();
    report["ok"] = json!(healthy);
    print_check(&report, out);
    Ok(if healthy { 0 } else { 3 })
}

/// The name SQLite is given for the file at `path`: a relative path starting with `file:`
/// gets `./` in front, as the library's own opens do (SQLite reads such a name as a URI).
fn sqlite_name(path: &Path) -> std::path::PathBuf {
    if path.as_os_str().as_encoded_bytes().starts_with(b"file:") {
        Path::new(".").join(path)
    } else {
        path.to_path_buf()
    }
}

/// A check's report: JSON, or one line per field.
fn print_check(report: &Value, out: &Output) {
    if out.json {
        out.print_json(report);
    } else if let Value::Object(fields) = report {
        for (key, value) in fields {
            println!("{key:<24} {value}");
        }
    }
}

fn column(conn: &rusqlite::Connection, sql: &str) -> Result<Vec<String>, CliError> {
    let mut statement = conn.prepare(sql).map_err(store_error)?;
    let rows = statement
        .query_map([], |row| Ok(format!("{:?}", row.get::<_, rusqlite::types::Value>(0)?)))
        .map_err(store_error)?;
    let mut values: Vec<String> = rows.collect::<Result<_, _>>().map_err(store_error)?;
    // integrity_check says "ok" as text; keep it readable.
    for value in &mut values {
        if value == "Text(\"ok\")" {
            *value = "ok".into();
        }
    }
    Ok(values)
}

fn sql_value(value: rusqlite::types::Value) -> Value {
    match value {
        rusqlite::types::Value::Integer(n) => json!(n),
        rusqlite::types::Value::Text(text) => json!(text),
        rusqlite::types::Value::Real(x) => json!(x),
        rusqlite::types::Value::Null | rusqlite::types::Value::Blob(_) => Value::Null,
    }
}

fn store_error(error: rusqlite::Error) -> CliError {
    CliError::Store(spindle::Error::from(error))
}
