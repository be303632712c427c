//! `spindle ui`'s JSON API (`/api/...`): what the dashboard's pages read, as plain functions
//! of a store view and a request line, so that they are tested without a browser.
//!
//! Every listing pages by keyset: `?after=<the last id of the page before>&limit=<1..=500>`,
//! and answers `{"items": [...], "next": <the after of the next page, or null>}`. Bad
//! parameters answer 400, unknown things 404, other methods 405; every error is
//! `{"error": "<what to do>"}`. Nothing here writes.

use serde_json::{Value, json};
use spindle::process::{ListFilter, StatusFilter};
use spindle::workflow::ExecutionFilter;
use spindle::{
    Graph, GraphFilter, GraphStatus, ItemFilter, ItemStatus, Page, Store, Stream, WorkflowStatus,
};

use crate::common::parse_stream;
use crate::livelog;
use crate::logs::LogReader;
use crate::pipeline::run_filter;
use crate::ui_state::Sample;

/// The most items one page may ask for.
const PAGE_MAX: usize = 500;
/// Items of a page when the request does not say.
const PAGE_DEFAULT: usize = 50;

/// An answer: its status code and its body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Body,
}

/// What an answer carries.
#[derive(Debug)]
pub enum Body {
    Json(Value),
    File { content_type: &'static str, bytes: Vec<u8> },
}

impl Reply {
    /// 200 with a JSON body.
    pub fn ok(body: Value) -> Self {
        Reply { status: 200, body: Body::Json(body) }
    }

    /// An error: `{"error": message}`.
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Reply { status, body: Body::Json(json!({ "error": message.into() })) }
    }

    /// A file's bytes.
    pub fn file(status: u16, content_type: &'static str, bytes: Vec<u8>) -> Self {
        Reply { status, body: Body::File { content_type, bytes } }
    }

    /// The content type and bytes to send.
    pub fn into_content(self) -> (&'static str, Vec<u8>) {
        match self.body {
            Body::Json(value) => {
                ("application/json; charset=utf-8", value.to_string().into_bytes())
            }
            Body::File { content_type, bytes } => (content_type, bytes),
        }
    }
}

/// Answers `method` on `path` with `query` (both still encoded) from the store view `store`;
/// `samples` are the queues over the last minutes, for the overview.
pub fn route(store: &Store, method: &str, path: &str, query: &str, samples: &[Sample]) -> Reply {
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
    let answer = match parts.as_slice() {
        ["", "api", "overview"] => overview(store, samples),
        ["", "api", "runs"] => runs(store, &query),
        ["", "api", "runs", run] => run_detail(store, run),
        ["", "api", "runs", run, "nodes", node] => node_detail(store, run, node),
        ["", "api", "queues"] => queues(store),
        ["", "api", "queues", queue, "dead"] => dead(store, queue, &query),
        ["", "api", "queues", queue, "items"] => items(store, queue, &query),
        ["", "api", "workflows"] => workflows(store, &query),
        ["", "api", "workflows", id] => workflow(store, id),
        ["", "api", "processes"] => processes(store, &query),
        ["", "api", "events"] => events(store, &query),
        ["", "api", "tenants"] => tenants(store),
        ["", "api", "tokens"] => tokens(store),
        _ => return Reply::error(404, format!("no such page {path:?}: see /api/overview")),
    };
    answer.unwrap_or_else(|error| error)
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

/// One page of `items` (already past `after`): at most `limit`, and the cursor of the next.
fn page_of(mut items: Vec<Value>, limit: usize, id_of: impl Fn(&Value) -> Option<String>) -> Value {
    let more = items.len() > limit;
    items.truncate(limit);
    let next = if more { items.last().and_then(id_of) } else { None };
    json!({ "items": items, "next": next })
}

/// A page of `found` (read with `limit + 1`) whose next cursor is the last item's `id`.
fn by_id(found: &[impl serde::Serialize], limit: usize) -> Answer {
    let items = found.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
    Ok(Reply::ok(page_of(items, limit, |item| item["id"].as_str().map(str::to_owned))))
}

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
    GraphFilter { status, newest_first: true, ..run_filter() }
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

/// `/api/runs?status=&name=&after=&limit=`: runs newest first.
fn runs(store: &Store, query: &Query) -> Answer {
    let (after, limit) = query.page()?;
    let status = match query.get("status").filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(enum_of::<GraphStatus>("status", text)?),
    };
    let mut filter = runs_newest_first(status);
    if let Some(name) = query.get("name").filter(|n| !n.is_empty()) {
        filter.metadata.push(("pipeline".into(), json!(name)));
    }
    let found =
        store.graphs().find(&filter, Page { after, limit: limit + 1 }).map_err(store_error)?;
    let items = found.iter().map(run_summary).collect();
    Ok(Reply::ok(page_of(items, limit, |item| item["id"].as_str().map(str::to_owned))))
}

/// A status (or other enum) as the API spells it, or a 400 that says which are known.
fn enum_of<T: serde::de::DeserializeOwned>(name: &str, text: &str) -> Result<T, Reply> {
    serde_json::from_value(json!(text))
        .map_err(|_| Reply::error(400, format!("{name} {text:?} is not one this API knows")))
}

/// `/api/runs/RUN`: the run with its nodes and edges.
fn run_detail(store: &Store, run: &str) -> Answer {
    let graph = store.graphs().get(run).map_err(store_error)?;
    let nodes = store.graphs().nodes(run).map_err(store_error)?;
    let edges = store.graphs().edges(run).map_err(store_error)?;
    Ok(Reply::ok(
        json!({ "run": run_summary(&graph), "nodes": to_json(&nodes)?, "edges": to_json(&edges)? }),
    ))
}

/// `/api/runs/RUN/nodes/NODE`: one node as stored (status, timings, error, output), the
/// attempts its run's live log holds (what each printed, how it ended), read from the node's
/// own log stream, not the whole run's, and that stream's name (`log_stream`, to follow it
/// live on the events page).
fn node_detail(store: &Store, run: &str, node: &str) -> Answer {
    let found = store.graphs().node(run, node).map_err(store_error)?;
    let mut attempts: Vec<Value> = Vec::new();
    LogReader::new(store, run)
        .node_attempts(node, &mut |a| {
            attempts.push(json!({ "try": a.attempt, "log": a.text, "ended": a.how }));
        })
        .map_err(store_error)?;
    let log_stream = format!("custom:{}", livelog::node_stream(run, node).id());
    Ok(Reply::ok(
        json!({ "node": to_json(&found)?, "attempts": attempts, "log_stream": log_stream }),
    ))
}

/// `/api/queues`: counts per queue.
fn queues(store: &Store) -> Answer {
    Ok(Reply::ok(to_json(&store.queue().stats().map_err(store_error)?)?))
}

/// `/api/queues/QUEUE/dead?after=&limit=`: dead letters with their last error.
fn dead(store: &Store, queue: &str, query: &Query) -> Answer {
    let (after, limit) = query.page()?;
    let page = Page { after, limit: limit + 1 };
    by_id(&store.queue().dead_letters(queue, page).map_err(store_error)?, limit)
}

/// `/api/queues/QUEUE/items?status=pending|scheduled|claimed&after=&limit=`: a queue's live
/// items; pending ones are due now, scheduled ones later.
fn items(store: &Store, queue: &str, query: &Query) -> Answer {
    let (after, limit) = query.page()?;
    let filter = match query.get("status").filter(|s| !s.is_empty()).unwrap_or("pending") {
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
    let page = Page { after, limit: limit + 1 };
    by_id(&store.queue().items(queue, filter, page).map_err(store_error)?, limit)
}

/// `/api/workflows?status=&workflow=&after=&limit=`: executions, newest first.
fn workflows(store: &Store, query: &Query) -> Answer {
    let (after, limit) = query.page()?;
    let status = match query.get("status").filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(enum_of::<WorkflowStatus>("status", text)?),
    };
    let workflow_id = query.get("workflow").filter(|w| !w.is_empty()).map(str::to_owned);
    let filter = ExecutionFilter { status, workflow_id };
    let page = Page { after, limit: limit + 1 };
    by_id(&store.workflows().list_executions(filter, page).map_err(store_error)?, limit)
}

/// Events of an execution shown at once: its latest.
const EXECUTION_EVENTS: u64 = 200;

/// `/api/workflows/ID`: an execution, its latest events and its latest snapshot.
fn workflow(store: &Store, id: &str) -> Answer {
    let execution = store
        .workflows()
        .execution(id)
        .map_err(store_error)?
        .ok_or_else(|| Reply::error(404, format!("no workflow execution {id}")))?;
    let head = store.events().head(Stream::execution(id)).map_err(store_error)?;
    let after = head.saturating_sub(EXECUTION_EVENTS);
    let events = store.workflows().events(id, after).map_err(store_error)?;
    let snapshot = store.workflows().latest_snapshot(id).map_err(store_error)?;
    Ok(Reply::ok(json!({
        "execution": to_json(&execution)?,
        "events": to_json(&events)?,
        "snapshot": to_json(&snapshot)?,
    })))
}

/// `/api/processes?status=running|any&after=&limit=`.
fn processes(store: &Store, query: &Query) -> Answer {
    let (after, limit) = query.page()?;
    let status = match query.get("status").filter(|s| !s.is_empty()).unwrap_or("running") {
        "running" => StatusFilter::Running,
        "any" => StatusFilter::Any,
        other => {
            return Err(Reply::error(400, format!("status is running or any, not {other:?}")));
        }
    };
    let page = Page { after, limit: limit + 1 };
    let filter = ListFilter { status, page, ..ListFilter::default() };
    by_id(&store.processes().list(&filter).map_err(store_error)?, limit)
}

/// `/api/events?stream=KIND:ID&after=&limit=`: a stream's events after a seq (or every
/// stream's after a position). With `tail=N` instead of `after`, the latest events: a
/// stream's last N, or every stream's among the last N positions; `last` is then the cursor a
/// live tail goes on from.
fn events(store: &Store, query: &Query) -> Answer {
    let (after, limit) = query.page()?;
    let stream = match query.get("stream").filter(|s| !s.is_empty()) {
        Some(text) => Some(parse_stream(text).map_err(|message| Reply::error(400, message))?),
        None => None,
    };
    let number = |name: &str, text: &str| {
        text.parse::<u64>()
            .map_err(|_| Reply::error(400, format!("{name} is a number, not {text:?}")))
    };
    let tail =
        query.get("tail").filter(|t| !t.is_empty()).map(|t| number("tail", t)).transpose()?;
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
    let found = match &stream {
        Some(stream) => store.events().read(stream, after, limit + 1),
        None => store.events().read_all(after, limit + 1),
    };
    let items = found.map_err(store_error)?.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
    let cursor = if stream.is_some() { "seq" } else { "position" };
    let mut page = page_of(items, limit, |item| item[cursor].as_u64().map(|n| n.to_string()));
    if let Some(last) = last {
        page["last"] = json!(last);
    }
    Ok(Reply::ok(page))
}

/// `/api/tenants`.
fn tenants(store: &Store) -> Answer {
    Ok(Reply::ok(to_json(&store.auth().tenants().map_err(store_error)?)?))
}

/// `/api/tokens`: the tenant's tokens, never their secrets (the store keeps only hashes).
fn tokens(store: &Store) -> Answer {
    Ok(Reply::ok(to_json(&store.auth().tokens().map_err(store_error)?)?))
}
