//! The `store_file` fuzz harness: a real store file holding rows of every domain, its bytes
//! mutated by the input, opened (read-write or read-only) and read through every listing:
//! every call returns, with a value or a typed error; nothing panics (in the caller, or in the
//! store, which would answer `OpPanicked`, `Poisoned` or `Closed`) and nothing hangs.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/store_file.rs`) and by the test that
//! replays the seed corpus on stable (`tests/fuzz_corpus.rs`), so it uses only `spindle`,
//! `serde_json`, `tempfile` and std. [`run`] panics when an invariant is violated; [`outcome`]
//! also says what happened, for the test to count.
//!
//! The template file is made once per process and kept in memory: events (one idempotent),
//! queue items (pending, scheduled, completed, dead-lettered), a workflow definition with an
//! execution, its state patched, its events and a snapshot, a process with a schema'd event
//! type, events and a lease, a graph with nodes and edges (started), tenant `acme` and tokens
//! (one revoked). The store is closed, so the file holds everything (no WAL).
//!
//! Input: byte 0 is flags ([`READ_ONLY`], [`TRUNCATE`], [`APPEND`]); with `TRUNCATE` the next
//! two bytes (little-endian) give the length kept, in 64-byte steps (modulo the file's
//! length); then each 4 bytes are one edit: page (modulo the page count), offset in the page
//! (two bytes, little-endian, modulo 4096), and the byte written there; with `APPEND` the
//! last edit's 4 bytes are appended instead. At most [`EDITS_MAX`] edits.
//!
//! Every `Error` variant but those three counts as typed. Damaged rows surface today not only
//! as `Corrupt` but also as `Sqlite` (a text column that is not UTF-8, a NULL where a value
//! belongs, a table or column renamed in the schema text) and `Json` (a payload that no longer
//! parses); and on a read-only store `auth().tenants()` and `auth().tokens()` answer
//! `ReadOnly`. [`Outcome::errors`] names each (call and variant), so the replay test can show
//! them. The template's ids and secrets are random, so an edit may hit other bytes of a row in
//! another process: a seed keeps its kind of damage, not always its exact effect.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::json;
use spindle::process::StatusFilter;
use spindle::{
    AppendRequest, Durability, Error, EventType, ExecutionFilter, LeaseOwner, ListFilter,
    ManualClock, NewItem, NodeOptions, NodeSpec, Options, Page, Registration, Role, Store, Stream,
    TokenColor,
};

/// Flag bit: open the copy read-only.
pub const READ_ONLY: u8 = 1;
/// Flag bit: cut the copy (length in the next two bytes).
pub const TRUNCATE: u8 = 2;
/// Flag bit: append the last edit's bytes to the file instead of writing them.
pub const APPEND: u8 = 4;

/// SQLite's page size for the store (its default).
const PAGE: usize = 4096;
/// Most edits applied.
const EDITS_MAX: usize = 256;
/// Rows asked for per listing.
const ROWS: usize = 100;
/// The clock the template was written at (and the copies are read at).
const START_MS: i64 = 1_700_000_000_000;

/// What one input did: whether the copy opened, and the name of each error seen (in call order).
#[derive(Debug, Default)]
pub struct Outcome {
    /// The copy opened.
    pub opened: bool,
    /// The error of the open, if it failed (`Corrupt`, `NotADatabase`, ...).
    pub refused: Option<String>,
    /// Every error a call returned: the call's name and the error's variant.
    pub errors: Vec<String>,
}

/// The template's bytes and the ids of its rows.
struct Template {
    bytes: Vec<u8>,
    items: Vec<String>,
    execution: String,
    process: String,
    graph: String,
    secret: String,
}

/// Runs one input; panics if a call panicked, hung or answered with a non-typed error.
pub fn run(data: &[u8]) {
    let _ = outcome(data);
}

/// Runs one input and says what happened.
pub fn outcome(data: &[u8]) -> Outcome {
    let template = template();
    let flags = data.first().copied().unwrap_or(0);
    let bytes = mutate(&template.bytes, data);
    let dir = scratch_dir();
    let path = dir.path().join("store.db");
    std::fs::write(&path, &bytes).expect("write the copy");
    let options = Options::default()
        .clock(Arc::new(ManualClock::new(START_MS)))
        .busy_timeout(Duration::from_millis(50))
        .durability(Durability::Normal)
        .read_only(flags & READ_ONLY != 0);
    let mut outcome = Outcome::default();
    let store = match Store::open_with(&path, options) {
        Ok(store) => store,
        Err(error) => {
            outcome.refused = Some(typed(&error));
            return outcome;
        }
    };
    outcome.opened = true;
    read_everything(&store, template, &mut outcome.errors);
    if let Err(error) = store.close() {
        outcome.errors.push(format!("close: {}", typed(&error)));
    }
    outcome
}

/// A fresh directory for one copy: in memory (`/dev/shm`) where there is one, as the copy is
/// thrown away and syncing it to a disk would only slow the fuzzer down.
fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let in_memory = if shm.is_dir() { tempfile::tempdir_in(shm).ok() } else { None };
    in_memory.unwrap_or_else(|| tempfile::tempdir().expect("temporary directory"))
}

/// The template's bytes with the input's edits.
fn mutate(template: &[u8], data: &[u8]) -> Vec<u8> {
    let mut bytes = template.to_vec();
    let flags = data.first().copied().unwrap_or(0);
    let mut rest = data.get(1..).unwrap_or_default();
    if flags & TRUNCATE != 0 && rest.len() >= 2 {
        let steps = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
        bytes.truncate((steps * 64) % template.len().max(1));
        rest = &rest[2..];
    }
    let pages = template.len().div_ceil(PAGE).max(1);
    let edits: Vec<&[u8]> = rest.chunks_exact(4).take(EDITS_MAX).collect();
    for (index, edit) in edits.iter().enumerate() {
        if flags & APPEND != 0 && index + 1 == edits.len() {
            bytes.extend_from_slice(edit);
            continue;
        }
        let offset = usize::from(edit[0]) % pages * PAGE
            + usize::from(u16::from_le_bytes([edit[1], edit[2]])) % PAGE;
        if let Some(byte) = bytes.get_mut(offset) {
            *byte = edit[3];
        }
    }
    bytes
}

/// The name of a typed error; panics on the errors that mean a panic or a dead store.
fn typed(error: &Error) -> String {
    match error {
        Error::OpPanicked(_) | Error::Poisoned(_) | Error::Closed => {
            panic!("the store answered {error:?}")
        }
        other => format!("{other:?}").split(['(', ' ', '{']).next().unwrap_or("?").to_owned(),
    }
}

/// Calls every listing and a write; records each error's name in `errors`.
fn read_everything(store: &Store, template: &Template, errors: &mut Vec<String>) {
    let mut note = |call: &str, result: spindle::Result<()>| {
        if let Err(error) = result {
            errors.push(format!("{call}: {}", typed(&error)));
        }
    };
    note("events.read_all", store.events().read_all(0, ROWS).map(drop));
    note("events.read", store.events().read(Stream::custom("log"), 0, ROWS).map(drop));
    note("stats", store.queue().stats().map(drop));
    for item in &template.items {
        note("queue.get", store.queue().get(item).map(drop));
    }
    note("dead_letters", store.queue().dead_letters("jobs", Page::first(ROWS)).map(drop));
    let workflows = store.workflows();
    note(
        "list_executions",
        workflows.list_executions(ExecutionFilter::default(), Page::first(ROWS)).map(drop),
    );
    note("workflows.load", workflows.load(&template.execution).map(drop));
    note("workflows.events", workflows.events(&template.execution, 0).map(drop));
    note("latest_snapshot", workflows.latest_snapshot(&template.execution).map(drop));
    let processes = store.processes();
    note("processes.list", processes.list(ListFilter::status(StatusFilter::Any)).map(drop));
    note("events_after", processes.events_after(&template.process, 0).map(drop));
    note("processes.get", processes.get(&template.process).map(drop));
    let graphs = store.graphs();
    note("graphs.list", graphs.list(Page::first(ROWS)).map(drop));
    note("nodes", graphs.nodes(&template.graph).map(drop));
    note("edges", graphs.edges(&template.graph).map(drop));
    note("audit", graphs.audit(&template.graph).map(drop));
    note("tenants", store.auth().tenants().map(drop));
    note("tokens", store.auth().tokens().map(drop));
    note("authenticate", store.authenticate(&template.secret).map(drop));
    note(
        "events.append",
        store.events().append(Stream::custom("log"), "after", json!({ "n": 0 })).map(drop),
    );
}

/// The template, made on first use.
fn template() -> &'static Template {
    static TEMPLATE: OnceLock<Template> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("template.db");
        let clock = ManualClock::new(START_MS);
        let options = Options::default().clock(Arc::new(clock.clone()));
        let store = Store::open_with(&path, options).expect("open the template");
        let mut template = fill(&store, &clock).expect("fill the template");
        store.close().expect("close the template");
        drop(store);
        template.bytes = std::fs::read(&path).expect("read the template");
        template
    })
}

/// Writes rows of every domain; the template's ids (its bytes are read after closing).
fn fill(store: &Store, clock: &ManualClock) -> spindle::Result<Template> {
    let log = Stream::custom("log");
    for n in 0..5 {
        store.events().append(&log, "wrote", json!({ "n": n, "text": "x".repeat(n * 40) }))?;
    }
    store.events().append_idempotent(&log, "once", json!({}), "key")?;
    let items = fill_queue(store)?;
    let workflows = store.workflows();
    workflows.put_definition("flow", "v1", json!({ "steps": ["a", "b"] }))?;
    let execution = workflows.create_execution("flow", "v1", json!({ "input": 1 }))?.id;
    workflows.patch_state(&execution, json!({ "done": ["a"], "left": { "b": true } }))?;
    workflows.append_event(&execution, "step", json!({ "step": "a" }))?;
    workflows.write_snapshot(&execution, 1, json!({ "done": ["a"] }))?;
    let schema = json!({ "type": "object", "required": ["line"] });
    let registration = Registration::new("proc", "tool", json!({ "tool": "grep" }))
        .event_type(EventType::new("progress").schema(schema));
    let process = store.processes().register(registration)?.id;
    let request = AppendRequest::new("progress", json!({ "line": "half" })).replay_key("r1");
    store.processes().append_event(&process, request)?;
    store.processes().claim_lease(&process, &LeaseOwner::new("worker", "1"), 60_000)?;
    let graph = fill_graph(store)?;
    store.auth().create_tenant("acme", "Acme")?;
    let acme = store.tenant("acme")?;
    let (secret, _) = acme.auth().create_token("live", Role::Admin, None)?;
    let (_, revoked) = acme.auth().create_token("gone", Role::Reader, None)?;
    acme.auth().revoke_token(&revoked.id)?;
    acme.events().append(&log, "tenant", json!({ "acme": true }))?;
    clock.advance_ms(1_000);
    let secret = secret.expose().to_owned();
    Ok(Template { bytes: Vec::new(), items, execution, process, graph, secret })
}

/// Queue items: completed, dead-lettered, pending and scheduled; their ids.
fn fill_queue(store: &Store) -> spindle::Result<Vec<String>> {
    let queue = store.queue();
    let mut items = Vec::new();
    for n in 0..2 {
        items.push(queue.enqueue(NewItem::new("jobs", json!({ "n": n })).max_attempts(1))?.id);
    }
    let first = queue.claim("w", &["jobs"], 60_000)?.expect("a due item");
    queue.complete(&first.item.id, first.fence, json!({ "ok": true }))?;
    let second = queue.claim("w", &["jobs"], 60_000)?.expect("a due item");
    queue.fail(&second.item.id, second.fence, "broken", false)?;
    items.push(queue.enqueue(NewItem::new("jobs", json!({ "n": 2 })).priority(5))?.id);
    let later = NewItem::new("later", json!({ "n": 3 })).run_at_ms(START_MS + 3_600_000);
    items.push(queue.enqueue(later.dedupe_key("once"))?.id);
    Ok(items)
}

/// A started graph of three nodes and three edges; its id.
fn fill_graph(store: &Store) -> spindle::Result<String> {
    let graphs = store.graphs();
    let graph = graphs.create(json!({ "kind": "fuzz" }))?;
    for node in ["a", "b", "c"] {
        let spec = NodeSpec::task(json!({ "run": node }));
        graphs.add_node(&graph, spec, NodeOptions::new().id(node))?;
    }
    graphs.add_edge(&graph, "a", "b", TokenColor::Ok)?;
    graphs.add_edge(&graph, "a", "c", TokenColor::Error)?;
    graphs.add_edge(&graph, "b", "c", None)?;
    graphs.start(&graph)?;
    Ok(graph)
}
