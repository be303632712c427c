//! Drawings of a graph: the plan of a pipeline (`spindle run --dry-run`) or a run's graph as
//! stored (`spindle graph show`), as Graphviz DOT or Mermaid, and the plan as a table or JSON.
//!
//! A node is drawn with its id (and, for a run, its status on a second line): a task as a
//! box, a matrix node's scatter and gathers as hexagons. An edge is labelled with what it
//! takes: `ok`, `error`, `any`, or a matrix value (a scatter's edge to its instance).

use std::fmt::Write as _;

use serde_json::{Value, json};
use spindle::{Edge, Node, TokenColor};

use crate::pipeline::{Pipeline, PlanKind, Step};

/// How `graph show` prints a graph.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ShowFormat {
    /// Nodes with status, fires and errors.
    Table,
    /// The graph, its nodes and edges.
    Json,
    /// Graphviz DOT.
    Dot,
    /// A Mermaid flowchart.
    Mermaid,
}

/// What is drawn.
pub struct Drawing {
    /// The graph's title (the pipeline's name, or the run's id).
    pub title: String,
    /// Its nodes.
    pub nodes: Vec<Shape>,
    /// Its edges: from, to, label.
    pub edges: Vec<(String, String, String)>,
}

/// One node: its id, the lines of its label, and whether it is a task (a box).
pub struct Shape {
    /// Its id.
    pub id: String,
    /// Its label's lines.
    pub lines: Vec<String>,
    /// A task (a box), or a scatter or gather (a hexagon).
    pub task: bool,
}

/// The label of an edge that takes `condition`.
pub fn condition_label(condition: Option<&TokenColor>) -> String {
    match condition {
        None => "any".into(),
        Some(TokenColor::Ok) => "ok".into(),
        Some(TokenColor::Error) => "error".into(),
        Some(TokenColor::Named { name }) => name.clone(),
        // A colour a later library adds: its debug form.
        Some(other) => format!("{other:?}"),
    }
}

/// The graph a pipeline becomes, before it runs.
pub fn of_plan(pipeline: &Pipeline) -> Drawing {
    let plan = pipeline.plan();
    let nodes = plan
        .nodes
        .iter()
        .map(|node| Shape {
            id: node.id.clone(),
            lines: vec![node.id.clone()],
            task: matches!(node.kind, PlanKind::Task { .. }),
        })
        .collect();
    let edges = plan
        .edges
        .iter()
        .map(|e| (e.from.clone(), e.to.clone(), condition_label(e.condition.as_ref())))
        .collect();
    Drawing { title: pipeline.name.clone(), nodes, edges }
}

/// A run's graph as stored, each node with its status.
pub fn of_graph(title: &str, nodes: &[Node], edges: &[Edge]) -> Drawing {
    let nodes = nodes
        .iter()
        .map(|node| Shape {
            id: node.id.clone(),
            lines: vec![node.id.clone(), node.status.as_str().to_owned()],
            task: node.spec.kind() == "task",
        })
        .collect();
    let edges = edges
        .iter()
        .map(|e| (e.from.clone(), e.to.clone(), condition_label(e.condition.as_ref())))
        .collect();
    Drawing { title: title.to_owned(), nodes, edges }
}

/// Graphviz DOT: `"id" [label=.., shape=..];` per node, `"from" -> "to" [label=".."];` per
/// edge.
pub fn dot(drawing: &Drawing) -> String {
    let mut text = format!("digraph {} {{\n", dot_string(&drawing.title));
    text.push_str("  rankdir=LR;\n");
    for node in &drawing.nodes {
        let label = dot_string(&node.lines.join("\n"));
        let shape = if node.task { "box" } else { "hexagon" };
        let _ = writeln!(text, "  {} [label={label}, shape={shape}];", dot_string(&node.id));
    }
    for (from, to, label) in &drawing.edges {
        let (from, to, label) = (dot_string(from), dot_string(to), dot_string(label));
        let _ = writeln!(text, "  {from} -> {to} [label={label}];");
    }
    text.push_str("}\n");
    text
}

/// A DOT string: quoted, with `"` and `\` escaped and newlines as `\n`.
fn dot_string(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    format!("\"{escaped}\"")
}

/// Mermaid `flowchart LR`: nodes as `n0["label"]` (tasks) or `n0{{"label"}}`, edges as
/// `n0 -->|label| n1`.
pub fn mermaid(drawing: &Drawing) -> String {
    let mut text = String::from("flowchart LR\n");
    let index: std::collections::BTreeMap<&str, usize> =
        drawing.nodes.iter().enumerate().map(|(i, node)| (node.id.as_str(), i)).collect();
    for (i, node) in drawing.nodes.iter().enumerate() {
        let label = node.lines.iter().map(|line| mermaid_text(line)).collect::<Vec<_>>();
        let label = label.join("<br/>");
        if node.task {
            let _ = writeln!(text, "  n{i}[\"{label}\"]");
        } else {
            let _ = writeln!(text, "  n{i}{{{{\"{label}\"}}}}");
        }
    }
    for (from, to, label) in &drawing.edges {
        let (Some(from), Some(to)) = (index.get(from.as_str()), index.get(to.as_str())) else {
            continue;
        };
        let _ = writeln!(text, "  n{from} -->|\"{}\"| n{to}", mermaid_text(label));
    }
    text
}

/// Text inside a Mermaid label: quotes and angle brackets as entities.
fn mermaid_text(text: &str) -> String {
    text.replace('"', "#quot;").replace('<', "#lt;").replace('>', "#gt;")
}

/// The plan as a table: each node of the file with its predecessors (and when their edges
/// fire), retries, timeout and matrix instances.
pub fn plan_table(pipeline: &Pipeline) -> String {
    let plan = pipeline.plan();
    let mut text = format!(
        "pipeline {} ({} nodes; {} graph nodes, {} edges)\n",
        pipeline.name,
        pipeline.nodes.len(),
        plan.nodes.len(),
        plan.edges.len()
    );
    let _ =
        writeln!(text, "{:<24} {:<32} {:>7} {:>8}  MATRIX", "NODE", "AFTER", "RETRIES", "TIMEOUT");
    for step in &pipeline.nodes {
        let timeout = step.timeout_s.map_or("-".into(), |s| format!("{s}s"));
        let _ = writeln!(
            text,
            "{:<24} {:<32} {:>7} {timeout:>8}  {}",
            step.name,
            after_text(step),
            step.retries,
            matrix_text(step)
        );
    }
    text
}

/// `a, b (error)`, `-` when none; `(join any)` after an `any` join.
fn after_text(step: &Step) -> String {
    if step.after.is_empty() {
        return "-".into();
    }
    let edges: Vec<String> = step
        .after
        .iter()
        .map(|(pred, on)| match on.as_str() {
            "ok" => pred.clone(),
            on => format!("{pred} ({on})"),
        })
        .collect();
    let join = if step.join == spindle::JoinType::Any { " (join any)" } else { "" };
    format!("{}{join}", edges.join(", "))
}

/// `target: x86 arm (2 instances)`, `-` when none.
fn matrix_text(step: &Step) -> String {
    step.matrix.as_ref().map_or("-".into(), |matrix| {
        let count = matrix.values.len();
        format!("{}: {} ({count} instances)", matrix.var, matrix.values.join(" "))
    })
}

/// The plan as JSON: the file's nodes as checked, and the graph they become.
pub fn plan_json(pipeline: &Pipeline) -> Value {
    let plan = pipeline.plan();
    let steps: Vec<Value> = pipeline
        .nodes
        .iter()
        .map(|step| {
            let after: Vec<Value> = step
                .after
                .iter()
                .map(|(pred, on)| json!({ "node": pred, "on": on.as_str() }))
                .collect();
            json!({
                "name": step.name, "run": step.run, "after": after, "retries": step.retries,
                "timeout_s": step.timeout_s, "join": step.join.as_str(), "env": step.env,
                "cwd": step.cwd,
                "matrix": step.matrix.as_ref().map(|m| json!({ m.var.as_str(): m.values })),
            })
        })
        .collect();
    let nodes: Vec<Value> = plan
        .nodes
        .iter()
        .map(|node| {
            let kind = match node.kind {
                PlanKind::Task { .. } => "task",
                PlanKind::Scatter { .. } => "scatter",
                PlanKind::Gather { .. } => "gather",
            };
            json!({ "id": node.id, "kind": kind, "join": node.join.as_str() })
        })
        .collect();
    let edges: Vec<Value> = plan
        .edges
        .iter()
        .map(|e| json!({ "from": e.from, "to": e.to, "on": condition_label(e.condition.as_ref()) }))
        .collect();
    json!({
        "name": pipeline.name, "hash": pipeline.hash, "nodes": steps,
        "graph": { "nodes": nodes, "edges": edges },
    })
}
