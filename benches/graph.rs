//! Graph engine throughput: a layered DAG driven to completion by worker threads under
//! `Durability::Full`, at two sizes, so that a step that grows with the graph shows as a
//! rising time per node.
//!
//! ```text
//! cargo bench --bench graph                 # 1,000 and 10,000 nodes, 4 workers
//! cargo bench --bench graph -- --smoke      # 100 and 1,000 nodes: does it still run?
//! SPINDLE_BENCH_THREADS=8 cargo bench --bench graph
//! ```
//!
//! Each layer is 100 nodes wide; every node after the first layer has an `All` join over two
//! nodes of the layer before (so each node has two inbound and two outbound edges). A
//! dispatcher thread follows the graph's stream and hands each `node_ready` to the workers,
//! which call `start_node` and `complete_node` (two committed operations per node). The
//! graph is built in transactions of 1,000 operations before the clock starts.

use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};
use serde_json::json;
use spindle::graph::{AddEdge, AddNode};
use spindle::{Durability, GraphEvent, NodeOptions, NodeSpec, Options, Store, Stream, TxOutcome};

/// Nodes per layer.
const WIDTH: usize = 100;
/// Worker threads, unless `SPINDLE_BENCH_THREADS` says otherwise.
const THREADS: usize = 4;

fn threads() -> usize {
    std::env::var("SPINDLE_BENCH_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(THREADS)
}

fn main() {
    let smoke = std::env::args().any(|arg| arg == "--smoke");
    let (small, large) = if smoke { (100, 1_000) } else { (1_000, 10_000) };
    let workers = threads();
    println!("graph: layered DAG, width {WIDTH}, {workers} workers, Durability::Full");
    let small_rate = run(small, workers);
    let large_rate = run(large, workers);
    let ratio = small_rate / large_rate;
    println!(
        "time per node, {large} nodes / {small} nodes: {ratio:.2}x (target <= 1.5x: {})",
        if ratio <= 1.5 { "met" } else { "NOT met" }
    );
}

/// Builds and drives one graph of `nodes` nodes; prints and returns nodes per second.
fn run(nodes: usize, workers: usize) -> f64 {
    let dir = tempfile::tempdir().expect("temporary directory");
    let options = Options::default().durability(Durability::Full);
    let store = Store::open_with(dir.path().join("bench.db"), options).expect("open");
    let graph = build(&store, nodes);
    let began = Instant::now();
    drive(&store, &graph, workers);
    let elapsed = began.elapsed();
    let summary = store.graphs().get(&graph).expect("get");
    assert!(summary.status.is_terminal() && summary.counts.complete == nodes as u64);
    let rate = nodes as f64 / elapsed.as_secs_f64();
    let per_node_us = elapsed.as_secs_f64() * 1e6 / nodes as f64;
    println!(
        "{nodes:>6} nodes: {:>7.2} s  {rate:>8.0} nodes/s  {per_node_us:>7.1} us/node",
        elapsed.as_secs_f64()
    );
    store.close().expect("close");
    rate
}

/// The layered DAG, built in transactions of 1,000 operations.
fn build(store: &Store, nodes: usize) -> String {
    let graph = store.graphs().create(json!({ "bench": nodes })).expect("create");
    let mut ops: Vec<Step> = (0..nodes).map(Step::Node).collect();
    for to in WIDTH..nodes {
        let (layer_start, column) = ((to / WIDTH - 1) * WIDTH, to % WIDTH);
        ops.push(Step::Edge(layer_start + column, to));
        ops.push(Step::Edge(layer_start + (column + 1) % WIDTH, to));
    }
    for chunk in ops.chunks(1_000) {
        let (graph, chunk) = (graph.clone(), chunk.to_vec());
        store.transaction(move |tx| apply(tx, &graph, &chunk)).expect("build");
    }
    graph
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Node(usize),
    Edge(usize, usize),
}

fn apply(tx: &mut spindle::Tx<'_>, graph: &str, steps: &[Step]) -> spindle::Result<TxOutcome<()>> {
    for step in steps {
        match *step {
            Step::Node(index) => {
                let spec = NodeSpec::task(json!({ "index": index }));
                let options = NodeOptions::new().id(format!("n{index}"));
                tx.exec(AddNode { graph: graph.to_owned(), spec, options })?;
            }
            Step::Edge(from, to) => {
                let (from, to) = (format!("n{from}"), format!("n{to}"));
                tx.exec(AddEdge { graph: graph.to_owned(), from, to, condition: None })?;
            }
        }
    }
    Ok(TxOutcome::Commit(()))
}

/// Starts the graph and runs every node it makes ready until it ends.
fn drive(store: &Store, graph: &str, workers: usize) {
    let (ready_tx, ready_rx) = unbounded::<String>();
    let dispatcher = {
        let (store, graph) = (store.clone(), graph.to_owned());
        thread::spawn(move || dispatch(&store, &graph, &ready_tx))
    };
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (store, graph, ready) = (store.clone(), graph.to_owned(), ready_rx.clone());
            thread::spawn(move || work(&store, &graph, &ready))
        })
        .collect();
    drop(ready_rx);
    store.graphs().start(graph).expect("start");
    dispatcher.join().expect("dispatcher");
    for handle in handles {
        handle.join().expect("worker");
    }
}

/// Follows the graph's stream, sending each ready node to the workers, until the graph ends.
fn dispatch(store: &Store, graph: &str, ready: &Sender<String>) {
    let mut events = store.subscribe(Stream::graph(graph), 0).expect("subscribe");
    loop {
        let event = events.recv_timeout(Duration::from_secs(60)).expect("recv");
        let event = event.expect("an event within a minute");
        match GraphEvent::from_event(&event).expect("graph event") {
            GraphEvent::NodeReady { node_id, .. } => ready.send(node_id).expect("send"),
            other if other.is_terminal() => return,
            _ => {}
        }
    }
}

fn work(store: &Store, graph: &str, ready: &Receiver<String>) {
    for node in ready {
        store.graphs().start_node(graph, &node).expect("start node");
        store.graphs().complete_node(graph, &node, None).expect("complete node");
    }
}
