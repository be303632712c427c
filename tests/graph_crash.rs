//! Crash safety of the graph engine by SIGKILL (reliability plan T2, CI size): a child process
//! drives four graphs from four threads and prints every node completion the store
//! acknowledged; the parent kills it at a varying moment, reopens the file (which recovers the
//! running graphs), and checks that every acknowledged completion is there, that every graph's
//! counters agree with its nodes and edges, and that every graph can then be driven to its end.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::thread;

use serde_json::json;
use spindle::{GraphStatus, NodeOptions, NodeSpec, NodeStatus, Page, Store, TokenColor};

const CHILD_ENV: &str = "SPINDLE_GRAPH_CRASH_CHILD";
const GRAPHS: usize = 4;
const LAYERS: usize = 6;
const WIDTH: usize = 5;

#[test]
fn acknowledged_node_completions_survive_sigkill() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return child(&path);
    }
    for round in 0..4_usize {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("graphs.db");
        let kill_after = 10 + round * 17;
        let acked = run_and_kill(&path, kill_after);
        check_and_finish(&path, &acked, round);
    }
}

/// Starts the child, reads acknowledgements until `kill_after` of them, then kills it.
fn run_and_kill(path: &std::path::Path, kill_after: usize) -> Vec<(String, String)> {
    let mut child =
        common::spawn_child_test("acknowledged_node_completions_survive_sigkill", CHILD_ENV, path);
    let stdout = child.stdout.take().expect("child stdout");
    let mut acked = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        if words == ["finished"] {
            break;
        }
        if let ["ack", graph, node] = words[..] {
            acked.push((graph.to_owned(), node.to_owned()));
            if acked.len() >= kill_after {
                break;
            }
        }
    }
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    acked
}

fn check_and_finish(path: &std::path::Path, acked: &[(String, String)], round: usize) {
    assert!(!acked.is_empty(), "round {round}: the child acknowledged nothing");
    let store = Store::open(path).expect("reopen after the crash");
    for (graph, node) in acked {
        let status = store.graphs().node(graph, node).expect("an acknowledged node").status;
        let finished = matches!(status, NodeStatus::Complete | NodeStatus::Failed);
        assert!(finished, "round {round}: {graph}/{node} acknowledged, now {status:?}");
    }
    let graphs = store.graphs().list(Page::first(100)).expect("list");
    assert_eq!(graphs.len(), GRAPHS, "round {round}");
    for graph in &graphs {
        let problems = store.graphs().audit(&graph.id).expect("audit");
        assert!(problems.is_empty(), "round {round}: {problems:?}");
        drive(&store, &graph.id, |_| {});
        let end = store.graphs().get(&graph.id).expect("get");
        assert!(end.status.is_terminal(), "round {round}: {end:?}");
        assert!(store.graphs().audit(&graph.id).expect("audit").is_empty());
    }
    store.close().expect("close");
}

/// The child: builds the graphs, then drives one per thread, printing every acknowledged
/// completion.
fn child(path: &str) {
    let store = Store::open(path).expect("open");
    let graphs: Vec<String> = (0..GRAPHS).map(|_| build(&store)).collect();
    let threads: Vec<_> = graphs
        .into_iter()
        .map(|graph| {
            let store = store.clone();
            thread::spawn(move || {
                drive(&store, &graph, |node| {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "ack {graph} {node}");
                    let _ = out.flush();
                });
            })
        })
        .collect();
    for handle in threads {
        let _ = handle.join();
    }
    println!("finished");
    // Wait to be killed: the parent decides when.
    thread::park();
}

/// A layered DAG with error handlers: each node waits for two of the layer before on `ok`,
/// and every fifth node of a layer also handles the errors of one node before it.
fn build(store: &Store) -> String {
    let graph = store.graphs().create(json!({ "crash": true })).expect("create");
    for layer in 0..LAYERS {
        for column in 0..WIDTH {
            let id = format!("n{layer}-{column}");
            let options = NodeOptions::new().id(id);
            store.graphs().add_node(&graph, NodeSpec::task(json!({})), options).expect("node");
        }
    }
    for layer in 1..LAYERS {
        for column in 0..WIDTH {
            let to = format!("n{layer}-{column}");
            for from in [column, (column + 1) % WIDTH] {
                let from = format!("n{}-{from}", layer - 1);
                let condition = if column == 0 { None } else { Some(TokenColor::Ok) };
                store.graphs().add_edge(&graph, &from, &to, condition).expect("edge");
            }
        }
    }
    store.graphs().start(&graph).expect("start");
    graph
}

/// Runs ready nodes until the graph ends: every seventh one fails, the rest complete.
fn drive(store: &Store, graph: &str, mut on_done: impl FnMut(&str)) {
    let mut count = 0_usize;
    loop {
        let current = store.graphs().get(graph).expect("get");
        if current.status != GraphStatus::Running {
            return;
        }
        let nodes = store.graphs().nodes(graph).expect("nodes");
        let Some(node) = nodes.iter().find(|n| n.status == NodeStatus::Ready) else {
            panic!("running with nothing ready: {current:?}");
        };
        store.graphs().start_node(graph, &node.id).expect("start node");
        count += 1;
        if count.is_multiple_of(7) {
            store.graphs().fail_node(graph, &node.id, "crash test failure").expect("fail");
        } else {
            store.graphs().complete_node(graph, &node.id, None).expect("complete");
        }
        on_done(&node.id);
    }
}
