//! `spindle ui`'s JSON API (`/api/...`): what the dashboard's pages read, as plain functions
//! of a store view and a request line, so that they are tested without a browser.
//!
//! Every listing pages by keyset: `?after=<the last id of the page before>&limit=<1..=500>`,
//! and answers `{"items": [...], "next": <the after of the next page, or null>}`. A page also
//! stops at the bytes its answer is allowed (`http.rs`'s gate: at most a few MiB; at least one
//! item), and is read from the store a few records at a time, so that big records are never
//! held by the hundred. Bad parameters answer 400, unknown things 404, other methods 405; every
//! error is `{"error": "<what to do>"}`. Nothing here writes.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde_json::{Value, json};
use spindle::process::StatusFilter;
use spindle::queue::METADATA_CONDITIONS_MAX;
use spindle::{
    Event, Execution, ExecutionFilter, Graph, GraphFilter, GraphStatus, ItemFilter, ItemStatus,
    ListFilter, Page, ProcessRecord, QueueItem, Store, Stream, WorkflowStatus,
};

use crate::common::{parse_meta, parse_stream};
use crate::log_reader::LogReader;
use crate::names::{node_stream, run_filter};
use crate::ui::state::Sample;

/// The most items one page may ask for.
const PAGE_MAX: usize = 500;
/// Items of a page when the request does not say.
const PAGE_DEFAULT: usize = 50;

/// An answer: its status code, its content type and its bytes (a JSON value is encoded as
/// the answer is made: what it holds until it is written is what it takes).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    content_type: &'static str,
    bytes: Cow<'static, [u8]>,
}

/// The content type of every JSON answer.
const JSON: &str = "application/json; charset=utf-8";

impl Reply {
    /// 200 with a JSON body.
    pub fn ok(body: Value) -> Self {
        Self::json(200, &body)
    }

    /// An error: `{"error": message}`.
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self::json(status, &json!({ "error": message.into() }))
    }

    /// `value` encoded as JSON.
    fn json(status: u16, value: &Value) -> Self {
        Reply { status, content_type: JSON, bytes: Cow::Owned(value.to_string().into_bytes()) }
    }

    /// 200 with JSON encoded already.
    fn json_bytes(bytes: Vec<u8>) -> Self {
        Reply { status: 200, content_type: JSON, bytes: Cow::Owned(bytes) }
    }

    /// 200 with a text body in the Prometheus exposition format.
    pub fn text(body: String) -> Self {
        let content_type = "text/plain; version=0.0.4; charset=utf-8";
        Reply { status: 200, content_type, bytes: Cow::Owned(body.into_bytes()) }
    }

    /// A file's bytes (borrowed when they are the binary's own).
    pub fn file(status: u16, content_type: &'static str, bytes: Cow<'static, [u8]>) -> Self {
        Reply { status, content_type, bytes }
    }

    /// Its content type.
    pub fn content_type(&self) -> &'static str {
        self.content_type
    }

    /// Its body's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The memory it holds (nothing for the binary's own bytes).
    pub fn held_bytes(&self) -> usize {
        match &self.bytes {
            Cow::Borrowed(_) => 0,
            Cow::Owned(bytes) => bytes.len(),
        }
    }
}

/// A request to the API: its method, path and query (both still encoded).
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
}

/// Answers `request` from the store view `store`, a page in at most `allowed` bytes (it stops
/// there and gives its cursor); `samples` are the queues over the last minutes, for the
/// overview.
pub fn route(store: &Store, request: &Request<'_>, samples: &[Sample], allowed: usize) -> Reply {
    let Request { method, path, query } = *request;
    if method != "GET" {
        return Reply::error(405, format!("{method} is not allowed here: the API only reads"));
    }
    let query = match Query::parse(query) {
        Ok(query) => query,
        Err(message) => return Reply::error(400, message),
    };
    let parts = match segments(path) {
        Ok(parts) => parts,
        Err(message) => return Reply::error(400, message),
    };
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let ask = Ask { query: &query, allowed };
    let answer = match parts.as_slice() {
        ["", "api", "overview"] => overview(store, samples),
        ["", "api", "runs"] => runs(store, &ask),
        ["", "api", "runs", run] => run_detail(store, run),
        ["", "api", "runs", run, "nodes", node] => node_detail(store, run, node, &ask),
        ["", "api", "queues"] => queues(store),
        ["", "api", "queues", queue, "dead"] => dead(store, queue, &ask),
        ["", "api", "queues", queue, "items"] => items(store, queue, &ask),
        ["", "api", "schedules"] => schedules(store, &ask),
        ["", "api", "workflows"] => workflows(store, &ask),
        ["", "api", "workflows", id] => workflow(store, id, allowed),
        ["", "api", "processes"] => processes(store, &ask),
        ["", "api", "events"] => events(store, &ask),
        ["", "api", "tenants"] => tenants(store),
        ["", "api", "tokens"] => tokens(store),
        _ => return Reply::error(404, format!("no such page {path:?}: see /api/overview")),
    };
    answer.unwrap_or_else(|error| error)
}

/// What a handler of a page is asked: the query, and the bytes its answer may take.
struct Ask<'q> {
    query: &'q Query,
    allowed: usize,
}

type Answer = Result<Reply, Reply>;

/// A store error as an answer: what was not found is 404, bad input 400, a conflict 409, a
/// refusal 403, the rest 500.
pub fn store_error(error: spindle::Error) -> Reply {
    match error {
        spindle::Error::NotFound { kind, id } => Reply::error(404, format!("no {kind} {id}")),
        spindle::Error::InvalidInput(message) => Reply::error(400, message),
        spindle::Error::Conflict(message) => Reply::error(409, message),
        refused @ (spindle::Error::Forbidden(_) | spindle::Error::TenantSuspended(_)) => {
            Reply::error(403, refused.to_string())
        }
        too_large @ spindle::Error::TooLarge { .. } => Reply::error(400, too_large.to_string()),
        other => Reply::error(500, format!("the store failed: {other}")),
    }
}

/// The query string's parameters, decoded.
pub struct Query(Vec<(String, String)>);

impl Query {
    /// Decodes `a=1&b=two`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for pair in text.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (name, value) = (name.replace('+', " "), value.replace('+', " "));
            pairs.push((decode(&name)?, decode(&value)?));
        }
        Ok(Query(pairs))
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }

    /// Every value of `name`, in order (`meta=a=1&meta=b=2`).
    pub fn all<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.0.iter().filter(move |(key, _)| key == name).map(|(_, value)| value.as_str())
    }

    /// The page asked for: `after` and `limit` (1 to `PAGE_MAX`).
    fn page(&self) -> Result<(Option<String>, usize), Reply> {
        let limit = match self.get("limit") {
            None => PAGE_DEFAULT,
            Some(text) => {
                text.parse().ok().filter(|n| (1..=PAGE_MAX).contains(n)).ok_or_else(|| {
                    Reply::error(
                        400,
                        format!("limit is a number from 1 to {PAGE_MAX}, not {text:?}"),
                    )
                })?
            }
        };
        Ok((self.get("after").filter(|a| !a.is_empty()).map(str::to_owned), limit))
    }
}

/// A path's segments, %-decoded (`/api/runs/` gives `["", "api", "runs"]`).
pub fn segments(path: &str) -> Result<Vec<String>, String> {
    path.trim_end_matches('/').split('/').map(decode).collect()
}

/// Percent-decodes a path segment (a query's `+` is made a space before).
fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let hex = text.get(at + 1..at + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(hex.ok_or_else(|| format!("a bad %-escape in {text:?}"))?);
                at += 3;
            }
            byte => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} is not UTF-8 once decoded"))
}

/// Records read from the store at first, for a page of records that may be big (events,
/// queue items, processes, executions: up to the store's payload bound each).
const CHUNK_FIRST: usize = 4;
/// Records read from the store at once, at most.
const CHUNK_MAX: usize = 64;
/// Bytes of records read from the store at once, about (by the biggest seen so far).
const CHUNK_BYTES: usize = 1024 * 1024;

/// How many records to read next, after reading `chunk` whose biggest took `biggest` bytes:
/// what fits in `CHUNK_BYTES` at that size, at most twice as many as before (records that
/// were small so far may be followed by big ones).
fn next_chunk(chunk: usize, biggest: usize) -> usize {
    (CHUNK_BYTES / biggest.max(1)).min(2 * chunk).clamp(1, CHUNK_MAX)
}

/// A page being encoded: `{"items":[` and its items' JSON, at most `allowed` bytes of them
/// (a first item goes in whatever its size).
struct PageText {
    text: Vec<u8>,
    items: usize,
    allowed: usize,
}

impl PageText {
    /// An empty page of at most `allowed` bytes.
    fn new(allowed: usize) -> Self {
        PageText { text: b"{\"items\":[".to_vec(), items: 0, allowed }
    }

    /// Adds an item's JSON, unless it would take the page past its bytes; whether it did.
    fn push(&mut self, item: &[u8]) -> bool {
        if self.items > 0 && self.text.len() + 1 + item.len() > self.allowed {
            return false;
        }
        if self.items > 0 {
            self.text.push(b',');
        }
        self.text.extend_from_slice(item);
        self.items += 1;
        true
    }

    /// The page's answer: its items, `next` and `more` fields.
    fn finish(mut self, next: Option<String>, more: &[(&str, Value)]) -> Reply {
        self.text.extend_from_slice(b"],\"next\":");
        self.text.extend_from_slice(json!(next).to_string().as_bytes());
        for (name, value) in more {
            self.text.extend_from_slice(format!(",{}:{value}", json!(name)).as_bytes());
        }
        self.text.push(b'}');
        // What it holds until it is written is what it takes.
        self.text.shrink_to_fit();
        Reply::json_bytes(self.text)
    }
}

/// How a listing is read: a page of at most `n` items after a cursor (`read`), an item's
/// cursor, an item as the page shows it (`encode`), and how many the first read takes.
struct Listing<R, K, E> {
    read: R,
    cursor: K,
    encode: E,
    first: usize,
}

impl<R, K, E> Listing<R, K, E> {
    /// A page of at most `limit` items after `after`, in at most `allowed` bytes, read a few
    /// items at a time (never hundreds of big records at once); with the cursor of the next
    /// page when there is more.
    fn page<T, C: Clone>(
        mut self,
        limit: usize,
        allowed: usize,
        mut after: Option<C>,
    ) -> Result<(PageText, Option<C>), Reply>
    where
        R: FnMut(Option<C>, usize) -> Result<Vec<T>, Reply>,
        K: Fn(&T) -> C,
        E: Fn(&T) -> Result<Vec<u8>, Reply>,
    {
        let mut page = PageText::new(allowed);
        let mut chunk = self.first;
        loop {
            let want = chunk.min(limit - page.items + 1);
            let found = (self.read)(after.clone(), want)?;
            let mut biggest = 1;
            for item in &found {
                let text = (self.encode)(item)?;
                biggest = biggest.max(text.len());
                if page.items == limit || !page.push(&text) {
                    return Ok((page, after));
                }
                after = Some((self.cursor)(item));
            }
            if found.len() < want {
                return Ok((page, None));
            }
            chunk = next_chunk(chunk, biggest);
        }
    }
}

/// A page of records keyed by their `id` (`Page::new(after, limit)` reads), each shown as it
/// is stored.
fn by_id<T: serde::Serialize>(
    ask: &Ask<'_>,
    id_of: impl Fn(&T) -> String,
    mut read: impl FnMut(Page) -> spindle::Result<Vec<T>>,
) -> Answer {
    let (after, limit) = ask.query.page()?;
    let listing = Listing {
        read: |after, limit| read(Page::new(after, limit)).map_err(store_error),
        cursor: id_of,
        encode: encoded,
        first: CHUNK_FIRST,
    };
    let (page, next) = listing.page(limit, ask.allowed, after)?;
    Ok(page.finish(next, &[]))
}

/// A value as JSON text.
fn encoded(value: &impl serde::Serialize) -> Result<Vec<u8>, Reply> {
    serde_json::to_vec(value).map_err(|e| Reply::error(500, format!("cannot encode: {e}")))
}

/// A value as a JSON value.
fn to_json(value: &impl serde::Serialize) -> Result<Value, Reply> {
    serde_json::to_value(value).map_err(|e| Reply::error(500, format!("cannot encode: {e}")))
}

/// Counts by status of runs, queue items, processes and workflow executions, the latest failed
/// runs, and the queues over the last minutes.
fn overview(store: &Store, samples: &[Sample]) -> Answer {
    let runs = store.graphs().count_by_status(&run_filter()).map_err(store_error)?;
    let runs = by_name(runs.iter().map(|(status, n)| (status.as_str(), *n)));
    let failed = runs_newest_first(Some(GraphStatus::Failed));
    let recent = store.graphs().find(&failed, Page::first(10)).map_err(store_error)?;
    let processes = store.processes().count().map_err(store_error)?;
    let processes = by_name([
        ("running", processes.running),
        ("waiting", processes.waiting),
        ("completed", processes.completed),
        ("failed", processes.failed),
        ("cancelled", processes.cancelled),
    ]);
    let workflows = store.workflows().count_by_status().map_err(store_error)?;
    let workflows = by_name(workflows.iter().map(|(status, n)| (status.as_str(), *n)));
    let queues = store.queue().stats().map_err(store_error)?;
    Ok(Reply::ok(json!({
        "runs": runs,
        "queues": to_json(&queues)?,
        "processes": processes,
        "workflows": workflows,
        "recent_failures": recent.iter().map(run_summary).collect::<Vec<_>>(),
        "samples": chart(samples),
    })))
}

/// Counts as a JSON object by name, leaving out the names none has.
fn by_name<'a>(counts: impl IntoIterator<Item = (&'a str, u64)>) -> Value {
    let present = counts.into_iter().filter(|(_, n)| *n > 0);
    Value::Object(present.map(|(name, n)| (name.to_owned(), json!(n))).collect())
}

/// The samples as the chart draws them: depth, and completions per minute since the sample
/// before.
fn chart(samples: &[Sample]) -> Vec<Value> {
    samples
        .windows(2)
        .map(|pair| {
            let (before, now) = (pair[0], pair[1]);
            let minutes = (now.at_ms - before.at_ms).max(1) as f64 / 60_000.0;
            let completed = now.completed.saturating_sub(before.completed) as f64;
            json!({ "at_ms": now.at_ms, "depth": now.depth, "completed_per_min": completed / minutes })
        })
        .collect()
}

/// The runs the CLI made, newest first, with `status`.
fn runs_newest_first(status: Option<GraphStatus>) -> GraphFilter {
    let filter = run_filter().newest_first(true);
    match status {
        Some(status) => filter.status(status),
        None => filter,
    }
}

/// What the runs list shows of a run.
fn run_summary(run: &Graph) -> Value {
    let duration_ms = run.started_at_ms.zip(run.finished_at_ms).map(|(s, f)| f - s);
    json!({
        "id": run.id,
        "name": run.metadata["pipeline"],
        "status": run.status,
        "created_at_ms": run.created_at_ms,
        "started_at_ms": run.started_at_ms,
        "finished_at_ms": run.finished_at_ms,
        "duration_ms": duration_ms,
        "counts": run.counts,
        "failed_node": run.failed_node_id,
    })
}

/// Runs read at first for a page: a run as the list shows it is small (no outputs, no specs).
const RUNS_FIRST: usize = 64;

/// `/api/runs?status=&name=&after=&limit=`: runs newest first.
fn runs(store: &Store, ask: &Ask<'_>) -> Answer {
    let (after, limit) = ask.query.page()?;
    let status = match ask.query.get("status").filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(enum_of::<GraphStatus>("status", text)?),
    };
    let mut filter = runs_newest_first(status);
    if let Some(name) = ask.query.get("name").filter(|n| !n.is_empty()) {
        filter.metadata.push(("pipeline".into(), json!(name)));
    }
    let listing = Listing {
        read: |after, limit| {
            store.graphs().find(&filter, Page::new(after, limit)).map_err(store_error)
        },
        cursor: |run: &Graph| run.id.clone(),
        encode: |run: &Graph| encoded(&run_summary(run)),
        first: RUNS_FIRST,
    };
    let (page, next) = listing.page(limit, ask.allowed, after)?;
    Ok(page.finish(next, &[]))
}

/// A status (or other enum) as the API spells it, or a 400 that says which are known.
fn enum_of<T: serde::de::DeserializeOwned>(name: &str, text: &str) -> Result<T, Reply> {
    serde_json::from_value(json!(text))
        .map_err(|_| Reply::error(400, format!("{name} {text:?} is not one this API knows")))
}

/// The most of a node's error the run's graph shows (its node view shows all of it).
const GRAPH_ERROR_CHARS: usize = 1_000;

/// `/api/runs/RUN`: the run with its nodes and edges, for drawing: a node's output is left
/// out and its error cut short (a node's view, below, has them).
fn run_detail(store: &Store, run: &str) -> Answer {
    let graph = store.graphs().get(run).map_err(store_error)?;
    let mut nodes = to_json(&store.graphs().nodes(run).map_err(store_error)?)?;
    for node in nodes.as_array_mut().into_iter().flatten() {
        let Some(node) = node.as_object_mut() else { continue };
        node.remove("output");
        if let Some(Value::String(error)) = node.get_mut("error")
            && let Some((cut, _)) = error.char_indices().nth(GRAPH_ERROR_CHARS)
        {
            error.truncate(cut);
            error.push('…');
        }
    }
    let edges = store.graphs().edges(run).map_err(store_error)?;
    Ok(Reply::ok(json!({ "run": run_summary(&graph), "nodes": nodes, "edges": to_json(&edges)? })))
}

/// Attempts of a node its view shows at once: the latest.
const ATTEMPTS_SHOWN: usize = 10;

/// `/api/runs/RUN/nodes/NODE[?attempts_before=N]`: one node as stored (status, timings,
/// error, output), its latest attempts (what each printed, how it ended: at most
/// `ATTEMPTS_SHOWN` and what fits in the answer's bytes; `attempts_before` asks for those
/// before the Nth), read from the node's own log stream, not the whole run's, how many there
/// are (`attempts_total`) and where those shown begin (`attempts_from`); and that stream's
/// name (`log_stream`, to follow it live on the events page).
fn node_detail(store: &Store, run: &str, node: &str, ask: &Ask<'_>) -> Answer {
    let found = to_json(&store.graphs().node(run, node).map_err(store_error)?)?;
    let before = match ask.query.get("attempts_before").filter(|b| !b.is_empty()) {
        Some(text) => Some(text.parse::<usize>().map_err(|_| {
            Reply::error(400, format!("attempts_before is a number, not {text:?}"))
        })?),
        None => None,
    };
    let (latest, total) = latest_attempts(store, run, node, before)?;
    let room = ask.allowed.saturating_sub(found.to_string().len());
    let (from, attempts) = fitting(latest, room, before.unwrap_or(total).min(total));
    let log_stream = format!("custom:{}", node_stream(run, node).id());
    Ok(Reply::ok(json!({
        "node": found,
        "attempts": attempts,
        "attempts_total": total,
        "attempts_from": from,
        "log_stream": log_stream,
    })))
}

/// The last `ATTEMPTS_SHOWN` attempts of a node before the `before`th (all: the last), with
/// their places, and how many the node has.
fn latest_attempts(
    store: &Store,
    run: &str,
    node: &str,
    before: Option<usize>,
) -> Result<(VecDeque<(usize, Value)>, usize), Reply> {
    let mut latest = VecDeque::new();
    let mut total = 0;
    LogReader::new(store, run)
        .node_attempts(node, &mut |a| {
            if before.is_none_or(|before| total < before) {
                latest
                    .push_back((total, json!({ "try": a.attempt, "log": a.text, "ended": a.how })));
                if latest.len() > ATTEMPTS_SHOWN {
                    latest.pop_front();
                }
            }
            total += 1;
        })
        .map_err(store_error)?;
    Ok((latest, total))
}

/// The newest of `attempts` that fit in `room` bytes (at least one), oldest first, and the
/// place of the first (`end` when there are none).
fn fitting(attempts: VecDeque<(usize, Value)>, mut room: usize, end: usize) -> (usize, Vec<Value>) {
    let mut shown = Vec::new();
    let mut from = end;
    for (at, attempt) in attempts.into_iter().rev() {
        let bytes = attempt.to_string().len();
        if !shown.is_empty() && bytes > room {
            break;
        }
        room = room.saturating_sub(bytes);
        from = at;
        shown.push(attempt);
    }
    shown.reverse();
    (from, shown)
}

/// `/api/queues`: counts per queue.
fn queues(store: &Store) -> Answer {
    Ok(Reply::ok(to_json(&store.queue().stats().map_err(store_error)?)?))
}

/// `/api/schedules?after=&limit=`: the tenant's periodic jobs by name, as
/// `spindle queue schedules --json` prints them, a bounded page at a time.
fn schedules(store: &Store, ask: &Ask<'_>) -> Answer {
    let name_of = |schedule: &Value| schedule["name"].as_str().unwrap_or_default().to_owned();
    by_id(ask, name_of, |page| {
        let schedules = store.queue().schedules(page)?;
        Ok(schedules.iter().map(crate::commands::schedules::schedule_json).collect())
    })
}

/// `/api/queues/QUEUE/dead?after=&limit=`: dead letters with their last error.
fn dead(store: &Store, queue: &str, ask: &Ask<'_>) -> Answer {
    by_id(ask, |item: &QueueItem| item.id.clone(), |page| store.queue().dead_letters(queue, page))
}

/// `/api/queues/QUEUE/items?status=pending|scheduled|claimed&tag=&meta=KEY=VALUE&after=&limit=`:
/// a queue's live items (with the tag, if one is given, and whose metadata meets every `meta`
/// condition, read as `spindle queue items --meta` reads them); pending ones are due now,
/// scheduled ones later.
fn items(store: &Store, queue: &str, ask: &Ask<'_>) -> Answer {
    let mut filter = match ask.query.get("status").filter(|s| !s.is_empty()).unwrap_or("pending") {
        "pending" => ItemFilter::due(),
        "scheduled" => ItemFilter::scheduled(),
        "claimed" => ItemFilter::status(ItemStatus::Claimed),
        other => {
            return Err(Reply::error(
                400,
                format!("status is pending, scheduled or claimed, not {other:?}"),
            ));
        }
    };
    if let Some(tag) = ask.query.get("tag").filter(|tag| !tag.is_empty()) {
        filter = filter.tag(tag);
    }
    let conditions: Vec<&str> = ask.query.all("meta").filter(|m| !m.is_empty()).collect();
    if conditions.len() > METADATA_CONDITIONS_MAX {
        let many = conditions.len();
        let message = format!("at most {METADATA_CONDITIONS_MAX} meta conditions, not {many}");
        return Err(Reply::error(400, message));
    }
    for condition in conditions {
        let (key, value) = parse_meta(condition).map_err(|message| Reply::error(400, message))?;
        filter = filter.metadata(key, value);
    }
    let read = |page| store.queue().items(queue, filter.clone(), page);
    by_id(ask, |item: &QueueItem| item.id.clone(), read)
}

/// `/api/workflows?status=&workflow=&after=&limit=`: executions, newest first.
fn workflows(store: &Store, ask: &Ask<'_>) -> Answer {
    let status = match ask.query.get("status").filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(enum_of::<WorkflowStatus>("status", text)?),
    };
    let workflow_id = ask.query.get("workflow").filter(|w| !w.is_empty()).map(str::to_owned);
    let mut filter = ExecutionFilter::default();
    filter.status = status;
    filter.workflow_id = workflow_id;
    by_id(
        ask,
        |execution: &Execution| execution.id.clone(),
        |page| store.workflows().list_executions(&filter, page),
    )
}

/// Events of an execution shown at once, at most: its latest.
const EXECUTION_EVENTS: u64 = 200;

/// `/api/workflows/ID`: an execution, its latest events (at most `EXECUTION_EVENTS`, and
/// those that fit in the answer's bytes) and its latest snapshot.
fn workflow(store: &Store, id: &str, allowed: usize) -> Answer {
    let execution = store
        .workflows()
        .execution(id)
        .map_err(store_error)?
        .ok_or_else(|| Reply::error(404, format!("no workflow execution {id}")))?;
    let execution = encoded(&execution)?;
    let snapshot = encoded(&store.workflows().latest_snapshot(id).map_err(store_error)?)?;
    let room = allowed.saturating_sub(execution.len() + snapshot.len());
    let events = latest_events(store, &Stream::execution(id), EXECUTION_EVENTS, room)?;
    let mut text = b"{\"execution\":".to_vec();
    text.extend_from_slice(&execution);
    text.extend_from_slice(b",\"events\":[");
    text.extend_from_slice(&events.into_iter().collect::<Vec<_>>().join(&b',')[..]);
    text.extend_from_slice(b"],\"snapshot\":");
    text.extend_from_slice(&snapshot);
    text.push(b'}');
    Ok(Reply::json_bytes(text))
}

/// The JSON of the last `count` events of `stream` that fit in `room` bytes (at least one),
/// oldest first, read a few at a time.
fn latest_events(
    store: &Store,
    stream: &Stream,
    count: u64,
    room: usize,
) -> Result<VecDeque<Vec<u8>>, Reply> {
    let head = store.events().head(stream).map_err(store_error)?;
    let mut after = head.saturating_sub(count);
    let (mut kept, mut bytes) = (VecDeque::new(), 0);
    let mut chunk = CHUNK_FIRST;
    while after < head {
        let found = store.events().read(stream, after, chunk).map_err(store_error)?;
        let Some(last) = found.last() else { break };
        after = last.seq;
        let mut biggest = 1;
        for event in &found {
            let text = encoded(event)?;
            biggest = biggest.max(text.len());
            bytes += text.len() + 1;
            kept.push_back(text);
            while bytes > room && kept.len() > 1 {
                bytes -= kept.pop_front().map_or(0, |text| text.len() + 1);
            }
        }
        chunk = next_chunk(chunk, biggest);
    }
    Ok(kept)
}

/// `/api/processes?status=running|any&after=&limit=`.
fn processes(store: &Store, ask: &Ask<'_>) -> Answer {
    let status = match ask.query.get("status").filter(|s| !s.is_empty()).unwrap_or("running") {
        "running" => StatusFilter::Running,
        "any" => StatusFilter::Any,
        other => {
            return Err(Reply::error(400, format!("status is running or any, not {other:?}")));
        }
    };
    by_id(
        ask,
        |process: &ProcessRecord| process.id.clone(),
        |page| store.processes().list(ListFilter::status(status).page(page)),
    )
}

/// `/api/events?stream=KIND:ID&after=&limit=`: a stream's events after a seq (or every
/// stream's after a position). With `tail=N` instead of `after`, the latest events: a
/// stream's last N, or every stream's among the last N positions; `last` is then the cursor a
/// live tail goes on from.
fn events(store: &Store, ask: &Ask<'_>) -> Answer {
    let (after, limit) = ask.query.page()?;
    let stream = match ask.query.get("stream").filter(|s| !s.is_empty()) {
        Some(text) => Some(parse_stream(text).map_err(|message| Reply::error(400, message))?),
        None => None,
    };
    let number = |name: &str, text: &str| {
        text.parse::<u64>()
            .map_err(|_| Reply::error(400, format!("{name} is a number, not {text:?}")))
    };
    let tail =
        ask.query.get("tail").filter(|t| !t.is_empty()).map(|t| number("tail", t)).transpose()?;
    let last = match (tail, &stream) {
        (None, _) => None,
        (Some(_), Some(stream)) => Some(store.events().head(stream).map_err(store_error)?),
        (Some(_), None) => Some(store.events().last_position().map_err(store_error)?),
    };
    let after = match (tail, last, after) {
        (Some(tail), Some(last), _) => last.saturating_sub(tail.min(PAGE_MAX as u64)),
        (_, _, Some(text)) => number("after", &text)?,
        _ => 0,
    };
    let by_stream = stream.is_some();
    let listing = Listing {
        read: |after: Option<u64>, limit| {
            let after = after.unwrap_or(0);
            match &stream {
                Some(stream) => store.events().read(stream, after, limit),
                None => store.events().read_all(after, limit),
            }
            .map_err(store_error)
        },
        cursor: |event: &Event| if by_stream { event.seq } else { event.position },
        encode: encoded,
        first: CHUNK_FIRST,
    };
    let (page, next) = listing.page(limit, ask.allowed, Some(after))?;
    let more: Vec<(&str, Value)> = last.map(|last| ("last", json!(last))).into_iter().collect();
    Ok(page.finish(next.map(|n| n.to_string()), &more))
}

/// `/api/tenants`.
fn tenants(store: &Store) -> Answer {
    Ok(Reply::ok(to_json(&store.auth().tenants().map_err(store_error)?)?))
}

/// `/api/tokens`: the tenant's tokens, never their secrets (the store keeps only hashes).
fn tokens(store: &Store) -> Answer {
    Ok(Reply::ok(to_json(&store.auth().tokens().map_err(store_error)?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of the numbers 1..=`count`, each `size` bytes of JSON, read as the API reads.
    fn page_of(count: u64, size: usize, limit: usize, allowed: usize) -> (Value, Vec<usize>) {
        let mut reads = Vec::new();
        let listing = Listing {
            read: |after: Option<u64>, n: usize| {
                reads.push(n);
                let from = after.unwrap_or(0) + 1;
                Ok((from..=count).take(n).collect::<Vec<u64>>())
            },
            cursor: |n: &u64| *n,
            // A JSON string of `size` bytes in all.
            encode: |n: &u64| {
                let digits = n.to_string();
                let pad = "x".repeat(size.saturating_sub(digits.len() + 2));
                Ok(format!("\"{digits}{pad}\"").into_bytes())
            },
            first: CHUNK_FIRST,
        };
        let (page, next) = listing.page(limit, allowed, None).map_err(|r| r.status).expect("page");
        let reply = page.finish(next.map(|n| n.to_string()), &[("last", json!(count))]);
        let value = serde_json::from_slice(reply.bytes()).expect("json");
        (value, reads)
    }

    #[test]
    fn pages_stop_at_their_limit_or_their_bytes_and_give_the_next_cursor() {
        let (page, reads) = page_of(1_000, 10, 500, usize::MAX);
        assert_eq!(page["items"].as_array().map(Vec::len), Some(500));
        assert_eq!((page["next"].clone(), page["last"].clone()), (json!("500"), json!(1_000)));
        assert_eq!(reads.first(), Some(&CHUNK_FIRST), "a few first");
        assert!(
            reads.iter().all(|&n| n <= CHUNK_MAX) && reads.windows(2).all(|w| w[1] <= 2 * w[0])
        );
        let (page, _) = page_of(10, 10, 500, usize::MAX);
        assert_eq!(
            (page["items"].as_array().map(Vec::len), page["next"].clone()),
            (Some(10), Value::Null)
        );
        // Bytes: a page of 100-byte items stops before 1,000 bytes; a first item goes in
        // whatever its size.
        let (page, _) = page_of(100, 100, 500, 1_000);
        let items = page["items"].as_array().map_or(0, Vec::len);
        assert_eq!((items, page["next"].clone()), (9, json!("9")));
        let (page, _) = page_of(100, 100, 500, 10);
        assert_eq!(
            (page["items"].as_array().map(Vec::len), page["next"].clone()),
            (Some(1), json!("1"))
        );
    }

    #[test]
    fn big_records_are_read_one_at_a_time() {
        let (_, reads) = page_of(100, 512 * 1024, 500, ANSWER_MAX_FOR_TESTS);
        assert_eq!(reads[0], CHUNK_FIRST);
        assert!(reads[1..].iter().all(|&n| n <= 2), "{reads:?}");
    }

    /// What an answer is allowed in these tests.
    const ANSWER_MAX_FOR_TESTS: usize = 4 * 1024 * 1024;
}
