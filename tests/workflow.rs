//! Workflows (DESIGN.md §5.2) through the public API: the seed's tests (jamjet-state's
//! `sqlite.rs`, `tests/durability.rs` and the workflow parts of `tests/tenant_isolation.rs`)
//! with the seed's bugs fixed (immutable definitions, a status machine, atomic state changes,
//! `NotFound` for missing executions), plus snapshots, load and replay, limits and concurrency.

mod common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use spindle::{
    Error, Event, ExecutionFilter, ManualClock, Options, Page, Store, Stream, WorkflowStatus,
};

use common::SharedStore;

const T0: i64 = 1_700_000_000_000;

fn options_at(clock: &ManualClock) -> Options {
    Options::default().clock(Arc::new(clock.clone()))
}

fn store_at(clock: &ManualClock) -> Store {
    common::new_store_with(options_at(clock))
}

/// A store with the `build` workflow at version `v1`.
fn with_build(clock: &ManualClock) -> Store {
    let store = store_at(clock);
    store.workflows().put_definition("build", "v1", json!({ "nodes": ["a", "b"] })).expect("put");
    store
}

fn start(store: &Store) -> String {
    let execution =
        store.workflows().create_execution("build", "v1", json!({ "n": 1 })).expect("create");
    execution.id
}

fn types(events: &[Event]) -> Vec<&str> {
    events.iter().map(|event| event.event_type.as_str()).collect()
}

#[test]
fn an_execution_is_created_from_an_existing_definition_and_read_back() {
    let store = with_build(&ManualClock::new(T0));
    let created =
        store.workflows().create_execution("build", "v1", json!({ "n": 1 })).expect("create");
    assert_eq!(created.status, WorkflowStatus::Pending);
    assert_eq!((created.state.clone(), created.state_version), (json!({}), 0));
    assert_eq!((created.created_at_ms, created.completed_at_ms), (T0, None));
    assert_eq!(store.workflows().execution(&created.id).expect("get"), Some(created.clone()));
    let missing = store.workflows().create_execution("build", "v9", json!({}));
    assert!(matches!(missing, Err(Error::NotFound { .. })), "{missing:?}");
    let all = store.workflows().list_executions(ExecutionFilter::default(), Page::default());
    assert_eq!(all.expect("list").len(), 1, "the refused create wrote nothing");
    assert_eq!(store.workflows().execution("nope").expect("get"), None);
}

#[test]
fn definitions_are_immutable_and_versions_keep_their_order() {
    let clock = ManualClock::new(T0);
    let store = with_build(&clock);
    let again = store.workflows().put_definition("build", "v1", json!({ "nodes": ["a", "b"] }));
    assert_eq!(again.expect("same content").ir, json!({ "nodes": ["a", "b"] }));
    let changed = store.workflows().put_definition("build", "v1", json!({ "nodes": [] }));
    assert!(matches!(changed, Err(Error::Conflict(_))), "{changed:?}");
    clock.advance_ms(1);
    for version in ["v10", "v9"] {
        store.workflows().put_definition("build", version, json!({ "v": version })).expect("put");
    }
    assert_eq!(store.workflows().versions("build").expect("versions"), ["v1", "v10", "v9"]);
    let latest = store.workflows().latest_definition("build").expect("latest").expect("some");
    assert_eq!(latest.version, "v9", "latest is the last put, not the largest");
    assert_eq!(store.workflows().definition("build", "v2").expect("get"), None);
    let v1 = store.workflows().definition("build", "v1").expect("get").expect("v1");
    assert_eq!((v1.ir, v1.created_at_ms), (json!({ "nodes": ["a", "b"] }), T0), "unchanged");
    assert_eq!(store.workflows().latest_definition("other").expect("latest"), None);
}

#[test]
fn status_moves_follow_the_machine_and_append_lifecycle_events() {
    use WorkflowStatus::*;
    let all = [Pending, Running, Paused, Completed, Failed, Cancelled, LimitExceeded];
    let allowed = |from, to| {
        matches!(
            (from, to),
            (Pending, Running)
                | (Running, Paused | Completed | Failed | Cancelled | LimitExceeded)
                | (Paused, Running | Cancelled)
        )
    };
    let clock = ManualClock::new(T0);
    let store = with_build(&clock);
    for from in all {
        for to in all {
            let id = start(&store);
            let path: &[WorkflowStatus] = match from {
                Pending => &[],
                Running => &[Running],
                Paused => &[Running, Paused],
                _ => &[Running, from],
            };
            for step in path {
                store.workflows().set_status(&id, *step).expect("reach the from status");
            }
            let head = store.events().head(Stream::execution(&id)).expect("head");
            let moved = store.workflows().set_status(&id, to);
            assert_eq!(moved.is_ok(), allowed(from, to), "{from:?} -> {to:?}: {moved:?}");
            assert_eq!(from.can_become(to), allowed(from, to));
            let after = store.events().head(Stream::execution(&id)).expect("head");
            assert_eq!(after, head + u64::from(moved.is_ok()), "one event per move, none refused");
            if let Err(error) = moved {
                assert!(matches!(error, Error::Conflict(_)), "{error:?}");
                let kept = store.workflows().execution(&id).expect("get").expect("exists");
                assert_eq!(kept.status, from, "a refused move changes nothing");
            }
        }
    }
}

#[test]
fn a_whole_life_is_in_the_stream_and_completion_is_timed() {
    let clock = ManualClock::new(T0);
    let store = with_build(&clock);
    let id = start(&store);
    let mut follower = store.subscribe(Stream::execution(&id), 0).expect("subscribe");
    for status in [WorkflowStatus::Running, WorkflowStatus::Paused, WorkflowStatus::Running] {
        store.workflows().set_status(&id, status).expect("move");
    }
    store.workflows().append_event(&id, "node_completed", json!({ "node": "a" })).expect("append");
    clock.advance_ms(250);
    let done = store.workflows().set_status(&id, WorkflowStatus::Completed).expect("complete");
    assert_eq!(done.completed_at_ms, Some(T0 + 250));
    let events = store.workflows().events(&id, 0).expect("events");
    let expected = [
        "workflow.started",
        "workflow.paused",
        "workflow.resumed",
        "node_completed",
        "workflow.completed",
    ];
    assert_eq!(types(&events), expected);
    for want in expected {
        let got = follower.recv_timeout(Duration::from_secs(5)).expect("recv").expect("event");
        assert_eq!(got.event_type, want, "the subscriber sees the whole history in order");
    }
    assert_eq!(types(&store.workflows().events(&id, 3).expect("after 3")), expected[3..]);
    let unknown = store.workflows().append_event("nope", "x", json!({}));
    assert!(matches!(unknown, Err(Error::NotFound { .. })), "{unknown:?}");
}

#[test]
fn state_changes_are_compare_and_set_patch_and_append() {
    let store = with_build(&ManualClock::new(T0));
    let id = start(&store);
    let set = store.workflows().set_state(&id, 0, json!({ "a": 1, "b": { "c": 2 } })).expect("set");
    assert_eq!(set.state_version, 1);
    let stale = store.workflows().set_state(&id, 0, json!({ "lost": true }));
    assert!(matches!(stale, Err(Error::Conflict(_))), "{stale:?}");
    let patched =
        store.workflows().patch_state(&id, json!({ "b": { "c": null, "d": 3 } })).expect("patch");
    assert_eq!(
        (patched.state.clone(), patched.state_version),
        (json!({ "a": 1, "b": { "d": 3 } }), 2)
    );
    store.workflows().append_to_array(&id, "log", json!("first")).expect("append");
    let appended = store.workflows().append_to_array(&id, "log", json!("second")).expect("append");
    assert_eq!(appended.state["log"], json!(["first", "second"]), "in order");
    let not_array = store.workflows().append_to_array(&id, "a", json!(1));
    assert!(matches!(not_array, Err(Error::InvalidInput(_))), "{not_array:?}");
    store.workflows().set_state(&id, 4, json!([1, 2])).expect("a state need not be an object");
    let not_object = store.workflows().append_to_array(&id, "log", json!(3));
    assert!(matches!(not_object, Err(Error::InvalidInput(_))), "{not_object:?}");
    let kept = store.workflows().execution(&id).expect("get").expect("exists");
    assert_eq!(
        (kept.state, kept.state_version),
        (json!([1, 2]), 5),
        "refused changes wrote nothing"
    );
    let missing = store.workflows().patch_state("nope", json!({}));
    assert!(matches!(missing, Err(Error::NotFound { .. })), "the seed ignored it: {missing:?}");
}

#[test]
fn concurrent_appends_and_patches_lose_nothing() {
    let store = with_build(&ManualClock::new(T0));
    let id = start(&store);
    std::thread::scope(|scope| {
        for thread in 0..8 {
            let (store, id) = (&store, &id);
            scope.spawn(move || {
                for i in 0..25 {
                    store
                        .workflows()
                        .append_to_array(id, "seen", json!([thread, i]))
                        .expect("append");
                    let patch = json!({ format!("t{thread}"): i });
                    store.workflows().patch_state(id, patch).expect("patch");
                }
            });
        }
    });
    let execution = store.workflows().execution(&id).expect("get").expect("exists");
    assert_eq!(execution.state["seen"].as_array().map(Vec::len), Some(200), "no lost append");
    for thread in 0..8 {
        assert_eq!(execution.state[format!("t{thread}")], json!(24), "each thread's last patch");
    }
    assert_eq!(execution.state_version, 400, "one version per change");
}

#[test]
fn snapshots_are_immutable_and_load_returns_the_events_after_the_latest() {
    let store = with_build(&ManualClock::new(T0));
    let id = start(&store);
    for i in 1..=7 {
        store.workflows().append_event(&id, "step", json!({ "i": i })).expect("append");
    }
    let past_head = store.workflows().write_snapshot(&id, 8, json!({}));
    assert!(matches!(past_head, Err(Error::InvalidInput(_))), "{past_head:?}");
    store.workflows().write_snapshot(&id, 2, json!({ "sum": 3 })).expect("snapshot");
    let five = store.workflows().write_snapshot(&id, 5, json!({ "sum": 15 })).expect("snapshot");
    assert_eq!(store.workflows().write_snapshot(&id, 5, json!({ "sum": 15 })).expect("same"), five);
    let other = store.workflows().write_snapshot(&id, 5, json!({ "sum": 0 }));
    assert!(matches!(other, Err(Error::Conflict(_))), "{other:?}");
    assert_eq!(store.workflows().latest_snapshot(&id).expect("latest"), Some(five.clone()));
    let loaded = store.workflows().load(&id).expect("load");
    assert_eq!(loaded.snapshot, Some(five));
    let seqs: Vec<u64> = loaded.events.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, [6, 7]);
    let sum = |state: Value, event: &Event| {
        let total = state["sum"].as_i64().unwrap_or(0) + event.payload["i"].as_i64().unwrap_or(0);
        json!({ "sum": total })
    };
    let replayed = store.workflows().replay(&id, json!({ "sum": 0 }), sum).expect("replay");
    assert_eq!(replayed, json!({ "sum": 28 }), "15 from the snapshot, then 6 and 7");
}

#[test]
fn load_pages_through_a_long_stream() {
    let limits = spindle::Limits::default().page_size_max(3);
    let clock = ManualClock::new(T0);
    let store = common::new_store_with(options_at(&clock).limits(limits));
    store.workflows().put_definition("build", "v1", json!({})).expect("put");
    let id = start(&store);
    for i in 0..10 {
        store.workflows().append_event(&id, "step", json!({ "i": i })).expect("append");
    }
    let loaded = store.workflows().load(&id).expect("load");
    assert_eq!(loaded.events.len(), 10, "every event, read a page at a time");
    assert!(loaded.snapshot.is_none());
    let count = store.workflows().replay(&id, json!(0), |n, _| json!(n.as_i64().unwrap_or(0) + 1));
    assert_eq!(count.expect("replay"), json!(10));
}

#[test]
fn listings_filter_by_status_and_workflow_newest_first() {
    let clock = ManualClock::new(T0);
    let store = with_build(&clock);
    store.workflows().put_definition("deploy", "v1", json!({})).expect("put");
    let mut ids = Vec::new();
    for (workflow, run) in [("build", true), ("deploy", false), ("build", false), ("deploy", true)]
    {
        clock.advance_ms(1);
        let execution =
            store.workflows().create_execution(workflow, "v1", json!({})).expect("create");
        if run {
            store.workflows().set_status(&execution.id, WorkflowStatus::Running).expect("run");
        }
        ids.push(execution.id);
    }
    let list = |filter: ExecutionFilter, page: Page| -> Vec<String> {
        let executions = store.workflows().list_executions(&filter, page).expect("list");
        executions.into_iter().map(|execution| execution.id).collect()
    };
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(list(ExecutionFilter::default(), Page::default()), newest_first);
    let running = ExecutionFilter::default().status(WorkflowStatus::Running);
    assert_eq!(list(running, Page::default()), [ids[3].clone(), ids[0].clone()]);
    let builds = ExecutionFilter::default().workflow_id("build");
    assert_eq!(list(builds, Page::default()), [ids[2].clone(), ids[0].clone()]);
    let running_builds =
        ExecutionFilter::default().status(WorkflowStatus::Running).workflow_id("build");
    assert_eq!(list(running_builds, Page::default()), [ids[0].clone()]);
    let second_page = list(ExecutionFilter::default(), Page::after(ids[2].clone(), 1));
    assert_eq!(second_page, [ids[1].clone()], "keyset pages go on from the last id");
    let too_big =
        store.workflows().list_executions(ExecutionFilter::default(), Page::first(1_000_000));
    assert!(matches!(too_big, Err(Error::TooLarge { .. })));
}

#[test]
fn a_run_is_recovered_from_its_log_after_reopen() {
    let clock = ManualClock::new(T0);
    let shared = SharedStore::new();
    let store = shared.open_with(options_at(&clock));
    store.workflows().put_definition("build", "v1", json!({})).expect("put");
    let id = store.workflows().create_execution("build", "v1", json!({})).expect("create").id;
    store.workflows().set_status(&id, WorkflowStatus::Running).expect("run");
    for node in ["n1", "n2", "n3", "n4"] {
        let payload = json!({ "node": node, "patch": { node: "done" } });
        store.workflows().append_event(&id, "node_completed", payload).expect("append");
    }
    store
        .workflows()
        .write_snapshot(&id, 5, json!({ "n1": "done", "n2": "done", "n3": "done", "n4": "done" }))
        .expect("snapshot");
    store
        .workflows()
        .append_event(&id, "node_completed", json!({ "node": "n6", "patch": { "n6": "done" } }))
        .expect("append");
    store.workflows().set_status(&id, WorkflowStatus::Completed).expect("complete");
    store.close().expect("close");
    let store = shared.open_with(options_at(&clock));
    let loaded = store.workflows().load(&id).expect("load");
    assert_eq!(loaded.execution.status, WorkflowStatus::Completed);
    assert_eq!(loaded.execution.completed_at_ms, Some(T0));
    assert_eq!(loaded.snapshot.as_ref().map(|snapshot| snapshot.at_seq), Some(5));
    assert_eq!(types(&loaded.events), ["node_completed", "workflow.completed"]);
    let apply = |mut state: Value, event: &Event| {
        if let Some(patch) = event.payload.get("patch") {
            spindle_merge(&mut state, patch);
        }
        state
    };
    let state = store.workflows().replay(&id, json!({}), apply).expect("replay");
    assert_eq!(state["n6"], "done", "the event after the snapshot is applied");
    assert_eq!(state["n1"], "done", "the snapshot's state is the start");
    assert_eq!(store.events().head(Stream::execution(&id)).expect("head"), 7);
}

/// A caller's own reducer step: a shallow merge.
fn spindle_merge(state: &mut Value, patch: &Value) {
    if let (Some(fields), Some(members)) = (state.as_object_mut(), patch.as_object()) {
        for (key, value) in members {
            fields.insert(key.clone(), value.clone());
        }
    }
}

#[test]
fn tenants_see_only_their_own_workflows() {
    let store = store_at(&ManualClock::new(T0));
    store.auth().create_tenant("acme", "Acme").expect("tenant");
    let acme = store.tenant("acme").expect("view");
    store.workflows().put_definition("build", "v1", json!({ "owner": "default" })).expect("put");
    acme.workflows()
        .put_definition("build", "v1", json!({ "owner": "acme" }))
        .expect("the same id and version");
    let ours = store.workflows().definition("build", "v1").expect("get").expect("ours");
    let theirs = acme.workflows().definition("build", "v1").expect("get").expect("theirs");
    assert_eq!(
        (ours.ir["owner"].clone(), theirs.ir["owner"].clone()),
        (json!("default"), json!("acme"))
    );
    let id = acme.workflows().create_execution("build", "v1", json!({})).expect("create").id;
    acme.workflows().append_event(&id, "x", json!({})).expect("append");
    assert_eq!(store.workflows().execution(&id).expect("get"), None);
    let all = store.workflows().list_executions(ExecutionFilter::default(), Page::default());
    assert!(all.expect("list").is_empty());
    let events = store.workflows().events(&id, 0);
    assert!(matches!(events, Err(Error::NotFound { .. })), "{events:?}");
    let moved = store.workflows().set_status(&id, WorkflowStatus::Running);
    assert!(matches!(moved, Err(Error::NotFound { .. })), "{moved:?}");
    assert_eq!(store.events().head(Stream::execution(&id)).expect("head"), 0);
    assert!(!store.workflows().delete_execution(&id).expect("delete"), "not ours to delete");
    assert!(acme.workflows().execution(&id).expect("get").is_some());
}

#[test]
fn delete_removes_the_execution_its_snapshots_and_its_events() {
    let clock = ManualClock::new(T0);
    let shared = SharedStore::new();
    let store = shared.open_with(options_at(&clock));
    store.workflows().put_definition("build", "v1", json!({})).expect("put");
    let id = start(&store);
    store.workflows().append_event(&id, "x", json!({})).expect("append");
    store.workflows().write_snapshot(&id, 1, json!({})).expect("snapshot");
    assert!(store.workflows().delete_execution(&id).expect("delete"));
    assert!(!store.workflows().delete_execution(&id).expect("again"));
    assert_eq!(store.workflows().execution(&id).expect("get"), None);
    assert_eq!(store.events().head(Stream::execution(&id)).expect("head"), 0);
    assert!(matches!(store.workflows().latest_snapshot(&id), Err(Error::NotFound { .. })));
    store.close().expect("close");
    let snapshots = shared.raw_count("SELECT count(*) FROM workflow_snapshots");
    assert_eq!(snapshots, 0, "its snapshots went with it");
}

#[test]
fn sizes_hold_at_the_limit_and_refuse_one_past_it() {
    let limits = spindle::Limits::default().payload_bytes_max(100).id_len_max(64);
    let clock = ManualClock::new(T0);
    let store = common::new_store_with(options_at(&clock).limits(limits));
    let id_at = "w".repeat(64);
    store.workflows().put_definition(&id_at, &id_at, json!({})).expect("ids at the limit");
    let id_past = "w".repeat(65);
    let refused = store.workflows().put_definition(&id_past, "v", json!({}));
    assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    let execution = store.workflows().create_execution(&id_at, &id_at, json!({})).expect("create");
    let text_of = |bytes: usize| json!({ "t": "x".repeat(bytes - r#"{"t":""}"#.len()) });
    store.workflows().set_state(&execution.id, 0, text_of(100)).expect("a state at the limit");
    let too_big = store.workflows().set_state(&execution.id, 1, text_of(101));
    assert!(matches!(too_big, Err(Error::TooLarge { .. })), "{too_big:?}");
    let grows = store.workflows().append_to_array(&execution.id, "more", json!(1));
    assert!(matches!(grows, Err(Error::TooLarge { .. })), "the state would pass the limit");
    let kept = store.workflows().execution(&execution.id).expect("get").expect("exists");
    assert_eq!((kept.state, kept.state_version), (text_of(100), 1), "nothing written");
    let big_input = store.workflows().create_execution(&id_at, &id_at, text_of(101));
    assert!(matches!(big_input, Err(Error::TooLarge { .. })), "{big_input:?}");
}

#[test]
fn an_executions_stream_is_written_only_through_the_workflow() {
    let store = with_build(&ManualClock::new(T0));
    let id = start(&store);
    let stream = Stream::execution(&id);
    let fake = store.events().append(&stream, "workflow.completed", json!({}));
    assert!(matches!(fake, Err(Error::InvalidInput(_))), "{fake:?}");
    let truncated = store.events().truncate(&stream, 1);
    assert!(matches!(truncated, Err(Error::InvalidInput(_))), "{truncated:?}");
    let in_tx = {
        let stream = stream.clone();
        store.transaction(move |tx| {
            tx.append_event(&stream, "x", json!({}))?;
            Ok(spindle::TxOutcome::Commit(()))
        })
    };
    assert!(matches!(in_tx, Err(Error::InvalidInput(_))), "{in_tx:?}");
    let reserved = store.workflows().append_event(&id, "workflow.completed", json!({}));
    assert!(matches!(reserved, Err(Error::InvalidInput(_))), "{reserved:?}");
    assert_eq!(store.events().head(&stream).expect("head"), 0, "nothing written");
    let status = store.workflows().execution(&id).expect("get").expect("exists").status;
    assert_eq!(status, WorkflowStatus::Pending);
    let unowned = Stream::execution("not-an-execution");
    store.events().append(&unowned, "x", json!({})).expect("an ordinary stream without owner");
}

#[test]
fn a_finished_executions_state_and_events_are_final() {
    let store = with_build(&ManualClock::new(T0));
    let id = start(&store);
    store.workflows().set_status(&id, WorkflowStatus::Running).expect("run");
    store.workflows().set_status(&id, WorkflowStatus::Failed).expect("fail");
    let before = store.workflows().execution(&id).expect("get").expect("exists");
    let refused = [
        store.workflows().set_state(&id, 0, json!({})).map(|_| ()),
        store.workflows().patch_state(&id, json!({ "a": 1 })).map(|_| ()),
        store.workflows().append_to_array(&id, "a", json!(1)).map(|_| ()),
        store.workflows().append_event(&id, "late", json!({})).map(|_| ()),
    ];
    for result in refused {
        assert!(matches!(result, Err(Error::Conflict(_))), "{result:?}");
    }
    assert_eq!(store.workflows().execution(&id).expect("get").expect("exists"), before);
    let head = store.events().head(Stream::execution(&id)).expect("head");
    store.workflows().write_snapshot(&id, head, json!({ "final": true })).expect("a last snapshot");
    let started = &store.workflows().events(&id, 0).expect("events")[0];
    assert_eq!(started.payload["workflow_id"], "build", "lifecycle events name the workflow");
    assert_eq!(started.payload["workflow_version"], "v1");
}

#[test]
fn a_rolled_back_status_move_leaves_no_event() {
    let store = with_build(&ManualClock::new(T0));
    let id = start(&store);
    let moved = {
        let id = id.clone();
        store.transaction(move |tx| {
            let running = tx.exec(spindle::workflow::SetStatus {
                id: id.clone(),
                status: WorkflowStatus::Running,
            })?;
            Ok(spindle::TxOutcome::Rollback(running.status))
        })
    };
    assert_eq!(moved.expect("transaction"), WorkflowStatus::Running, "the value comes back");
    assert_eq!(store.events().head(Stream::execution(&id)).expect("head"), 0);
    let kept = store.workflows().execution(&id).expect("get").expect("exists");
    assert_eq!(kept.status, WorkflowStatus::Pending);
}

#[test]
fn another_tenants_execution_behaves_as_missing_for_every_operation() {
    let store = store_at(&ManualClock::new(T0));
    store.auth().create_tenant("acme", "Acme").expect("tenant");
    let acme = store.tenant("acme").expect("view");
    acme.workflows().put_definition("build", "v1", json!({})).expect("put");
    let id = acme.workflows().create_execution("build", "v1", json!({})).expect("create").id;
    acme.workflows().append_event(&id, "x", json!({})).expect("append");
    let w = store.workflows();
    let results = [
        w.set_state(&id, 0, json!({})).map(|_| ()),
        w.patch_state(&id, json!({})).map(|_| ()),
        w.append_to_array(&id, "a", json!(1)).map(|_| ()),
        w.append_event(&id, "x", json!({})).map(|_| ()),
        w.write_snapshot(&id, 1, json!({})).map(|_| ()),
        w.latest_snapshot(&id).map(|_| ()),
        w.load(&id).map(|_| ()),
        w.replay(&id, json!(null), |state, _| state).map(|_| ()),
    ];
    for result in results {
        assert!(matches!(result, Err(Error::NotFound { .. })), "{result:?}");
    }
    let theirs = acme.workflows().execution(&id).expect("get").expect("exists");
    assert_eq!((theirs.state_version, theirs.state), (0, json!({})), "untouched");
    assert!(acme.workflows().latest_snapshot(&id).expect("latest").is_none());
}

#[test]
fn every_value_a_workflow_keeps_is_bounded() {
    let limits = spindle::Limits::default().payload_bytes_max(100);
    let clock = ManualClock::new(T0);
    let store = common::new_store_with(options_at(&clock).limits(limits));
    let text_of = |bytes: usize| json!({ "t": "x".repeat(bytes - r#"{"t":""}"#.len()) });
    store.workflows().put_definition("w", "at", text_of(100)).expect("an ir at the limit");
    let ir = store.workflows().put_definition("w", "past", text_of(101));
    assert!(matches!(ir, Err(Error::TooLarge { .. })), "{ir:?}");
    assert_eq!(store.workflows().versions("w").expect("versions"), ["at"]);
    let id = store.workflows().create_execution("w", "at", json!({})).expect("create").id;
    store.workflows().append_event(&id, "e", text_of(100)).expect("a payload at the limit");
    let event = store.workflows().append_event(&id, "e", text_of(101));
    assert!(matches!(event, Err(Error::TooLarge { .. })), "{event:?}");
    store.workflows().write_snapshot(&id, 1, text_of(100)).expect("a snapshot at the limit");
    let snapshot = store.workflows().write_snapshot(&id, 1, text_of(101));
    assert!(matches!(snapshot, Err(Error::TooLarge { .. })), "{snapshot:?}");
    let patch = store.workflows().patch_state(&id, text_of(101));
    assert!(matches!(patch, Err(Error::TooLarge { .. })), "{patch:?}");
    let key = store.workflows().append_to_array(&id, &"k".repeat(257), json!(1));
    assert!(matches!(key, Err(Error::TooLarge { .. })), "{key:?}");
    let kept = store.workflows().execution(&id).expect("get").expect("exists");
    assert_eq!((kept.state_version, kept.state), (0, json!({})), "nothing written");
    assert_eq!(store.events().head(Stream::execution(&id)).expect("head"), 1);
}

#[test]
fn count_by_status_counts_the_tenants_executions_of_each_status() {
    let clock = ManualClock::new(T0);
    let store = with_build(&clock);
    let (first, _second) = (start(&store), start(&store));
    store.workflows().set_status(&first, WorkflowStatus::Running).expect("run");
    let counts = store.workflows().count_by_status().expect("count");
    assert_eq!(counts, [(WorkflowStatus::Pending, 1), (WorkflowStatus::Running, 1)]);
    assert!(
        store.tenant("acme").expect("acme").workflows().count_by_status().expect("c").is_empty()
    );
}
