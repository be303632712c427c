//! Counts that do not scan (issue 28 item 2): every path that moves a counted row (an item's
//! every status change, purge, prune, cancel of an execution's items, a batch, a worker's
//! cycle; a graph's creation, child, end, cancel, reopen and deadline; a process's wait, end
//! and prune; an execution's moves and deletion) keeps `stats`, `count_by_status` and `count`
//! equal to a recount of the rows by a plain `GROUP BY`, per tenant; a rolled-back write
//! leaves the counts as they were; and a store of schema version 4 is brought to version 5
//! with its counts filled from the rows it holds (a file; and on PostgreSQL, a schema).

mod common;

use std::sync::Arc;

use common::{assert_graph_counts, assert_process_counts, assert_queue_counts};
use common::{assert_workflow_counts, new_store_with};
use serde_json::json;
use spindle::process::{AwaitOutput, Registration, WaitKind};
use spindle::queue::{Claimed, CompleteBatch, Completion, Cycle, Settlement, Stats};
use spindle::{
    GraphFilter, GraphStatus, ManualClock, NewItem, NodeOptions, NodeSpec, Options, Store,
    TxOutcome, WorkflowStatus,
};

const T0: i64 = 1_700_000_000_000;

fn store_at(clock: &ManualClock) -> Store {
    new_store_with(Options::default().clock(Arc::new(clock.clone())))
}

#[test]
fn every_path_of_an_item_keeps_the_queue_counts() -> spindle::Result<()> {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    let queue = store.queue();
    let check = |what: &str| assert_queue_counts(&store, what);
    let mut ids = Vec::new();
    for n in 0..8 {
        let item = NewItem::new("q", json!(n)).max_attempts(1);
        let item = if n >= 5 { item.execution_id("e1") } else { item };
        ids.push(queue.enqueue(item)?.id);
    }
    queue.enqueue(NewItem::new("later", json!(0)).run_at_ms(T0 + 60_000))?;
    check("enqueued");
    let claimed = queue.claim_batch("w", &["q"], 1_000, 6)?;
    check("claimed");
    queue.complete(&claimed[0].item.id, claimed[0].fence, json!("done"))?;
    check("completed");
    queue.fail(&claimed[1].item.id, claimed[1].fence, "boom", false)?;
    check("failed for good");
    queue.release(&claimed[2].item.id, claimed[2].fence)?;
    check("released");
    clock.advance_ms(2_000);
    let reclaimed = queue.reclaim_expired()?;
    assert_eq!(reclaimed.dead_lettered, 3, "items 3, 4 and 5 had their one attempt");
    check("reclaimed");
    queue.cancel(&ids[2])?;
    check("cancelled");
    let claimed = queue.claim("w", &["q"], 60_000)?.expect("item 6");
    assert_eq!(claimed.item.id, ids[6], "items are claimed in id order");
    assert_eq!(queue.cancel_execution("e1")?, 2, "6 claimed, 7 pending");
    check("an execution's items cancelled");
    queue.requeue(&ids[1])?;
    check("requeued");
    assert_eq!(queue.requeue_all("q")?, 3);
    check("requeued all");
    let batch = queue.claim_batch("w", &["q"], 60_000, 4)?;
    let completions = batch.iter().map(|c| Completion {
        id: c.item.id.clone(),
        fence: c.fence,
        result: json!(null),
    });
    queue.complete_batch(completions.take(2).collect())?;
    check("a batch completed");
    let next = spindle::queue::Claim::new("w", &["q"], 60_000);
    queue.complete_and_claim(&batch[2].item.id, batch[2].fence, json!(null), &next)?;
    check("completed and claimed");
    queue.fail(&batch[3].item.id, batch[3].fence, "boom", false)?;
    assert_eq!(queue.purge_dead("q")?, 1);
    check("purged");
    clock.advance_ms(120_000);
    let cycle = Cycle {
        worker_id: "w".into(),
        queues: vec!["q".into(), "later".into()],
        lease_ms: 60_000,
        settle: Vec::new(),
        renew: Vec::new(),
        claim_max: 10,
    };
    let cycled = store.exec(cycle.clone())?;
    let settle = cycled.claimed.iter().map(|c| {
        Settlement::Complete(Completion { id: c.item.id.clone(), fence: c.fence, result: json!(1) })
    });
    store.exec(Cycle { settle: settle.collect(), claim_max: 0, ..cycle })?;
    check("a worker's cycle");
    let before = queue.stats()?;
    assert!(before.iter().any(|stats| stats.queue == "later" && stats.completed == 1));
    clock.advance_ms(1);
    assert_eq!(queue.prune_completed(0)?, 8, "every completed and cancelled item");
    check("pruned");
    let after = queue.stats()?;
    assert!(after.is_empty(), "a queue with nothing left is not listed: {after:?}");
    Ok(())
}

#[test]
fn a_rolled_back_write_leaves_the_counts_as_they_were() -> spindle::Result<()> {
    let store = common::new_store();
    let id = store.queue().enqueue(NewItem::new("q", json!(1)))?.id;
    let claimed = store.queue().claim("w", &["q"], 60_000)?.expect("the item");
    let before = store.queue().stats()?;
    store.transaction(move |tx| {
        tx.exec(spindle::queue::Complete { id, fence: claimed.fence, result: json!(1) })?;
        Ok(TxOutcome::Rollback(()))
    })?;
    assert_eq!(store.queue().stats()?, before);
    assert_queue_counts(&store, "rolled back");
    Ok(())
}

#[test]
fn each_tenant_counts_its_own() -> spindle::Result<()> {
    let store = common::new_store();
    let acme = store.tenant("acme")?;
    for view in [&store, &acme, &acme] {
        let id = view.queue().enqueue(NewItem::new("q", json!(1)))?.id;
        let claimed = view.queue().claim("w", &["q"], 60_000)?.expect("the item");
        view.queue().complete(&id, claimed.fence, json!(1))?;
        view.graphs().create(json!({ "kind": "k" }))?;
        view.processes().register(Registration::new("p", "tool", json!({})))?;
    }
    let (mine, theirs) = (store.queue().stats()?, acme.queue().stats()?);
    assert_eq!((mine[0].completed, theirs[0].completed), (1, 2));
    let kind = GraphFilter::default().metadata("kind", json!("k"));
    assert_eq!(acme.graphs().count_by_status(&kind)?, [(GraphStatus::Pending, 2)]);
    assert_eq!(store.processes().count()?.running, 1, "the second registration of p is acme's");
    for view in [&store, &acme] {
        assert_queue_counts(view, view.tenant_id());
        assert_graph_counts(view, &["k"], view.tenant_id());
        assert_process_counts(view, view.tenant_id());
    }
    Ok(())
}

/// A started graph of one running task node `a`, of `kind`, with a deadline `timeout_ms` away.
fn started(store: &Store, kind: &str, timeout_ms: Option<i64>) -> spindle::Result<String> {
    let graph = store.graphs().create(json!({ "kind": kind }))?;
    store.graphs().add_node(&graph, NodeSpec::task(json!({})), NodeOptions::new().id("a"))?;
    store.graphs().set_timeout(&graph, timeout_ms)?;
    store.graphs().start(&graph)?;
    store.graphs().start_node(&graph, "a")?;
    Ok(graph)
}

#[test]
fn every_path_of_a_graph_keeps_the_graph_counts() -> spindle::Result<()> {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    let graphs = store.graphs();
    let kinds = ["run", "other"];
    let check = |what: &str| assert_graph_counts(&store, &kinds, what);
    let done = started(&store, "run", None)?;
    graphs.create_child(&done, json!({ "kind": "run" }))?;
    check("created and started, with a child");
    graphs.complete_node(&done, "a", None)?;
    check("completed: its child cancelled");
    let failed = started(&store, "run", None)?;
    graphs.fail_node(&failed, "a", "boom")?;
    check("failed");
    graphs.reopen(&failed, &["a"])?;
    check("reopened");
    let cancelled = started(&store, "other", None)?;
    graphs.cancel(&cancelled)?;
    check("cancelled");
    let late = started(&store, "other", Some(1_000))?;
    clock.advance_ms(5_000);
    // The store's alarm may have run the sweep already.
    graphs.expire_overdue()?;
    assert_eq!(graphs.get(&late)?.status, GraphStatus::Failed);
    check("past its deadline");
    graphs.create(json!({ "kind": 3 }))?;
    graphs.create(json!({ "kind": "" }))?;
    graphs.create(json!(null))?;
    check("kinds that are not counted apart");
    let runs = GraphFilter::default().metadata("kind", json!("run")).roots_only(true);
    let counted = graphs.count_by_status(&runs)?;
    assert_eq!(counted, [(GraphStatus::Complete, 1), (GraphStatus::Running, 1)], "by name");
    let empty = GraphFilter::default().metadata("kind", json!(""));
    assert_eq!(graphs.count_by_status(&empty)?, [(GraphStatus::Pending, 1)], "read, not kept");
    Ok(())
}

#[test]
fn every_path_of_a_process_keeps_the_process_counts() -> spindle::Result<()> {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    let processes = store.processes();
    let check = |what: &str| assert_process_counts(&store, what);
    for id in ["a", "b", "c"] {
        processes.register(Registration::new(id, "tool", json!({})))?;
    }
    check("registered");
    let wait = WaitKind::Signal {
        name: "go".into(),
        event_type: "signal.go".into(),
        key: "process:a:signal.go:1".into(),
        ordinal: 1,
    };
    processes.set_wait("a", wait.clone())?;
    processes.set_wait("b", wait)?;
    check("waiting");
    processes.clear_wait("b")?;
    check("no longer waiting");
    processes.complete("a", AwaitOutput::Success { value: json!(1), control: None })?;
    check("a waiting process completed");
    let failure = AwaitOutput::Failure {
        class: "execution".into(),
        code: "e".into(),
        message: "boom".into(),
        raw: None,
        control: None,
    };
    processes.complete("b", failure)?;
    check("failed");
    clock.advance_ms(10_000);
    assert_eq!(processes.prune_terminal(T0 + 5_000)?.pruned_processes, 2);
    check("pruned");
    assert_eq!(processes.count()?.running, 1);
    Ok(())
}

#[test]
fn every_path_of_an_execution_keeps_the_workflow_counts() -> spindle::Result<()> {
    let store = common::new_store();
    let workflows = store.workflows();
    let check = |what: &str| assert_workflow_counts(&store, what);
    workflows.put_definition("build", "v1", json!({}))?;
    let ids: Vec<String> = (0..4)
        .map(|n| Ok(workflows.create_execution("build", "v1", json!(n))?.id))
        .collect::<spindle::Result<_>>()?;
    check("created");
    for id in &ids[1..] {
        workflows.set_status(id, WorkflowStatus::Running)?;
    }
    workflows.set_status(&ids[1], WorkflowStatus::Paused)?;
    workflows.set_status(&ids[2], WorkflowStatus::Completed)?;
    workflows.set_status(&ids[3], WorkflowStatus::LimitExceeded)?;
    check("moved");
    assert!(workflows.set_status(&ids[2], WorkflowStatus::Running).is_err());
    check("a move refused");
    assert!(workflows.delete_execution(&ids[2])?);
    assert!(!workflows.delete_execution(&ids[2])?);
    check("deleted");
    let statuses: Vec<WorkflowStatus> =
        workflows.count_by_status()?.into_iter().map(|(status, _)| status).collect();
    let expected = [WorkflowStatus::LimitExceeded, WorkflowStatus::Paused, WorkflowStatus::Pending];
    assert_eq!(statuses, expected, "by status name, those none is in left out");
    Ok(())
}

/// Rows of every status of every counted table, as a store of schema version 4 holds them
/// (the same SQL on both engines): queue items of two tenants and three queues (the third
/// with only cancelled items), graphs of two kinds, roots and a child, processes running,
/// waiting and completed, executions of four statuses.
const VERSION_FOUR_ROWS: &str = "
INSERT INTO tenants (tenant_id, name, status, created_at_ms, updated_at_ms)
VALUES ('acme', 'Acme', 'active', 0, 0);
INSERT INTO queue_items (tenant_id, item_id, queue, payload, priority, run_at_ms, attempt,
    max_attempts, backoff_base_ms, backoff_max_ms, status, fence, worker_id,
    lease_expires_at_ms, created_at_ms, updated_at_ms, finished_at_ms)
VALUES ('default', 'i01', 'q1', '{}', 0, 0, 1, 3, 1000, 64000, 'completed', 1, NULL, NULL, 0, 0, 5),
       ('default', 'i02', 'q1', '{}', 0, 0, 1, 3, 1000, 64000, 'completed', 1, NULL, NULL, 0, 0, 5),
       ('default', 'i03', 'q1', '{}', 0, 0, 1, 3, 1000, 64000, 'completed', 1, NULL, NULL, 0, 0, 5),
       ('default', 'i04', 'q1', '{}', 0, 0, 3, 3, 1000, 64000, 'dead', 3, NULL, NULL, 0, 0, 5),
       ('default', 'i05', 'q1', '{}', 0, 0, 3, 3, 1000, 64000, 'dead', 3, NULL, NULL, 0, 0, 5),
       ('default', 'i06', 'q1', '{}', 0, 7, 0, 3, 1000, 64000, 'pending', 0, NULL, NULL, 0, 0, NULL),
       ('default', 'i07', 'q1', '{}', 0, 4000000000000, 0, 3, 1000, 64000, 'pending', 0, NULL,
        NULL, 0, 0, NULL),
       ('default', 'i08', 'q1', '{}', 0, 0, 1, 3, 1000, 64000, 'claimed', 1, 'w', 4000000000000,
        0, 0, NULL),
       ('default', 'i09', 'q2', '{}', 0, 0, 1, 3, 1000, 64000, 'completed', 1, NULL, NULL, 0, 0, 5),
       ('default', 'i10', 'q3', '{}', 0, 0, 0, 3, 1000, 64000, 'cancelled', 0, NULL, NULL, 0, 0, 5),
       ('acme', 'i11', 'q1', '{}', 0, 0, 1, 3, 1000, 64000, 'completed', 1, NULL, NULL, 0, 0, 5),
       ('acme', 'i12', 'q1', '{}', 0, 0, 1, 3, 1000, 64000, 'completed', 1, NULL, NULL, 0, 0, 5);
INSERT INTO graphs (tenant_id, graph_id, parent_graph_id, metadata, status, created_at_ms,
    updated_at_ms)
VALUES ('default', 'g1', NULL, '{\"kind\":\"spindle-run\",\"pipeline\":\"p\"}', 'complete', 0, 0),
       ('default', 'g2', NULL, '{\"pipeline\":\"p\",\"kind\":\"spindle-run\"}', 'complete', 0, 0),
       ('default', 'g3', NULL, '{\"kind\":\"spindle-run\"}', 'failed', 0, 0),
       ('default', 'g4', 'g1', '{\"kind\":\"spindle-run\"}', 'complete', 0, 0),
       ('default', 'g5', NULL, '{}', 'running', 0, 0),
       ('default', 'g6', NULL, '{\"kind\":4}', 'pending', 0, 0);
INSERT INTO processes (tenant_id, process_id, registration_hash, registration, status,
    await_output, wait_state, created_at_ms, updated_at_ms)
VALUES ('default', 'p1', 'h', '{}', 'running', NULL, NULL, 0, 0),
       ('default', 'p2', 'h', '{}', 'running', NULL, '{}', 0, 0),
       ('default', 'p3', 'h', '{}', 'completed', '{}', NULL, 0, 0);
INSERT INTO workflow_definitions (tenant_id, workflow_id, version, ir, ir_hash, def_seq,
    created_at_ms)
VALUES ('default', 'w', 'v1', '{}', 'h', 1, 0);
INSERT INTO workflow_executions (tenant_id, execution_id, workflow_id, workflow_version, status,
    input, state, state_version, created_at_ms, updated_at_ms, completed_at_ms)
VALUES ('default', 'x1', 'w', 'v1', 'pending', '{}', '{}', 0, 0, 0, NULL),
       ('default', 'x2', 'w', 'v1', 'running', '{}', '{}', 0, 0, 0, NULL),
       ('default', 'x3', 'w', 'v1', 'completed', '{}', '{}', 0, 0, 0, 1),
       ('default', 'x4', 'w', 'v1', 'completed', '{}', '{}', 0, 0, 0, 1);
";

/// What a store made of `VERSION_FOUR_ROWS` counts once brought to the current version: the
/// counts every reader answers, and each against a recount of the rows.
fn assert_version_four_rows_counted(store: &Store) -> spindle::Result<()> {
    let stats = store.queue().stats()?;
    let summary: Vec<(&str, [u64; 5])> = stats
        .iter()
        .map(|s| (s.queue.as_str(), [s.pending, s.scheduled, s.claimed, s.dead, s.completed]))
        .collect();
    assert_eq!(summary, [("q1", [1, 1, 1, 2, 3]), ("q2", [0, 0, 0, 0, 1]), ("q3", [0; 5])]);
    assert!(stats[0].oldest_pending_age_ms.is_some_and(|age| age > 0));
    let acme = store.tenant("acme")?;
    assert_eq!(acme.queue().stats()?[0].completed, 2);
    let runs = GraphFilter::default().metadata("kind", json!("spindle-run")).roots_only(true);
    let counted = store.graphs().count_by_status(&runs)?;
    assert_eq!(counted, [(GraphStatus::Complete, 2), (GraphStatus::Failed, 1)]);
    let processes = store.processes().count()?;
    assert_eq!((processes.running, processes.waiting, processes.completed), (1, 1, 1));
    let executions = store.workflows().count_by_status()?;
    let expected = [
        (WorkflowStatus::Completed, 2),
        (WorkflowStatus::Pending, 1),
        (WorkflowStatus::Running, 1),
    ];
    assert_eq!(executions, expected);
    for view in [store, &acme] {
        assert_queue_counts(view, "migrated");
        assert_graph_counts(view, &["spindle-run"], "migrated");
        assert_process_counts(view, "migrated");
        assert_workflow_counts(view, "migrated");
    }
    Ok(())
}

#[test]
fn a_version_four_file_is_migrated_with_its_counts_filled_from_its_rows() -> spindle::Result<()> {
    if common::sqlite_only("a store file of schema version 4") {
        return Ok(());
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v4.db");
    let raw = rusqlite::Connection::open(&path)?;
    raw.execute_batch(include_str!("fixtures/schema_v4.sql"))?;
    raw.execute_batch(VERSION_FOUR_ROWS)?;
    drop(raw);
    let store = Store::open(&path)?;
    assert_version_four_rows_counted(&store)?;
    store.close()
}

#[cfg(feature = "postgres")]
#[test]
fn a_version_four_postgres_store_is_upgraded_with_its_counts_filled_from_its_rows()
-> spindle::Result<()> {
    if !common::on_postgres() {
        return Ok(());
    }
    let old = common::SharedStore::new();
    let schema = old.location().rsplit("search_path=").next().expect("a schema").trim_matches('\'');
    let server = std::env::var("SPINDLE_TEST_PG").expect("SPINDLE_TEST_PG");
    let mut raw = postgres::Client::connect(&server, postgres::NoTls).expect("connect");
    raw.batch_execute(&format!("CREATE SCHEMA {schema}; SET search_path = {schema};"))
        .expect("a schema");
    raw.batch_execute(include_str!("fixtures/schema_postgres_v4.sql")).expect("version 4");
    raw.batch_execute(VERSION_FOUR_ROWS).expect("its rows");
    drop(raw);
    let store = old.open();
    assert_version_four_rows_counted(&store)?;
    store.close()?;
    let fresh = common::SharedStore::new();
    fresh.open().close()?;
    assert_eq!(common::store_columns(&old), common::store_columns(&fresh));
    let objects = "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema()
                   AND indexname = 'graphs_finished'";
    assert_eq!(old.raw_count(objects), 1, "the upgrade made the index of finished graphs");
    Ok(())
}

/// The counts of batch-shaped calls (on PostgreSQL written at their batch's end, so that
/// batches sharing a tenant's turn lock the count's row only while they commit) are seen by a
/// read later in the same batch, and are not written for such a call that is rolled back (a
/// `CompleteBatch` one of whose leases is lost completes nothing).
#[test]
fn batch_calls_counts_are_seen_later_in_their_batch_and_go_with_a_rolled_back_call()
-> spindle::Result<()> {
    let clock = ManualClock::new(T0);
    let options = Options::default().clock(Arc::new(clock.clone())).writers(1);
    let store = common::new_store_exact(options);
    let queue = store.queue();
    for n in 0..4 {
        queue.enqueue(NewItem::new("q", json!(n)))?;
    }
    let claimed = queue.claim_batch("w", &["q"], 60_000, 4)?;
    assert_eq!(claimed.len(), 4);
    let done = |claim: &Claimed| Completion {
        id: claim.item.id.clone(),
        fence: claim.fence,
        result: json!(null),
    };
    // The writer is held, so that what this thread sends next waits in its mailbox and runs
    // in one batch: two completions, one of them refused whole, then a read of the counts
    // (on the writer: this thread's writes are unanswered when it is sent).
    let (held_tx, held_rx) = crossbeam_channel::bounded::<()>(1);
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
    let holder = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.transaction(move |_| {
                held_tx.send(()).expect("the test waits");
                release_rx.recv().expect("the test lets go");
                Ok(TxOutcome::Commit(()))
            })
        })
    };
    held_rx.recv().expect("the writer is held");
    let kept = store.submit(CompleteBatch { items: vec![done(&claimed[0]), done(&claimed[1])] })?;
    let lost = Completion { fence: claimed[3].fence + 1, ..done(&claimed[3]) };
    let refused = store.submit(CompleteBatch { items: vec![done(&claimed[2]), lost] })?;
    let counted = store.submit(Stats)?;
    release_tx.send(()).expect("the holder waits");
    holder.join().expect("the holder ends")?;
    kept.wait()?;
    assert!(refused.wait().is_err(), "a lost lease refuses the whole batch");
    let stats = counted.wait()?;
    let q = stats.iter().find(|stats| stats.queue == "q").expect("the queue's stats");
    assert_eq!((q.completed, q.claimed), (2, 2), "the read later in the batch sees the count");
    assert_queue_counts(&store, "after a batch with a refused completion");
    let after = queue.stats()?;
    let q = after.iter().find(|stats| stats.queue == "q").expect("the queue's stats");
    assert_eq!(q.completed, 2, "the refused call counted nothing");
    Ok(())
}
