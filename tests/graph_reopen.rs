//! Reopening a finished graph (`Graphs::reopen`, the engine side of `spindle retry`): the
//! named nodes run again, what was skipped because of them runs when their new tokens arrive,
//! what succeeded keeps its end, nodes a failed graph left running are taken up again, the
//! graph finishes by the usual rules with exact counters, and every refusal writes nothing.

mod common;

use serde_json::json;
use spindle::{
    Error, GraphEvent, GraphStatus, Limits, ManualClock, NodeOptions, NodeSpec, NodeStatus,
    Options, Store, Stream, TokenColor,
};

fn store() -> Store {
    common::new_store()
}

/// A started graph of task nodes `names`, with `edges` as `(from, to, condition)`.
fn graph(store: &Store, names: &[&str], edges: &[(&str, &str, Option<TokenColor>)]) -> String {
    let g = store.graphs().create(json!({})).expect("create");
    for name in names {
        let spec = NodeSpec::task(json!({}));
        store.graphs().add_node(&g, spec, NodeOptions::new().id(*name)).expect("add node");
    }
    for (from, to, condition) in edges {
        store.graphs().add_edge(&g, from, to, condition.clone()).expect("add edge");
    }
    store.graphs().start(&g).expect("start");
    g
}

fn run_ok(store: &Store, g: &str, id: &str) {
    store.graphs().start_node(g, id).expect("start node");
    store.graphs().complete_node(g, id, None).expect("complete node");
}

fn run_fail(store: &Store, g: &str, id: &str) {
    store.graphs().start_node(g, id).expect("start node");
    store.graphs().fail_node(g, id, "boom").expect("fail node");
}

fn status_of(store: &Store, g: &str, id: &str) -> NodeStatus {
    store.graphs().node(g, id).expect("node").status
}

fn fires_of(store: &Store, g: &str, id: &str) -> u32 {
    store.graphs().node(g, id).expect("node").fires
}

fn graph_status(store: &Store, g: &str) -> GraphStatus {
    store.graphs().get(g).expect("get").status
}

fn events(store: &Store, g: &str) -> Vec<GraphEvent> {
    let events = common::read_stream(store, &Stream::graph(g));
    events.iter().map(|event| GraphEvent::from_event(event).expect("graph event")).collect()
}

fn assert_sound(store: &Store, g: &str) {
    let problems = store.graphs().audit(g).expect("audit");
    assert!(problems.is_empty(), "audit: {problems:?}");
}

#[test]
fn a_failed_graph_reopened_at_its_failed_node_runs_it_and_what_waited_on_it() {
    let store = store();
    let g = graph(
        &store,
        &["fetch", "test", "package"],
        &[("fetch", "test", None), ("test", "package", Some(TokenColor::Ok))],
    );
    run_ok(&store, &g, "fetch");
    run_fail(&store, &g, "test");
    assert_eq!(graph_status(&store, &g), GraphStatus::Failed);
    let before = events(&store, &g).len();

    store.graphs().reopen(&g, &["test"]).expect("reopen");

    let summary = store.graphs().get(&g).expect("get");
    assert_eq!(summary.status, GraphStatus::Running);
    assert_eq!((summary.error, summary.failed_node_id, summary.finished_at_ms), (None, None, None));
    assert_eq!(status_of(&store, &g, "test"), NodeStatus::Ready);
    assert_eq!(status_of(&store, &g, "fetch"), NodeStatus::Complete, "success keeps its end");
    let new = events(&store, &g).split_off(before);
    assert_eq!(
        new,
        [
            GraphEvent::GraphReopened { graph_id: g.clone(), node_ids: vec!["test".into()] },
            GraphEvent::NodeReady { node_id: "test".into(), kind: "task".into() },
        ]
    );
    assert_sound(&store, &g);

    run_ok(&store, &g, "test");
    assert_eq!(status_of(&store, &g, "package"), NodeStatus::Ready);
    run_ok(&store, &g, "package");
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
    assert_eq!(fires_of(&store, &g, "fetch"), 1, "fetch never ran again");
    assert_eq!(fires_of(&store, &g, "test"), 2);
    assert_sound(&store, &g);
}

/// test fails, its error edge runs alert, package (after test's success) is skipped, and the
/// graph completes: the failure was handled.
fn handled_failure(store: &Store) -> String {
    let g = graph(
        store,
        &["test", "alert", "package"],
        &[("test", "alert", Some(TokenColor::Error)), ("test", "package", Some(TokenColor::Ok))],
    );
    run_fail(store, &g, "test");
    run_ok(store, &g, "alert");
    assert_eq!(graph_status(store, &g), GraphStatus::Complete);
    assert_eq!(status_of(store, &g, "package"), NodeStatus::Skipped);
    g
}

#[test]
fn a_skipped_node_runs_once_its_reopened_predecessor_succeeds_and_the_handler_keeps_its_end() {
    let store = store();
    let g = handled_failure(&store);
    store.graphs().reopen(&g, &["test"]).expect("reopen");
    run_ok(&store, &g, "test");
    assert_eq!(status_of(&store, &g, "package"), NodeStatus::Ready, "skipped, now enabled");
    assert_eq!(status_of(&store, &g, "alert"), NodeStatus::Complete, "not run again");
    run_ok(&store, &g, "package");
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
    assert_eq!(fires_of(&store, &g, "alert"), 1);
    assert_sound(&store, &g);
}

#[test]
fn a_reopened_node_that_fails_again_runs_its_handler_again_and_its_successor_stays_skipped() {
    let store = store();
    let g = handled_failure(&store);
    store.graphs().reopen(&g, &["test"]).expect("reopen");
    run_fail(&store, &g, "test");
    assert_eq!(status_of(&store, &g, "alert"), NodeStatus::Ready, "a new error, a new alert");
    run_ok(&store, &g, "alert");
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
    assert_eq!(status_of(&store, &g, "package"), NodeStatus::Skipped);
    assert_sound(&store, &g);
}

#[test]
fn a_failed_handler_is_not_named_with_the_node_it_handles_but_runs_again_through_it() {
    let store = store();
    let g = graph(&store, &["a", "handler"], &[("a", "handler", Some(TokenColor::Error))]);
    run_fail(&store, &g, "a");
    run_fail(&store, &g, "handler");
    assert_eq!(graph_status(&store, &g), GraphStatus::Failed);
    let error = store.graphs().reopen(&g, &["a", "handler"]).expect_err("handler follows a");
    assert!(matches!(&error, Error::Conflict(m) if m.contains("name only a")), "{error:?}");
    assert_eq!(graph_status(&store, &g), GraphStatus::Failed, "nothing written");

    store.graphs().reopen(&g, &["a"]).expect("reopen");
    run_fail(&store, &g, "a");
    assert_eq!(status_of(&store, &g, "handler"), NodeStatus::Ready, "a new error to handle");
    run_ok(&store, &g, "handler");
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
    assert_eq!(fires_of(&store, &g, "handler"), 2);
    assert_sound(&store, &g);
}

#[test]
fn nodes_a_failed_graph_left_running_or_ready_are_announced_again() {
    let store = store();
    let g = graph(&store, &["a", "b", "c", "d"], &[("b", "d", None)]);
    store.graphs().start_node(&g, "b").expect("start b");
    run_fail(&store, &g, "a");
    assert_eq!(graph_status(&store, &g), GraphStatus::Failed);
    assert_eq!(status_of(&store, &g, "b"), NodeStatus::Running, "left running by the end");
    assert_eq!(status_of(&store, &g, "c"), NodeStatus::Ready, "left ready by the end");
    let before = events(&store, &g).len();

    store.graphs().reopen(&g, &["a"]).expect("reopen");

    assert_eq!(status_of(&store, &g, "b"), NodeStatus::Ready);
    let mut announced: Vec<String> = events(&store, &g)
        .split_off(before)
        .into_iter()
        .filter_map(|event| match event {
            GraphEvent::NodeReady { node_id, .. } => Some(node_id),
            _ => None,
        })
        .collect();
    announced.sort();
    assert_eq!(announced, ["a", "b", "c"], "each once");
    for node in ["a", "b", "c", "d"] {
        run_ok(&store, &g, node);
    }
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
    assert_sound(&store, &g);
}

#[test]
fn a_reopened_graph_gets_a_new_deadline() {
    let clock = ManualClock::new(1_700_000_000_000);
    let options = Options::default().clock(std::sync::Arc::new(clock.clone()));
    let store = common::new_store_with(options);
    let g = store.graphs().create(json!({})).expect("create");
    store.graphs().add_node(&g, NodeSpec::task(json!({})), NodeOptions::new().id("a")).expect("a");
    store.graphs().set_timeout(&g, Some(60_000)).expect("timeout");
    store.graphs().start(&g).expect("start");
    run_fail(&store, &g, "a");
    clock.advance_ms(3_600_000);
    store.graphs().reopen(&g, &["a"]).expect("reopen");
    let summary = store.graphs().get(&g).expect("get");
    assert_eq!(summary.deadline_at_ms, Some(1_700_000_000_000 + 3_600_000 + 60_000));
    assert_eq!(store.graphs().expire_overdue().expect("sweep"), 0, "not overdue at once");
    assert_eq!(graph_status(&store, &g), GraphStatus::Running);
    clock.advance_ms(60_000);
    store.graphs().expire_overdue().expect("sweep");
    let summary = store.graphs().get(&g).expect("get");
    assert_eq!(summary.status, GraphStatus::Failed);
    assert!(summary.error.as_deref().is_some_and(|e| e.contains("deadline")), "{summary:?}");
}

#[test]
fn reopening_again_and_again_ends_at_the_refire_limit_with_the_graph_failed() {
    let limits = Limits::default().loop_refires_max(2);
    let store = common::new_store_with(Options::default().limits(limits));
    let g = graph(&store, &["a"], &[]);
    run_fail(&store, &g, "a");
    for _ in 0..2 {
        store.graphs().reopen(&g, &["a"]).expect("reopen");
        run_fail(&store, &g, "a");
    }
    store.graphs().reopen(&g, &["a"]).expect("reopen");
    let summary = store.graphs().get(&g).expect("get");
    assert_eq!(summary.status, GraphStatus::Failed, "{summary:?}");
    assert!(summary.error.as_deref().is_some_and(|e| e.contains("more than 2")), "{summary:?}");
    assert_sound(&store, &g);
}

/// Which error a refused call must give.
type Expected = fn(&Error) -> bool;

#[test]
fn refused_reopens_write_nothing() {
    let store = store();
    let running = graph(&store, &["a", "b"], &[]);
    let failed = graph(&store, &["x", "y", "z"], &[("x", "z", Some(TokenColor::Ok))]);
    run_fail(&store, &failed, "x");
    let cancelled = graph(&store, &["c"], &[]);
    store.graphs().cancel(&cancelled).expect("cancel");
    let skipped = handled_failure(&store);
    let parent = store.graphs().create(json!({})).expect("parent");
    let child = store.graphs().create_child(&parent, json!({})).expect("child");
    let spec = NodeSpec::task(json!({}));
    store.graphs().add_node(&child, spec, NodeOptions::new().id("k")).expect("k");
    let spec = NodeSpec::SubGraph { graph_id: child.clone() };
    store.graphs().add_node(&parent, spec, NodeOptions::new().id("sub")).expect("sub");
    store.graphs().start(&parent).expect("start parent");
    store.graphs().start_node(&parent, "sub").expect("start sub");
    run_fail(&store, &child, "k");
    assert_eq!(graph_status(&store, &parent), GraphStatus::Failed);

    let complete = graph(&store, &["done"], &[]);
    run_ok(&store, &complete, "done");
    let cases: Vec<(&str, &[&str], Expected)> = vec![
        (&complete, &["done"], |e| matches!(e, Error::Conflict(_))),
        (&running, &["a"], |e| matches!(e, Error::Conflict(_))),
        (&cancelled, &["c"], |e| matches!(e, Error::Conflict(_))),
        (&failed, &["y"], |e| matches!(e, Error::Conflict(_))),
        (&failed, &["z"], |e| matches!(e, Error::Conflict(_))),
        (&skipped, &["package"], |e| matches!(e, Error::Conflict(_))),
        (&failed, &["x", "nope"], |e| matches!(e, Error::NotFound { .. })),
        ("no-such-graph", &["x"], |e| matches!(e, Error::NotFound { .. })),
        (&failed, &[], |e| matches!(e, Error::InvalidInput(_))),
        (&failed, &["x", "x"], |e| matches!(e, Error::InvalidInput(_))),
        (&child, &["k"], |e| matches!(e, Error::Conflict(_))),
        (&parent, &["sub"], |e| matches!(e, Error::Conflict(_))),
    ];
    for (g, nodes, expected) in cases {
        let before = store.events().read_all(0, 1_000).expect("read").len();
        let summary = store.graphs().get(g).ok();
        let error = store.graphs().reopen(g, nodes).expect_err("refused");
        assert!(expected(&error), "{g} {nodes:?}: {error:?}");
        assert_eq!(store.events().read_all(0, 1_000).expect("read").len(), before, "{g} {nodes:?}");
        assert_eq!(store.graphs().get(g).ok(), summary, "{g} {nodes:?}: the graph changed");
    }
}

#[test]
fn a_reopened_graph_is_recovered_after_a_restart_like_any_running_graph() {
    let shared = common::SharedStore::new();
    let store = shared.open();
    let g = graph(&store, &["a", "b"], &[("a", "b", Some(TokenColor::Ok))]);
    run_fail(&store, &g, "a");
    store.graphs().reopen(&g, &["a"]).expect("reopen");
    store.graphs().start_node(&g, "a").expect("start a");
    store.close().expect("close");

    let store = shared.open(); // the restart
    assert_eq!(status_of(&store, &g, "a"), NodeStatus::Ready, "recovered");
    run_ok(&store, &g, "a");
    run_ok(&store, &g, "b");
    assert_eq!(graph_status(&store, &g), GraphStatus::Complete);
    assert_sound(&store, &g);
}
