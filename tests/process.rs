//! The process registry (DESIGN.md §5.4) through the public API. The first tests port the
//! seed's conformance suite (`process_registry_reopenable`) under the same names, but for
//! `reports_declared_durability` (there are no durability tiers: every registry write is a
//! store commit) and the seed's runtime-invocation fields (`scope`, `caused_by`), which
//! Spindle's events do not carry (an event names its process and replay key instead). The
//! rest cover what Spindle adds: tenants, limits, fencing across reopen and prune, repair on
//! replay, the event log refusing to write process streams for callers.

mod common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use spindle::process::{
    AppendRequest, AwaitOutput, DedupeKey, EventType, ExternalRef, HandleDescriptor, LeaseClaim,
    LeaseOwner, ListFilter, Liveness, Originator, ProcessLease, Registration, Selector,
    SessionScope, StatusFilter, TerminalState, WaitKind, WakeSpec,
};
use spindle::{Error, ManualClock, Options, Page, Store, Stream};

use common::SharedStore;

const T0: i64 = 1_700_000_000_000;

fn store_at(clock: &ManualClock) -> Store {
    common::new_store_with(options_at(clock))
}

fn options_at(clock: &ManualClock) -> Options {
    Options::default().clock(Arc::new(clock.clone()))
}

fn tool(id: &str) -> Registration {
    Registration::new(id, "tool", json!({ "tool": "grep", "args": ["-n", "x"] })).label("grep")
}

fn success(value: Value) -> AwaitOutput {
    AwaitOutput::Success { value, control: None }
}

fn register(store: &Store, registration: Registration) {
    store.processes().register(registration).expect("register");
}

/// A `progress` event type that wakes with the payload's `line`.
fn progress_type() -> EventType {
    EventType::new("progress")
        .schema(json!({
            "type": "object",
            "required": ["line"],
            "properties": { "line": { "type": "string" } }
        }))
        .wake(WakeSpec::new(Selector::Pointer("/line".into())))
}

fn signal(name: &str, ordinal: u64) -> WaitKind {
    WaitKind::Signal {
        name: name.into(),
        event_type: format!("signal.{name}"),
        key: format!("process:p:signal.{name}:{ordinal}"),
        ordinal,
    }
}

fn ids(records: &[spindle::ProcessRecord]) -> Vec<&str> {
    records.iter().map(|record| record.id.as_str()).collect()
}

fn owner(id: &str, incarnation: &str) -> LeaseOwner {
    LeaseOwner::new(id, incarnation)
}

fn acquired(claim: LeaseClaim) -> ProcessLease {
    match claim {
        LeaseClaim::Acquired(lease) => lease,
        other => panic!("expected the lease, got {other:?}"),
    }
}

fn busy_holder(claim: LeaseClaim) -> ProcessLease {
    match claim {
        LeaseClaim::Busy { holder } => holder,
        other => panic!("expected busy, got {other:?}"),
    }
}

// ---- the seed's conformance suite ----

#[test]
fn registration_is_idempotent_and_hash_conflicts_fail() {
    let store = store_at(&ManualClock::new(T0));
    let first = store.processes().register(tool("p1")).expect("register");
    assert_eq!(first.status.label(), "running");
    assert_eq!(first.event_types.len(), 6, "the default event types are declared");
    let again = store.processes().register(tool("p1")).expect("same content");
    assert_eq!(again, first, "the same content returns the first record");
    let other = Registration::new("p1", "tool", json!({ "tool": "sed" }));
    let conflict = store.processes().register(other);
    assert!(matches!(conflict, Err(Error::Conflict(_))), "{conflict:?}");
    let stored = store.processes().get("p1").expect("get").expect("exists");
    assert_eq!(stored, first, "the conflicting registration wrote nothing");
}

#[test]
fn external_refs_and_handle_grant_membership_round_trip() {
    let store = store_at(&ManualClock::new(T0));
    let reference = ExternalRef::new("k8s", "pod-1");
    let unknown = store.processes().set_external_ref("nope", reference.clone());
    assert!(matches!(unknown, Err(Error::NotFound { .. })), "{unknown:?}");
    register(&store, tool("p1"));
    let set = store.processes().set_external_ref("p1", reference.clone()).expect("set");
    assert_eq!(set.external_ref.as_ref(), Some(&reference));
    let repeat = store.processes().set_external_ref("p1", reference.clone()).expect("repeat");
    assert_eq!(repeat, set, "an identical repeat returns the record unchanged");
    let other_id = ExternalRef::new("k8s", "pod-2");
    let other_metadata = reference.metadata(json!({ "ns": "x" }));
    for changed in [other_id, other_metadata] {
        let conflict = store.processes().set_external_ref("p1", changed);
        assert!(matches!(conflict, Err(Error::Conflict(_))), "{conflict:?}");
    }
    let scope = SessionScope::new("s1");
    assert!(!store.processes().has_handle_grant(&scope, "p1").expect("has"));
    let descriptor = HandleDescriptor::default().kind("tool").label("grep");
    let grant = store.processes().grant_handle(&scope, "p1", descriptor.clone()).expect("grant");
    assert_eq!((grant.session_id.as_str(), grant.scope_id.as_str()), ("s1", "session:s1"));
    assert!(store.processes().has_handle_grant(&scope, "p1").expect("has"));
    let listed = store.processes().handle_grants(&scope).expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].0.descriptor.clone(), listed[0].1.id.as_str()), (descriptor, "p1"));
    assert!(store.processes().revoke_handle(&scope, "p1").expect("revoke"));
    assert!(!store.processes().revoke_handle(&scope, "p1").expect("revoke again"));
    assert!(!store.processes().has_handle_grant(&scope, "p1").expect("has"));
    let grant_unknown = store.processes().grant_handle(&scope, "nope", HandleDescriptor::default());
    assert!(matches!(grant_unknown, Err(Error::NotFound { .. })), "{grant_unknown:?}");
}

#[test]
fn validates_custom_events_and_materializes_wakes() {
    let store = store_at(&ManualClock::new(T0));
    let registration = tool("p1").event_type(progress_type()).wake_target(SessionScope::new("s1"));
    register(&store, registration);
    let first = store
        .processes()
        .append_event("p1", AppendRequest::new("progress", json!({ "line": "half" })))
        .expect("append");
    assert_eq!(first.event.seq, 1, "a process's first event is 1");
    let wake = first.wake.expect("a wake for the target");
    assert_eq!((wake.input.as_str(), wake.target_session_id.as_str()), ("half", "s1"));
    let missing = AppendRequest::new("progress", json!({ "other": 1 }));
    let refused = store.processes().append_event("p1", missing);
    assert!(matches!(refused, Err(Error::InvalidInput(_))), "{refused:?}");
    assert_eq!(store.events().head(Stream::process("p1")).expect("head"), 1, "nothing written");
    let undeclared = store.processes().append_event("p1", AppendRequest::new("nope", json!({})));
    assert!(matches!(undeclared, Err(Error::InvalidInput(_))), "{undeclared:?}");
    assert_eq!(store.processes().wake_events_after("p1", 0).expect("wakes").len(), 1);
    store.processes().ack_wake("p1", 1).expect("ack");
    assert!(store.processes().wake_events_after("p1", 0).expect("wakes").is_empty());
}

#[test]
fn custom_wake_events_preserve_typed_provenance_and_replay() {
    let store = store_at(&ManualClock::new(T0));
    let wake_type = EventType::new("ping").wake(WakeSpec::new(Selector::Const(json!("ping"))));
    let registration = Registration::new("proc", "engine", json!({}))
        .originator(Originator::Session { scope: SessionScope::new("s1") })
        .event_type(wake_type)
        .wake_target(SessionScope::new("s1"));
    register(&store, registration);
    let request = AppendRequest::new("ping", json!({ "n": 1 })).replay_key("ping-1");
    let first = store.processes().append_event("proc", request.clone()).expect("append");
    let replayed = store.processes().append_event("proc", request).expect("replay");
    assert!(replayed.replayed && !first.replayed);
    assert_eq!(replayed.event, first.event, "the replay returns the first event");
    assert_eq!(store.events().head(Stream::process("proc")).expect("head"), 1, "one row only");
    let (a, b) = (first.wake.expect("wake"), replayed.wake.expect("wake"));
    assert_eq!(a.dedupe_key, "proc:1", "the event identity is <process>:<seq>");
    assert_eq!(a.wake_id, b.wake_id, "the same wake id on replay");
    assert_eq!(first.event.replay_key.as_deref(), Some("ping-1"));
    let record = store.processes().get("proc").expect("get").expect("exists");
    assert_eq!(record.originator.scope_id(), "session:s1");
}

#[test]
fn event_streams_filter_order_and_wait() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p1").event_type(progress_type()).event_type(EventType::new("note")));
    for (event_type, line) in [("progress", "a"), ("note", "b"), ("progress", "c")] {
        let request = AppendRequest::new(event_type, json!({ "line": line }));
        store.processes().append_event("p1", request).expect("append");
    }
    let after_one = store.processes().events_after("p1", 1).expect("after");
    let seqs: Vec<u64> = after_one.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, [2, 3], "events_after leaves out the cursor and before, in order");
    let wakes = store.processes().wake_events_after("p1", 1).expect("wakes");
    let wake_seqs: Vec<u64> = wakes.iter().map(|event| event.seq).collect();
    assert_eq!(wake_seqs, [3], "only wake events after the cursor");
    let unknown = store.processes().events_after("nope", 0);
    assert!(matches!(unknown, Err(Error::NotFound { .. })), "{unknown:?}");
}

#[test]
fn wake_semantics_matrix() {
    let store = store_at(&ManualClock::new(T0));
    let wake = |name: &str, spec: WakeSpec| EventType::new(name).wake(spec);
    let fields = [
        ("line".to_owned(), Selector::Pointer("/line".into())),
        ("n".to_owned(), Selector::Pointer("/n".into())),
    ];
    let types = vec![
        wake("gated", WakeSpec::new(Selector::Payload).when(Selector::Pointer("/go".into()))),
        wake(
            "raw",
            WakeSpec::new(Selector::Payload)
                .dedupe_key(DedupeKey::Selector(Selector::Pointer("/id".into()))),
        ),
        wake(
            "constant",
            WakeSpec::new(Selector::Const(json!({ "k": 1 })))
                .dedupe_key(DedupeKey::Const("fixed".into())),
        ),
        wake(
            "templated",
            WakeSpec::new(Selector::Template {
                template: "line {line} #{n}".into(),
                fields: fields.into(),
            }),
        ),
    ];
    register(&store, tool("p").event_types(types).wake_target(SessionScope::new("s")));
    let append = |event_type: &str, payload: Value| {
        store
            .processes()
            .append_event("p", AppendRequest::new(event_type, payload))
            .expect("append")
    };
    assert!(append("gated", json!({ "go": false })).wake.is_none(), "when=false: no wake");
    assert!(append("gated", json!({ "go": 1 })).wake.is_some(), "numbers are truthy");
    let raw = append("raw", json!({ "id": "x" })).wake.expect("wake");
    assert_eq!((raw.input.as_str(), raw.dedupe_key.as_str()), (r#"{"id":"x"}"#, "x"));
    let raw_again = append("raw", json!({ "id": "x" })).wake.expect("wake");
    assert_eq!(raw_again.wake_id, raw.wake_id, "a selector dedupe key gives a stable wake id");
    let constant = append("constant", json!({})).wake.expect("wake");
    let constant_again = append("constant", json!({ "other": true })).wake.expect("wake");
    assert_eq!(constant.input, r#"{"k":1}"#);
    assert_eq!(constant.wake_id, constant_again.wake_id, "a constant dedupe key too");
    let templated = append("templated", json!({ "line": "done", "n": 7 })).wake.expect("wake");
    assert_eq!(templated.input, "line done #7");
}

#[test]
fn wake_payload_strings_are_taken_as_they_are() {
    let store = store_at(&ManualClock::new(T0));
    let raw = EventType::new("say").wake(WakeSpec::new(Selector::Payload));
    register(&store, tool("p").event_type(raw).wake_target(SessionScope::new("s")));
    let said = store.processes().append_event("p", AppendRequest::new("say", json!("hello")));
    assert_eq!(said.expect("append").wake.expect("wake").input, "hello", "not \"\\\"hello\\\"\"");
}

#[test]
fn keyed_events_materialize_idempotent_wakes() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p").event_type(progress_type()).wake_target(SessionScope::new("s")));
    let request = AppendRequest::new("progress", json!({ "line": "x" })).replay_key("k1");
    let first = store.processes().append_event("p", request.clone()).expect("append");
    let again = store.processes().append_event("p", request).expect("again");
    assert_eq!(first.wake.expect("wake").wake_id, again.wake.expect("wake").wake_id);
    let different = AppendRequest::new("progress", json!({ "line": "y" })).replay_key("k1");
    let conflict = store.processes().append_event("p", different);
    assert!(matches!(conflict, Err(Error::Conflict(_))), "{conflict:?}");
    assert_eq!(store.events().head(Stream::process("p")).expect("head"), 1);
}

#[test]
fn wake_semantic_events_without_target_are_persisted_without_delivery() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p").event_type(progress_type()));
    let appended = store
        .processes()
        .append_event("p", AppendRequest::new("progress", json!({ "line": "x" })))
        .expect("append");
    assert!(appended.wake.is_none(), "no target, no delivery");
    assert!(appended.event.semantics.wake.is_some(), "the wake is still worked out and kept");
    assert_eq!(store.processes().wake_events_after("p", 0).expect("wakes").len(), 1);
    let targeted = AppendRequest::new("progress", json!({ "line": "y" }))
        .wake_target_scope(SessionScope::for_agent_frame("s", "f"));
    let delivered = store.processes().append_event("p", targeted).expect("append");
    assert_eq!(delivered.wake.expect("wake").target_scope_id, "session:s/frame:f");
}

#[test]
fn terminal_and_cancel_events_require_keys() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p"));
    let payload = json!({ "await_output": { "type": "success", "value": 1 } });
    let unkeyed =
        store.processes().append_event("p", AppendRequest::new("process.completed", payload));
    assert!(matches!(unkeyed, Err(Error::InvalidInput(_))), "{unkeyed:?}");
    let cancel = AppendRequest::new("process.cancel_requested", json!({ "reason": "x" }));
    let unkeyed_cancel = store.processes().append_event("p", cancel);
    assert!(matches!(unkeyed_cancel, Err(Error::InvalidInput(_))), "{unkeyed_cancel:?}");
    assert_eq!(store.events().head(Stream::process("p")).expect("head"), 0, "nothing written");
    let keyed = AppendRequest::cancel_requested("user asked");
    let first = store.processes().append_event("p", keyed.clone()).expect("keyed cancel request");
    let second = store.processes().append_event("p", keyed).expect("same request");
    assert_eq!(first.event.seq, second.event.seq, "the same request is one event");
}

#[test]
fn await_reads_terminal_materialized_output() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p"));
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || store.processes().await_terminal("p", Duration::from_secs(30)))
    };
    let record = store.processes().complete("p", success(json!({ "answer": 42 }))).expect("done");
    assert_eq!(record.status.label(), "completed");
    let awaited = waiter.join().expect("waiter").expect("await");
    assert_eq!(awaited.status.await_output(), Some(&success(json!({ "answer": 42 }))));
    let again = store.processes().complete("p", success(json!({ "answer": 42 }))).expect("same");
    assert_eq!(again, record, "completing with the same output again is a no-op");
    let different = store.processes().complete("p", success(json!({ "answer": 7 })));
    assert!(matches!(different, Err(Error::Conflict(_))), "{different:?}");
    let failure = AwaitOutput::Failure {
        class: "execution".into(),
        code: "x".into(),
        message: "late".into(),
        raw: None,
        control: None,
    };
    let late = store.processes().complete("p", failure);
    assert!(matches!(late, Err(Error::Conflict(_))), "already terminal: {late:?}");
    let timed_out = {
        register(&store, tool("q"));
        store.processes().await_terminal("q", Duration::from_millis(20)).expect("await")
    };
    assert!(!timed_out.is_terminal(), "a timeout returns the running record");
}

#[test]
fn wait_state_round_trips_filters_and_clears_on_terminal() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    register(&store, tool("p"));
    clock.advance_ms(5);
    let waiting = store.processes().set_wait("p", signal("go", 1)).expect("wait");
    let state = waiting.wait.expect("waiting");
    assert_eq!((state.kind, state.since_ms), (signal("go", 1), T0 + 5));
    let filter = ListFilter::default().waiting(true);
    assert_eq!(ids(&store.processes().list(&filter).expect("list")), ["p"]);
    let cleared = store.processes().clear_wait("p").expect("clear");
    assert!(cleared.wait.is_none());
    let given = spindle::process::WaitState { kind: signal("go", 7), since_ms: 1 };
    let stamped = store.processes().set_wait("p", given).expect("a whole wait state");
    assert_eq!(stamped.wait.map(|wait| wait.since_ms), Some(T0 + 5), "the store's clock");
    store.processes().set_wait("p", signal("go", 2)).expect("wait again");
    let done = store.processes().complete("p", success(json!(null))).expect("complete");
    assert!(done.wait.is_none(), "ending a process clears its wait");
    let refused = store.processes().set_wait("p", signal("go", 3));
    assert!(matches!(refused, Err(Error::Conflict(_))), "a finished process cannot wait");
    let bad = WaitKind::Signal {
        name: "no spaces".into(),
        event_type: "t".into(),
        key: "k".into(),
        ordinal: 0,
    };
    register(&store, tool("q"));
    let refused_name = store.processes().set_wait("q", bad);
    assert!(matches!(refused_name, Err(Error::InvalidInput(_))), "{refused_name:?}");
    assert!(store.processes().get("q").expect("get").expect("q").wait.is_none(), "unchanged");
}

#[test]
fn list_processes_filters_by_status_and_waiting() {
    let store = store_at(&ManualClock::new(T0));
    for id in ["c", "a", "b", "d"] {
        register(&store, tool(id).definition(json!({ "flow": id == "a" || id == "b" })));
    }
    store.processes().complete("c", success(json!(1))).expect("complete");
    store.processes().set_wait("b", signal("go", 1)).expect("wait");
    let list = |filter: ListFilter| ids(&store.processes().list(&filter).expect("list")).join(",");
    assert_eq!(list(ListFilter::default()), "a,b,d", "running by default, waiting included");
    assert_eq!(list(ListFilter::status(StatusFilter::Any)), "a,b,c,d", "sorted by id");
    assert_eq!(list(ListFilter::status(StatusFilter::Completed)), "c");
    assert_eq!(list(ListFilter::status(StatusFilter::Failed)), "");
    assert_eq!(list(ListFilter::default().waiting(false)), "a,d");
    let flows = ListFilter::default().definition(json!({ "flow": true }));
    assert_eq!(list(flows), "a,b");
    let paged = ListFilter::status(StatusFilter::Any).page(Page::after("a", 1));
    assert_eq!(list(paged), "b", "keyset pages by id");
    let too_big = ListFilter::default().page(Page::first(1_000_000));
    assert!(matches!(store.processes().list(&too_big), Err(Error::TooLarge { .. })));
}

#[test]
fn count_and_recent_events_match_the_log() {
    let store = store_at(&ManualClock::new(T0));
    register(
        &store,
        tool("p").event_type(EventType::new("tick")).event_type(EventType::new("tock")),
    );
    for event_type in ["tick", "tock", "tick", "tick", "tock"] {
        store
            .processes()
            .append_event("p", AppendRequest::new(event_type, json!({})))
            .expect("append");
    }
    assert_eq!(store.processes().count_events_through("p", "tick", 4).expect("count"), 3);
    assert_eq!(store.processes().count_events_through("p", "tock", 4).expect("count"), 1);
    assert_eq!(store.processes().count_events_through("p", "tock", 5).expect("count"), 2);
    let recent = store.processes().recent_events("p", 2).expect("recent");
    let seqs: Vec<u64> = recent.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, [4, 5], "the last two, oldest first");
    let log: Vec<u64> =
        common::read_stream(&store, &Stream::process("p")).iter().map(|e| e.seq).collect();
    assert_eq!(log, [1, 2, 3, 4, 5], "the process stream is the event log's");
    let unknown = store.processes().count_events_through("nope", "tick", 1);
    assert!(matches!(unknown, Err(Error::NotFound { .. })), "{unknown:?}");
}

#[test]
fn transfer_handle_grants_moves_addressability() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p1"));
    register(&store, tool("p2"));
    let (from, to) = (SessionScope::new("s1"), SessionScope::for_agent_frame("s2", "f"));
    let descriptor = HandleDescriptor::default().label("one");
    store.processes().grant_handle(&from, "p1", descriptor.clone()).expect("grant");
    let partial = store.processes().transfer_handles(&from, &to, &["p1", "p2"]);
    assert!(matches!(partial, Err(Error::NotFound { .. })), "p2 is not granted: {partial:?}");
    assert!(store.processes().has_handle_grant(&from, "p1").expect("has"), "all or none");
    assert!(!store.processes().has_handle_grant(&to, "p1").expect("has"));
    store.processes().transfer_handles(&from, &to, &["p1"]).expect("transfer");
    assert!(!store.processes().has_handle_grant(&from, "p1").expect("has"));
    let moved = store.processes().handle_grants(&to).expect("grants");
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].0.descriptor, descriptor, "the descriptor moves with it");
    assert_eq!(
        (moved[0].0.session_id.as_str(), moved[0].0.scope_id.as_str()),
        ("s2", "session:s2/frame:f")
    );
}

#[test]
fn multiple_sessions_can_hold_grants() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p"));
    for session in ["s2", "s1"] {
        store
            .processes()
            .grant_handle(&SessionScope::new(session), "p", HandleDescriptor::default())
            .expect("grant");
    }
    let grants = store.processes().grants_for_process("p").expect("grants");
    let sessions: Vec<&str> = grants.iter().map(|grant| grant.session_id.as_str()).collect();
    assert_eq!(sessions, ["s1", "s2"], "ordered by session");
}

#[test]
fn processes_can_exist_with_zero_grants() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p"));
    assert!(store.processes().grants_for_process("p").expect("grants").is_empty());
    let unknown = store.processes().grants_for_process("nope");
    assert!(matches!(unknown, Err(Error::NotFound { .. })), "{unknown:?}");
}

#[test]
fn delete_session_revokes_handles_by_session() {
    let store = store_at(&ManualClock::new(T0));
    let doomed = SessionScope::new("doomed");
    for id in ["sole", "shared", "finished"] {
        register(&store, tool(id).event_type(progress_type()).wake_target(doomed.clone()));
    }
    let frame = SessionScope::for_agent_frame("doomed", "f1");
    store.processes().grant_handle(&doomed, "sole", HandleDescriptor::default()).expect("grant");
    store.processes().grant_handle(&frame, "shared", HandleDescriptor::default()).expect("grant");
    store
        .processes()
        .grant_handle(&SessionScope::new("other"), "shared", HandleDescriptor::default())
        .expect("grant");
    store
        .processes()
        .grant_handle(&doomed, "finished", HandleDescriptor::default())
        .expect("grant");
    store.processes().complete("finished", success(json!(1))).expect("complete");
    let appended = store
        .processes()
        .append_event("sole", AppendRequest::new("progress", json!({ "line": "x" })))
        .expect("append");
    store.processes().ack_wake("sole", appended.event.seq).expect("ack");
    let report = store.processes().delete_session_state("doomed").expect("delete");
    assert_eq!(report.revoked_handle_count, 3, "every scope and frame of the session");
    assert_eq!(report.deleted_wake_count, 0);
    assert_eq!(report.orphaned_process_ids, ["sole"]);
    assert_eq!(report.preserved_process_ids, ["shared"]);
    for id in ["sole", "shared", "finished"] {
        let record = store.processes().get(id).expect("get").expect("exists");
        assert_eq!(record.wake_target, None, "{id}: the wake target is cleared, finished or not");
    }
    assert!(store.processes().wake_events_after("sole", 0).expect("wakes").is_empty(), "acks stay");
    assert!(
        store.processes().has_handle_grant(&SessionScope::new("other"), "shared").expect("has")
    );
}

#[test]
fn list_non_terminal_excludes_terminal_processes() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("a"));
    register(&store, tool("b"));
    store.processes().complete("a", success(json!(1))).expect("complete");
    assert_eq!(ids(&store.processes().list_non_terminal().expect("list")), ["b"]);
}

#[test]
fn list_live_handle_grants_excludes_terminal_history() {
    let store = store_at(&ManualClock::new(T0));
    let scope = SessionScope::new("s");
    for id in ["a", "b"] {
        register(&store, tool(id));
        store.processes().grant_handle(&scope, id, HandleDescriptor::default()).expect("grant");
    }
    store.processes().complete("a", success(json!(1))).expect("complete");
    let live = store.processes().live_handle_grants(&scope).expect("live");
    assert_eq!(live.iter().map(|(grant, _)| grant.process_id.as_str()).collect::<Vec<_>>(), ["b"]);
    assert_eq!(store.processes().handle_grants(&scope).expect("all").len(), 2);
}

#[test]
fn active_process_lease_fences_competing_owner() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    register(&store, tool("p"));
    let unknown = store.processes().claim_lease("nope", &owner("a", "1"), 1_000);
    assert!(matches!(unknown, Err(Error::NotFound { .. })), "{unknown:?}");
    let lease =
        acquired(store.processes().claim_lease("p", &owner("a", "1"), 1_000).expect("claim"));
    assert_eq!(lease.fencing_token, 1);
    let holder =
        busy_holder(store.processes().claim_lease("p", &owner("b", "1"), 1_000).expect("claim"));
    assert_eq!(holder, lease, "another owner sees the holder");
    clock.advance_ms(10);
    let reentered =
        acquired(store.processes().claim_lease("p", &owner("a", "1"), 1_000).expect("claim"));
    assert_eq!(
        (reentered.lease_token.as_str(), reentered.fencing_token),
        (lease.lease_token.as_str(), 1)
    );
    assert_eq!(reentered.expires_at_ms, T0 + 10 + 1_000, "re-entry moves the expiry");
    let other_incarnation =
        store.processes().claim_lease("p", &owner("a", "2"), 1_000).expect("claim");
    assert!(
        matches!(other_incarnation, LeaseClaim::Busy { .. }),
        "a new incarnation is another holder"
    );
}

#[test]
fn superseded_process_lease_cannot_renew() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    register(&store, tool("p"));
    let old = acquired(store.processes().claim_lease("p", &owner("a", "1"), 1).expect("claim"));
    clock.advance_ms(1);
    let new = acquired(store.processes().claim_lease("p", &owner("b", "1"), 1_000).expect("claim"));
    assert_eq!(new.fencing_token, 2, "an expired lease is granted again with the next token");
    let renew = store.processes().renew_lease(&old, 1_000);
    assert!(matches!(renew, Err(Error::LeaseLost(_))), "{renew:?}");
    let complete = store.processes().complete_lease(&old);
    assert!(matches!(complete, Err(Error::LeaseLost(_))), "{complete:?}");
    let still =
        busy_holder(store.processes().claim_lease("p", &owner("c", "1"), 1_000).expect("claim"));
    assert_eq!(still, new, "the stale holder changed nothing");
}

#[test]
fn renewed_process_lease_survives_original_expiry() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    register(&store, tool("p"));
    let lease = acquired(store.processes().claim_lease("p", &owner("a", "1"), 20).expect("claim"));
    clock.advance_ms(10);
    let renewed = store.processes().renew_lease(&lease, 20).expect("renew");
    assert_eq!(renewed.expires_at_ms, T0 + 30);
    clock.advance_ms(15); // past the first expiry, before the renewed one
    let other = store.processes().claim_lease("p", &owner("b", "1"), 20).expect("claim");
    assert!(matches!(other, LeaseClaim::Busy { .. }), "{other:?}");
    clock.advance_ms(5); // exactly at expiry: lapsed
    let lapsed = store.processes().renew_lease(&renewed, 20);
    assert!(matches!(lapsed, Err(Error::LeaseLost(_))), "{lapsed:?}");
}

#[test]
fn completed_lease_releases_and_reclaim_bumps_fencing() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p"));
    let first =
        acquired(store.processes().claim_lease("p", &owner("a", "1"), 1_000).expect("claim"));
    store.processes().complete_lease(&first).expect("complete");
    store.processes().complete_lease(&first).expect("completing again is a no-op");
    let second =
        acquired(store.processes().claim_lease("p", &owner("b", "1"), 1_000).expect("claim"));
    assert_eq!(second.fencing_token, first.fencing_token + 1, "kept across the release");
    let stale_again = store.processes().complete_lease(&first);
    assert!(matches!(stale_again, Err(Error::LeaseLost(_))), "{stale_again:?}");
}

#[test]
fn stale_lease_completion_cannot_release_live_lease() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    register(&store, tool("p"));
    let stale = acquired(store.processes().claim_lease("p", &owner("a", "1"), 5).expect("claim"));
    clock.advance_ms(5);
    let live =
        acquired(store.processes().claim_lease("p", &owner("b", "1"), 1_000).expect("claim"));
    assert!(store.processes().complete_lease(&stale).is_err());
    let holder =
        busy_holder(store.processes().claim_lease("p", &owner("c", "1"), 1_000).expect("claim"));
    assert_eq!(holder, live, "the live lease is still held");
}

/// A holder that is this very process but with another start time: provably dead.
fn dead_local_owner(id: &str) -> LeaseOwner {
    let Liveness::LocalProcess { host_id, boot_id, pid, .. } =
        Liveness::current_local_process("host-1").expect("/proc")
    else {
        panic!("a local process");
    };
    let liveness = Liveness::LocalProcess { host_id, boot_id, pid, process_start: "0".into() };
    owner(id, "1").liveness(liveness)
}

fn live_local_owner(id: &str, host: &str) -> LeaseOwner {
    owner(id, "1").liveness(Liveness::current_local_process(host).expect("/proc"))
}

#[test]
fn process_lease_reclaim_contract() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p"));
    let dead = acquired(
        store.processes().claim_lease("p", &dead_local_owner("dead"), 60_000).expect("claim"),
    );
    let claimant = live_local_owner("claimant", "host-1");
    let plain = store.processes().claim_lease("p", &claimant, 60_000).expect("claim");
    assert!(matches!(plain, LeaseClaim::Busy { .. }), "a plain claim does not take a live lease");
    let stale = dead.clone().lease_token("other".into());
    let refused = store.processes().reclaim_lease("p", &claimant, &stale, 60_000).expect("reclaim");
    assert_eq!(busy_holder(refused), dead, "a stale observation is busy");
    let other_host = live_local_owner("claimant", "host-2");
    let far = store.processes().reclaim_lease("p", &other_host, &dead, 60_000).expect("reclaim");
    assert!(matches!(far, LeaseClaim::Busy { .. }), "another host cannot prove death");
    let opaque =
        store.processes().reclaim_lease("p", &owner("o", "1"), &dead, 60_000).expect("reclaim");
    assert!(matches!(opaque, LeaseClaim::Busy { .. }), "an opaque claimant cannot prove death");
    let winners: Vec<LeaseClaim> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (store, claimant, dead) = (&store, claimant.clone(), dead.clone());
                scope.spawn(move || store.processes().reclaim_lease("p", &claimant, &dead, 60_000))
            })
            .collect();
        racers.into_iter().map(|racer| racer.join().expect("racer").expect("reclaim")).collect()
    });
    let won: Vec<ProcessLease> = winners.into_iter().filter_map(LeaseClaim::acquired).collect();
    assert_eq!(won.len(), 1, "two reclaims of one observation: exactly one winner");
    assert_eq!(won[0].fencing_token, dead.fencing_token + 1);
    let live_holder =
        store.processes().reclaim_lease("p", &claimant, &won[0], 60_000).expect("reclaim");
    assert!(matches!(live_holder, LeaseClaim::Busy { .. }), "a live holder is never reclaimed");
}

#[test]
fn prune_removes_terminal_processes_older_than_cutoff() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    register(&store, tool("old").event_type(progress_type()));
    store
        .processes()
        .append_event("old", AppendRequest::new("progress", json!({ "line": "x" })))
        .expect("append");
    store
        .processes()
        .grant_handle(&SessionScope::new("s"), "old", HandleDescriptor::default())
        .expect("grant");
    acquired(store.processes().claim_lease("old", &owner("a", "1"), 1_000).expect("claim"));
    store.processes().complete("old", success(json!(1))).expect("complete");
    register(&store, tool("running"));
    clock.advance_ms(100);
    register(&store, tool("fresh"));
    let fresh = store.processes().complete("fresh", success(json!(2))).expect("complete");
    let report = store.processes().prune_terminal(fresh.updated_at_ms).expect("prune");
    assert_eq!((report.pruned_processes, report.pruned_events), (1, 2), "the cutoff is exclusive");
    assert!(store.processes().get("old").expect("get").is_none());
    assert!(store.processes().get("fresh").expect("get").is_some());
    assert!(store.processes().get("running").expect("get").is_some());
    let left = store.events().read(Stream::process("old"), 0, 10).expect("read");
    assert!(left.is_empty(), "its events went too");
    assert_eq!(store.events().head(Stream::process("old")).expect("head"), 2, "its head stays");
    let unknown = store.processes().events_after("old", 0);
    assert!(matches!(unknown, Err(Error::NotFound { .. })), "pruned ids read as unknown");
    register(&store, tool("old"));
    let fresh_start = store.processes().complete("old", success(json!(1))).expect("complete");
    let events = store.processes().events_after("old", 0).expect("events");
    assert_eq!(events[0].seq, 3, "the numbering goes on: a subscriber's cursor stays valid");
    assert!(fresh_start.is_terminal(), "the id can be registered again, its old keys gone");
}

#[test]
fn process_registry_survives_reopen() {
    let clock = ManualClock::new(T0);
    let shared = SharedStore::new();
    let store = shared.open_with(options_at(&clock));
    let reference = ExternalRef::new("b", "x").metadata(json!([1]));
    let scope = SessionScope::new("s");
    let (event, lease) = {
        let processes = store.processes();
        processes.register(tool("p").event_type(progress_type())).expect("register");
        processes.set_external_ref("p", reference.clone()).expect("ref");
        processes.grant_handle(&scope, "p", HandleDescriptor::default()).expect("grant");
        let request = AppendRequest::new("progress", json!({ "line": "x" })).replay_key("k");
        let event = processes.append_event("p", request).expect("append").event;
        let lease = acquired(processes.claim_lease("p", &owner("a", "1"), 1_000).expect("claim"));
        processes.complete_lease(&lease).expect("release");
        (event, lease)
    };
    let record = store.processes().get("p").expect("get").expect("exists");
    store.close().expect("close");
    let store = shared.open_with(options_at(&clock));
    assert_eq!(store.processes().get("p").expect("get").expect("exists"), record);
    assert!(store.processes().has_handle_grant(&scope, "p").expect("has"));
    assert_eq!(
        store.processes().events_after("p", 0).expect("events"),
        std::slice::from_ref(&event)
    );
    let request = AppendRequest::new("progress", json!({ "line": "x" })).replay_key("k");
    let replayed = store.processes().append_event("p", request).expect("replay");
    assert_eq!((replayed.event.seq, replayed.replayed), (event.seq, true));
    let next =
        acquired(store.processes().claim_lease("p", &owner("b", "1"), 1_000).expect("claim"));
    assert_eq!(next.fencing_token, lease.fencing_token + 1, "fencing tokens grow across reopen");
}

// ---- what Spindle adds ----

#[test]
fn a_replayed_terminal_event_repairs_a_record_that_lost_its_end() {
    let clock = ManualClock::new(T0);
    let shared = SharedStore::new();
    let store = shared.open_with(options_at(&clock));
    store.processes().register(tool("p")).expect("register");
    let done = store.processes().complete("p", success(json!("ok"))).expect("complete");
    store.close().expect("close");
    shared.raw_execute("UPDATE processes SET status = 'running', await_output = NULL");
    let store = shared.open_with(options_at(&clock));
    assert!(!store.processes().get("p").expect("get").expect("p").is_terminal(), "damaged");
    let repaired = store.processes().complete("p", success(json!("ok"))).expect("replay");
    assert_eq!(repaired.status, done.status, "the replay put the end back");
    assert_eq!(store.events().head(Stream::process("p")).expect("head"), 1, "no second event");
}

#[test]
fn another_tenants_process_is_missing() {
    let store = store_at(&ManualClock::new(T0));
    store.auth().create_tenant("acme", "Acme").expect("tenant");
    let acme = store.tenant("acme").expect("view");
    acme.processes().register(tool("p")).expect("register");
    assert!(store.processes().get("p").expect("get").is_none());
    let append =
        store.processes().append_event("p", AppendRequest::new("process.waiting", json!({})));
    assert!(matches!(append, Err(Error::NotFound { .. })), "{append:?}");
    let claim = store.processes().claim_lease("p", &owner("a", "1"), 1_000);
    assert!(matches!(claim, Err(Error::NotFound { .. })), "{claim:?}");
    store.processes().register(tool("p").label("mine")).expect("the same id in another tenant");
    let theirs = acme.processes().get("p").expect("get").expect("acme's");
    assert_eq!(theirs.identity.label.as_deref(), Some("grep"));
    assert_eq!(
        ids(&store.processes().list(ListFilter::status(StatusFilter::Any)).expect("list")),
        ["p"]
    );
}

#[test]
fn bad_registrations_are_refused_and_write_nothing() {
    let store = store_at(&ManualClock::new(T0));
    let limits = store.limits().clone();
    let long_id = "x".repeat(limits.id_len_max + 1);
    let at_limit = "y".repeat(limits.id_len_max);
    store.processes().register(tool(&at_limit)).expect("an id at the limit");
    let duplicate = tool("p").event_type(EventType::new("e")).event_type(EventType::new("e"));
    let bad_schema = tool("p").event_type(EventType::new("e").schema(json!({ "pattern": "x" })));
    let unselected = tool("p").event_type(
        EventType::new("e").terminal(spindle::process::TerminalSpec::new(TerminalState::Cancelled)),
    );
    for bad in [tool(&long_id), tool(""), duplicate, bad_schema, unselected] {
        let refused = store.processes().register(bad);
        assert!(
            matches!(refused, Err(Error::InvalidInput(_) | Error::TooLarge { .. })),
            "{refused:?}"
        );
    }
    let big = Registration::new("p", "tool", json!("z".repeat(limits.payload_bytes_max)));
    assert!(matches!(store.processes().register(big), Err(Error::TooLarge { .. })));
    let all = store.processes().list(ListFilter::status(StatusFilter::Any)).expect("list");
    assert_eq!(ids(&all), [at_limit.as_str()], "only the good registration was written");
}

#[test]
fn bad_events_and_leases_are_refused_and_write_nothing() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p").event_type(progress_type()));
    let before = store.processes().get("p").expect("get").expect("p");
    let limits = store.limits().clone();
    let pointer_miss = EventType::new("w").wake(WakeSpec::new(Selector::Pointer("/absent".into())));
    register(&store, tool("q").event_type(pointer_miss));
    let missed = store.processes().append_event("q", AppendRequest::new("w", json!({})));
    assert!(matches!(missed, Err(Error::InvalidInput(_))), "a selector that misses: {missed:?}");
    let huge = json!({ "line": "z".repeat(limits.payload_bytes_max) });
    let too_big = store.processes().append_event("p", AppendRequest::new("progress", huge));
    assert!(matches!(too_big, Err(Error::TooLarge { .. })), "{too_big:?}");
    let long_key = AppendRequest::new("progress", json!({ "line": "x" }))
        .replay_key("k".repeat(limits.id_len_max + 1));
    assert!(store.processes().append_event("p", long_key).is_err());
    for ttl_ms in [0, limits.lease_ms_max + 1] {
        let claim = store.processes().claim_lease("p", &owner("a", "1"), ttl_ms);
        assert!(matches!(claim, Err(Error::InvalidInput(_))), "ttl {ttl_ms}: {claim:?}");
    }
    let ack = store.processes().ack_wake("p", 1);
    assert!(matches!(ack, Err(Error::InvalidInput(_))), "no such wake: {ack:?}");
    assert_eq!(store.events().head(Stream::process("p")).expect("head"), 0);
    assert_eq!(store.events().head(Stream::process("q")).expect("head"), 0);
    assert_eq!(store.processes().get("p").expect("get").expect("p"), before, "unchanged");
    let first = acquired(
        store
            .processes()
            .claim_lease("p", &owner("a", "1"), limits.lease_ms_min)
            .expect("at the limit"),
    );
    assert_eq!(first.fencing_token, 1, "the refused claims took no fencing token");
}

#[test]
fn prune_goes_a_page_at_a_time() {
    let clock = ManualClock::new(T0);
    let limits = spindle::Limits::default().page_size_max(3);
    let store = common::new_store_with(options_at(&clock).limits(limits));
    for i in 0..5 {
        register(&store, tool(&format!("p{i}")));
        store.processes().complete(&format!("p{i}"), success(json!(i))).expect("complete");
    }
    clock.advance_ms(1);
    let counts: Vec<u64> = (0..3)
        .map(|_| store.processes().prune_terminal(T0 + 1).expect("prune").pruned_processes)
        .collect();
    assert_eq!(counts, [3, 2, 0]);
}

#[test]
fn a_subscriber_follows_a_process_stream() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p").event_type(progress_type()));
    let mut events = store.subscribe(Stream::process("p"), 0).expect("subscribe");
    store
        .processes()
        .append_event("p", AppendRequest::new("progress", json!({ "line": "a" })))
        .expect("append");
    store.processes().complete("p", success(json!(1))).expect("complete");
    let first = events.recv_timeout(Duration::from_secs(5)).expect("recv").expect("event");
    let second = events.recv_timeout(Duration::from_secs(5)).expect("recv").expect("event");
    assert_eq!(
        (first.event_type.as_str(), second.event_type.as_str()),
        ("progress", "process.completed")
    );
    assert_eq!(second.idem_key.as_deref(), Some("terminal:process.completed"));
}

#[test]
fn a_terminal_event_of_a_custom_type_ends_the_process_with_its_selected_output() {
    let store = store_at(&ManualClock::new(T0));
    let gave_up = EventType::new("gave_up").terminal(
        spindle::process::TerminalSpec::new(TerminalState::Failed)
            .await_output(Selector::Pointer("/why".into())),
    );
    register(&store, tool("p").event_type(gave_up));
    store.processes().set_wait("p", signal("go", 1)).expect("wait");
    let request = AppendRequest::new("gave_up", json!({ "why": "no route" })).replay_key("end");
    let appended = store.processes().append_event("p", request).expect("append");
    let terminal = appended.event.semantics.terminal.expect("terminal");
    assert_eq!(terminal.state, TerminalState::Failed);
    let record = store.processes().get("p").expect("get").expect("p");
    assert_eq!(record.status.label(), "failed");
    assert!(record.wait.is_none());
    let Some(AwaitOutput::Failure { message, .. }) = record.status.await_output() else {
        panic!("a failure: {:?}", record.status);
    };
    assert_eq!(message, "no route");
}

fn small_limits_store(clock: &ManualClock) -> Store {
    let limits =
        spindle::Limits::default().payload_bytes_max(2_000).page_size_max(4).id_len_max(64);
    common::new_store_with(options_at(clock).limits(limits))
}

/// A JSON string payload whose encoding is exactly `bytes` long.
fn payload_of_len(bytes: usize) -> Value {
    json!("x".repeat(bytes - 2))
}

#[test]
fn limits_hold_at_the_limit_and_refuse_one_past_it() {
    let store = small_limits_store(&ManualClock::new(T0));
    let limits = store.limits().clone();
    let id = "p".repeat(limits.id_len_max);
    register(&store, Registration::new(&id, "tool", json!({})).event_type(EventType::new("e")));
    let at_limit = AppendRequest::new("e", payload_of_len(limits.payload_bytes_max));
    store.processes().append_event(&id, at_limit).expect("a payload at the limit");
    let past = AppendRequest::new("e", payload_of_len(limits.payload_bytes_max + 1));
    let refused = store.processes().append_event(&id, past);
    assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    let key_at = AppendRequest::new("e", json!(1)).replay_key("k".repeat(limits.id_len_max));
    store.processes().append_event(&id, key_at).expect("a replay key at the limit");
    let key_past = AppendRequest::new("e", json!(1)).replay_key("k".repeat(limits.id_len_max + 1));
    let refused_key = store.processes().append_event(&id, key_past);
    assert!(matches!(refused_key, Err(Error::TooLarge { .. })), "{refused_key:?}");
    for _ in 0..3 {
        store.processes().append_event(&id, AppendRequest::new("e", json!(0))).expect("append");
    }
    let recent = store.processes().recent_events(&id, limits.page_size_max).expect("at the limit");
    assert_eq!(recent.len(), limits.page_size_max);
    let too_many = store.processes().recent_events(&id, limits.page_size_max + 1);
    assert!(matches!(too_many, Err(Error::TooLarge { .. })), "{too_many:?}");
    assert_eq!(store.processes().events_after(&id, 0).expect("page").len(), limits.page_size_max);
    let cancel = AppendRequest::cancel_requested("stop");
    store.processes().append_event(&id, cancel).expect("a cancel request on an id at the limit");
    let done = store.processes().complete(&id, success(json!(1))).expect("complete it too");
    assert!(done.is_terminal());
    assert_eq!(store.events().head(Stream::process(&id)).expect("head"), 7, "no refused write");
}

#[test]
fn transfers_and_descriptors_hold_at_their_limits() {
    let store = small_limits_store(&ManualClock::new(T0));
    let limits = store.limits().clone();
    let (from, to) = (SessionScope::new("a"), SessionScope::new("b"));
    let ids: Vec<String> = (0..=limits.page_size_max).map(|i| format!("p{i}")).collect();
    for id in &ids {
        register(&store, tool(id));
        store.processes().grant_handle(&from, id, HandleDescriptor::default()).expect("grant");
    }
    let all: Vec<&str> = ids.iter().map(String::as_str).collect();
    let refused = store.processes().transfer_handles(&from, &to, &all);
    assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    assert!(store.processes().handle_grants(&to).expect("grants").is_empty(), "nothing moved");
    let at_limit = &all[..limits.page_size_max];
    store.processes().transfer_handles(&from, &to, at_limit).expect("at the limit");
    assert_eq!(store.processes().handle_grants(&to).expect("grants").len(), limits.page_size_max);
    let label_of = |bytes: usize| HandleDescriptor::default().label("l".repeat(bytes));
    let overhead = r#"{"label":""}"#.len();
    let fits = label_of(limits.payload_bytes_max - overhead);
    store.processes().grant_handle(&from, "p0", fits).expect("a descriptor at the limit");
    let too_big = store.processes().grant_handle(&from, "p1", label_of(limits.payload_bytes_max));
    assert!(matches!(too_big, Err(Error::TooLarge { .. })), "{too_big:?}");
    assert!(!store.processes().has_handle_grant(&from, "p1").expect("has"), "nothing written");
}

#[test]
fn a_wake_template_cannot_grow_past_the_payload_limit_or_read_its_own_values() {
    let store = small_limits_store(&ManualClock::new(T0));
    let fields = [
        ("a".to_owned(), Selector::Pointer("/a".into())),
        ("b".to_owned(), Selector::Pointer("/b".into())),
    ];
    let template = Selector::Template { template: "{a}".repeat(40), fields: fields.into() };
    let wake = EventType::new("w").wake(WakeSpec::new(template));
    register(&store, tool("p").event_type(wake));
    let grows = AppendRequest::new("w", json!({ "a": "y".repeat(100), "b": "" }));
    let refused = store.processes().append_event("p", grows);
    assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    assert_eq!(store.events().head(Stream::process("p")).expect("head"), 0, "nothing written");
    let injected = AppendRequest::new("w", json!({ "a": "{b}", "b": "secret" }));
    let appended = store.processes().append_event("p", injected).expect("append");
    let input = appended.event.semantics.wake.expect("wake").input;
    assert_eq!(input, "{b}".repeat(40), "a value's braces are not filled in again");
}

#[test]
fn a_terminal_output_of_another_state_is_refused() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p"));
    let failure = json!({ "type": "failure", "class": "x", "code": "y", "message": "z" });
    let request =
        AppendRequest::new("process.completed", json!({ "await_output": failure })).replay_key("t");
    let refused = store.processes().append_event("p", request);
    assert!(matches!(refused, Err(Error::InvalidInput(_))), "{refused:?}");
    assert!(!store.processes().get("p").expect("get").expect("p").is_terminal());
}

#[test]
fn scopes_and_owners_are_checked_like_ids() {
    let store = small_limits_store(&ManualClock::new(T0));
    let limits = store.limits().clone();
    let long = "s".repeat(limits.id_len_max + 1);
    let slashed = SessionScope::new("a/frame:b");
    for scope in [SessionScope::new(&long), slashed.clone(), SessionScope::new("")] {
        let bad = tool("p").wake_target(scope.clone());
        let refused = store.processes().register(bad);
        assert!(matches!(refused, Err(Error::InvalidInput(_) | Error::TooLarge { .. })));
        let origin = tool("p").originator(Originator::Session { scope });
        assert!(store.processes().register(origin).is_err());
    }
    register(&store, tool("p"));
    let grant = store.processes().grant_handle(&slashed, "p", HandleDescriptor::default());
    assert!(matches!(grant, Err(Error::InvalidInput(_))), "no scope collides with a frame's");
    let liveness = Liveness::LocalProcess {
        host_id: long.clone(),
        boot_id: "b".into(),
        pid: 1,
        process_start: "1".into(),
    };
    let big_owner = owner("a", "1").liveness(liveness);
    let claim = store.processes().claim_lease("p", &big_owner, 1_000);
    assert!(matches!(claim, Err(Error::TooLarge { .. })), "{claim:?}");
    let first = acquired(store.processes().claim_lease("p", &owner("a", "1"), 1_000).expect("ok"));
    assert_eq!(first.fencing_token, 1, "the refused claim took no token");
}

#[test]
fn fencing_tokens_continue_after_a_process_is_pruned_and_registered_again() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    register(&store, tool("p"));
    let mut last = 0;
    for _ in 0..3 {
        let lease =
            acquired(store.processes().claim_lease("p", &owner("a", "1"), 1_000).expect("claim"));
        store.processes().complete_lease(&lease).expect("release");
        last = lease.fencing_token;
    }
    store.processes().complete("p", success(json!(1))).expect("complete");
    clock.advance_ms(1);
    assert_eq!(store.processes().prune_terminal(T0 + 1).expect("prune").pruned_processes, 1);
    register(&store, tool("p"));
    let next =
        acquired(store.processes().claim_lease("p", &owner("b", "1"), 1_000).expect("claim"));
    assert_eq!(next.fencing_token, last + 1, "never reused, even for a new process of that id");
}

#[test]
fn the_event_log_does_not_write_process_streams_for_callers() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p"));
    store
        .processes()
        .append_event("p", AppendRequest::new("process.waiting", json!({})))
        .expect("append");
    let stream = Stream::process("p");
    let output = json!({ "await_output": { "type": "success", "value": 1 } });
    let plain = store.events().append(&stream, "process.completed", output.clone());
    let keyed = store.events().append_idempotent(
        &stream,
        "process.completed",
        output.clone(),
        "terminal:process.completed",
    );
    let truncated = store.events().truncate(&stream, 2);
    let in_tx = store.transaction(move |tx| {
        tx.append_event(&stream, "process.completed", output)?;
        Ok(spindle::TxOutcome::Commit(()))
    });
    for refused in [plain.map(|_| ()), keyed.map(|_| ()), truncated.map(|_| ()), in_tx] {
        assert!(matches!(refused, Err(Error::InvalidInput(_))), "{refused:?}");
    }
    assert_eq!(store.events().head(Stream::process("p")).expect("head"), 1, "nothing written");
    assert_eq!(store.processes().events_after("p", 0).expect("events").len(), 1, "nothing deleted");
    let done = store.processes().complete("p", success(json!(1))).expect("complete");
    assert!(done.is_terminal(), "the registry's own key was not taken");
}

#[test]
fn reports_declared_durability() {
    // The seed's registry reports a durability tier; here every registry write is a store
    // commit, durable across power loss under the default `Durability::Full`.
    assert_eq!(Options::default().durability, spindle::Durability::Full);
    let shared = SharedStore::new();
    let store = shared.open();
    register(&store, tool("p"));
    store.close().expect("close");
    let count = shared.raw_count("SELECT count(*) FROM processes");
    assert_eq!(count, 1, "on disk once the call returned");
}

#[test]
fn a_process_stream_nobody_registered_is_an_ordinary_stream() {
    let store = store_at(&ManualClock::new(T0));
    let stream = Stream::process("free");
    store.events().append(&stream, "anything", json!(1)).expect("an unregistered process stream");
    let taken = store.processes().register(tool("free"));
    assert!(matches!(taken, Err(Error::Conflict(_))), "its stream already has events: {taken:?}");
    assert!(store.processes().get("free").expect("get").is_none(), "nothing registered");
}

#[test]
fn the_registrys_own_replay_keys_are_kept_for_its_own_events() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p").event_type(EventType::new("note")));
    for key in ["terminal:process.completed", "cancel:0123"] {
        let request = AppendRequest::new("note", json!({})).replay_key(key);
        let refused = store.processes().append_event("p", request);
        assert!(matches!(refused, Err(Error::InvalidInput(_))), "{key}: {refused:?}");
    }
    let done = store.processes().complete("p", success(json!(1))).expect("complete");
    assert!(done.is_terminal(), "nothing took the terminal key");
}

#[test]
fn a_failure_value_that_is_not_an_output_keeps_a_short_message_and_the_whole_value() {
    let store = store_at(&ManualClock::new(T0));
    register(&store, tool("p"));
    let long = "é".repeat(600_000 / 2);
    let request = AppendRequest::new("process.failed", json!({ "await_output": long }))
        .replay_key("terminal:process.failed");
    store.processes().append_event("p", request).expect("a large failure value fits");
    let record = store.processes().get("p").expect("get").expect("p");
    let Some(AwaitOutput::Failure { message, raw, .. }) = record.status.await_output() else {
        panic!("a failure: {:?}", record.status);
    };
    assert!(message.len() <= 1024 && long.starts_with(message.as_str()), "{}", message.len());
    assert_eq!(raw.as_ref(), Some(&json!(long)), "the whole value is kept as raw");
}

#[test]
fn pruning_a_leased_process_ends_its_lease_and_keeps_its_tokens_in_the_tenant() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    store.auth().create_tenant("acme", "Acme").expect("tenant");
    let acme = store.tenant("acme").expect("view");
    register(&acme, tool("p"));
    let theirs =
        acquired(acme.processes().claim_lease("p", &owner("x", "1"), 60_000).expect("claim"));
    register(&store, tool("p"));
    let mut held =
        acquired(store.processes().claim_lease("p", &owner("a", "1"), 60_000).expect("claim"));
    for _ in 0..2 {
        store.processes().complete_lease(&held).expect("release");
        held =
            acquired(store.processes().claim_lease("p", &owner("a", "1"), 60_000).expect("claim"));
    }
    store.processes().complete("p", success(json!(1))).expect("complete");
    clock.advance_ms(1);
    assert_eq!(store.processes().prune_terminal(T0 + 1).expect("prune").pruned_processes, 1);
    let renew = store.processes().renew_lease(&held, 60_000);
    assert!(
        matches!(renew, Err(Error::LeaseLost(_))),
        "the lease went with its process: {renew:?}"
    );
    register(&store, tool("p"));
    let next =
        acquired(store.processes().claim_lease("p", &owner("b", "1"), 60_000).expect("claim"));
    assert_eq!(next.fencing_token, held.fencing_token + 1, "acquired, past every old token");
    let still =
        busy_holder(acme.processes().claim_lease("p", &owner("y", "1"), 60_000).expect("claim"));
    assert_eq!(still, theirs, "another tenant's process of that id keeps its own lease");
}

#[test]
fn a_payload_schema_that_takes_too_long_to_check_is_refused() {
    let store = store_at(&ManualClock::new(T0));
    let branches: Vec<Value> = (0..50).map(|_| json!({ "type": "number" })).collect();
    let costly = EventType::new("numbers").schema(json!({ "items": { "allOf": branches } }));
    register(&store, tool("p").event_type(costly));
    let small = json!((0..1_000).collect::<Vec<u32>>());
    store.processes().append_event("p", AppendRequest::new("numbers", small)).expect("quick");
    let large = json!((0..30_000).collect::<Vec<u32>>());
    let refused = store.processes().append_event("p", AppendRequest::new("numbers", large));
    assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    assert_eq!(store.events().head(Stream::process("p")).expect("head"), 1, "nothing written");
}

#[test]
fn a_subscriber_follows_an_id_registered_again_after_a_prune() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    register(&store, tool("p").event_type(EventType::new("note")));
    let mut events = store.subscribe(Stream::process("p"), 0).expect("subscribe");
    for _ in 0..3 {
        store.processes().append_event("p", AppendRequest::new("note", json!({}))).expect("append");
    }
    store.processes().complete("p", success(json!(1))).expect("complete");
    let first: Vec<u64> = (0..4)
        .map(|_| events.recv_timeout(Duration::from_secs(5)).expect("recv").expect("event").seq)
        .collect();
    assert_eq!(first, [1, 2, 3, 4]);
    clock.advance_ms(1);
    store.processes().prune_terminal(T0 + 1).expect("prune");
    register(&store, tool("p").event_type(EventType::new("note")));
    for _ in 0..2 {
        store.processes().append_event("p", AppendRequest::new("note", json!({}))).expect("append");
    }
    let again: Vec<u64> = (0..2)
        .map(|_| events.recv_timeout(Duration::from_secs(5)).expect("recv").expect("event").seq)
        .collect();
    assert_eq!(again, [5, 6], "the new history continues the numbering: nothing is missed");
}

#[test]
fn a_local_process_is_running_until_it_exits_and_unprovable_elsewhere() {
    let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn sleep");
    let liveness = Liveness::local_process("host-1", child.id()).expect("/proc");
    assert_eq!(liveness.is_running_here(), Some(true));
    assert_eq!(liveness.holds_pid_here(), Some(true));
    let Liveness::LocalProcess { host_id, boot_id, pid, process_start } = liveness.clone() else {
        panic!("a local process");
    };
    let other_start = Liveness::LocalProcess {
        host_id: host_id.clone(),
        boot_id: boot_id.clone(),
        pid,
        process_start: "0".into(),
    };
    assert_eq!(other_start.is_running_here(), Some(false), "a reused pid is another process");
    let other_boot =
        Liveness::LocalProcess { host_id, boot_id: "another boot".into(), pid, process_start };
    assert_eq!(other_boot.is_running_here(), None, "another boot cannot be told");
    assert_eq!(Liveness::Opaque.is_running_here(), None);
    child.kill().expect("kill");
    // Exited but not reaped: a zombie keeps its pid but runs no more (the kill lands soon).
    let killed = std::time::Instant::now();
    while liveness.is_running_here() != Some(false) {
        assert!(killed.elapsed() < Duration::from_secs(5), "the killed child still runs");
        std::thread::yield_now();
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("a zombie's stat");
    assert!(stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')), "{stat}");
    assert_eq!(liveness.holds_pid_here(), Some(true), "a zombie still holds its pid");
    child.wait().expect("reap");
    assert_eq!(liveness.is_running_here(), Some(false));
    assert_eq!(liveness.holds_pid_here(), Some(false), "reaped: its pid is free");
    assert_eq!(other_boot.holds_pid_here(), None);
    assert!(matches!(Liveness::local_process("h", pid), Err(Error::NotFound { .. })));
}

#[test]
fn count_gives_each_state_and_a_waiting_process_apart_from_running_ones() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    for id in ["a", "b", "c", "d"] {
        register(&store, tool(id));
    }
    store.tenant("acme").expect("acme").processes().register(tool("theirs")).expect("register");
    store.processes().set_wait("b", signal("go", 1)).expect("wait");
    store.processes().complete("c", success(json!(1))).expect("complete");
    let counts = store.processes().count().expect("count");
    let mut expected = spindle::ProcessCounts::default();
    (expected.running, expected.waiting, expected.completed) = (2, 1, 1);
    assert_eq!(counts, expected, "every other state zero");
}
