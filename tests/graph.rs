//! The graph engine (DESIGN.md §5.5) through the public API: one test per rule, on small
//! graphs, driven the way a dispatcher drives them (start the ready node, then complete or
//! fail it).

mod common;

use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use common::SharedStore;
use serde_json::{Value, json};
use spindle::graph::CompleteNode;
use spindle::{
    Error, GatherStrategy, GraphEvent, GraphStatus, JoinType, Limits, ManualClock, NodeOptions,
    NodeOutput, NodeSpec, NodeStatus, Options, Page, Store, Stream, Token, TokenColor, TxOutcome,
};

const T0: i64 = 1_700_000_000_000;

fn store() -> Store {
    common::new_store()
}

fn task() -> NodeSpec {
    NodeSpec::task(json!({}))
}

/// Adds a task node named `id`.
fn node(store: &Store, graph: &str, id: &str) -> String {
    store.graphs().add_node(graph, task(), NodeOptions::new().id(id)).expect("add node")
}

fn edge(store: &Store, graph: &str, from: &str, to: &str, condition: Option<TokenColor>) {
    store.graphs().add_edge(graph, from, to, condition).expect("add edge");
}

/// The status of every node, by id.
fn statuses(store: &Store, graph: &str) -> Vec<(String, NodeStatus)> {
    let nodes = store.graphs().nodes(graph).expect("nodes");
    nodes.into_iter().map(|node| (node.id, node.status)).collect()
}

fn status_of(store: &Store, graph: &str, id: &str) -> NodeStatus {
    store.graphs().node(graph, id).expect("node").status
}

/// The ready nodes, in the order they were added.
fn ready(store: &Store, graph: &str) -> Vec<String> {
    let nodes = store.graphs().nodes(graph).expect("nodes");
    nodes.into_iter().filter(|n| n.status == NodeStatus::Ready).map(|n| n.id).collect()
}

/// Starts and completes `id` with no output.
fn run_ok(store: &Store, graph: &str, id: &str) {
    store.graphs().start_node(graph, id).expect("start node");
    store.graphs().complete_node(graph, id, None).expect("complete node");
}

fn run_fail(store: &Store, graph: &str, id: &str, error: &str) {
    store.graphs().start_node(graph, id).expect("start node");
    store.graphs().fail_node(graph, id, error).expect("fail node");
}

/// The graph events of a graph, decoded.
fn events(store: &Store, graph: &str) -> Vec<GraphEvent> {
    let events = common::read_stream(store, &Stream::graph(graph));
    events.iter().map(|event| GraphEvent::from_event(event).expect("graph event")).collect()
}

fn graph_status(store: &Store, graph: &str) -> GraphStatus {
    store.graphs().get(graph).expect("get").status
}

/// a -> b, a -> c, b -> d, c -> d.
fn diamond(store: &Store) -> String {
    let g = store.graphs().create(json!({ "name": "diamond" })).expect("create");
    for id in ["a", "b", "c", "d"] {
        node(store, &g, id);
    }
    edge(store, &g, "a", "b", None);
    edge(store, &g, "a", "c", None);
    edge(store, &g, "b", "d", None);
    edge(store, &g, "c", "d", None);
    g
}

#[test]
fn a_diamond_runs_in_order_and_completes() {
    let store = store();
    let g = diamond(&store);
    assert_eq!(graph_status(&store, &g), GraphStatus::Pending);
    assert_eq!(store.graphs().start(&g).expect("start"), GraphStatus::Running);
    assert_eq!(ready(&store, &g), ["a"]);
    run_ok(&store, &g, "a");
    assert_eq!(ready(&store, &g), ["b", "c"]);
    run_ok(&store, &g, "c");
    assert_eq!(ready(&store, &g), ["b"], "d waits for both");
    assert_eq!(status_of(&store, &g, "d"), NodeStatus::Pending);
    let output = NodeOutput::ok(json!({ "from": "b" }));
    store.graphs().start_node(&g, "b").expect("start b");
    store.graphs().complete_node(&g, "b", output).expect("an output, or Some(output)");
    assert_eq!(ready(&store, &g), ["d"]);
    let inputs = store.graphs().inputs(&g, "d").expect("inputs");
    assert_eq!(inputs, [Token::ok(), Token::ok_data(json!({ "from": "b" }))], "arrival order");
    run_ok(&store, &g, "d");
    let graph = store.graphs().get(&g).expect("get");
    assert_eq!(graph.status, GraphStatus::Complete);
    assert_eq!((graph.node_count, graph.edge_count), (4, 4));
    assert_eq!(graph.counts.complete, 4);
    assert!(graph.finished_at_ms.is_some());
    let last = events(&store, &g).pop().expect("events");
    assert_eq!(last, GraphEvent::GraphDone { graph_id: g.clone() });
}

#[test]
fn the_event_stream_tells_the_whole_run() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    node(&store, &g, "b");
    edge(&store, &g, "a", "b", None);
    store.graphs().start(&g).expect("start");
    run_ok(&store, &g, "a");
    run_ok(&store, &g, "b");
    let types: Vec<&str> = events(&store, &g).iter().map(GraphEvent::event_type).collect();
    assert_eq!(
        types,
        [
            "node_ready",
            "node_started",
            "node_done",
            "node_ready",
            "node_started",
            "node_done",
            "graph_done"
        ]
    );
}

#[test]
fn an_error_branch_runs_its_handler_and_the_untaken_branch_is_skipped() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    for id in ["work", "next", "handler"] {
        node(&store, &g, id);
    }
    edge(&store, &g, "work", "next", Some(TokenColor::Ok));
    edge(&store, &g, "work", "handler", Some(TokenColor::Error));
    store.graphs().start(&g).expect("start");
    run_fail(&store, &g, "work", "disk full");
    assert_eq!(status_of(&store, &g, "next"), NodeStatus::Skipped);
    assert_eq!(ready(&store, &g), ["handler"]);
    let inputs = store.graphs().inputs(&g, "handler").expect("inputs");
    assert_eq!(inputs, [Token::error("disk full")]);
    run_ok(&store, &g, "handler");
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete, "a handled failure completes");
    let node = store.graphs().node(&g, "work").expect("node");
    assert_eq!((node.status, node.error.as_deref()), (NodeStatus::Failed, Some("disk full")));
}

#[test]
fn success_skips_the_error_handler_and_completes() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    for id in ["work", "next", "handler", "after_handler"] {
        node(&store, &g, id);
    }
    store.graphs().add_edge(&g, "work", "next", TokenColor::Ok).expect("a colour, or Some");
    edge(&store, &g, "work", "handler", Some(TokenColor::Error));
    edge(&store, &g, "handler", "after_handler", None);
    store.graphs().start(&g).expect("start");
    run_ok(&store, &g, "work");
    assert_eq!(status_of(&store, &g, "handler"), NodeStatus::Skipped);
    assert_eq!(status_of(&store, &g, "after_handler"), NodeStatus::Skipped, "skips propagate");
    run_ok(&store, &g, "next");
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
    let skipped = events(&store, &g)
        .into_iter()
        .filter(|event| matches!(event, GraphEvent::NodeSkipped { .. }))
        .count();
    assert_eq!(skipped, 2);
}

#[test]
fn an_error_no_edge_accepts_fails_the_graph_and_later_completions_conflict() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    for id in ["a", "b", "other"] {
        node(&store, &g, id);
    }
    edge(&store, &g, "a", "b", Some(TokenColor::Ok));
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "other").expect("start other");
    run_fail(&store, &g, "a", "boom");
    let graph = store.graphs().get(&g).expect("get");
    assert_eq!(graph.status, GraphStatus::Failed);
    assert_eq!(graph.error.as_deref(), Some("boom"));
    assert_eq!(graph.failed_node_id.as_deref(), Some("a"));
    let late = store.graphs().complete_node(&g, "other", None);
    assert!(matches!(late, Err(Error::Conflict(_))), "{late:?}");
    assert_eq!(status_of(&store, &g, "other"), NodeStatus::Running, "nothing written");
    let last = events(&store, &g).pop().expect("events");
    let expected = GraphEvent::GraphFailed {
        graph_id: g.clone(),
        node_id: Some("a".into()),
        error: "boom".into(),
    };
    assert_eq!(last, expected);
}

#[test]
fn an_unconditioned_edge_accepts_an_error_token_as_in_the_seed() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    node(&store, &g, "b");
    edge(&store, &g, "a", "b", None);
    store.graphs().start(&g).expect("start");
    run_fail(&store, &g, "a", "bad");
    assert_eq!(ready(&store, &g), ["b"]);
    assert_eq!(store.graphs().inputs(&g, "b").expect("inputs"), [Token::error("bad")]);
}

#[test]
fn an_any_join_fires_on_the_first_token_and_not_again_for_a_late_sibling() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    node(&store, &g, "b");
    let options = NodeOptions::new().id("c").join(JoinType::Any);
    store.graphs().add_node(&g, task(), options).expect("add c");
    edge(&store, &g, "a", "c", None);
    edge(&store, &g, "b", "c", None);
    store.graphs().start(&g).expect("start");
    run_ok(&store, &g, "a");
    assert_eq!(ready(&store, &g), ["b", "c"]);
    run_ok(&store, &g, "c");
    run_ok(&store, &g, "b");
    let c = store.graphs().node(&g, "c").expect("c");
    assert_eq!((c.status, c.fires), (NodeStatus::Complete, 1));
    assert_eq!(store.graphs().inputs(&g, "c").expect("inputs").len(), 2);
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
}

#[test]
fn an_any_join_does_not_fire_again_for_a_sibling_branch_that_started_later() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    for id in ["fast", "slow_prep", "slow"] {
        node(&store, &g, id);
    }
    let options = NodeOptions::new().id("notify").join(JoinType::Any);
    store.graphs().add_node(&g, task(), options).expect("add notify");
    edge(&store, &g, "slow_prep", "slow", None);
    edge(&store, &g, "fast", "notify", None);
    edge(&store, &g, "slow", "notify", None);
    store.graphs().start(&g).expect("start");
    run_ok(&store, &g, "fast");
    run_ok(&store, &g, "notify");
    run_ok(&store, &g, "slow_prep");
    run_ok(&store, &g, "slow");
    assert_eq!(store.graphs().node(&g, "notify").expect("notify").fires, 1);
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
}

#[test]
fn an_any_join_is_skipped_only_when_every_inbound_edge_is_dead() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    for id in ["a", "b"] {
        node(&store, &g, id);
    }
    let options = NodeOptions::new().id("c").join(JoinType::Any);
    store.graphs().add_node(&g, task(), options).expect("add c");
    edge(&store, &g, "a", "c", Some(TokenColor::Error));
    edge(&store, &g, "b", "c", Some(TokenColor::Error));
    store.graphs().start(&g).expect("start");
    run_ok(&store, &g, "a");
    assert_eq!(status_of(&store, &g, "c"), NodeStatus::Pending, "b may still fail");
    run_ok(&store, &g, "b");
    assert_eq!(status_of(&store, &g, "c"), NodeStatus::Skipped);
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
}

#[test]
fn set_join_makes_a_pending_node_an_any_join() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    for id in ["a", "b", "c"] {
        node(&store, &g, id);
    }
    edge(&store, &g, "a", "c", None);
    edge(&store, &g, "b", "c", None);
    store.graphs().start(&g).expect("start");
    run_ok(&store, &g, "a");
    assert_eq!(status_of(&store, &g, "c"), NodeStatus::Pending);
    store.graphs().set_join(&g, "c", JoinType::Any).expect("set join");
    assert_eq!(status_of(&store, &g, "c"), NodeStatus::Ready, "its rule is met at once");
    assert_eq!(store.graphs().node(&g, "c").expect("c").join, JoinType::Any);
    let again = store.graphs().set_join(&g, "c", JoinType::All);
    assert!(matches!(again, Err(Error::Conflict(_))), "only a pending node's join changes");
}

/// Three producers feeding one gather.
fn gather_graph(store: &Store, strategy: GatherStrategy) -> String {
    let g = store.graphs().create(json!({})).expect("create");
    for id in ["p1", "p2", "p3", "after"] {
        node(store, &g, id);
    }
    let spec = NodeSpec::Gather { strategy };
    store.graphs().add_node(&g, spec, NodeOptions::new().id("gather")).expect("add gather");
    for id in ["p1", "p2", "p3"] {
        edge(store, &g, id, "gather", None);
    }
    edge(store, &g, "gather", "after", None);
    store.graphs().start(&g).expect("start");
    for (id, value) in [("p2", 2), ("p1", 1), ("p3", 3)] {
        store.graphs().start_node(&g, id).expect("start");
        let output = Some(NodeOutput::ok(json!(value)));
        store.graphs().complete_node(&g, id, output).expect("complete");
    }
    g
}

#[test]
fn a_gather_all_runs_inside_the_engine_with_every_input_in_arrival_order() {
    let store = store();
    let g = gather_graph(&store, GatherStrategy::All);
    let gather = store.graphs().node(&g, "gather").expect("gather");
    assert_eq!(gather.status, NodeStatus::Complete);
    let expected: Vec<Token> = [2, 1, 3].map(|v| Token::ok_data(json!(v))).into();
    assert_eq!(gather.output, Some(NodeOutput::Many { tokens: expected.clone() }));
    assert_eq!(store.graphs().inputs(&g, "after").expect("inputs"), expected);
    assert_eq!(ready(&store, &g), ["after"]);
    let readies = events(&store, &g)
        .into_iter()
        .filter(|e| matches!(e, GraphEvent::NodeReady { node_id, .. } if node_id == "gather"))
        .count();
    assert_eq!(readies, 0, "a gather is never handed to a dispatcher");
}

#[test]
fn a_gather_first_n_keeps_the_first_n_inputs() {
    let store = store();
    let g = gather_graph(&store, GatherStrategy::First { n: 2 });
    let gather = store.graphs().node(&g, "gather").expect("gather");
    let expected: Vec<Token> = [2, 1].map(|v| Token::ok_data(json!(v))).into();
    assert_eq!(gather.output, Some(NodeOutput::Many { tokens: expected }));
    let zero = store.graphs().add_node(
        &g,
        NodeSpec::Gather { strategy: GatherStrategy::First { n: 0 } },
        NodeOptions::new(),
    );
    assert!(matches!(zero, Err(Error::InvalidInput(_))));
}

#[test]
fn a_self_loop_on_error_retries_until_success() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "work");
    node(&store, &g, "next");
    edge(&store, &g, "work", "work", Some(TokenColor::Error));
    edge(&store, &g, "work", "next", Some(TokenColor::Ok));
    store.graphs().start(&g).expect("start");
    run_fail(&store, &g, "work", "flaky");
    assert_eq!(ready(&store, &g), ["work"], "the error token fires it again");
    assert_eq!(status_of(&store, &g, "next"), NodeStatus::Pending, "not skipped by the retry");
    run_fail(&store, &g, "work", "flaky");
    run_ok(&store, &g, "work");
    assert_eq!(store.graphs().node(&g, "work").expect("work").fires, 3);
    run_ok(&store, &g, "next");
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
}

#[test]
fn a_loop_past_its_limit_fails_the_graph() {
    let limits = Limits::default().loop_refires_max(2);
    let store = common::new_store_with(Options::default().limits(limits));
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "work");
    edge(&store, &g, "work", "work", Some(TokenColor::Error));
    store.graphs().start(&g).expect("start");
    for _ in 0..3 {
        assert_eq!(graph_status(&store, &g), GraphStatus::Running);
        run_fail(&store, &g, "work", "again");
    }
    let graph = store.graphs().get(&g).expect("get");
    assert_eq!(graph.status, GraphStatus::Failed);
    assert_eq!(graph.failed_node_id.as_deref(), Some("work"));
    assert!(graph.error.as_deref().is_some_and(|e| e.contains("more than 2")), "{graph:?}");
    assert_eq!(store.graphs().node(&g, "work").expect("work").fires, 3, "1 run + 2 re-fires");
}

#[test]
fn a_back_edge_loop_runs_until_the_exit_colour() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "init");
    let any = NodeOptions::new().id("body").join(JoinType::Any);
    store.graphs().add_node(&g, task(), any).expect("body");
    node(&store, &g, "check");
    node(&store, &g, "done");
    edge(&store, &g, "init", "body", None);
    edge(&store, &g, "body", "check", None);
    edge(&store, &g, "check", "body", Some(TokenColor::named("again")));
    edge(&store, &g, "check", "done", Some(TokenColor::Ok));
    store.graphs().start(&g).expect("start");
    run_ok(&store, &g, "init");
    for round in 0..3 {
        run_ok(&store, &g, "body");
        store.graphs().start_node(&g, "check").expect("start check");
        let token = if round < 2 { Token::named("again", None) } else { Token::ok() };
        let output = Some(NodeOutput::Single(token));
        store.graphs().complete_node(&g, "check", output).expect("complete check");
    }
    assert_eq!(store.graphs().node(&g, "body").expect("body").fires, 3);
    run_ok(&store, &g, "done");
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
}

#[test]
fn a_sub_graph_node_runs_its_child_and_completes_with_it() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    let child = store.graphs().create_child(&g, json!({ "role": "child" })).expect("child");
    node(&store, &child, "inner");
    let spec = NodeSpec::SubGraph { graph_id: child.clone() };
    store.graphs().add_node(&g, spec, NodeOptions::new().id("sub")).expect("sub");
    node(&store, &g, "after");
    edge(&store, &g, "sub", "after", None);
    store.graphs().start(&g).expect("start");
    assert_eq!(graph_status(&store, &child), GraphStatus::Pending);
    store.graphs().start_node(&g, "sub").expect("start sub");
    assert_eq!(graph_status(&store, &child), GraphStatus::Running, "starts with the node");
    assert_eq!(ready(&store, &child), ["inner"]);
    run_ok(&store, &child, "inner");
    assert_eq!(graph_status(&store, &child), GraphStatus::Complete);
    let sub = store.graphs().node(&g, "sub").expect("sub");
    assert_eq!(sub.status, NodeStatus::Complete, "in the same transaction");
    assert_eq!(sub.output, Some(NodeOutput::ok(json!({ "child_graph_id": child }))));
    assert_eq!(ready(&store, &g), ["after"]);
    let children = store.graphs().children(&g).expect("children");
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].parent_node_id.as_deref(), Some("sub"));
}

#[test]
fn a_failed_child_fails_its_sub_graph_node() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    let child = store.graphs().create_child(&g, json!({})).expect("child");
    node(&store, &child, "inner");
    let spec = NodeSpec::SubGraph { graph_id: child.clone() };
    store.graphs().add_node(&g, spec, NodeOptions::new().id("sub")).expect("sub");
    node(&store, &g, "handler");
    edge(&store, &g, "sub", "handler", Some(TokenColor::Error));
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "sub").expect("start sub");
    run_fail(&store, &child, "inner", "inner broke");
    assert_eq!(graph_status(&store, &child), GraphStatus::Failed);
    let sub = store.graphs().node(&g, "sub").expect("sub");
    assert_eq!(sub.status, NodeStatus::Failed);
    assert!(sub.error.as_deref().is_some_and(|e| e.contains("inner broke")), "{sub:?}");
    assert_eq!(ready(&store, &g), ["handler"]);
}

#[test]
fn a_failing_parent_cancels_its_running_child_and_callers_cannot_finish_a_sub_graph_node() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    let child = store.graphs().create_child(&g, json!({})).expect("child");
    node(&store, &child, "inner");
    let spec = NodeSpec::SubGraph { graph_id: child.clone() };
    store.graphs().add_node(&g, spec, NodeOptions::new().id("sub")).expect("sub");
    node(&store, &g, "breaks");
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "sub").expect("start sub");
    let by_hand = store.graphs().complete_node(&g, "sub", None);
    assert!(matches!(by_hand, Err(Error::Conflict(_))), "{by_hand:?}");
    run_fail(&store, &g, "breaks", "unhandled");
    assert_eq!(graph_status(&store, &g), GraphStatus::Failed);
    assert_eq!(graph_status(&store, &child), GraphStatus::Cancelled, "not left running");
}

#[test]
fn an_empty_child_completes_its_node_as_it_starts() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    let child = store.graphs().create_child(&g, json!({})).expect("child");
    let spec = NodeSpec::SubGraph { graph_id: child.clone() };
    store.graphs().add_node(&g, spec, NodeOptions::new().id("sub")).expect("sub");
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "sub").expect("start sub");
    assert_eq!(status_of(&store, &g, "sub"), NodeStatus::Complete);
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
}

#[test]
fn a_sub_graph_must_name_an_unbound_child_of_its_graph() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    let stranger = store.graphs().create(json!({})).expect("stranger");
    let spec = NodeSpec::SubGraph { graph_id: stranger };
    let err =
        store.graphs().add_node(&g, spec, NodeOptions::new().id("s")).expect_err("not a child");
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    let child = store.graphs().create_child(&g, json!({})).expect("child");
    let spec = NodeSpec::SubGraph { graph_id: child.clone() };
    store.graphs().add_node(&g, spec.clone(), NodeOptions::new().id("s1")).expect("first");
    let twice = store.graphs().add_node(&g, spec, NodeOptions::new().id("s2"));
    assert!(matches!(twice, Err(Error::Conflict(_))), "{twice:?}");
    assert_eq!(store.graphs().get(&g).expect("get").node_count, 1, "nothing written");
    let missing = NodeSpec::SubGraph { graph_id: "nope".into() };
    let err = store.graphs().add_node(&g, missing, NodeOptions::new()).expect_err("missing");
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
}

#[test]
fn a_predecessorless_node_added_to_a_running_graph_is_ready() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    store.graphs().start(&g).expect("start");
    node(&store, &g, "late");
    assert_eq!(ready(&store, &g), ["a", "late"]);
    run_ok(&store, &g, "a");
    assert_eq!(graph_status(&store, &g), GraphStatus::Running, "late still has to run");
    run_ok(&store, &g, "late");
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
}

#[test]
fn an_edge_added_to_a_running_graph_delivers_the_finished_sources_tokens() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "src");
    node(&store, &g, "failed");
    node(&store, &g, "target");
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "target").expect("keep target running");
    store.graphs().start_node(&g, "src").expect("start src");
    let output = Some(NodeOutput::ok(json!("src's output")));
    store.graphs().complete_node(&g, "src", output).expect("complete src");
    edge(&store, &g, "src", "target", None);
    let inputs = store.graphs().inputs(&g, "target").expect("inputs");
    assert_eq!(inputs, [Token::ok_data(json!("src's output"))]);
    // A late edge whose condition the finished source's tokens do not meet is dead at once.
    node(&store, &g, "never");
    let never = store.graphs().node(&g, "never").expect("never");
    assert_eq!(never.status, NodeStatus::Ready, "predecessor-less: ready at once");
    run_fail(&store, &g, "failed", "late failure");
    assert_eq!(graph_status(&store, &g), GraphStatus::Failed, "no edge accepted the error");
}

#[test]
fn a_late_edge_enables_a_pending_gather_which_completes() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "src");
    node(&store, &g, "busy");
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "busy").expect("keep the graph running");
    store.graphs().start_node(&g, "src").expect("start src");
    let output = Some(NodeOutput::ok(json!(7)));
    store.graphs().complete_node(&g, "src", output).expect("complete src");
    let spec = NodeSpec::Gather { strategy: GatherStrategy::All };
    store.graphs().add_node(&g, spec, NodeOptions::new().id("gather")).expect("gather");
    node(&store, &g, "after");
    edge(&store, &g, "gather", "after", None);
    assert_eq!(status_of(&store, &g, "gather"), NodeStatus::Pending, "nothing to gather yet");
    edge(&store, &g, "src", "gather", None);
    let gather = store.graphs().node(&g, "gather").expect("gather");
    assert_eq!(gather.status, NodeStatus::Complete);
    let expected = vec![Token::ok_data(json!(7))];
    assert_eq!(gather.output, Some(NodeOutput::Many { tokens: expected }));
    assert_eq!(ready(&store, &g), ["after"]);
}

#[test]
fn a_gather_feeding_itself_is_stopped_by_the_output_limit() {
    let limits = Limits::default().payload_bytes_max(4096);
    let store = common::new_store_with(Options::default().limits(limits));
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "t");
    let spec = NodeSpec::Gather { strategy: GatherStrategy::All };
    store.graphs().add_node(&g, spec, NodeOptions::new().id("g")).expect("gather");
    edge(&store, &g, "t", "g", None);
    edge(&store, &g, "g", "g", None);
    store.graphs().start(&g).expect("start");
    run_ok(&store, &g, "t");
    let graph = store.graphs().get(&g).expect("get");
    assert_eq!(graph.status, GraphStatus::Failed);
    assert_eq!(graph.failed_node_id.as_deref(), Some("g"));
    assert!(graph.error.as_deref().is_some_and(|e| e.contains("gather output")), "{graph:?}");
}

#[test]
fn an_error_token_passed_on_by_a_completed_node_does_not_fail_the_graph() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    node(&store, &g, "b");
    let spec = NodeSpec::Gather { strategy: GatherStrategy::All };
    store.graphs().add_node(&g, spec, NodeOptions::new().id("g")).expect("gather");
    edge(&store, &g, "a", "g", None);
    edge(&store, &g, "b", "g", None);
    store.graphs().start(&g).expect("start");
    run_fail(&store, &g, "a", "handled by the gather");
    run_ok(&store, &g, "b");
    assert_eq!(status_of(&store, &g, "g"), NodeStatus::Complete);
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
}

#[test]
fn an_all_join_fires_again_for_each_round_of_a_looping_source() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    for id in ["s", "t", "c"] {
        node(&store, &g, id);
    }
    edge(&store, &g, "s", "c", Some(TokenColor::Ok));
    edge(&store, &g, "s", "s", Some(TokenColor::named("again")));
    edge(&store, &g, "t", "c", None);
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "s").expect("start s");
    let both = NodeOutput::Many { tokens: vec![Token::ok(), Token::named("again", None)] };
    store.graphs().complete_node(&g, "s", Some(both)).expect("complete s");
    run_ok(&store, &g, "t");
    run_ok(&store, &g, "c");
    run_ok(&store, &g, "s");
    assert_eq!(status_of(&store, &g, "c"), NodeStatus::Ready, "the second round fires c again");
    run_ok(&store, &g, "c");
    assert_eq!(store.graphs().node(&g, "c").expect("c").fires, 2);
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
}

#[test]
fn cancel_ends_the_graph_its_children_and_later_work() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    let child = store.graphs().create_child(&g, json!({})).expect("child");
    node(&store, &child, "inner");
    let spec = NodeSpec::SubGraph { graph_id: child.clone() };
    store.graphs().add_node(&g, spec, NodeOptions::new().id("sub")).expect("sub");
    node(&store, &g, "other");
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "sub").expect("start sub");
    store.graphs().start_node(&g, "other").expect("start other");
    store.graphs().cancel(&g).expect("cancel");
    assert_eq!(graph_status(&store, &g), GraphStatus::Cancelled);
    assert_eq!(graph_status(&store, &child), GraphStatus::Cancelled);
    assert_eq!(events(&store, &g).pop(), Some(GraphEvent::GraphCancelled { graph_id: g.clone() }));
    assert_eq!(
        events(&store, &child).pop(),
        Some(GraphEvent::GraphCancelled { graph_id: child.clone() })
    );
    let late = store.graphs().complete_node(&g, "other", None);
    assert!(matches!(late, Err(Error::Conflict(_))), "{late:?}");
    let add = store.graphs().add_node(&g, task(), NodeOptions::new());
    assert!(matches!(add, Err(Error::Conflict(_))), "{add:?}");
    store.graphs().cancel(&g).expect("cancelling again does nothing");
    assert_eq!(events(&store, &g).len(), events_before_second_cancel(&store, &g));
}

fn events_before_second_cancel(store: &Store, graph: &str) -> usize {
    // Every event up to and including the one cancellation.
    let all = events(store, graph);
    let at = all.iter().position(GraphEvent::is_terminal).expect("a terminal event");
    at + 1
}

#[test]
fn cancelling_a_finished_graph_is_a_conflict() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    assert_eq!(store.graphs().start(&g).expect("start"), GraphStatus::Complete, "empty");
    assert!(matches!(store.graphs().cancel(&g), Err(Error::Conflict(_))));
    assert_eq!(events(&store, &g), [GraphEvent::GraphDone { graph_id: g.clone() }]);
}

#[test]
fn a_graph_past_its_deadline_fails_and_refuses_work() {
    let clock = ManualClock::new(T0);
    let options = Options::default().clock(Arc::new(clock.clone()));
    let store = common::new_store_with(options);
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    store.graphs().set_timeout(&g, Some(60_000)).expect("timeout");
    store.graphs().start(&g).expect("start");
    assert_eq!(store.graphs().get(&g).expect("get").deadline_at_ms, Some(T0 + 60_000));
    store.graphs().start_node(&g, "a").expect("start a");
    clock.advance_ms(60_000);
    let late = store.graphs().complete_node(&g, "a", None);
    assert!(matches!(late, Err(Error::Conflict(_))), "{late:?}");
    let graph = store.graphs().wait(&g, Duration::from_secs(5)).expect("wait");
    assert_eq!(graph.status, GraphStatus::Failed, "wait expires it");
    assert!(graph.error.as_deref().is_some_and(|e| e.contains("deadline")), "{graph:?}");
    assert!(events(&store, &g).pop().is_some_and(|e| e.is_terminal()));
    assert_eq!(store.graphs().expire_overdue().expect("sweep"), 0, "already failed");
    let negative = store.graphs().set_timeout(&g, Some(-1));
    assert!(matches!(negative, Err(Error::InvalidInput(_))));
}

#[test]
fn a_deadline_is_kept_without_any_caller_waiting() {
    let clock = ManualClock::new(T0);
    let options = Options::default().clock(Arc::new(clock.clone()));
    let store = common::new_store_with(options);
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    store.graphs().set_timeout(&g, Some(5_000)).expect("timeout");
    store.graphs().start(&g).expect("start");
    let mut follower = store.subscribe(Stream::graph(&g), 0).expect("subscribe");
    clock.advance_ms(5_000);
    // The store's own alarm fails the graph: a follower sees the terminal event.
    let terminal = loop {
        let event = follower.recv_timeout(Duration::from_secs(10)).expect("recv");
        let event = GraphEvent::from_event(&event.expect("an event")).expect("graph event");
        if event.is_terminal() {
            break event;
        }
    };
    assert!(matches!(terminal, GraphEvent::GraphFailed { .. }), "{terminal:?}");
    assert_eq!(graph_status(&store, &g), GraphStatus::Failed);
}

#[test]
fn a_deadline_sweep_that_could_not_commit_runs_again() {
    let clock = ManualClock::new(T0);
    let shared = SharedStore::new();
    let store = &shared.open_with(
        Options::default().clock(Arc::new(clock.clone())).busy_timeout(Duration::from_millis(50)),
    );
    let g = store.graphs().create(json!({})).expect("create");
    node(store, &g, "a");
    store.graphs().set_timeout(&g, Some(1_000)).expect("timeout");
    store.graphs().start(&g).expect("start");
    let other = HeldWrites::start(&shared);
    clock.advance_ms(1_000);
    let blocked = store.graphs().create(json!({}));
    assert!(matches!(blocked, Err(Error::Busy)), "{blocked:?}");
    assert_eq!(graph_status(store, &g), GraphStatus::Running, "reads still work");
    other.release();
    clock.advance_ms(1_000);
    store.graphs().create(json!({})).expect("a write carries the retried sweep");
    assert_eq!(graph_status(store, &g), GraphStatus::Failed);
}

/// Another process's write transaction on a shared store, held open until it is released:
/// SQLite's write lock, or the default tenant's turn to write on PostgreSQL.
struct HeldWrites {
    release: mpsc::Sender<()>,
    thread: JoinHandle<spindle::Result<()>>,
}

impl HeldWrites {
    /// Opens another handle on `shared` and starts its transaction. Its clock stays at `T0`,
    /// so it never sweeps a deadline itself.
    fn start(shared: &SharedStore) -> Self {
        let other = shared.open_with(Options::default().clock(Arc::new(ManualClock::new(T0))));
        let (release, hold) = mpsc::channel::<()>();
        let (entered_tx, entered) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            other.transaction(move |_tx| {
                let _ = entered_tx.send(());
                let _ = hold.recv();
                Ok(TxOutcome::Rollback(()))
            })?;
            other.close()
        });
        entered.recv().expect("the held transaction is running");
        Self { release, thread }
    }

    /// Ends the transaction (writing nothing) and closes the other handle.
    fn release(self) {
        self.release.send(()).expect("release the transaction");
        self.thread.join().expect("the holding thread").expect("the held transaction");
    }
}

#[test]
fn cancelling_a_deep_chain_of_children_cancels_them_all() {
    let store = store();
    let root = store.graphs().create(json!({})).expect("create");
    let mut parent = root.clone();
    let mut chain = Vec::new();
    for _ in 0..300 {
        parent = store.graphs().create_child(&parent, json!({})).expect("child");
        chain.push(parent.clone());
    }
    store.graphs().cancel(&root).expect("cancel");
    for child in &chain {
        assert_eq!(graph_status(&store, child), GraphStatus::Cancelled);
    }
}

#[test]
fn a_deadline_that_passed_while_closed_is_kept_at_open() {
    let clock = ManualClock::new(T0);
    let options = || Options::default().clock(Arc::new(clock.clone()));
    let shared = SharedStore::new();
    let store = shared.open_with(options());
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    store.graphs().set_timeout(&g, Some(1_000)).expect("timeout");
    store.graphs().start(&g).expect("start");
    store.close().expect("close");
    clock.advance_ms(1_000);
    let store = shared.open_with(options());
    assert_eq!(graph_status(&store, &g), GraphStatus::Failed);
}

#[test]
fn the_deadline_sweep_fails_every_overdue_graph_and_only_those() {
    let clock = ManualClock::new(T0);
    let options = Options::default().clock(Arc::new(clock.clone()));
    let store = common::new_store_with(options);
    let mut graphs = Vec::new();
    for timeout_ms in [1_000, 2_000, 10_000] {
        let g = store.graphs().create(json!({})).expect("create");
        node(&store, &g, "a");
        store.graphs().set_timeout(&g, Some(timeout_ms)).expect("timeout");
        store.graphs().start(&g).expect("start");
        graphs.push(g);
    }
    clock.advance_ms(2_000);
    // The store's alarm runs the same sweep before the next batch: nothing is left to do.
    assert_eq!(store.graphs().expire_overdue().expect("sweep"), 0);
    let statuses: Vec<GraphStatus> = graphs.iter().map(|g| graph_status(&store, g)).collect();
    assert_eq!(statuses, [GraphStatus::Failed, GraphStatus::Failed, GraphStatus::Running]);
}

#[test]
fn wait_returns_when_another_thread_finishes_the_graph_or_at_its_timeout() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    store.graphs().start(&g).expect("start");
    let still = store.graphs().wait(&g, Duration::from_millis(30)).expect("wait");
    assert_eq!(still.status, GraphStatus::Running, "timed out");
    let worker = {
        let (store, g) = (store.clone(), g.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            run_ok(&store, &g, "a");
        })
    };
    let done = store.graphs().wait(&g, Duration::from_secs(10)).expect("wait");
    worker.join().expect("worker");
    assert_eq!(done.status, GraphStatus::Complete);
}

#[test]
fn two_subscribers_both_see_every_event() {
    let store = store();
    let g = diamond(&store);
    let first = store.subscribe(Stream::graph(&g), 0).expect("subscribe");
    let second = store.subscribe(Stream::graph(&g), 0).expect("subscribe");
    store.graphs().start(&g).expect("start");
    for id in ["a", "b", "c", "d"] {
        run_ok(&store, &g, id);
    }
    let written = events(&store, &g);
    for mut subscription in [first, second] {
        let mut seen = Vec::new();
        while seen.len() < written.len() {
            let event = subscription.recv_timeout(Duration::from_secs(5)).expect("event");
            let event = event.expect("an event before the timeout");
            seen.push(GraphEvent::from_event(&event).expect("graph event"));
        }
        assert_eq!(seen, written);
    }
}

#[test]
fn recovery_after_reopen_resets_running_nodes_and_announces_each_ready_node_once() {
    let shared = SharedStore::new();
    let first = shared.open();
    let g = {
        let store = &first;
        let g = store.graphs().create(json!({})).expect("create");
        for id in ["r1", "ready1", "r2", "ready2", "done"] {
            node(store, &g, id);
        }
        store.graphs().start(&g).expect("start");
        run_ok(store, &g, "done");
        store.graphs().start_node(&g, "r1").expect("r1");
        store.graphs().start_node(&g, "r2").expect("r2");
        g
    };
    let before = events(&first, &g).len();
    first.close().expect("close");
    let store = shared.open();
    let nodes = statuses(&store, &g);
    let expected: Vec<(String, NodeStatus)> = [
        ("r1", NodeStatus::Ready),
        ("ready1", NodeStatus::Ready),
        ("r2", NodeStatus::Ready),
        ("ready2", NodeStatus::Ready),
        ("done", NodeStatus::Complete),
    ]
    .map(|(id, status)| (id.to_owned(), status))
    .into();
    assert_eq!(nodes, expected);
    let announced: Vec<String> = events(&store, &g)[before..]
        .iter()
        .map(|event| match event {
            GraphEvent::NodeReady { node_id, .. } => node_id.clone(),
            other => panic!("recovery wrote {other:?}"),
        })
        .collect();
    assert_eq!(announced, ["r1", "ready1", "r2", "ready2"]);
    let again = store.graphs().recover().expect("recover");
    assert_eq!((again.graphs, again.reset, again.announced), (1, 0, 4));
    for id in ["r1", "ready1", "r2", "ready2"] {
        run_ok(&store, &g, id);
    }
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
}

#[test]
fn recovery_goes_page_by_page_and_announces_each_ready_node_once() {
    let limits = Limits::default().page_size_max(2);
    let shared = SharedStore::new();
    let first = shared.open_with(Options::default().limits(limits.clone()));
    let mut graphs = Vec::new();
    for _ in 0..5 {
        let g = first.graphs().create(json!({})).expect("create");
        node(&first, &g, "a");
        first.graphs().start(&g).expect("start");
        first.graphs().start_node(&g, "a").expect("start a");
        graphs.push(g);
    }
    first.close().expect("close");
    let store = shared.open_with(Options::default().limits(limits));
    for g in &graphs {
        assert_eq!(status_of(&store, g, "a"), NodeStatus::Ready);
        let stream = Stream::graph(g);
        let page = store.events().read(&stream, 0, 2).expect("read");
        let later = store.events().read(&stream, 2, 2).expect("read");
        let types: Vec<&str> = page.iter().chain(&later).map(|e| e.event_type.as_str()).collect();
        assert_eq!(types, ["node_ready", "node_started", "node_ready"], "announced once more");
    }
    let again = store.graphs().recover().expect("recover");
    assert_eq!((again.graphs, again.reset, again.announced), (5, 0, 5));
}

#[test]
fn an_inspector_that_opens_without_recovery_leaves_running_nodes_alone() {
    let shared = SharedStore::new();
    let store = shared.open();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "a").expect("start a");
    let options = Options::default().recover_on_open(false);
    let inspector = shared.open_with(options);
    assert_eq!(status_of(&inspector, &g, "a"), NodeStatus::Running);
    inspector.close().expect("close");
    assert_eq!(status_of(&store, &g, "a"), NodeStatus::Running);
}

#[test]
fn an_empty_graph_completes_when_started_and_start_is_idempotent() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    assert_eq!(store.graphs().start(&g).expect("start"), GraphStatus::Complete);
    assert_eq!(store.graphs().start(&g).expect("again"), GraphStatus::Complete);
    assert_eq!(events(&store, &g).len(), 1);
    let h = store.graphs().create(json!({})).expect("create");
    node(&store, &h, "a");
    store.graphs().start(&h).expect("start");
    assert_eq!(store.graphs().start(&h).expect("again"), GraphStatus::Running);
    assert_eq!(events(&store, &h).len(), 1, "one node_ready, not two");
}

#[test]
fn node_ids_are_unique_per_graph_not_globally() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    let h = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "same");
    node(&store, &h, "same");
    let twice = store.graphs().add_node(&g, task(), NodeOptions::new().id("same"));
    assert!(matches!(twice, Err(Error::Conflict(_))), "{twice:?}");
    let generated = store.graphs().add_node(&g, task(), NodeOptions::new()).expect("generated");
    assert_eq!(generated.len(), 36, "a UUID");
    let missing = store.graphs().add_edge(&g, "same", "nope", None);
    assert!(matches!(missing, Err(Error::NotFound { .. })), "{missing:?}");
    let other_graph = store.graphs().add_edge(&g, "same", &generated, None);
    assert!(other_graph.is_ok());
    assert_eq!(store.graphs().edges(&g).expect("edges").len(), 1);
}

#[test]
fn starting_or_finishing_a_node_in_the_wrong_status_is_a_conflict_that_writes_nothing() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    node(&store, &g, "b");
    edge(&store, &g, "a", "b", None);
    let early = store.graphs().start_node(&g, "a");
    assert!(matches!(early, Err(Error::Conflict(_))), "graph not running: {early:?}");
    store.graphs().start(&g).expect("start");
    let pending = store.graphs().complete_node(&g, "b", None);
    assert!(matches!(pending, Err(Error::Conflict(_))), "{pending:?}");
    let not_ready = store.graphs().start_node(&g, "b");
    assert!(matches!(not_ready, Err(Error::Conflict(_))), "{not_ready:?}");
    run_ok(&store, &g, "a");
    let twice = store.graphs().complete_node(&g, "a", None);
    assert!(matches!(twice, Err(Error::Conflict(_))), "{twice:?}");
    assert_eq!(store.graphs().inputs(&g, "b").expect("inputs").len(), 1, "delivered once");
    let unknown = store.graphs().start_node(&g, "zzz");
    assert!(matches!(unknown, Err(Error::NotFound { .. })), "{unknown:?}");
}

#[test]
fn bad_input_is_refused_and_writes_nothing() {
    let limits = Limits::default().payload_bytes_max(64).graph_nodes_max(2);
    let store = common::new_store_with(Options::default().limits(limits));
    let big = json!({ "text": "x".repeat(100) });
    assert!(matches!(store.graphs().create(big.clone()), Err(Error::TooLarge { .. })));
    assert!(store.graphs().list(Page::first(10)).expect("list").is_empty());
    let g = store.graphs().create(json!({})).expect("create");
    let spec = NodeSpec::task(big.clone());
    assert!(matches!(
        store.graphs().add_node(&g, spec, NodeOptions::new()),
        Err(Error::TooLarge { .. })
    ));
    let bad_id = store.graphs().add_node(&g, task(), NodeOptions::new().id(""));
    assert!(matches!(bad_id, Err(Error::InvalidInput(_))));
    node(&store, &g, "a");
    node(&store, &g, "b");
    let full = store.graphs().add_node(&g, task(), NodeOptions::new().id("c"));
    assert!(matches!(full, Err(Error::TooLarge { .. })), "{full:?}");
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "a").expect("start a");
    let output = Some(NodeOutput::ok(big));
    let large = store.graphs().complete_node(&g, "a", output);
    assert!(matches!(large, Err(Error::TooLarge { .. })), "{large:?}");
    assert_eq!(status_of(&store, &g, "a"), NodeStatus::Running);
    assert_eq!(store.graphs().get(&g).expect("get").node_count, 2);
    let page = store.graphs().list(Page::first(5000));
    assert!(matches!(page, Err(Error::TooLarge { .. })));
}

#[test]
fn another_tenants_graph_is_missing() {
    let store = store();
    let acme = store.tenant("acme").expect("acme");
    let g = acme.graphs().create(json!({})).expect("create");
    node(&acme, &g, "a");
    assert!(matches!(store.graphs().get(&g), Err(Error::NotFound { .. })));
    assert!(matches!(store.graphs().nodes(&g), Err(Error::NotFound { .. })));
    assert!(matches!(store.graphs().start(&g), Err(Error::NotFound { .. })));
    assert!(matches!(store.graphs().cancel(&g), Err(Error::NotFound { .. })));
    let spec = NodeSpec::task(json!({}));
    assert!(matches!(
        store.graphs().add_node(&g, spec, NodeOptions::new()),
        Err(Error::NotFound { .. })
    ));
    assert!(store.graphs().list(Page::first(10)).expect("list").is_empty());
    assert_eq!(acme.graphs().list(Page::first(10)).expect("list").len(), 1);
    assert_eq!(store.graphs().recover().expect("recover").graphs, 0);
}

#[test]
fn list_pages_through_graphs_in_creation_order() {
    let store = store();
    let ids: Vec<String> =
        (0..5).map(|i| store.graphs().create(json!({ "i": i })).expect("create")).collect();
    let first = store.graphs().list(Page::first(3)).expect("page");
    let after = first.last().map(|g| g.id.clone()).expect("a last id");
    let second = store.graphs().list(Page::after(after, 3)).expect("page");
    let listed: Vec<String> = first.iter().chain(&second).map(|g| g.id.clone()).collect();
    assert_eq!(listed, ids);
    assert_eq!(second[1].metadata, json!({ "i": 4 }));
}

#[test]
fn a_rolled_back_transaction_leaves_the_graph_as_it_was() {
    let store = store();
    let g = store.graphs().create(json!({})).expect("create");
    node(&store, &g, "a");
    store.graphs().start(&g).expect("start");
    store.graphs().start_node(&g, "a").expect("start a");
    let g2 = g.clone();
    store
        .transaction(move |tx| {
            tx.exec(CompleteNode { graph: g2.clone(), node: "a".into(), output: None })?;
            Ok(TxOutcome::Rollback(()))
        })
        .expect("transaction");
    assert_eq!(status_of(&store, &g, "a"), NodeStatus::Running);
    assert_eq!(graph_status(&store, &g), GraphStatus::Running);
    let done: Vec<GraphEvent> = events(&store, &g);
    assert!(!done.iter().any(GraphEvent::is_terminal), "no event of the rolled-back work");
    assert_eq!(value_of(&store, &g), json!(1));
}

/// The graph's count of running nodes, as JSON.
fn value_of(store: &Store, graph: &str) -> Value {
    json!(store.graphs().get(graph).expect("get").counts.running)
}

#[test]
fn edges_and_children_stop_at_their_limits_and_write_nothing_past_them() {
    let limits = Limits::default().graph_edges_max(2).graph_nodes_max(3);
    let store = common::new_store_with(Options::default().limits(limits));
    let g = store.graphs().create(json!({})).expect("create");
    for id in ["a", "b", "c"] {
        node(&store, &g, id);
    }
    edge(&store, &g, "a", "b", None);
    edge(&store, &g, "b", "c", None);
    let third = store.graphs().add_edge(&g, "a", "c", None);
    assert!(matches!(third, Err(Error::TooLarge { limit: 2, actual: 3, .. })), "{third:?}");
    assert_eq!(store.graphs().edges(&g).expect("edges").len(), 2);
    for _ in 0..3 {
        store.graphs().create_child(&g, json!({})).expect("child");
    }
    let fourth = store.graphs().create_child(&g, json!({}));
    assert!(matches!(fourth, Err(Error::TooLarge { .. })), "{fourth:?}");
    assert_eq!(store.graphs().children(&g).expect("children").len(), 3);
}

#[test]
fn find_filters_by_status_metadata_and_parent_and_pages_either_way() {
    let store = store();
    let graphs = store.graphs();
    let mut ids = Vec::new();
    for (n, pipeline) in ["build", "test", "build", "build"].iter().enumerate() {
        let id = graphs.create(json!({"kind": "run", "pipeline": pipeline, "n": n})).expect("g");
        ids.push(id);
    }
    node(&store, &ids[0], "a");
    graphs.start(&ids[0]).expect("start");
    let child =
        graphs.create_child(&ids[0], json!({"kind": "run", "pipeline": "build"})).expect("child");
    let builds = spindle::GraphFilter::default()
        .metadata("kind", json!("run"))
        .metadata("pipeline", json!("build"))
        .roots_only(true)
        .newest_first(true);
    let found: Vec<String> =
        graphs.find(&builds, Page::first(10)).expect("find").into_iter().map(|g| g.id).collect();
    assert_eq!(found, vec![ids[3].clone(), ids[2].clone(), ids[0].clone()]);
    let first = graphs.find(&builds, Page::first(2)).expect("page 1");
    let after = first.last().map(|g| g.id.clone()).expect("a last id");
    let rest = graphs.find(&builds, Page::after(after, 2)).expect("page 2");
    assert_eq!(rest.iter().map(|g| g.id.clone()).collect::<Vec<_>>(), vec![ids[0].clone()]);

    let with_children = builds.clone().roots_only(false);
    assert_eq!(graphs.find(&with_children, Page::first(10)).expect("all").len(), 4);
    assert!(
        graphs.find(&with_children, Page::first(10)).expect("all").iter().any(|g| g.id == child)
    );
    let oldest_first = builds.clone().newest_first(false);
    assert_eq!(graphs.find(&oldest_first, Page::first(1)).expect("oldest")[0].id, ids[0]);
    let numbered = spindle::GraphFilter::default().metadata("n", json!(1));
    assert_eq!(graphs.find(&numbered, Page::first(10)).expect("n")[0].id, ids[1]);

    let one_as_float = spindle::GraphFilter::default().metadata("n", json!(1.0));
    assert!(graphs.find(&one_as_float, Page::first(10)).expect("n").is_empty(), "1.0 is not 1");
    let escaped = graphs
        .create(serde_json::from_str(r#"{"name": "caf\u00e9 \"x\""}"#).expect("json"))
        .expect("g");
    let plain = spindle::GraphFilter::default().metadata("name", json!("café \"x\""));
    assert_eq!(graphs.find(&plain, Page::first(10)).expect("name")[0].id, escaped);
    let other_tenant = store.tenant("acme").expect("acme");
    other_tenant.graphs().create(json!({"kind": "run", "pipeline": "build"})).expect("theirs");
    assert_eq!(graphs.find(&builds, Page::first(10)).expect("mine").len(), 3, "tenants apart");

    let running = builds.clone().status(GraphStatus::Running);
    assert_eq!(graphs.find(&running, Page::first(10)).expect("running").len(), 1);
    let counts = graphs.count_by_status(&builds).expect("counts");
    assert_eq!(counts, vec![(GraphStatus::Pending, 2), (GraphStatus::Running, 1)]);
    assert_eq!(graphs.count_by_status(&running).expect("counts"), counts, "status aside");
}

#[test]
fn find_refuses_a_bad_metadata_key_or_a_value_that_is_not_a_scalar() {
    let store = store();
    store.graphs().create(json!({"kind": "run"})).expect("graph");
    let seventeen =
        (0..17).fold(spindle::GraphFilter::default(), |f, n| f.metadata(format!("k{n}"), json!(n)));
    let found = store.graphs().find(&seventeen, Page::first(10));
    assert!(matches!(found, Err(Error::InvalidInput(_))), "{found:?}");
    for (key, value) in [("", json!(1)), ("a.b", json!(1)), ("a\"", json!(1)), ("k", json!({}))] {
        let filter = spindle::GraphFilter::default().metadata(key, value);
        let found = store.graphs().find(&filter, Page::first(10));
        assert!(matches!(found, Err(Error::InvalidInput(_))), "{key:?}: {found:?}");
        let counted = store.graphs().count_by_status(&filter);
        assert!(matches!(counted, Err(Error::InvalidInput(_))), "{key:?}: {counted:?}");
    }
    let too_many = store.graphs().find(&spindle::GraphFilter::default(), Page::first(1_000_000));
    assert!(matches!(too_many, Err(Error::TooLarge { .. })), "{too_many:?}");
}
