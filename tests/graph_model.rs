//! Property and model tests of the graph engine. Random DAGs (random joins, gathers and edge
//! conditions) driven with random outcomes, sometimes grown while they run, always reach a
//! terminal status, and the end state obeys the firing rule, checked against the edges' token
//! counts; with loops, they still finish within the re-fire limit.
//!
//! The model test (`random_graph_sequences_agree_with_the_model`) runs `SPINDLE_MODEL_CASES`
//! seeded sequences (default 2,000) of up to 100 calls: graphs built, started, their nodes
//! started, completed and failed in any order (calls the engine must refuse included), grown
//! while running, cancelled, with clock moves backwards and reopens of a shared store (a
//! tmpfs file on SQLite, a schema on PostgreSQL; recovery puts running nodes back to ready),
//! checked after every call against the model of `tests/models/graph.rs` (shared with the
//! `ops` fuzz harness): exactly the nodes and edges added, counts that match, finished nodes
//! and graphs staying finished, nodes of a DAG firing at most once, the audit clean, and
//! `count_by_status` (unfiltered, roots only, by kind) agreeing with a recount of the graphs
//! by a plain `GROUP BY` (graphs of two kinds, of a kind that is a number and of none, some
//! with a child graph that their end cancels). It fails
//! when the rare paths were not reached often enough. Every graph and sequence comes from a
//! printed seed; `GRAPH_MODEL_SEED=<seed>` runs one sequence alone.

mod common;
mod models;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{Dice, SharedStore};
use models::graph::{GraphModel, check_counts, check_join};
use serde_json::json;
use spindle::{
    Durability, GatherStrategy, GraphStatus, JoinType, Limits, ManualClock, Node, NodeOptions,
    NodeOutput, NodeSpec, NodeStatus, Options, Store, Token, TokenColor,
};

const GRAPHS: u64 = 250;

#[test]
fn random_dags_with_random_outcomes_always_finish_by_the_rules() {
    let options = Options::default().inline(true);
    let store = common::new_store_with(options);
    let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
    for seed in 0..GRAPHS {
        let mut dice = Dice::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let graph = build(&store, &mut dice, seed);
        store.graphs().start(&graph).expect("start");
        drive(&store, &graph, &mut dice, seed);
        check_end_state(&store, &graph, seed);
        let problems = store.graphs().audit(&graph).expect("audit");
        assert!(problems.is_empty(), "seed {seed}: {problems:?}");
        let summary = store.graphs().get(&graph).expect("get");
        *seen.entry(summary.status.as_str()).or_default() += 1;
        *seen.entry("skipped nodes").or_default() += summary.counts.skipped;
    }
    // The generator reaches both endings and skips nodes; otherwise the checks prove little.
    for what in ["complete", "failed", "skipped nodes"] {
        assert!(seen.get(what).is_some_and(|&n| n >= 10), "too few {what}: {seen:?}");
    }
}

#[test]
fn random_graphs_with_loops_always_finish_and_keep_their_counts() {
    let limits = Limits::default().loop_refires_max(5);
    let options = Options::default().limits(limits).inline(true);
    let store = common::new_store_with(options);
    let mut refired = 0;
    for seed in 0..GRAPHS {
        let mut dice = Dice::new(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ 0x5EED);
        let graph = build(&store, &mut dice, seed);
        add_loops(&store, &graph, &mut dice);
        store.graphs().start(&graph).expect("start");
        drive(&store, &graph, &mut dice, seed);
        let summary = store.graphs().get(&graph).expect("get");
        assert!(summary.status.is_terminal(), "seed {seed}: {summary:?}");
        let problems = store.graphs().audit(&graph).expect("audit");
        assert!(problems.is_empty(), "seed {seed}: {problems:?}");
        let all = nodes(&store, &graph);
        check_counts(&summary, &all, &format!("seed {seed}"));
        for node in &all {
            assert!(node.fires <= 6, "seed {seed}: {node:?} past the loop limit");
            if summary.status == GraphStatus::Complete {
                let finished = [NodeStatus::Complete, NodeStatus::Failed, NodeStatus::Skipped];
                assert!(finished.contains(&node.status), "seed {seed}: {node:?} unfinished");
            }
        }
        refired += all.iter().filter(|node| node.fires > 1).count();
    }
    assert!(refired >= 20, "the loops were hardly taken: {refired}");
}

/// Self-loops and back edges into `Any` joins, taken by an `again` token.
fn add_loops(store: &Store, graph: &str, dice: &mut Dice) {
    let all = nodes(store, graph);
    for node in &all {
        if dice.below(3) == 0 {
            let again = Some(TokenColor::named("again"));
            store.graphs().add_edge(graph, &node.id, &node.id, again).expect("self-loop");
        }
    }
    for (later, node) in all.iter().enumerate().skip(1) {
        let earlier = &all[dice.below(later as u64) as usize];
        if dice.below(4) == 0 && earlier.join == JoinType::Any {
            let again = Some(TokenColor::named("again"));
            store.graphs().add_edge(graph, &node.id, &earlier.id, again).expect("back edge");
        }
    }
}

/// A DAG of 1..=12 nodes: edges only go from an earlier node to a later one.
fn build(store: &Store, dice: &mut Dice, seed: u64) -> String {
    let graph = store.graphs().create(json!({ "seed": seed })).expect("create");
    let count = 1 + dice.below(12);
    for index in 0..count {
        add_random_node(store, &graph, dice, &format!("n{index}"));
        for from in 0..index {
            if dice.below(3) == 0 {
                let condition = random_condition(dice);
                let (from, to) = (format!("n{from}"), format!("n{index}"));
                store.graphs().add_edge(&graph, &from, &to, condition).expect("edge");
            }
        }
    }
    graph
}

fn add_random_node(store: &Store, graph: &str, dice: &mut Dice, id: &str) {
    let spec = match dice.below(6) {
        0 => NodeSpec::Gather { strategy: GatherStrategy::All },
        1 => NodeSpec::Gather { strategy: GatherStrategy::First { n: 1 + dice.below(2) as usize } },
        _ => NodeSpec::task(json!({ "id": id })),
    };
    let join = if dice.below(3) == 0 { JoinType::Any } else { JoinType::All };
    let options = NodeOptions::new().id(id).join(join);
    store.graphs().add_node(graph, spec, options).expect("add node");
}

fn random_condition(dice: &mut Dice) -> Option<TokenColor> {
    match dice.below(5) {
        0 => Some(TokenColor::Ok),
        1 => Some(TokenColor::Error),
        2 => Some(TokenColor::named("x")),
        _ => None,
    }
}

/// Runs ready nodes with random outcomes until the graph ends; sometimes adds a node and an
/// edge from an existing node while it runs.
fn drive(store: &Store, graph: &str, dice: &mut Dice, seed: u64) {
    for step in 0..1_000 {
        let current = store.graphs().get(graph).expect("get");
        if current.status.is_terminal() {
            return;
        }
        if dice.below(10) == 0 {
            grow(store, graph, dice, step);
            continue;
        }
        let ready: Vec<Node> = nodes(store, graph)
            .into_iter()
            .filter(|node| node.status == NodeStatus::Ready)
            .collect();
        assert!(!ready.is_empty(), "seed {seed}: running with nothing ready: {current:?}");
        let node = &ready[dice.below(ready.len() as u64) as usize];
        store.graphs().start_node(graph, &node.id).expect("start node");
        finish_randomly(store, graph, &node.id, dice);
    }
    panic!("seed {seed}: the graph did not finish in 1,000 steps");
}

fn grow(store: &Store, graph: &str, dice: &mut Dice, step: usize) {
    let existing = nodes(store, graph);
    let id = format!("late{step}");
    add_random_node(store, graph, dice, &id);
    let from = &existing[dice.below(existing.len() as u64) as usize].id;
    let condition = random_condition(dice);
    store.graphs().add_edge(graph, from, &id, condition).expect("late edge");
}

fn finish_randomly(store: &Store, graph: &str, node: &str, dice: &mut Dice) {
    let output = match dice.below(8) {
        6 => Some(NodeOutput::Single(Token::named("again", None))),
        7 => Some(NodeOutput::Many { tokens: vec![Token::ok(), Token::named("again", None)] }),
        0 => {
            store.graphs().fail_node(graph, node, "random failure").expect("fail");
            return;
        }
        1 => Some(NodeOutput::Single(Token::named("x", None))),
        2 => Some(NodeOutput::Many { tokens: vec![Token::ok(), Token::named("x", None)] }),
        3 => Some(NodeOutput::Many { tokens: Vec::new() }),
        _ => None,
    };
    store.graphs().complete_node(graph, node, output).expect("complete");
}

fn nodes(store: &Store, graph: &str) -> Vec<Node> {
    store.graphs().nodes(graph).expect("nodes")
}

/// The end state: a terminal status; the counts match the nodes; in a DAG no node fired
/// twice; a complete graph has every node finished; a skipped node could not have been
/// enabled and a node that ran was.
fn check_end_state(store: &Store, graph: &str, seed: u64) {
    let summary = store.graphs().get(graph).expect("get");
    assert!(summary.status.is_terminal(), "seed {seed}: {summary:?}");
    let all = nodes(store, graph);
    let context = format!("seed {seed}");
    check_counts(&summary, &all, &context);
    let inbound = inbound_tokens(store, graph);
    for node in &all {
        assert!(node.fires <= 1, "seed {seed}: {} fired {} times in a DAG", node.id, node.fires);
        if summary.status == GraphStatus::Complete {
            let finished = [NodeStatus::Complete, NodeStatus::Failed, NodeStatus::Skipped];
            assert!(finished.contains(&node.status), "seed {seed}: {node:?} left unfinished");
        }
        let tokens = inbound.get(&node.id).cloned().unwrap_or_default();
        // A node added to a running graph runs at once, before its edge exists.
        let late = node.id.starts_with("late");
        check_join(node, &tokens, summary.status, late, &context);
    }
}

/// For each node, the token count of each of its inbound edges.
fn inbound_tokens(store: &Store, graph: &str) -> BTreeMap<String, Vec<u64>> {
    let mut inbound: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for edge in store.graphs().edges(graph).expect("edges") {
        inbound.entry(edge.to).or_default().push(edge.tokens);
    }
    inbound
}

/// What the sequence test reached, summed over every sequence.
#[derive(Debug, Default)]
struct Coverage {
    graphs: u64,
    completed: u64,
    failed: u64,
    cancelled: u64,
    skipped_nodes: u64,
    late_nodes: u64,
    node_runs: u64,
    refused: u64,
    refused_on_finished: u64,
    recovered_running: u64,
    reopens: u64,
    clock_back: u64,
    reruns: u64,
    reruns_finished: u64,
    children: u64,
}

struct Sequence {
    seed: u64,
    step: usize,
    clock: ManualClock,
    /// The store of a sequence that reopens it (`None`: a private one, never reopened).
    shared: Option<SharedStore>,
    store: Store,
    graph: GraphModel,
    nodes_made: usize,
}

fn open_store(shared: Option<&SharedStore>, clock: &ManualClock) -> Store {
    let options = Options::default()
        .clock(Arc::new(clock.clone()))
        .durability(Durability::Normal)
        .inline(true);
    match shared {
        Some(shared) => shared.open_with(options),
        None => common::new_store_with(options),
    }
}

impl Sequence {
    /// Names the call for failure messages (and prints it with `GRAPH_MODEL_TRACE=1`).
    fn context(&self, op: &str) -> String {
        let context =
            format!("seed {} step {} graph {} ({op})", self.seed, self.step, self.graph.id);
        if std::env::var_os("GRAPH_MODEL_TRACE").is_some() {
            eprintln!("{context}");
        }
        context
    }

    /// A new root graph (of one of the `KINDS`, of a kind that is not a string, or of none),
    /// and sometimes a child of it that stays pending until its parent ends (which cancels
    /// it): what the graph counts are kept per.
    fn new_graph(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let graphs = self.store.graphs();
        let id = graphs.create(random_metadata(dice, self.step)).expect("create");
        if dice.below(4) == 0 {
            graphs.create_child(&id, random_metadata(dice, self.step)).expect("create a child");
            c.children += 1;
        }
        self.graph = GraphModel::new(&id);
        c.graphs += 1;
    }

    /// Adds a node and, often, edges into it from earlier nodes.
    fn add_node(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let id = format!("n{}", self.nodes_made);
        self.nodes_made += 1;
        let join = if dice.below(3) == 0 { JoinType::Any } else { JoinType::All };
        let context = self.context(&format!("add_node {id}"));
        let expected = self.graph.add_node(&id, join);
        let spec = match dice.below(6) {
            0 => NodeSpec::Gather { strategy: GatherStrategy::All },
            _ => NodeSpec::task(json!({ "id": id })),
        };
        let got = self.store.graphs().add_node(
            &self.graph.id,
            spec,
            NodeOptions::new().id(&id).join(join),
        );
        if models::compare(&context, got.map(|_| ()), expected).is_some() {
            return;
        }
        c.late_nodes += u64::from(self.graph.status == GraphStatus::Running);
        let earlier: Vec<String> = self.graph.nodes.keys().filter(|n| **n != id).cloned().collect();
        for from in earlier {
            if dice.below(3) == 0 {
                let context = self.context(&format!("add_edge {from} -> {id}"));
                let expected = self.graph.add_edge(&from, &id);
                let got = self.store.graphs().add_edge(
                    &self.graph.id,
                    &from,
                    &id,
                    random_condition(dice),
                );
                models::compare(&context, got.map(|_| ()), expected);
            }
        }
    }

    /// A node to act on: mostly one in `wanted`, sometimes any, sometimes an unknown one.
    fn pick(&self, dice: &mut Dice, wanted: NodeStatus) -> String {
        let nodes = &self.graph.nodes;
        let matching: Vec<&String> =
            nodes.iter().filter(|(_, n)| n.status == wanted).map(|(id, _)| id).collect();
        let all: Vec<&String> = nodes.keys().collect();
        match dice.below(10) {
            0 => "no-such-node".into(),
            1 | 2 if !all.is_empty() => all[dice.below(all.len() as u64) as usize].clone(),
            _ if !matching.is_empty() => {
                matching[dice.below(matching.len() as u64) as usize].clone()
            }
            _ => "no-such-node".into(),
        }
    }

    fn start_node(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let node = self.pick(dice, NodeStatus::Ready);
        let context = self.context(&format!("start_node {node}"));
        let expected = self.graph.start_node(&node);
        let got = self.store.graphs().start_node(&self.graph.id, &node);
        c.refused += u64::from(models::compare(&context, got, expected).is_some());
    }

    fn finish_node(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let node = self.pick(dice, NodeStatus::Running);
        let context = self.context(&format!("finish {node}"));
        let expected = self.graph.finish_node(&node);
        let graphs = self.store.graphs();
        let got = match dice.below(6) {
            0 => graphs.fail_node(&self.graph.id, &node, "random failure"),
            1 => graphs.complete_node(
                &self.graph.id,
                &node,
                Some(NodeOutput::Single(Token::named("x", None))),
            ),
            2 => graphs.complete_node(
                &self.graph.id,
                &node,
                Some(NodeOutput::Many { tokens: vec![Token::ok(), Token::named("x", None)] }),
            ),
            _ => graphs.complete_node(&self.graph.id, &node, None),
        };
        let refused = models::compare(&context, got, expected);
        c.node_runs += u64::from(refused.is_none());
        c.refused += u64::from(refused.is_some());
        let finished = self.graph.status.is_terminal();
        c.refused_on_finished += u64::from(finished && refused == Some(models::Refusal::Conflict));
    }

    /// Runs a finished graph again from one or two nodes (mostly finished ones; sometimes
    /// none, an unknown one, one named twice, or one that cannot run again).
    fn rerun(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let first = if dice.below(2) == 0 {
            self.pick(dice, NodeStatus::Failed)
        } else {
            self.pick(dice, NodeStatus::Complete)
        };
        let nodes: Vec<String> = match dice.below(12) {
            0 => Vec::new(),
            1 => vec![first.clone(), first],
            2 | 3 => vec![first, self.pick(dice, NodeStatus::Complete)],
            _ => vec![first],
        };
        let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
        let context = self.context(&format!("reopen {names:?}"));
        let expected = self.graph.reopen(&names);
        let got = self.store.graphs().reopen(&self.graph.id, &names);
        if models::compare(&context, got, expected).is_some() {
            c.refused += 1;
            return;
        }
        c.reruns += 1;
        for node in self.store.graphs().nodes(&self.graph.id).expect("nodes") {
            if !names.contains(&node.id.as_str()) {
                continue;
            }
            let gather = matches!(node.spec, NodeSpec::Gather { .. });
            let graph_status = self.store.graphs().get(&self.graph.id).expect("get").status;
            let fired = node.status == NodeStatus::Ready || gather || graph_status.is_terminal();
            assert!(fired, "{context}: {} is {:?} after the reopen", node.id, node.status);
        }
    }

    fn cancel(&mut self) {
        let context = self.context("cancel");
        let expected = self.graph.cancel();
        models::compare(&context, self.store.graphs().cancel(&self.graph.id), expected);
    }

    /// Closes and opens the store again: recovery puts every running node back to ready.
    fn reopen(&mut self, c: &mut Coverage) -> bool {
        let Some(shared) = &self.shared else { return false };
        self.store.close().expect("close");
        self.store = open_store(Some(shared), &self.clock);
        let context = self.context("reopened");
        let running: Vec<String> = self
            .graph
            .nodes
            .iter()
            .filter(|(_, n)| n.status == NodeStatus::Running)
            .map(|(id, _)| id.clone())
            .collect();
        let nodes = self.store.graphs().nodes(&self.graph.id).expect("nodes");
        for node in nodes.iter().filter(|node| running.contains(&node.id)) {
            let expected = if self.graph.status == GraphStatus::Running {
                NodeStatus::Ready
            } else {
                NodeStatus::Running
            };
            assert_eq!(node.status, expected, "{context}: {} after recovery", node.id);
            c.recovered_running += 1;
        }
        true
    }

    /// The checks at the end of a graph; counts how it ended.
    fn ended(&mut self, c: &mut Coverage) {
        let context = self.context("ended");
        self.graph.check_deep(&self.store, &context);
        c.reruns_finished += u64::from(self.graph.reruns > 0);
        match self.graph.status {
            GraphStatus::Complete => c.completed += 1,
            GraphStatus::Failed => c.failed += 1,
            _ => c.cancelled += 1,
        }
        let skipped = self.graph.nodes.values().filter(|n| n.status == NodeStatus::Skipped);
        c.skipped_nodes += skipped.count() as u64;
    }
}

/// The kinds graphs of the model test have (`count_by_status` answers a filter on one alone
/// from its counts).
const KINDS: [&str; 2] = ["build", "deploy"];

/// A graph's metadata: one of the `KINDS`, a kind that is a number, or none.
fn random_metadata(dice: &mut Dice, step: usize) -> serde_json::Value {
    match dice.below(4) {
        0 | 1 => json!({ "step": step, "kind": KINDS[dice.below(2) as usize] }),
        2 => json!({ "step": step, "kind": 7 }),
        _ => json!({ "step": step }),
    }
}

fn sequence_step(s: &mut Sequence, dice: &mut Dice, c: &mut Coverage) {
    match (s.graph.status, dice.below(20)) {
        (_, 0) => {
            if s.reopen(c) {
                c.reopens += 1;
            }
        }
        (_, 1 | 2) => {
            let back = dice.below(3) == 0;
            s.clock.advance_ms(if back { -1_000 } else { 1_000 });
            c.clock_back += u64::from(back);
        }
        (GraphStatus::Pending, roll) if roll < 14 || s.graph.nodes.is_empty() => {
            s.add_node(dice, c)
        }
        (GraphStatus::Pending, _) => {
            let context = s.context("start");
            let status = s.store.graphs().start(&s.graph.id).expect("start");
            assert_eq!(s.graph.check(&s.store, &context).status, status, "{context}");
        }
        (GraphStatus::Running, 3) => s.add_node(dice, c),
        (GraphStatus::Running, 4) if dice.below(8) == 0 => s.cancel(),
        (GraphStatus::Running, roll) if roll < 11 => s.start_node(dice, c),
        (GraphStatus::Running, _) => s.finish_node(dice, c),
        (GraphStatus::Complete | GraphStatus::Failed, roll) if (8..11).contains(&roll) => {
            s.rerun(dice, c);
        }
        (_, roll) if roll < 8 => {
            s.finish_node(dice, c);
            if dice.below(2) == 0 {
                s.add_node(dice, c);
            }
        }
        (_, _) => {
            s.ended(c);
            s.new_graph(dice, c);
        }
    }
}

fn run_sequence(seed: u64, c: &mut Coverage) {
    let mut dice = Dice::new(seed);
    let steps = 1 + dice.below(100) as usize;
    let clock = ManualClock::new(1_700_000_000_000);
    let shared = (dice.below(4) == 0).then(SharedStore::in_tmpfs);
    let store = open_store(shared.as_ref(), &clock);
    let graph = GraphModel::new("");
    let mut s = Sequence { seed, step: 0, clock, shared, store, graph, nodes_made: 0 };
    s.new_graph(&mut dice, c);
    for step in 0..steps {
        s.step = step;
        sequence_step(&mut s, &mut dice, c);
        let context = s.context("check");
        s.graph.check(&s.store, &context);
        common::assert_graph_counts(&s.store, &KINDS, &context);
    }
    let context = s.context("end of sequence");
    s.graph.check_deep(&s.store, &context);
    s.store.close().expect("close");
}

#[test]
fn random_graph_sequences_agree_with_the_model() {
    let mut c = Coverage::default();
    if !models::run_cases("GRAPH_MODEL_SEED", |seed| run_sequence(seed, &mut c)) {
        return;
    }
    println!("{c:?}");
    models::assert_floors(
        "graphs",
        &[
            ("graphs", c.graphs, 2_000),
            ("graphs completed", c.completed, 200),
            ("graphs failed", c.failed, 50),
            ("graphs cancelled", c.cancelled, 50),
            ("skipped nodes", c.skipped_nodes, 50),
            ("nodes added while running", c.late_nodes, 200),
            ("nodes run", c.node_runs, 2_000),
            ("calls refused", c.refused, 500),
            ("completions refused on a finished graph", c.refused_on_finished, 50),
            ("running nodes recovered at reopen", c.recovered_running, 50),
            ("reopens", c.reopens, 50),
            ("clock moves backwards", c.clock_back, 50),
            ("graphs reopened to run again", c.reruns, 100),
            ("reopened graphs that finished again", c.reruns_finished, 50),
            ("child graphs", c.children, 200),
        ],
    );
}
