//! `spindle::migrate::sqlite_to_postgres`: a SQLite store with data in every domain and two
//! tenants is copied into a PostgreSQL schema, then read back through the facades (everything
//! reads the same) and used (streams, positions, fences and leases continue; stale holders are
//! still refused; tokens still authenticate). A target that holds data is refused and left as
//! it was; a missing source is a typed error.
//!
//! Needs a server: runs only when `SPINDLE_TEST_PG` names one (`.ci/run` starts one), each
//! test in schemas of its own.
#![cfg(feature = "postgres")]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use spindle::migrate::{MigrateError, sqlite_to_postgres};
use spindle::process::{HandleDescriptor, Selector, StatusFilter, WakeSpec};
use spindle::{
    AppendRequest, AwaitOutput, Backoff, Error, EventType, ExecutionFilter, FailOutcome,
    ItemFilter, ItemStatus, LeaseClaim, LeaseOwner, ListFilter, ManualClock, NewItem, NodeOptions,
    NodeSpec, Options, Page, ProcessLease, Registration, Role, SessionScope, Store, Stream,
    TenantStatus, TenantUpdate, TokenColor, TxOutcome, WorkflowStatus,
};
use tempfile::TempDir;

/// Whether a server is there to test on; if not, says so.
fn server() -> bool {
    let there = std::env::var_os("SPINDLE_TEST_PG").is_some();
    if !there {
        eprintln!("skipped: SPINDLE_TEST_PG names no PostgreSQL server");
    }
    there
}

/// What the source store was built with, for the checks after the copy.
struct Source {
    _dir: TempDir,
    path: PathBuf,
    /// A writer token of tenant `acme`.
    secret: String,
    dead_item: String,
    /// Claimed twice: fence 1 lapsed, fence 2 holds it.
    stale_item: String,
    /// The process lease that lapsed (fencing token 1) and the one that holds (2).
    lapsed_lease: ProcessLease,
    live_lease: ProcessLease,
    graph: String,
    execution: String,
    /// The position of the newest event ever appended (truncated since).
    newest_position: u64,
    /// The time of both stores: leases lapse by it, and the graph's deadline has not passed
    /// by it (it passed long ago by the system's clock).
    clock: ManualClock,
}

/// When the source store is built, by its clock: long before the system's now.
const T0: i64 = 1_000_000;

/// A lease or claim that lapses at once, then a moment for it to lapse.
const LAPSING_MS: i64 = 1;

fn lapse(clock: &ManualClock) {
    clock.advance_ms(20);
}

/// The options of a store on `clock`, opened without recovery.
fn on(clock: &ManualClock) -> Options {
    Options::default().recover_on_open(false).clock(Arc::new(clock.clone()))
}

/// Builds a store file with data in every domain and two tenants (and a suspended third).
fn build_source() -> spindle::Result<Source> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("source.db");
    let clock = ManualClock::new(T0);
    let store = Store::open_with(&path, on(&clock))?;
    store.auth().create_tenant("acme", "Acme Corp")?;
    store.auth().create_tenant("globex", "Globex")?;
    let suspend = TenantUpdate::default().status(TenantStatus::Suspended);
    store.auth().update_tenant("globex", suspend)?;
    let acme = store.tenant("acme")?;
    let (secret, _) = acme.auth().create_token("ci", Role::Writer, None)?;
    store.auth().create_token("admin", Role::Admin, Some(4_102_444_800_000))?;
    append_events(&store, &acme)?;
    let (dead_item, stale_item) = fill_queues(&store, &acme, &clock)?;
    let (lapsed_lease, live_lease) = register_processes(&store, &clock)?;
    let graph = graph_mid_run(&store)?;
    let execution = workflow_with_snapshot(&acme)?;
    own_table(&store)?;
    let newest_position = truncated_stream(&store)?;
    store.close()?;
    Ok(Source {
        _dir: dir,
        path,
        secret: secret.expose().to_owned(),
        dead_item,
        stale_item,
        lapsed_lease,
        live_lease,
        graph,
        execution,
        newest_position,
        clock,
    })
}

fn append_events(store: &Store, acme: &Store) -> spindle::Result<()> {
    let orders = Stream::custom("orders");
    for i in 1..=3 {
        store.events().append(&orders, "placed", json!({ "order": i }))?;
    }
    store.events().append_idempotent(&orders, "paid", json!({ "order": 1 }), "pay-1")?;
    acme.events().append(&orders, "placed", json!({ "order": "a-1" }))?;
    acme.events().append(&orders, "placed", json!({ "order": "a-2" }))?;
    Ok(())
}

/// A dead letter (fence 2), a completed item, an item whose first claim lapsed (held at fence
/// 2), a delayed item with a dedupe key, a queue without item events, and acme's own queue.
fn fill_queues(
    store: &Store,
    acme: &Store,
    clock: &ManualClock,
) -> spindle::Result<(String, String)> {
    let queue = store.queue();
    let now = Backoff::new(0, 0);
    let dead =
        queue.enqueue(NewItem::new("dead", json!({ "n": 1 })).max_attempts(2).backoff(now))?;
    for expected in 1..=2 {
        let claimed = queue.claim("w1", &["dead"], 30_000)?.expect("the dead-to-be item");
        assert_eq!(claimed.fence, expected);
        let outcome = queue.fail(&claimed.item.id, claimed.fence, "boom", true)?;
        assert_eq!(matches!(outcome, FailOutcome::DeadLettered), expected == 2);
        lapse(clock);
    }
    queue.enqueue(NewItem::new("done", json!({ "n": 2 })))?;
    let done = queue.claim("w1", &["done"], 30_000)?.expect("the item to complete");
    queue.complete(&done.item.id, done.fence, json!({ "ok": true }))?;
    let stale = queue.enqueue(NewItem::new("stale", json!({ "n": 3 })).backoff(now))?;
    queue.claim("w1", &["stale"], LAPSING_MS)?.expect("the first claim");
    lapse(clock);
    let held = queue.claim("w2", &["stale"], 600_000)?.expect("the second claim");
    assert_eq!(held.fence, 2);
    let later = NewItem::new("later", json!({ "n": 4 })).dedupe_key("once").priority(5);
    queue.enqueue(later.run_at_ms(4_102_444_800_000))?;
    queue.set_item_events("quiet", false)?;
    queue.enqueue(NewItem::new("quiet", json!({ "n": 5 })))?;
    acme.queue().enqueue(NewItem::new("builds", json!({ "tenant": "acme" })))?;
    Ok((dead.id, stale.id))
}

/// A process with a declared event type that wakes a session, events with replay keys, a
/// wake acknowledged, a handle granted, a lease that lapsed and one that holds; and a finished
/// process.
fn register_processes(
    store: &Store,
    clock: &ManualClock,
) -> spindle::Result<(ProcessLease, ProcessLease)> {
    let processes = store.processes();
    let session = SessionScope::new("session-1");
    let progress = EventType::new("progress")
        .schema(json!({ "type": "object", "required": ["line"] }))
        .wake(WakeSpec::new(Selector::Pointer("/line".into())));
    let registration = Registration::new("build-7", "engine", json!({ "target": "dist" }))
        .event_type(progress)
        .wake_target(session.clone());
    processes.register(registration)?;
    for step in 1..=2 {
        let event = AppendRequest::new("progress", json!({ "line": format!("step {step}") }));
        let appended =
            processes.append_event("build-7", event.replay_key(format!("step-{step}")))?;
        if step == 1 {
            processes.ack_wake("build-7", appended.event.seq)?;
        }
    }
    processes.grant_handle(&session, "build-7", HandleDescriptor::default())?;
    let first = LeaseOwner::new("worker-1", "boot-1");
    let LeaseClaim::Acquired(lapsed) = processes.claim_lease("build-7", &first, LAPSING_MS)? else {
        panic!("the first lease");
    };
    lapse(clock);
    let second = LeaseOwner::new("worker-2", "boot-2");
    let LeaseClaim::Acquired(live) = processes.claim_lease("build-7", &second, 600_000)? else {
        panic!("the second lease");
    };
    assert_eq!((lapsed.fencing_token, live.fencing_token), (1, 2));
    processes.register(Registration::new("done-1", "tool", json!({})))?;
    processes.complete("done-1", AwaitOutput::Success { value: json!("ok"), control: None })?;
    Ok((lapsed, live))
}

/// A graph whose first node completed and whose second one runs, with an hour left before
/// its deadline (by the stores' clock).
fn graph_mid_run(store: &Store) -> spindle::Result<String> {
    let graphs = store.graphs();
    let graph = graphs.create(json!({ "name": "build" }))?;
    for id in ["test", "package"] {
        graphs.add_node(&graph, NodeSpec::task(json!({ "run": id })), NodeOptions::new().id(id))?;
    }
    graphs.add_edge(&graph, "test", "package", Some(TokenColor::Ok))?;
    graphs.set_timeout(&graph, Some(3_600_000))?;
    graphs.start(&graph)?;
    graphs.start_node(&graph, "test")?;
    graphs.complete_node(&graph, "test", None)?;
    graphs.start_node(&graph, "package")?;
    Ok(graph.to_string())
}

/// An execution of acme's with events, a patched state and a snapshot.
fn workflow_with_snapshot(acme: &Store) -> spindle::Result<String> {
    let workflows = acme.workflows();
    workflows.put_definition("ingest", "v1", json!({ "steps": ["fetch", "parse"] }))?;
    let run =
        workflows.create_execution("ingest", "v1", json!({ "url": "https://example.com" }))?;
    workflows.set_status(&run.id, WorkflowStatus::Running)?;
    workflows.append_event(&run.id, "step_done", json!({ "bytes": 512 }))?;
    workflows.patch_state(&run.id, json!({ "fetched": true }))?;
    let head = acme.events().head(Stream::execution(&run.id))?;
    workflows.write_snapshot(&run.id, head, json!({ "bytes": 512 }))?;
    Ok(run.id)
}

/// A table of the caller's own in the file (not the store's: not copied).
fn own_table(store: &Store) -> spindle::Result<()> {
    store.transaction(|tx| {
        let sql = tx.sqlite()?;
        sql.execute_batch("CREATE TABLE my_orders (id TEXT PRIMARY KEY, total INTEGER)")?;
        sql.execute("INSERT INTO my_orders (id, total) VALUES ('o-1', 420)", ())?;
        Ok(TxOutcome::Commit(()))
    })
}

/// Appends the newest events of all to a stream, then truncates it whole: the newest position
/// is no longer in the table, only in SQLite's AUTOINCREMENT counter. Returns it.
fn truncated_stream(store: &Store) -> spindle::Result<u64> {
    let scratch = Stream::custom("scratch");
    store.events().append(&scratch, "x", json!(1))?;
    let newest = store.events().append(&scratch, "x", json!(2))?;
    store.events().truncate(&scratch, 3)?;
    assert!(store.events().last_position()? < newest.position - 1, "both are gone");
    Ok(newest.position)
}

/// Everything a tenant's view reads through the facades, as JSON.
fn snapshot(store: &Store) -> spindle::Result<Value> {
    Ok(json!({
        "events": store.events().read_all(0, 1000)?,
        "queues": queues(store)?,
        "graphs": graphs(store)?,
        "processes": processes(store)?,
        "workflows": workflows(store)?,
        "tenants": store.auth().tenants()?,
        "tokens": store.auth().tokens()?,
    }))
}

fn queues(store: &Store) -> spindle::Result<Value> {
    let queue = store.queue();
    let mut items = Vec::new();
    for stats in queue.stats()? {
        for status in [
            ItemStatus::Pending,
            ItemStatus::Claimed,
            ItemStatus::Completed,
            ItemStatus::Dead,
            ItemStatus::Cancelled,
        ] {
            items.extend(queue.items(
                &stats.queue,
                ItemFilter::status(status),
                Page::first(100),
            )?);
        }
    }
    let settings: Vec<bool> =
        ["quiet", "dead"].iter().map(|name| queue.item_events(name)).collect::<Result<_, _>>()?;
    let mut stats = json!(queue.stats()?);
    // The age of the oldest pending item is the clock's, not the store's.
    stats
        .as_array_mut()
        .into_iter()
        .flatten()
        .for_each(|queue| queue["oldest_pending_age_ms"] = json!(null));
    Ok(json!({ "stats": stats, "items": items, "item_events": settings }))
}

fn graphs(store: &Store) -> spindle::Result<Value> {
    let graphs = store.graphs();
    let mut all = Vec::new();
    for graph in graphs.list(Page::first(100))? {
        let (nodes, edges) = (graphs.nodes(&graph.id)?, graphs.edges(&graph.id)?);
        all.push(json!({ "graph": graph, "nodes": nodes, "edges": edges }));
    }
    Ok(Value::Array(all))
}

fn processes(store: &Store) -> spindle::Result<Value> {
    let processes = store.processes();
    let mut all = Vec::new();
    for record in processes.list(ListFilter::status(StatusFilter::Any))? {
        let events = processes.events_after(&record.id, 0)?;
        let wakes = processes.wake_events_after(&record.id, 0)?;
        let grants = processes.grants_for_process(&record.id)?;
        all.push(json!({ "record": record, "events": events, "wakes": wakes, "grants": grants }));
    }
    Ok(Value::Array(all))
}

fn workflows(store: &Store) -> spindle::Result<Value> {
    let workflows = store.workflows();
    let mut all = Vec::new();
    for execution in workflows.list_executions(ExecutionFilter::default(), Page::first(100))? {
        let events = workflows.events(&execution.id, 0)?;
        let snapshot = workflows.latest_snapshot(&execution.id)?;
        let definition =
            workflows.definition(&execution.workflow_id, &execution.workflow_version)?;
        all.push(json!({
            "execution": execution, "events": events, "snapshot": snapshot, "definition": definition,
        }));
    }
    Ok(Value::Array(all))
}

/// What every tenant of the store reads.
fn every_tenant(store: &Store) -> spindle::Result<Vec<Value>> {
    ["default", "acme", "globex"].iter().map(|tenant| snapshot(&store.tenant(tenant)?)).collect()
}

/// The source file, opened read-only on `clock`.
fn open_read_only(path: &Path, clock: &ManualClock) -> spindle::Result<Store> {
    Store::open_with(path, on(clock).read_only(true))
}

#[test]
fn every_tenant_and_domain_reads_the_same_and_goes_on_where_it_stood() -> spindle::Result<()> {
    if !server() {
        return Ok(());
    }
    let source = build_source()?;
    let target = common::new_postgres_location();
    let report = sqlite_to_postgres(&source.path, &target).map_err(Error::from)?;
    assert_eq!(report.not_copied, ["my_orders"]);
    assert!(report.tables.iter().any(|table| table.name == "queue_items" && table.rows == 6));
    let events = report.sequences.iter().find(|sequence| sequence.table == "events");
    assert_eq!(events.map(|sequence| sequence.last_value), Some(source.newest_position as i64));

    let file = open_read_only(&source.path, &source.clock)?;
    let expected = every_tenant(&file)?;
    // Copied as it stood: the copy did not fail the graph, whose deadline passed long ago
    // by the system's clock.
    assert_eq!(file.graphs().get(&source.graph)?.status, spindle::GraphStatus::Running);
    file.close()?;
    let store = Store::connect_with(&target, on(&source.clock))?;
    assert_same("", &every_tenant(&store)?.into(), &expected.into());

    streams_go_on(&store, &source)?;
    fences_go_on(&store, &source)?;
    leases_go_on(&store, &source)?;
    graph_and_workflow_go_on(&store, &source)?;
    let acme = store.authenticate(&source.secret)?;
    assert_eq!(acme.queue().stats()?.len(), 1, "the token opens acme's view");
    assert!(matches!(
        store.tenant("globex")?.events().append(Stream::custom("x"), "x", json!(1)),
        Err(Error::TenantSuspended(_))
    ));
    store.close()
}

/// Fails naming the first place where `found` differs from `expected`.
fn assert_same(at: &str, found: &Value, expected: &Value) {
    match (found, expected) {
        (Value::Object(found), Value::Object(expected)) => {
            let keys = |object: &serde_json::Map<String, Value>| {
                object.keys().cloned().collect::<Vec<_>>()
            };
            assert_eq!(keys(found), keys(expected), "the fields of {at}");
            for (key, value) in expected {
                assert_same(&format!("{at}/{key}"), &found[key], value);
            }
        }
        (Value::Array(found), Value::Array(expected)) => {
            assert_eq!(found.len(), expected.len(), "the length of {at}");
            for (index, (found, expected)) in found.iter().zip(expected).enumerate() {
                assert_same(&format!("{at}/{index}"), found, expected);
            }
        }
        _ => assert_eq!(found, expected, "{at}"),
    }
}

/// The next append continues each stream's seqs, at a position after every copied one (the
/// truncated newest included); an idempotent append still finds its first event.
fn streams_go_on(store: &Store, source: &Source) -> spindle::Result<()> {
    let orders = Stream::custom("orders");
    let next = store.events().append(&orders, "placed", json!({ "order": 4 }))?;
    assert_eq!(next.seq, 5);
    assert!(next.position > source.newest_position, "{next:?} after {}", source.newest_position);
    let again =
        store.events().append_idempotent(&orders, "paid", json!({ "order": 1 }), "pay-1")?;
    assert!(again.existed && again.seq == 4);
    let scratch = store.events().append(Stream::custom("scratch"), "x", json!(3))?;
    assert_eq!(scratch.seq, 3, "a truncated stream's seqs are not handed out again");
    let acme =
        store.tenant("acme")?.events().append(&orders, "placed", json!({ "order": "a-3" }))?;
    assert_eq!(acme.seq, 3);
    assert!(acme.position > next.position);
    Ok(())
}

/// A stale fence is refused; the next claims' fences continue the copied ones.
fn fences_go_on(store: &Store, source: &Source) -> spindle::Result<()> {
    let queue = store.queue();
    let stale = queue.complete(&source.stale_item, 1, json!({}));
    assert!(matches!(stale, Err(Error::LeaseLost(_))), "{stale:?}");
    queue.release(&source.stale_item, 2)?;
    let claimed = queue.claim("w3", &["stale"], 30_000)?.expect("the released item");
    assert_eq!((claimed.item.id.as_str(), claimed.fence), (source.stale_item.as_str(), 3));
    queue.requeue(&source.dead_item)?;
    let revived = queue.claim("w3", &["dead"], 30_000)?.expect("the requeued item");
    assert_eq!((revived.item.id.as_str(), revived.fence), (source.dead_item.as_str(), 3));
    queue.complete(&revived.item.id, revived.fence, json!({ "ok": true }))
}

/// The lapsed lease is refused, the live one still holds, and the next grant's fencing token
/// continues.
fn leases_go_on(store: &Store, source: &Source) -> spindle::Result<()> {
    let processes = store.processes();
    let lapsed = processes.renew_lease(&source.lapsed_lease, 30_000);
    assert!(matches!(lapsed, Err(Error::LeaseLost(_))), "{lapsed:?}");
    let other = LeaseOwner::new("worker-3", "boot-3");
    match processes.claim_lease("build-7", &other, 30_000)? {
        LeaseClaim::Busy { holder } => assert_eq!(holder, source.live_lease),
        other => panic!("the live lease was lost: {other:?}"),
    }
    let renewed = processes.renew_lease(&source.live_lease, 30_000)?;
    processes.complete_lease(&renewed)?;
    let LeaseClaim::Acquired(next) = processes.claim_lease("build-7", &other, 30_000)? else {
        panic!("the lease is free");
    };
    assert_eq!(next.fencing_token, 3);
    let event = AppendRequest::new("progress", json!({ "line": "step 2" })).replay_key("step-2");
    assert_eq!(
        processes.append_event("build-7", event)?.event.seq,
        2,
        "a replay key still replays"
    );
    Ok(())
}

/// The graph finishes from where it stood; the execution's stream and state go on.
fn graph_and_workflow_go_on(store: &Store, source: &Source) -> spindle::Result<()> {
    let graphs = store.graphs();
    graphs.complete_node(&source.graph, "package", None)?;
    assert_eq!(graphs.get(&source.graph)?.status, spindle::GraphStatus::Complete);
    let acme = store.tenant("acme")?;
    let workflows = acme.workflows();
    let loaded = workflows.load(&source.execution)?;
    assert_eq!(loaded.execution.state["fetched"], json!(true));
    let before = loaded.snapshot.as_ref().map(|snapshot| snapshot.at_seq);
    workflows.append_event(&source.execution, "step_done", json!({ "bytes": 1 }))?;
    let events = workflows.events(&source.execution, 0)?;
    let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(before.is_some_and(|at| at < seqs.len() as u64));
    Ok(())
}

/// A raw client of the target location, for counting what is there.
fn raw(location: &str) -> postgres::Client {
    postgres::Client::connect(location, postgres::NoTls).expect("raw connection")
}

/// How many rows a table of the location's schema holds.
fn rows(location: &str, table: &str) -> i64 {
    raw(location).query_one(&format!("SELECT count(*) FROM {table}"), &[]).expect("count").get(0)
}

#[test]
fn a_target_that_holds_data_is_refused_and_left_as_it_was() -> spindle::Result<()> {
    if !server() {
        return Ok(());
    }
    let source = build_source()?;
    let target = common::new_postgres_location();
    let store = Store::connect(&target)?;
    store.events().append(Stream::custom("mine"), "kept", json!(1))?;
    store.close()?;
    let refused = sqlite_to_postgres(&source.path, &target);
    match refused {
        Err(MigrateError::TargetNotEmpty { table, rows }) => {
            assert_eq!((table.as_str(), rows), ("events", 1))
        }
        other => panic!("expected TargetNotEmpty, got {other:?}"),
    }
    assert_eq!(rows(&target, "events"), 1, "the target's own event is all there is");
    for table in ["queue_items", "graphs", "processes", "api_tokens", "workflow_executions"] {
        assert_eq!(rows(&target, table), 0, "nothing of the source in {table}");
    }
    assert_eq!(rows(&target, "tenants"), 1);

    // A tenant changed counts as data too; an existing store that is empty is taken.
    let renamed = common::new_postgres_location();
    let store = Store::connect(&renamed)?;
    let update = TenantUpdate::default().name("Renamed");
    store.auth().update_tenant("default", update)?;
    store.close()?;
    let refused = sqlite_to_postgres(&source.path, &renamed);
    assert!(
        matches!(refused, Err(MigrateError::TargetNotEmpty { ref table, .. }) if table == "tenants")
    );
    let empty = common::new_postgres_location();
    Store::connect(&empty)?.close()?;
    let report = sqlite_to_postgres(&source.path, &empty).map_err(Error::from)?;
    assert_eq!(report.rows(), report.tables.iter().map(|table| table.rows).sum::<u64>());
    assert_eq!(rows(&empty, "tenants"), 3);
    Ok(())
}

#[test]
fn a_missing_source_is_a_typed_error_that_touches_nothing() {
    if !server() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.db");
    let target = common::new_postgres_location();
    let result = sqlite_to_postgres(&missing, &target);
    assert!(
        matches!(&result, Err(MigrateError::SourceMissing(path)) if path == &missing),
        "{result:?}"
    );
    assert!(matches!(result.map_err(Error::from), Err(Error::NotFound { kind: "store file", .. })));
    assert!(!missing.exists(), "no file is created");
    let schema = target.rsplit("search_path=").next().unwrap_or_default().trim_end_matches('\'');
    let sql = "SELECT count(*) FROM pg_namespace WHERE nspname = $1";
    let found: i64 = raw(&target).query_one(sql, &[&schema]).expect("count").get(0);
    assert_eq!(found, 0, "the target's schema was not created");
}

#[test]
fn an_older_store_file_is_migrated_to_the_current_schema_first() -> spindle::Result<()> {
    if !server() {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("v1.db");
    let conn = rusqlite::Connection::open(&path)?;
    conn.execute_batch(include_str!("fixtures/schema_v1.sql"))?;
    conn.execute(
        "INSERT INTO events (tenant_id, stream_kind, stream_id, seq, event_type, payload, created_at_ms)
         VALUES ('default', 'custom', 'old', 1, 'kept', '{\"v\":1}', 1)",
        (),
    )?;
    drop(conn);
    let target = common::new_postgres_location();
    let report = sqlite_to_postgres(&path, &target).map_err(Error::from)?;
    assert!(report.tables.iter().any(|table| table.name == "workflow_snapshots"));
    let store = Store::connect(&target)?;
    let events = common::read_stream(&store, &Stream::custom("old"));
    assert_eq!((events.len(), events[0].payload.clone()), (1, json!({ "v": 1 })));
    assert_eq!(store.events().append(Stream::custom("old"), "new", json!(2))?.seq, 2);
    store.close()
}

#[test]
fn a_copy_that_does_not_read_back_as_the_file_is_refused_and_rolled_back() -> spindle::Result<()> {
    if !server() {
        return Ok(());
    }
    let source = build_source()?;
    let target = common::new_postgres_location();
    Store::connect(&target)?.close()?;
    // Something on the server changes rows as they arrive (a trigger of someone else's).
    raw(&target)
        .batch_execute(
            "CREATE FUNCTION garble() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN NEW.event_type := NEW.event_type || '!'; RETURN NEW; END $$;
             CREATE TRIGGER garble BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION garble()",
        )
        .expect("the trigger");
    let refused = sqlite_to_postgres(&source.path, &target);
    assert!(
        matches!(&refused, Err(MigrateError::Mismatch { table, .. }) if table == "events"),
        "{refused:?}"
    );
    for table in ["events", "queue_items", "graphs", "processes", "api_tokens"] {
        assert_eq!(rows(&target, table), 0, "{table}: nothing of the copy is kept");
    }
    Ok(())
}
