//! The runs of pipelines as people look for them: `spindle runs` (one line per run), a `RUN`
//! argument (a unique id prefix, or a pipeline's name for its latest run), and `spindle
//! retry` (reopen a finished run at its failed nodes and run it again).
//!
//! A run is a graph whose metadata says `kind: spindle-run`; it keeps its pipeline's text
//! (`names::source_stream`), so a retry runs the same pipeline without the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use spindle::{Graph, GraphStatus, NodeStatus, Store};

use crate::common::{
    CliError, Output, all_graphs_by, human_duration, human_time, now_ms, parse_duration_ms,
    read_stream,
};
use crate::names::{run_filter, run_of_queue, run_queue, source_stream};
use crate::pipeline::{self, Pipeline};
use crate::run::livelog;
use crate::run::outputs::Outputs;
use crate::run::{self, Ending};

/// Which runs `spindle runs` lists.
pub struct Filter {
    pub status: Option<String>,
    pub name: Option<String>,
    pub since: Option<String>,
}

/// Every run of the tenant, oldest first.
pub fn all_runs(store: &Store) -> spindle::Result<Vec<Graph>> {
    let filter = run_filter();
    let mut runs = all_graphs_by(|page| store.graphs().find(&filter, page))?;
    runs.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
    Ok(runs)
}

/// The run `wanted` names: its id, a prefix of exactly one run's id, or a pipeline's name
/// (its latest run).
pub fn resolve(store: &Store, wanted: &str) -> Result<Graph, CliError> {
    let runs = all_runs(store)?;
    if let Some(run) = runs.iter().find(|run| run.id == wanted) {
        return Ok(run.clone());
    }
    let by_prefix: Vec<&Graph> = runs.iter().filter(|run| run.id.starts_with(wanted)).collect();
    match by_prefix.as_slice() {
        [one] => return Ok((*one).clone()),
        [] => {}
        many => {
            return Err(CliError::Bad(format!(
                "{wanted:?} starts {} run ids: give more of the id (see `spindle runs`)",
                many.len()
            )));
        }
    }
    let by_name = runs.iter().rev().find(|run| run.metadata["pipeline"] == wanted);
    by_name.cloned().ok_or_else(|| {
        CliError::Bad(format!(
            "no run has the id or pipeline name {wanted:?}: `spindle runs` lists them"
        ))
    })
}

/// The graph `wanted` names: a graph's id, or a run as [`resolve`] finds it.
pub fn graph_or_run(store: &Store, wanted: &str) -> Result<String, CliError> {
    match store.graphs().get(wanted) {
        Ok(graph) => Ok(graph.id),
        Err(spindle::Error::NotFound { .. }) => Ok(resolve(store, wanted)?.id),
        Err(error) => Err(error.into()),
    }
}

/// What `prune` removed of runs that finished before its cutoff.
#[derive(Debug, Default)]
pub struct Pruned {
    /// Live log events.
    pub log_events: u64,
    /// Outputs directories.
    pub output_dirs: u64,
    /// Dead items of their queues (a finished run's failed attempts; nothing runs them again:
    /// a retry enqueues afresh).
    pub dead_items: u64,
}

/// Removes the live logs, the dead queue items and the outputs directories (under `runs`, the
/// runs directory) of runs that finished before `cutoff_ms` (the runs themselves, and what
/// their nodes kept, stay).
pub fn prune(store: &Store, runs: &Path, cutoff_ms: i64) -> Result<Pruned, CliError> {
    let mut pruned = Pruned::default();
    for run in all_runs(store)? {
        if run.finished_at_ms.is_none_or(|at_ms| at_ms >= cutoff_ms) {
            continue;
        }
        pruned.log_events += livelog::delete(store, &run.id)?;
        pruned.output_dirs += u64::from(Outputs::remove(runs, &run.id)?);
        pruned.dead_items += purge_dead(store, &run_queue(&run.id))?;
    }
    pruned.dead_items += purge_orphans(store)?;
    Ok(pruned)
}

/// Deletes every dead item of `queue`; returns how many.
fn purge_dead(store: &Store, queue: &str) -> spindle::Result<u64> {
    let mut total = 0;
    loop {
        let purged = store.queue().purge_dead(queue)?;
        total += purged;
        if purged == 0 {
            return Ok(total);
        }
    }
}

/// Deletes the dead items of runs' queues whose run is gone (its graph deleted through the
/// library): nothing can settle them any more, and the command and the dashboard refuse
/// actions on a run's queue.
fn purge_orphans(store: &Store) -> Result<u64, CliError> {
    let mut total = 0;
    for stats in store.queue().stats()? {
        let Some(run) = run_of_queue(&stats.queue) else { continue };
        if stats.dead == 0 {
            continue;
        }
        match store.graphs().get(run) {
            Err(spindle::Error::NotFound { .. }) => total += purge_dead(store, &stats.queue)?,
            other => drop(other?),
        }
    }
    Ok(total)
}

/// `spindle runs`: one line per run, newest last.
pub fn list(store: &Store, filter: &Filter, out: &Output) -> Result<(), CliError> {
    let since_ms = filter.since.as_deref().map(parse_duration_ms).transpose()?;
    if let Some(status) = &filter.status {
        let known = ["pending", "running", "complete", "failed", "cancelled"];
        if !known.contains(&status.as_str()) {
            return Err(CliError::Bad(format!(
                "--status is one of {}, not {status:?}",
                known.join(", ")
            )));
        }
    }
    let now = now_ms();
    let runs: Vec<Graph> = all_runs(store)?
        .into_iter()
        .filter(|run| filter.status.as_deref().is_none_or(|s| run.status.as_str() == s))
        .filter(|run| filter.name.as_deref().is_none_or(|n| run.metadata["pipeline"] == n))
        .filter(|run| since_ms.is_none_or(|ms| run.created_at_ms >= now.saturating_sub(ms)))
        .collect();
    if out.json {
        out.print_json(&Value::Array(runs.iter().map(run_json).collect()));
        return Ok(());
    }
    println!(
        "{:<36}  {:<20} {:<9} {:<19} {:>9}  FAILED NODE",
        "RUN", "NAME", "STATUS", "STARTED", "DURATION"
    );
    for run in &runs {
        let name = run.metadata["pipeline"].as_str().unwrap_or("?");
        let started = run.started_at_ms.map_or_else(|| "-".into(), human_time);
        let duration = duration_ms(run, now).map_or_else(|| "-".into(), human_duration);
        let failed = run.failed_node_id.as_deref().unwrap_or("");
        let status = run.status.as_str();
        let status = out.paint(status, &format!("{status:<9}"));
        println!("{:<36}  {name:<20} {status} {started:<19} {duration:>9}  {failed}", run.id);
    }
    if runs.is_empty() {
        out.note("no runs match (spindle run FILE starts one)");
    }
    Ok(())
}

/// A run as `spindle runs --json` prints it.
fn run_json(run: &Graph) -> Value {
    json!({
        "run": run.id,
        "name": run.metadata["pipeline"],
        "status": run.status,
        "created_at_ms": run.created_at_ms,
        "started_at_ms": run.started_at_ms,
        "finished_at_ms": run.finished_at_ms,
        "duration_ms": duration_ms(run, now_ms()),
        "failed_node": run.failed_node_id,
        "counts": run.counts,
    })
}

/// How long a run took (or has taken so far, while it runs).
fn duration_ms(run: &Graph, now: i64) -> Option<i64> {
    let started = run.started_at_ms?;
    let until = run.finished_at_ms.unwrap_or(now);
    Some(until.saturating_sub(started).max(0))
}

/// What `spindle retry` will do, worked out by reading alone (so that bad input is refused
/// before the store is opened to run, whose recovery of interrupted runs writes).
pub struct RetryPlan {
    graph: Graph,
    pipeline: Pipeline,
    /// The nodes to reopen; none to resume an unfinished run.
    reopen: Vec<String>,
}

/// `spindle retry RUN [--node N]`, checked: a finished run is reopened at its failed nodes
/// (those no other failed node leads to), or at `node`; an unfinished run is resumed.
pub fn plan_retry(store: &Store, wanted: &str, node: Option<&str>) -> Result<RetryPlan, CliError> {
    let graph = resolve(store, wanted)?;
    let pipeline = pipeline_of(store, &graph)?;
    let (id, status) = (graph.id.as_str(), graph.status);
    let reopen = match (status, node) {
        (GraphStatus::Cancelled, _) => {
            return Err(CliError::Bad(format!(
                "run {id} was cancelled: start the pipeline again with `spindle run FILE`"
            )));
        }
        (GraphStatus::Pending | GraphStatus::Running, Some(_)) => {
            return Err(CliError::Bad(format!(
                "run {id} has not finished, so no node of it can be retried yet: resume it \
                 with `spindle retry {id}` (no --node)"
            )));
        }
        (GraphStatus::Pending | GraphStatus::Running, None) => Vec::new(),
        (GraphStatus::Complete | GraphStatus::Failed, Some(node)) => {
            check_failed(store, id, node)?;
            vec![node.to_owned()]
        }
        (GraphStatus::Complete | GraphStatus::Failed, None) => first_failures(store, &graph)?,
        (other, _) => {
            let status = other.as_str();
            return Err(CliError::Bad(format!("run {id} is {status}: this build cannot retry it")));
        }
    };
    if status.is_terminal() && reopen.is_empty() {
        return Err(CliError::Bad(format!(
            "run {id} has no failed node to retry (`spindle run --fresh FILE` runs it all again)"
        )));
    }
    Ok(RetryPlan { graph, pipeline, reopen })
}

/// Refuses a node to retry that the run does not have or that did not fail.
fn check_failed(store: &Store, run: &str, node: &str) -> Result<(), CliError> {
    let found = match store.graphs().node(run, node) {
        Err(spindle::Error::NotFound { .. }) => {
            return Err(CliError::Bad(format!(
                "run {run} has no node {node:?}: `spindle graph show {run}` lists them"
            )));
        }
        other => other?,
    };
    if found.status != NodeStatus::Failed {
        return Err(CliError::Bad(format!(
            "node {node} of run {run} is {}: only a failed node can run again",
            found.status.as_str()
        )));
    }
    Ok(())
}

/// Carries out a checked retry on a store opened to run: reopens the run (if it finished)
/// and drives it as `spindle run` would.
pub fn retry(
    store: &Store,
    plan: RetryPlan,
    jobs: usize,
    runs: &Path,
    out: &Output,
) -> Result<Ending, CliError> {
    let RetryPlan { graph, pipeline, reopen } = plan;
    if reopen.is_empty() {
        out.note(&format!("run {} has not finished: resuming it", graph.id));
    } else {
        let named: Vec<&str> = reopen.iter().map(String::as_str).collect();
        match store.graphs().reopen(&graph.id, &named) {
            Ok(()) => out.note(&format!("retrying run {} from {}", graph.id, reopen.join(", "))),
            // Another retry reopened it since it was read: run it together, as two runners
            // of one pipeline do.
            Err(spindle::Error::Conflict(_)) if running(store, &graph.id)? => {
                out.note(&format!("run {} is being retried already: joining it", graph.id));
            }
            Err(error) => return Err(error.into()),
        }
    }
    run::drive(store, graph.id, pipeline, jobs, runs, out)
}

/// Whether the run is running (a retry reopened it).
fn running(store: &Store, run: &str) -> Result<bool, CliError> {
    Ok(store.graphs().get(run)?.status == GraphStatus::Running)
}

/// The failed nodes of a run that no other failed node leads to: retried, each runs what
/// follows it again.
fn first_failures(store: &Store, graph: &Graph) -> Result<Vec<String>, CliError> {
    let nodes = store.graphs().nodes(&graph.id)?;
    let failed: BTreeSet<&str> = nodes
        .iter()
        .filter(|node| node.status == NodeStatus::Failed)
        .map(|node| node.id.as_str())
        .collect();
    let mut next: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for edge in store.graphs().edges(&graph.id)? {
        next.entry(edge.from).or_default().push(edge.to);
    }
    let followers: BTreeSet<String> =
        failed.iter().flat_map(|from| reachable(&next, from)).collect();
    Ok(failed.iter().filter(|id| !followers.contains(**id)).map(|id| (*id).to_owned()).collect())
}

/// Every node reachable from `from` over edges (not `from` itself, unless on a loop).
fn reachable(next: &BTreeMap<String, Vec<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut frontier = vec![from.to_owned()];
    while let Some(node) = frontier.pop() {
        for target in next.get(&node).into_iter().flatten() {
            if seen.insert(target.clone()) {
                frontier.push(target.clone());
            }
        }
    }
    seen
}

/// The pipeline a run was built from, read back from the text the run kept.
fn pipeline_of(store: &Store, graph: &Graph) -> Result<Pipeline, CliError> {
    let parts = read_stream(store, &source_stream(&graph.id))?;
    let text: String =
        parts.iter().map(|event| event.payload["text"].as_str().unwrap_or("")).collect();
    if text.is_empty() {
        return Err(CliError::Bad(format!(
            "run {} was made by an older spindle that did not keep its pipeline: run the \
             file again (`spindle run FILE`)",
            graph.id
        )));
    }
    let file = format!("the pipeline of run {}", graph.id);
    let mut pipeline =
        pipeline::parse(&file, &text).map_err(|bad| CliError::Bad(bad.to_string()))?;
    pipeline.dir = graph.metadata["dir"].as_str().map(PathBuf::from).unwrap_or_default();
    Ok(pipeline)
}
