//! The shape of the public API: what must be `Send`, `Sync` and `Clone` for the handle to be
//! shared across threads, checked at compile time; and the setters and constructors of the
//! `#[non_exhaustive]` structs a caller builds, each setting its own field and no other.

mod common;

use std::time::Duration;

use serde_json::json;
use spindle::process::{
    DedupeKey, ExternalRef, HandleDescriptor, Identity, Selector, StatusFilter, TerminalSpec,
    TerminalState, WakeSpec,
};
use spindle::{
    Backoff, Durability, Error, Event, ExecutionFilter, GraphFilter, GraphStatus, Limits,
    ListFilter, ManualClock, Options, Page, Store, Stream, Subscription, TenantStatus,
    TenantUpdate, WorkflowStatus,
};

fn clone_send_sync<T: Clone + Send + Sync + 'static>() {}
fn send<T: Send + 'static>() {}

#[test]
fn handles_and_values_cross_threads() {
    clone_send_sync::<Store>();
    clone_send_sync::<Options>();
    clone_send_sync::<ManualClock>();
    clone_send_sync::<Stream>();
    clone_send_sync::<Event>();
    send::<Subscription>();
    send::<Error>();
    // A subscription moves to the thread that follows it.
    let store = common::new_store();
    let mut follower = store.subscribe(Stream::custom("s"), 0).expect("subscribe");
    let handle = std::thread::spawn(move || follower.recv().map(|event| event.seq));
    store.events().append(Stream::custom("s"), "e", serde_json::json!(1)).expect("append");
    assert_eq!(handle.join().expect("thread").expect("event"), 1);
}

#[test]
fn options_and_limits_take_one_setter_per_field_and_reach_the_store() {
    let defaults = Options::default();
    let limits = Limits::default().page_size_max(5).id_len_max(64).sql_steps_max(1_000);
    let options = Options::default()
        .durability(Durability::Normal)
        .busy_timeout(Duration::from_millis(7))
        .batch_max(3)
        .mailbox_capacity(5)
        .wal_bytes_max(9 << 20)
        .recover_on_open(false)
        .inline(true)
        .readers(0)
        .writers(3)
        .slow_batch(Duration::from_millis(11))
        .file_bytes_max(1 << 30)
        .seed(42)
        .limits(limits.clone());
    assert_eq!(options.durability, Durability::Normal);
    assert_eq!(options.busy_timeout, Duration::from_millis(7));
    assert_eq!((options.batch_max, options.mailbox_capacity), (3, 5));
    assert_eq!(options.wal_bytes_max, 9 << 20);
    assert!(!options.recover_on_open && options.inline && !options.read_only);
    assert_eq!((options.readers, options.writers), (0, 3));
    assert_eq!(options.slow_batch, Duration::from_millis(11));
    assert_eq!((options.file_bytes_max, options.seed), (Some(1 << 30), Some(42)));
    assert_eq!(options.vfs, defaults.vfs, "untouched");
    assert_eq!(options.clone().seed(None).seed, None, "an Option setter takes None too");
    assert_eq!(Options::default().vfs("unix-none").vfs.as_deref(), Some("unix-none"));
    assert_eq!((limits.page_size_max, limits.id_len_max, limits.sql_steps_max), (5, 64, 1_000));
    assert_eq!(limits.payload_bytes_max, Limits::default().payload_bytes_max, "untouched");

    let store = Store::open_in_memory_with(options).expect("open");
    assert_eq!(store.limits(), &limits, "the store enforces the limits it was given");
    let too_long = "x".repeat(65);
    let refused = store.events().append(Stream::custom(too_long), "e", json!(1));
    assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    store.close().expect("close");
}

#[test]
fn filters_and_requests_are_built_from_defaults_and_constructors() {
    let graphs = GraphFilter::default()
        .status(GraphStatus::Running)
        .metadata("kind", "run")
        .metadata("n", 1)
        .roots_only(true)
        .newest_first(true);
    assert_eq!(graphs.status, Some(GraphStatus::Running));
    assert_eq!(graphs.metadata, [("kind".to_owned(), json!("run")), ("n".to_owned(), json!(1))]);
    assert!(graphs.roots_only && graphs.newest_first);
    assert_eq!(GraphFilter::default().metadata, []);

    let processes = ListFilter::status(StatusFilter::Any)
        .definition(json!({ "flow": 1 }))
        .waiting(true)
        .page(Page::first(3));
    assert_eq!(processes.status, StatusFilter::Any);
    assert_eq!(processes.definition, Some(json!({ "flow": 1 })));
    assert_eq!((processes.waiting, processes.page.limit), (Some(true), 3));
    assert_eq!(ListFilter::default().status, StatusFilter::Running);

    let executions = ExecutionFilter::default().status(WorkflowStatus::Running).workflow_id("b");
    assert_eq!(executions.status, Some(WorkflowStatus::Running));
    assert_eq!(executions.workflow_id.as_deref(), Some("b"));
    let update = TenantUpdate::default().name("Acme").status(TenantStatus::Suspended);
    assert_eq!(update.name.as_deref(), Some("Acme"));
    assert_eq!(update.status, Some(TenantStatus::Suspended));

    assert_eq!(Page::new(None, 5), Page::first(5));
    assert_eq!(Page::new(Some("a".into()), 5), Page::after("a", 5));
    let backoff = Backoff::new(100, 250);
    assert_eq!([1, 2, 3].map(|attempt| backoff.delay_ms(attempt)), [100, 200, 250]);

    let wake = WakeSpec::new(Selector::Payload)
        .when(Selector::Pointer("/go".into()))
        .dedupe_key(DedupeKey::Const("k".into()));
    assert_eq!(wake.input, Selector::Payload);
    assert_eq!(wake.when, Some(Selector::Pointer("/go".into())));
    assert_eq!(wake.dedupe_key, DedupeKey::Const("k".into()));
    assert_eq!(WakeSpec::new(Selector::Payload).dedupe_key, DedupeKey::EventIdentity);
    let terminal = TerminalSpec::new(TerminalState::Failed).await_output(Selector::Payload);
    assert_eq!(
        (terminal.state, terminal.await_output),
        (TerminalState::Failed, Some(Selector::Payload))
    );
    let reference = ExternalRef::new("k8s", "pod-1").metadata(json!({ "ns": "x" }));
    assert_eq!((reference.backend.as_str(), reference.id.as_str()), ("k8s", "pod-1"));
    assert_eq!(reference.metadata, Some(json!({ "ns": "x" })));
    let handle = HandleDescriptor::default().kind("tool").label("grep");
    assert_eq!((handle.kind.as_deref(), handle.label.as_deref()), (Some("tool"), Some("grep")));
    let identity = Identity::new("tool").label("l").definition(json!(1));
    assert_eq!((identity.kind.as_str(), identity.label.as_deref()), ("tool", Some("l")));
    assert_eq!(identity.definition, Some(json!(1)));
}

#[test]
fn a_lease_kept_elsewhere_is_built_again_and_a_store_judges_it() {
    let store = Store::open_in_memory().expect("open");
    let processes = store.processes();
    processes.register(spindle::Registration::new("p", "tool", json!({}))).expect("register");
    let owner = spindle::LeaseOwner::new("host", "1");
    let spindle::LeaseClaim::Acquired(granted) =
        processes.claim_lease("p", &owner, 60_000).expect("claim")
    else {
        panic!("the lease was free");
    };
    let rebuilt = spindle::ProcessLease::new(
        granted.process_id.clone(),
        owner,
        granted.lease_token.clone(),
        granted.fencing_token,
        granted.claimed_at_ms,
        granted.expires_at_ms,
    );
    assert_eq!(rebuilt, granted);
    let forged = rebuilt.clone().lease_token("not-the-grant".into());
    assert_eq!(
        (forged.lease_token.as_str(), forged.fencing_token),
        ("not-the-grant", granted.fencing_token)
    );
    assert!(processes.renew_lease(&forged, 60_000).is_err(), "a token the store did not grant");
    processes.renew_lease(&rebuilt, 60_000).expect("the rebuilt lease renews");
    let later = rebuilt.clone().expires_at_ms(rebuilt.expires_at_ms + 1);
    assert_eq!(
        (later.expires_at_ms, later.lease_token),
        (rebuilt.expires_at_ms + 1, rebuilt.lease_token)
    );

    let ended = spindle::process::TerminalSemantics::new(
        TerminalState::Failed,
        spindle::process::AwaitOutput::Cancelled {
            message: "stopped".into(),
            raw: None,
            control: None,
        },
    );
    assert_eq!(ended.state, TerminalState::Failed);
}
