//! `spindle logs RUN [NODE] [--follow]`: what a run's commands printed, as the run kept it.
//!
//! Each node keeps the tail of its last attempt's output (stdout and stderr together, the
//! last 64 KiB): a success in its output, a failure in its error, after the line that says
//! which attempt it was and how it ended. One node prints under a header naming its attempt;
//! every node prints each line prefixed by its name, nodes in the order they finished.
//! `--follow` polls the store (so it follows a run that another process drives) and prints
//! each node as it finishes, until the run ends.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use spindle::{Node, NodeOutput, NodeStatus, Store};

use crate::common::{CliError, Output};
use crate::run::attempts_of;
use crate::runs::resolve;

/// How often `--follow` looks again.
const POLL: Duration = Duration::from_millis(200);

/// Prints the kept output of a run's nodes (or of `node`), following the run if asked.
pub fn logs(
    store: &Store,
    run: &str,
    node: Option<&str>,
    follow: bool,
    out: &Output,
) -> Result<(), CliError> {
    let graph = resolve(store, run)?;
    if let Some(node) = node {
        store.graphs().node(&graph.id, node).map_err(|_| {
            CliError::Bad(format!(
                "run {} has no node {node:?}: `spindle graph show` lists them",
                graph.id
            ))
        })?;
    }
    let mut printed = BTreeSet::new();
    loop {
        let ended = store.graphs().get(&graph.id)?.status.is_terminal();
        let mut finished: Vec<Node> = store
            .graphs()
            .nodes(&graph.id)?
            .into_iter()
            .filter(|n| node.is_none_or(|wanted| n.id == wanted))
            .filter(|n| matches!(n.status, NodeStatus::Complete | NodeStatus::Failed))
            .filter(|n| !printed.contains(&(n.id.clone(), n.fires)))
            .collect();
        finished.sort_by_key(|n| (n.finished_at_ms, n.id.clone()));
        for n in &finished {
            print_node(n, node.is_some(), out);
            printed.insert((n.id.clone(), n.fires));
        }
        if !follow || ended {
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

/// One node's kept output: under a header, or each line prefixed by its name.
fn print_node(node: &Node, alone: bool, out: &Output) {
    let attempt = attempts_of(node);
    let text = kept_output(node);
    if out.json {
        let status = node.status;
        out.print_json(
            &json!({ "node": node.id, "attempt": attempt, "status": status, "output": text }),
        );
        return;
    }
    let attempt = attempt.map_or_else(String::new, |n| format!(" (attempt {n})"));
    let status = node.status.as_str();
    if alone {
        println!("== {}{attempt}: {status}", node.id);
        print!("{text}");
        if !text.is_empty() && !text.ends_with('\n') {
            println!();
        }
        return;
    }
    println!("{} | == {status}{attempt}", node.id);
    for line in text.lines() {
        println!("{} | {line}", node.id);
    }
}

/// What a finished node kept of its output: a success's tail, or a failure's after its first
/// line (which says what happened).
fn kept_output(node: &Node) -> String {
    if node.status == NodeStatus::Failed {
        let error = node.error.as_deref().unwrap_or("");
        return error.split_once('\n').map_or("", |(_, rest)| rest).to_owned();
    }
    match &node.output {
        Some(NodeOutput::Single(token)) => token
            .data
            .as_ref()
            .and_then(|data| data.get("output"))
            .and_then(|text| text.as_str())
            .unwrap_or("")
            .to_owned(),
        _ => String::new(),
    }
}
