//! `spindle ui`'s JSON API (`/api/...`): what the dashboard's pages read, as plain functions
//! of a store view and a request line, so that they are tested without a browser.
//!
//! Every listing pages by keyset: `?after=<the last id of the page before>&limit=<1..=500>`,
//! and answers `{"items": [...], "next": <the after of the next page, or null>}`. Bad
//! parameters answer 400, unknown things 404, other methods 405; every error is
//! `{"error": "<what to do>"}`. Nothing here writes.

use serde_json::{Value, json};
use spindle::process::{ListFilter, StatusFilter};
use spindle::{Graph, Page, Store};

use crate::common::parse_stream;
use crate::inspect::all_processes;
use crate::runs::all_runs;

/// The most items one page may ask for.
const PAGE_MAX: usize = 500;
/// Items of a page when the request does not say.
const PAGE_DEFAULT: usize = 50;

/// An answer: its status code and its JSON body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    fn ok(body: Value) -> Self {
        Reply { status: 200, body }
    }

    fn error(status: u16, message: impl Into<String>) -> Self {
        Reply { status, body: json!({ "error": message.into() }) }
    }
}

/// Answers `method` on `url` (a path with an optional query) from the store view `store`.
pub fn route(store: &Store, method: &str, url: &str) -> Reply {
    if method != "GET" {
        return Reply::error(405, format!("{method} is not allowed here: the API only reads"));
    }
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let query = match Query::parse(query) {
        Ok(query) => query,
        Err(message) => return Reply::error(400, message),
    };
    let parts: Vec<String> = match path.trim_end_matches('/').split('/').map(decode).collect() {
        Ok(parts) => parts,
        Err(message) => return Reply::error(400, message),
    };
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let answer = match parts.as_slice() {
        ["", "api", "overview"] => overview(store),
        ["", "api", "runs"] => runs(store, &query),
        ["", "api", "runs", run] => run_detail(store, run),
        ["", "api", "runs", run, "nodes", node] => node_detail(store, run, node),
        ["", "api", "queues"] => queues(store),
        ["", "api", "queues", queue, "dead"] => dead(store, queue, &query),
        ["", "api", "processes"] => processes(store, &query),
        ["", "api", "events"] => events(store, &query),
        ["", "api", "tenants"] => tenants(store),
        ["", "api", "tokens"] => tokens(store),
        _ => return Reply::error(404, format!("no such page {path:?}: see /api/overview")),
    };
    answer.unwrap_or_else(|error| error)
}

type Answer = Result<Reply, Reply>;

/// A store error as an answer: what was not found is 404, bad input 400, the rest 500.
fn store_error(error: spindle::Error) -> Reply {
    match error {
        spindle::Error::NotFound { kind, id } => Reply::error(404, format!("no {kind} {id}")),
        spindle::Error::InvalidInput(message) | spindle::Error::Conflict(message) => {
            Reply::error(400, message)
        }
        too_large @ spindle::Error::TooLarge { .. } => Reply::error(400, too_large.to_string()),
        other => Reply::error(500, format!("the store failed: {other}")),
    }
}

/// The query string's parameters, decoded.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for pair in text.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            pairs.push((decode(name)?, decode(value)?));
        }
        Ok(Query(pairs))
    }

    fn get(&self, name: &str) -> Option<&str> {
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

/// Percent-decodes a URL component (`+` is a space in a query).
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
            b'+' => {
                out.push(b' ');
                at += 1;
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

fn to_json(value: &impl serde::Serialize) -> Result<Value, Reply> {
    serde_json::to_value(value).map_err(|e| Reply::error(500, format!("cannot encode: {e}")))
}

/// Counts by status of runs, queue items and processes, and the latest failed runs.
fn overview(store: &Store) -> Answer {
    let runs = run_graphs(store)?;
    let mut by_status = serde_json::Map::new();
    for run in &runs {
        let count = by_status.entry(run.status.as_str()).or_insert(json!(0));
        *count = json!(count.as_u64().unwrap_or(0) + 1);
    }
    let mut failed: Vec<&Graph> = runs.iter().filter(|r| r.status.as_str() == "failed").collect();
    failed.sort_by_key(|run| std::cmp::Reverse(run.finished_at_ms));
    let recent: Vec<Value> = failed.iter().take(10).map(|run| run_summary(run)).collect();
    let queues = store.queue().stats().map_err(store_error)?;
    Ok(Reply::ok(json!({
        "runs": by_status,
        "queues": to_json(&queues)?,
        "processes_running": all_processes(store, StatusFilter::Running).map_err(store_error)?.len(),
        "recent_failures": recent,
    })))
}

/// Every run (a graph the CLI made), in id order: what keyset pages go by.
fn run_graphs(store: &Store) -> Result<Vec<Graph>, Reply> {
    let mut runs = all_runs(store).map_err(store_error)?;
    runs.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(runs)
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

/// `/api/runs?status=&name=&after=&limit=`: runs in id order (ids begin with their time).
fn runs(store: &Store, query: &Query) -> Answer {
    let (after, limit) = query.page()?;
    let status = query.get("status").filter(|s| !s.is_empty());
    let known = ["pending", "running", "complete", "failed", "cancelled"];
    if let Some(status) = status.filter(|s| !known.contains(s)) {
        return Err(Reply::error(
            400,
            format!("status is one of {}, not {status:?}", known.join(", ")),
        ));
    }
    let name = query.get("name").filter(|n| !n.is_empty());
    let items: Vec<Value> = run_graphs(store)?
        .iter()
        .filter(|run| after.as_deref().is_none_or(|after| run.id.as_str() > after))
        .filter(|run| status.is_none_or(|s| run.status.as_str() == s))
        .filter(|run| name.is_none_or(|n| run.metadata["pipeline"] == n))
        .take(limit + 1)
        .map(run_summary)
        .collect();
    Ok(Reply::ok(page_of(items, limit, |item| item["id"].as_str().map(str::to_owned))))
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

/// `/api/runs/RUN/nodes/NODE`: one node as stored (status, timings, error, output).
fn node_detail(store: &Store, run: &str, node: &str) -> Answer {
    let node = store.graphs().node(run, node).map_err(store_error)?;
    Ok(Reply::ok(to_json(&node)?))
}

/// `/api/queues`: counts per queue.
fn queues(store: &Store) -> Answer {
    Ok(Reply::ok(to_json(&store.queue().stats().map_err(store_error)?)?))
}

/// `/api/queues/QUEUE/dead?after=&limit=`: dead letters with their last error.
fn dead(store: &Store, queue: &str, query: &Query) -> Answer {
    let (after, limit) = query.page()?;
    let page = Page { after, limit: limit + 1 };
    let items = store.queue().dead_letters(queue, page).map_err(store_error)?;
    let items = items.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
    Ok(Reply::ok(page_of(items, limit, |item| item["id"].as_str().map(str::to_owned))))
}

/// `/api/processes?status=running|any&after=&limit=`.
fn processes(store: &Store, query: &Query) -> Answer {
    let (after, limit) = query.page()?;
    let status = match query.get("status").unwrap_or("running") {
        "running" => StatusFilter::Running,
        "any" => StatusFilter::Any,
        other => {
            return Err(Reply::error(400, format!("status is running or any, not {other:?}")));
        }
    };
    let page = Page { after, limit: limit + 1 };
    let filter = ListFilter { status, page, ..ListFilter::default() };
    let found = store.processes().list(&filter).map_err(store_error)?;
    let items = found.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
    Ok(Reply::ok(page_of(items, limit, |item| item["id"].as_str().map(str::to_owned))))
}

/// `/api/events?stream=KIND:ID&after=&limit=`: a stream's events after a seq (or every
/// stream's after a position).
fn events(store: &Store, query: &Query) -> Answer {
    let (after, limit) = query.page()?;
    let after: u64 = match after {
        None => 0,
        Some(text) => text
            .parse()
            .map_err(|_| Reply::error(400, format!("after is a number here, not {text:?}")))?,
    };
    let found = match query.get("stream").filter(|s| !s.is_empty()) {
        Some(stream) => {
            let stream = parse_stream(stream).map_err(|message| Reply::error(400, message))?;
            store.events().read(&stream, after, limit + 1)
        }
        None => store.events().read_all(after, limit + 1),
    };
    let by_stream = query.get("stream").is_some_and(|s| !s.is_empty());
    let items = found.map_err(store_error)?.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
    let cursor = if by_stream { "seq" } else { "position" };
    Ok(Reply::ok(page_of(items, limit, |item| item[cursor].as_u64().map(|n| n.to_string()))))
}

/// `/api/tenants`.
fn tenants(store: &Store) -> Answer {
    Ok(Reply::ok(to_json(&store.auth().tenants().map_err(store_error)?)?))
}

/// `/api/tokens`: the tenant's tokens, never their secrets (the store keeps only hashes).
fn tokens(store: &Store) -> Answer {
    Ok(Reply::ok(to_json(&store.auth().tokens().map_err(store_error)?)?))
}
