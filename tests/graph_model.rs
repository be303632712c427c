//! Property test of the graph engine: random DAGs (random joins, gathers and edge conditions)
//! driven with random outcomes, sometimes grown while they run, always reach a terminal status;
//! and the end state obeys the firing rule, checked against the edges' token counts. Each
//! graph comes from a printed seed, so a failure is reproduced by running that seed again.

mod common;

use std::collections::BTreeMap;

use common::Dice;
use serde_json::json;
use spindle::{
    GatherStrategy, Graph, GraphStatus, JoinType, Limits, Node, NodeOptions, NodeOutput, NodeSpec,
    NodeStatus, Options, Store, Token, TokenColor,
};

const GRAPHS: u64 = 250;

#[test]
fn random_dags_with_random_outcomes_always_finish_by_the_rules() {
    let store = Store::open_in_memory().expect("open");
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
    let limits = Limits { loop_refires_max: 5, ..Limits::default() };
    let store = Store::open_in_memory_with(Options { limits, ..Options::default() }).expect("open");
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
        check_counts(&summary, &all, seed);
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
    check_counts(&summary, &all, seed);
    let inbound = inbound_tokens(store, graph);
    for node in &all {
        assert!(node.fires <= 1, "seed {seed}: {} fired {} times in a DAG", node.id, node.fires);
        if summary.status == GraphStatus::Complete {
            let finished = [NodeStatus::Complete, NodeStatus::Failed, NodeStatus::Skipped];
            assert!(finished.contains(&node.status), "seed {seed}: {node:?} left unfinished");
        }
        let tokens = inbound.get(&node.id).cloned().unwrap_or_default();
        check_join(node, &tokens, summary.status, seed);
    }
}

fn check_counts(summary: &Graph, all: &[Node], seed: u64) {
    let count = |status| all.iter().filter(|node| node.status == status).count() as u64;
    let counts = summary.counts;
    let tallied = [
        counts.pending,
        counts.ready,
        counts.running,
        counts.complete,
        counts.failed,
        counts.skipped,
    ];
    let expected = [
        count(NodeStatus::Pending),
        count(NodeStatus::Ready),
        count(NodeStatus::Running),
        count(NodeStatus::Complete),
        count(NodeStatus::Failed),
        count(NodeStatus::Skipped),
    ];
    assert_eq!(tallied, expected, "seed {seed}: the graph's counts drifted");
    assert_eq!(summary.node_count, all.len() as u64, "seed {seed}");
}

/// For each node, the token count of each of its inbound edges.
fn inbound_tokens(store: &Store, graph: &str) -> BTreeMap<String, Vec<u64>> {
    let mut inbound: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for edge in store.graphs().edges(graph).expect("edges") {
        inbound.entry(edge.to).or_default().push(edge.tokens);
    }
    inbound
}

/// A node that ran had its join met; a skipped node of a complete graph could not have it met.
fn check_join(node: &Node, tokens: &[u64], status: GraphStatus, seed: u64) {
    let filled = tokens.iter().filter(|&&count| count > 0).count();
    let met = match node.join {
        JoinType::All => filled == tokens.len(),
        JoinType::Any => tokens.is_empty() || filled > 0,
    };
    // A node added to a running graph runs at once, before its edge exists.
    let late = node.id.starts_with("late");
    let ran = matches!(node.status, NodeStatus::Complete | NodeStatus::Failed);
    assert!(!ran || met || late, "seed {seed}: {node:?} ran with inputs {tokens:?}");
    if status == GraphStatus::Complete && node.status == NodeStatus::Skipped {
        assert!(!met || tokens.is_empty(), "seed {seed}: {node:?} skipped with {tokens:?}");
    }
}
