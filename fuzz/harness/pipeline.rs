//! The `pipeline` fuzz harness: arbitrary bytes into the CLI's pipeline reader and validator
//! (`cli/src/pipeline/format.rs`, included as it is) must never panic, and a file it accepts
//! must build, through the CLI's own `Pipeline::build`, a graph with exactly its nodes and
//! edges.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/pipeline.rs`) and by the test that
//! replays the seed corpus on stable (`tests/fuzz_corpus.rs`), so it uses only `spindle`,
//! `serde`, `serde_json`, `sha2` and std; both declare at their root the `names` module that
//! `format.rs` names (`cli/src/names.rs`, by `#[path]`). [`run`] panics when an invariant is
//! violated.
//!
//! Input: the bytes of a pipeline file (what `spindle run FILE` reads; not UTF-8 is refused
//! there before parsing, so such inputs end here). For an accepted file the harness reads the
//! same text a second way (as a plain `serde_json::Value`) into the nodes and edges it must
//! have, checks the file's rules on that reading (names, commands, retries, timeouts, joins,
//! edge conditions, known predecessors, no cycle), builds the graph in an in-memory store kept
//! for the process, and compares `graphs().nodes` and `graphs().edges` with it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde_json::{Value, json};
use spindle::{JoinType, NodeSpec, Store, TokenColor, TxOutcome};

#[allow(dead_code)]
#[path = "../../cli/src/pipeline/format.rs"]
mod cli;

/// Graphs built in one store before the harness opens a fresh one (memory stays bounded over
/// millions of inputs).
const GRAPHS_PER_STORE: usize = 500;

/// The store the graphs are built in, and how many it holds.
static STORE: Mutex<Option<(Store, usize)>> = Mutex::new(None);

/// One node as the file says it: command, retries, timeout, join.
type NodeFields = (String, u64, Option<u64>, JoinType);
/// One edge as the file says it: from, to, condition.
type EdgeFields = (String, String, Option<TokenColor>);

/// What an accepted file must become, read from its text as a plain JSON value.
#[derive(Debug, PartialEq)]
struct Expected {
    name: String,
    nodes: BTreeMap<String, NodeFields>,
    /// Sorted by their `Debug` form (a multiset: the same edge may be listed twice).
    edges: Vec<EdgeFields>,
}

/// Runs one input; panics if an accepted file breaks a rule or builds the wrong graph.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(parsed) = cli::parse("fuzz.json", text) else {
        return;
    };
    let value: Value = serde_json::from_str(text).expect("an accepted file is JSON");
    let expected = expected(&value);
    check_rules(&expected);
    let got = as_parsed(&parsed);
    assert_eq!(got, expected, "the parsed pipeline differs from the file; input {text:?}");
    let graph = expected_graph(&value, &expected);
    check_graph(&parsed, &expected, &graph, text);
}

/// The graph's nodes (spec and join) and edges (sorted like [`Expected::edges`]).
type Graph = (BTreeMap<String, (NodeSpec, JoinType)>, Vec<EdgeFields>);

/// The graph an accepted file must build, read from the JSON value: a task per plain node; a
/// matrix node `N` as a scatter `N` with a task `N[v]` per value (its edge takes the colour
/// `v`), the gather `N[*]` of their `ok` tokens, and `N[*:error]` (any join) or `N[*:any]`
/// when an edge leaves `N` on error or any; an edge from `N` leaves its gather.
fn expected_graph(value: &Value, expected: &Expected) -> Graph {
    let mut nodes = BTreeMap::new();
    let mut edges = Vec::new();
    let mut matrices = BTreeSet::new();
    for (name, (run, retries, timeout, join)) in &expected.nodes {
        let data = json!({ "run": run, "retries": retries, "timeout_s": timeout });
        let Some((var, values)) = value["nodes"][name]["matrix"].as_object().and_then(|m| {
            let (var, values) = m.iter().next()?;
            Some((var.clone(), values.as_array()?.clone()))
        }) else {
            nodes.insert(name.clone(), (NodeSpec::task(data), *join));
            continue;
        };
        matrices.insert(name.clone());
        let scatter = json!({ "matrix": var, "values": values });
        nodes.insert(name.clone(), (NodeSpec::Scatter { data: scatter }, *join));
        let gathers = [
            ("[*]", Some(TokenColor::Ok)),
            ("[*:error]", Some(TokenColor::Error)),
            ("[*:any]", None),
        ];
        for value in values.iter().filter_map(Value::as_str) {
            let id = format!("{name}[{value}]");
            let mut data = data.clone();
            data["matrix"] = json!({ var.as_str(): value });
            nodes.insert(id.clone(), (NodeSpec::task(data), JoinType::All));
            edges.push((name.clone(), id.clone(), Some(TokenColor::named(value))));
            for (suffix, condition) in &gathers {
                let used = expected.edges.iter().any(|(f, _, c)| f == name && c == condition);
                if suffix == &"[*]" || used {
                    edges.push((id.clone(), format!("{name}{suffix}"), condition.clone()));
                }
            }
        }
        for (suffix, condition) in gathers {
            let used = expected.edges.iter().any(|(f, _, c)| f == name && *c == condition);
            if suffix == "[*]" || used {
                let join = if condition == Some(TokenColor::Error) {
                    JoinType::Any
                } else {
                    JoinType::All
                };
                let spec = NodeSpec::Gather { strategy: spindle::GatherStrategy::First { n: 1 } };
                nodes.insert(format!("{name}{suffix}"), (spec, join));
            }
        }
    }
    for (from, to, condition) in &expected.edges {
        let from = match (matrices.contains(from), condition) {
            (false, _) => from.clone(),
            (true, Some(TokenColor::Ok)) => format!("{from}[*]"),
            (true, None) => format!("{from}[*:any]"),
            (true, _) => format!("{from}[*:error]"),
        };
        edges.push((from, to.clone(), condition.clone()));
    }
    edges.sort_by_key(|edge| format!("{edge:?}"));
    (nodes, edges)
}

/// The nodes and edges of an accepted file, read from the JSON value.
fn expected(value: &Value) -> Expected {
    let name = value["name"].as_str().expect("an accepted file has a string name").to_owned();
    let nodes_value = value["nodes"].as_object().expect("an accepted file has a nodes object");
    let mut nodes = BTreeMap::new();
    let mut edges = Vec::new();
    for (node, fields) in nodes_value {
        let run = fields["run"].as_str().expect("an accepted node has a string run").to_owned();
        let retries = fields.get("retries").map_or(0, |r| r.as_u64().expect("retries"));
        let timeout = fields.get("timeout_s").and_then(|t| (!t.is_null()).then_some(t));
        let timeout = timeout.map(|t| t.as_u64().expect("a whole timeout"));
        let join = match fields.get("join").and_then(Value::as_str) {
            Some("any") => JoinType::Any,
            Some("all") | None => JoinType::All,
            Some(other) => panic!("an accepted node has join {other:?}"),
        };
        nodes.insert(node.clone(), (run, retries, timeout, join));
        let after = fields.get("after").and_then(Value::as_array).cloned().unwrap_or_default();
        for entry in after {
            let (from, on) = match &entry {
                Value::String(from) => (from.clone(), None),
                Value::Object(edge) => {
                    let from = edge["node"].as_str().expect("an edge names its node").to_owned();
                    (from, edge.get("on").and_then(Value::as_str).map(str::to_owned))
                }
                other => panic!("an accepted after entry is {other}"),
            };
            let condition = match on.as_deref() {
                None | Some("ok") => Some(TokenColor::Ok),
                Some("error") => Some(TokenColor::Error),
                Some("any") => None,
                Some(other) => panic!("an accepted edge has on {other:?}"),
            };
            edges.push((from, node.clone(), condition));
        }
    }
    edges.sort_by_key(|edge| format!("{edge:?}"));
    Expected { name, nodes, edges }
}

/// Panics unless the file's rules hold for an accepted reading.
fn check_rules(expected: &Expected) {
    let name = &expected.name;
    assert!(!name.trim().is_empty() && name.len() <= 200, "accepted pipeline name {name:?}");
    assert!(!expected.nodes.is_empty(), "an accepted pipeline without nodes");
    for (node, (run, retries, timeout, _)) in &expected.nodes {
        let good_name =
            !node.is_empty() && node.len() <= 200 && !node.chars().any(char::is_control);
        assert!(good_name, "accepted node name {node:?}");
        assert!(!run.trim().is_empty() && run.len() <= 64 * 1024, "{node}: accepted run {run:?}");
        assert!(*retries <= u64::from(cli::RETRIES_MAX), "{node}: retries {retries}");
        assert_ne!(*timeout, Some(0), "{node}: accepted timeout 0");
    }
    for (from, to, _) in &expected.edges {
        assert!(expected.nodes.contains_key(from), "{to}: accepted edge from unknown {from:?}");
    }
    assert!(acyclic(expected), "an accepted pipeline has a cycle: {:?}", expected.edges);
}

/// Whether the edges leave no cycle: repeatedly remove the nodes without remaining inbound
/// edges, and see that every node went.
fn acyclic(expected: &Expected) -> bool {
    let mut left: BTreeSet<&str> = expected.nodes.keys().map(String::as_str).collect();
    loop {
        let blocked: BTreeSet<&str> = expected
            .edges
            .iter()
            .filter(|(from, _, _)| left.contains(from.as_str()))
            .map(|(_, to, _)| to.as_str())
            .collect();
        let free: Vec<&str> = left.iter().copied().filter(|node| !blocked.contains(node)).collect();
        if free.is_empty() {
            return left.is_empty();
        }
        for node in free {
            left.remove(node);
        }
    }
}

/// The parsed pipeline in the form of [`Expected`].
fn as_parsed(parsed: &cli::Pipeline) -> Expected {
    let mut nodes = BTreeMap::new();
    let mut edges = Vec::new();
    for step in &parsed.nodes {
        let fields = (step.run.clone(), u64::from(step.retries), step.timeout_s, step.join);
        assert!(nodes.insert(step.name.clone(), fields).is_none(), "{} twice", step.name);
        for (from, on) in &step.after {
            let condition = match on {
                cli::On::Ok => Some(TokenColor::Ok),
                cli::On::Error => Some(TokenColor::Error),
                cli::On::Any => None,
            };
            edges.push((from.clone(), step.name.clone(), condition));
        }
    }
    edges.sort_by_key(|edge| format!("{edge:?}"));
    Expected { name: parsed.name.clone(), nodes, edges }
}

/// The store to build in: the process's, replaced by a fresh one every [`GRAPHS_PER_STORE`].
fn store() -> Store {
    let mut slot = STORE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((store, built)) = slot.as_mut() {
        if *built < GRAPHS_PER_STORE {
            *built += 1;
            return store.clone();
        }
        store.close().expect("close the full store");
    }
    let store = Store::open_in_memory().expect("open an in-memory store");
    *slot = Some((store.clone(), 1));
    store
}

/// Builds the graph through the CLI's code and compares it with the file.
fn check_graph(parsed: &cli::Pipeline, expected: &Expected, graph_of: &Graph, text: &str) {
    let store = store();
    let owned = parsed.clone();
    let graph = store
        .transaction(move |tx| Ok(TxOutcome::Commit(owned.build(tx)?)))
        .unwrap_or_else(|error| panic!("an accepted pipeline did not build: {error:?}; {text:?}"));
    let metadata = store.graphs().get(&graph).expect("the built graph").metadata;
    assert_eq!(metadata["pipeline"], json!(expected.name), "metadata; input {text:?}");
    assert_eq!(metadata["nodes"], json!(expected.nodes.len()), "metadata; input {text:?}");
    let (want_nodes, want_edges) = graph_of;
    let mut nodes = BTreeMap::new();
    for node in store.graphs().nodes(&graph).expect("the graph's nodes") {
        let (spec, join) =
            want_nodes.get(&node.id).unwrap_or_else(|| panic!("extra node {:?}", node.id));
        assert_eq!(node.spec, *spec, "node {:?}: spec; input {text:?}", node.id);
        assert_eq!(node.join, *join, "node {:?}: join; input {text:?}", node.id);
        nodes.insert(node.id.clone(), node);
    }
    let want: Vec<&String> = want_nodes.keys().collect();
    let have: Vec<&String> = nodes.keys().collect();
    assert_eq!(have, want, "the graph's nodes; input {text:?}");
    let mut edges: Vec<EdgeFields> = store
        .graphs()
        .edges(&graph)
        .expect("the graph's edges")
        .into_iter()
        .map(|edge| (edge.from, edge.to, edge.condition))
        .collect();
    edges.sort_by_key(|edge| format!("{edge:?}"));
    assert_eq!(edges, *want_edges, "the graph's edges; input {text:?}");
}
