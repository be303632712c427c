//! Several stores open on one database, as processes on several hosts would have it: each
//! sees what the others commit (subscriptions, reads), and on PostgreSQL a blocking claim in
//! one is woken by an enqueue in another (LISTEN/NOTIFY; on SQLite another process's enqueue
//! rings no bell, see `Worker::poll_interval`).

// Most tests here need a server, and the `postgres` feature to reach it.
#![cfg_attr(not(feature = "postgres"), allow(unused_imports, dead_code))]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::SharedStore;
use serde_json::json;
use spindle::queue::{Complete, CompleteBatch, Completion, Get};
use spindle::{
    Error, GraphEvent, GraphStatus, ItemStatus, ManualClock, NewItem, NodeOptions, NodeSpec,
    NodeStatus, Options, Store, Stream, TenantStatus, TenantUpdate, TxOutcome,
};

/// Long enough that a wait that times out is a missed wake-up, not a slow machine.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn a_subscriber_sees_every_event_another_store_appends_in_order() -> spindle::Result<()> {
    let shared = SharedStore::new();
    let (reader, writer) = (shared.open(), shared.open());
    let stream = Stream::custom("across");
    let mut subscription = reader.subscribe(&stream, 0)?;
    // The subscriber goes live on its store before the other store writes.
    reader.events().append(&stream, "first", json!(0))?;
    assert_eq!(subscription.recv_timeout(PATIENCE)?.expect("first").event_type, "first");
    for i in 1..=20 {
        writer.events().append(&stream, "n", json!(i))?;
    }
    for i in 1..=20 {
        let event = subscription.recv_timeout(PATIENCE)?.expect("an event of the other store");
        assert_eq!((event.seq, event.payload.clone()), (i + 1, json!(i)));
    }
    Ok(())
}

/// A store's last batch saw a tenant active; another store suspends it. On PostgreSQL the
/// first store's next write of the tenant runs before the status is read (its batch's start
/// goes with the write's first statement): it must still be refused, and leave nothing.
#[test]
fn a_write_of_a_tenant_another_store_suspended_since_is_refused_and_leaves_nothing()
-> spindle::Result<()> {
    let shared = SharedStore::new();
    let (writer, admin) = (shared.open(), shared.open());
    admin.auth().create_tenant("acme", "Acme")?;
    let acme = writer.tenant("acme")?;
    let stream = Stream::custom("orders");
    acme.events().append(&stream, "placed", json!(1))?;
    let suspended = TenantUpdate::default().status(TenantStatus::Suspended);
    admin.auth().update_tenant("acme", suspended)?;
    let append = acme.events().append(&stream, "placed", json!(2));
    assert!(matches!(append, Err(Error::TenantSuspended(_))), "{append:?}");
    let enqueue = acme.queue().enqueue(NewItem::new("q", json!({})));
    assert!(matches!(enqueue, Err(Error::TenantSuspended(_))), "{enqueue:?}");
    let appended: Vec<_> = acme.events().read(&stream, 0, 10)?;
    assert_eq!(appended.len(), 1, "nothing of the refused append");
    assert!(acme.events().read(Stream::queue("q"), 0, 10)?.is_empty(), "nor of the enqueue");
    assert!(acme.queue().stats()?.iter().all(|queue| queue.queue != "q"), "no item");
    writer.events().append(&stream, "placed", json!(3))?;
    let active = TenantUpdate::default().status(TenantStatus::Active);
    admin.auth().update_tenant("acme", active)?;
    acme.events().append(&stream, "placed", json!(4))?;
    assert_eq!(acme.events().read(&stream, 0, 10)?.len(), 2, "active again");
    Ok(())
}

#[test]
fn appends_from_two_stores_to_one_stream_stay_dense_with_ordered_positions() -> spindle::Result<()>
{
    let shared = SharedStore::new();
    let stores = [shared.open(), shared.open()];
    let stream = Stream::custom("both");
    let writers: Vec<_> = stores
        .iter()
        .map(|store| {
            let (store, stream) = (store.clone(), stream.clone());
            thread::spawn(move || {
                for i in 0..200 {
                    store.events().append(&stream, "n", json!(i)).expect("append");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("writer");
    }
    let events = common::read_stream(&stores[0], &stream);
    common::assert_dense(&events);
    assert_eq!(events.len(), 400);
    let positions: Vec<u64> = events.iter().map(|event| event.position).collect();
    assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "positions follow seqs");
    Ok(())
}

#[test]
fn a_blocking_claim_is_woken_by_another_stores_enqueue() -> spindle::Result<()> {
    if !common::on_postgres() {
        // SQLite: another process's enqueue rings no bell here; the claim waits for its timeout
        // or the next due time it knows of (workers poll, `Worker::poll_interval`).
        return Ok(());
    }
    let shared = SharedStore::new();
    let (waiter, producer) = (shared.open(), shared.open());
    let started = Instant::now();
    let claim = thread::spawn(move || {
        waiter.queue().claim_wait("w", &["wake"], 30_000, PATIENCE).expect("claim_wait")
    });
    producer.queue().enqueue(NewItem::new("wake", json!("hello")))?;
    let claimed = claim.join().expect("claimer").expect("woken before the timeout");
    assert_eq!(claimed.item.payload, json!("hello"));
    assert!(started.elapsed() < PATIENCE, "woken by the notice, not by the timeout");
    Ok(())
}

#[test]
fn both_engines_schemas_have_the_same_tables_and_columns() {
    if !common::on_postgres() {
        // Compared from the PostgreSQL run, which makes a SQLite store to compare with.
        return;
    }
    let postgres = SharedStore::new();
    postgres.open().close().expect("close");
    let mut on_postgres = common::store_columns(&postgres);
    let meta: Vec<_> =
        on_postgres.iter().filter(|(table, _)| table == "spindle_meta").cloned().collect();
    assert_eq!(meta.len(), 2, "the version table is PostgreSQL's own: {meta:?}");
    on_postgres.retain(|(table, _)| table != "spindle_meta");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    spindle::Store::open(&path).expect("open").close().expect("close");
    let on_sqlite = common::sqlite_columns(&path);
    assert_eq!(on_postgres, on_sqlite);
}

/// A graph of one node `a` in `store`'s tenant, started, with a deadline `timeout_ms` away
/// (none for `None`).
fn started_graph(store: &Store, timeout_ms: Option<i64>) -> spindle::Result<String> {
    let graphs = store.graphs();
    let graph = graphs.create(json!({}))?;
    graphs.add_node(&graph, NodeSpec::task(json!({})), NodeOptions::new().id("a"))?;
    graphs.set_timeout(&graph, timeout_ms)?;
    graphs.start(&graph)?;
    Ok(graph)
}

#[test]
fn recovery_at_open_leaves_alone_the_work_of_stores_still_open() -> spindle::Result<()> {
    // On SQLite these are stores of one process on one file: each holds the presence lock
    // through a file description of its own, so they see each other as processes would.
    let shared = SharedStore::new();
    let first = shared.open();
    let graph = started_graph(&first, None)?;
    first.graphs().start_node(&graph, "a")?;
    let running = |store: &Store| store.graphs().node(&graph, "a").map(|node| node.status);
    // Another store opening (recovering by default) while the first runs the node.
    let second = shared.open();
    assert_eq!(running(&second)?, NodeStatus::Running, "a live store's node is not reset");
    drop(first);
    let third = shared.open();
    assert_eq!(running(&third)?, NodeStatus::Running, "the second store is still open");
    drop((second, third));
    // Alone now: the node whose store is gone is interrupted work, and is made ready again.
    let alone = shared.open();
    assert_eq!(running(&alone)?, NodeStatus::Ready);
    Ok(())
}

#[cfg(feature = "postgres")]
#[test]
fn a_deadline_sweep_passes_over_a_tenant_another_process_writes_and_comes_back()
-> spindle::Result<()> {
    if !common::on_postgres() {
        return Ok(()); // SQLite's one writer never meets another in the middle of a batch.
    }
    let clock = ManualClock::new(1_000_000);
    let shared = SharedStore::new();
    let store = shared.open_with(Options::default().clock(Arc::new(clock.clone())));
    let acme = store.tenant("acme")?;
    let (ours, theirs) = (started_graph(&store, Some(5_000))?, started_graph(&acme, Some(5_000))?);
    let mut our_events = store.subscribe(Stream::graph(&ours), 0)?;
    let mut their_events = acme.subscribe(Stream::graph(&theirs), 0)?;
    // Another process in the middle of a transaction that writes tenant acme.
    let mut raw = shared.raw_client();
    let mut other = raw.transaction().expect("raw transaction");
    let hold = "SELECT pg_advisory_xact_lock(1397771844, hashtext(current_schema() || '/acme'))";
    other.execute(hold, &[]).expect("hold acme's writers");
    // Every writing batch of the store sends a notice on its channel: a listener counts them.
    let mut listener = shared.raw_client();
    listener.batch_execute(&format!("LISTEN {}", channel_of(&shared))).expect("listen");
    clock.advance_ms(5_000);
    wait_terminal(&mut our_events);
    // The sweep that failed our graph did not wait for acme's writer (that could deadlock).
    assert_eq!(acme.graphs().get(&theirs)?.status, GraphStatus::Running);
    // Nor does it sweep again before the retry is due by the store's clock (still where it
    // was): acme's overdue graph must not make the alarm due at once, again and again.
    let heard = {
        use postgres::fallible_iterator::FallibleIterator;
        let mut notices = listener.notifications();
        notices.timeout_iter(Duration::from_millis(500)).take(50).count().expect("notices")
    };
    assert!(heard <= 2, "{heard} writing batches while the store's clock stood still");
    other.commit().expect("release acme's writers");
    // The sweep tries acme again a moment later (by the store's clock).
    clock.advance_ms(1_000);
    wait_terminal(&mut their_events);
    assert_eq!(acme.graphs().get(&theirs)?.status, GraphStatus::Failed);
    Ok(())
}

/// The channel the store's writing batches notify on: `spindle_` and the first 12 bytes of
/// the SHA-256 of its schema's name, in hex.
#[cfg(feature = "postgres")]
fn channel_of(shared: &SharedStore) -> String {
    use sha2::{Digest, Sha256};
    let schema: String =
        shared.raw_client().query_one("SELECT current_schema()::text", &[]).expect("raw").get(0);
    let digest = Sha256::digest(schema.as_bytes());
    let hex: String = digest[..12].iter().map(|byte| format!("{byte:02x}")).collect();
    format!("spindle_{hex}")
}

/// Reads a graph's events until its terminal one.
fn wait_terminal(events: &mut spindle::Subscription) {
    loop {
        let event = events.recv_timeout(PATIENCE).expect("recv").expect("an event in time");
        if GraphEvent::from_event(&event).expect("a graph event").is_terminal() {
            return;
        }
    }
}

#[cfg(feature = "postgres")]
#[test]
fn a_store_connects_again_after_the_server_ends_its_session() -> spindle::Result<()> {
    if !common::on_postgres() {
        return Ok(());
    }
    let shared = SharedStore::new();
    let store = shared.open_with(spindle::Options::default().readers(2).writers(2));
    let stream = Stream::custom("dropped");
    store.events().append(&stream, "before", json!(1))?;
    // An administrator ends the store's sessions (their application_name names its schema):
    // each writer's and each reader's.
    let mut raw = shared.raw_client();
    let sessions =
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'spindle ' || current_schema()";
    let ended = raw
        .query(&format!("SELECT pg_terminate_backend(pid) FROM ({sessions}) s"), &[])
        .expect("terminate");
    assert_eq!(ended.len(), 4, "the store has two writers' sessions and two readers'");
    wait_until("the sessions end", || raw.query(sessions, &[]).expect("sessions").is_empty());
    let appended = store.events().append(&stream, "after", json!(2))?;
    assert_eq!(appended.seq, 2, "the next call runs on a new session");
    let again = raw.query(sessions, &[]).expect("sessions").len();
    assert_eq!(again, 1, "the session of this thread's writer, again");
    // Reads connect again too, each reader when it next runs a read.
    for _ in 0..4 {
        assert_eq!(common::read_stream(&store, &stream).len(), 2);
    }
    Ok(())
}

#[cfg(feature = "postgres")]
#[test]
fn a_connection_lost_in_the_middle_of_a_batch_fails_that_batch_only() -> spindle::Result<()> {
    if !common::on_postgres() {
        return Ok(());
    }
    let shared = SharedStore::new();
    let store = shared.open();
    let stream = Stream::custom("cut");
    store.events().append(&stream, "before", json!(1))?;
    // The batch's own session ends under it (as a server restart would end it).
    let cut = store.transaction(|tx| {
        tx.append_event(Stream::custom("cut"), "lost", json!(2))?;
        tx.postgres()?.execute("SELECT pg_terminate_backend(pg_backend_pid())", &[])?;
        Ok(TxOutcome::Commit(()))
    });
    assert!(cut.is_err(), "the batch whose session ended fails: {cut:?}");
    // The store is not left refusing calls: the next batch runs on a new session.
    let appended = store.events().append(&stream, "after", json!(3))?;
    assert_eq!(appended.seq, 2, "the lost batch's append is not there");
    let types: Vec<String> =
        common::read_stream(&store, &stream).into_iter().map(|event| event.event_type).collect();
    assert_eq!(types, ["before", "after"]);
    Ok(())
}

#[cfg(feature = "postgres")]
#[test]
fn a_tenant_named_like_sql_stays_a_name_whatever_the_session_reads_literals_as()
-> spindle::Result<()> {
    if !common::on_postgres() {
        return Ok(());
    }
    let shared = SharedStore::new();
    let store = shared.open();
    // A closure's own SQL may change how the session reads string literals.
    store.transaction(|tx| {
        let off = "SELECT set_config('standard_conforming_strings', 'off', false)";
        tx.postgres()?.query(off, &[])?;
        Ok(TxOutcome::Commit(()))
    })?;
    for name in [r"o'brien\", r"x\'); SELECT pg_advisory_unlock_all(); --"] {
        let tenant = store.tenant(name)?;
        let stream = Stream::custom("named");
        tenant.events().append(&stream, "n", json!(name))?;
        let events = common::read_stream(&tenant, &stream);
        assert_eq!(events.len(), 1, "{name}");
        assert_eq!(events[0].payload, json!(name));
        // A batch call shares the tenant's turn, and its events take the tenant's order lock,
        // whose statement names the tenant too.
        tenant.queue().enqueue_batch(vec![NewItem::new("named", json!(name))])?;
        let pending: u64 = tenant.queue().stats()?.iter().map(|stats| stats.pending).sum();
        assert_eq!(pending, 1, "{name}");
        assert_eq!(common::read_stream(&tenant, &Stream::queue("named")).len(), 1, "{name}");
    }
    Ok(())
}

/// Waits (at most `PATIENCE`) until `done` says so; fails naming `what` did not happen.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not in time");
        thread::yield_now();
    }
}

/// Waits until a session of the store at `shared` waits for a lock another process holds.
#[cfg(feature = "postgres")]
fn wait_for_a_lock(shared: &SharedStore, what: &str) {
    let mut watcher = shared.raw_client();
    let waits = "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE NOT l.granted AND a.application_name = 'spindle ' || current_schema()";
    wait_until(what, || !watcher.query(waits, &[]).expect("locks").is_empty());
}

/// A claimed item of `store`'s, as (id, fence).
fn claimed_item(store: &Store) -> spindle::Result<(String, u64)> {
    store.queue().enqueue(NewItem::new("q", json!(1)))?;
    let claimed = store.queue().claim("w", &["q"], 600_000)?.expect("the item");
    Ok((claimed.item.id, claimed.fence))
}

/// Runs `work` (on a thread of its own) while another process makes the store's next writing
/// batch lose a deadlock: it holds item `id`'s row, and once the store's batch (holding its
/// tenant's writers) waits for that row, asks for those writers. The other process looks for
/// deadlocks only after a minute, so the store's side finds this one, and is its victim.
#[cfg(feature = "postgres")]
fn with_a_lost_deadlock<T: Send + 'static>(
    shared: &SharedStore,
    id: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    let mut raw = shared.raw_client();
    raw.batch_execute("SET deadlock_timeout = '60s'").expect("deadlock_timeout");
    let mut other = raw.transaction().expect("raw transaction");
    let row = "SELECT 1 FROM queue_items WHERE item_id = $1 FOR UPDATE";
    other.query(row, &[&id]).expect("hold the row");
    let working = thread::spawn(work);
    let mut watcher = shared.raw_client();
    let waiting = "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                   WHERE NOT l.granted AND a.application_name = 'spindle ' || current_schema()";
    wait_until("the store waits for the row", || {
        !watcher.query(waiting, &[]).expect("locks").is_empty()
    });
    let writers =
        "SELECT pg_advisory_xact_lock(1397771844, hashtext(current_schema() || '/default'))";
    other.query(writers, &[]).expect("granted once the store's transaction gave up");
    other.commit().expect("the other process commits");
    working.join().expect("the work's thread")
}

#[cfg(feature = "postgres")]
#[test]
fn an_operation_that_loses_a_deadlock_runs_again_and_succeeds() -> spindle::Result<()> {
    if !common::on_postgres() {
        return Ok(()); // SQLite has one writer: no transaction of its waits for another's.
    }
    let shared = SharedStore::new();
    let store = shared.open();
    let (id, fence) = claimed_item(&store)?;
    // One caller sends the completion and, right after it, a read of the item, both in one
    // batch (the store is held busy until both are sent): ops one thread submits run in the
    // order it sent them, a retried one too.
    let (caller, item) = (store.clone(), id.clone());
    let read = with_a_lost_deadlock(&shared, &id, move || -> spindle::Result<ItemStatus> {
        let (started, release) = (mpsc::channel(), mpsc::channel::<()>());
        let (started_tx, release_rx) = (started.0, release.1);
        let parker = caller.clone();
        let parked = thread::spawn(move || {
            parker.transaction(move |_| {
                started_tx.send(()).expect("started");
                release_rx.recv().expect("released");
                Ok(TxOutcome::Commit(()))
            })
        });
        started.1.recv().expect("the store is busy");
        let completed = caller.submit(Complete { id: item.clone(), fence, result: json!(1) })?;
        let read = caller.submit(Get { id: item })?;
        release.0.send(()).expect("release");
        parked.join().expect("parked")?;
        completed.wait()?;
        Ok(read.wait()?.status)
    });
    // The store's transaction lost the deadlock and was rolled back; the completion ran again
    // in the next one, and its caller never saw the loss.
    assert!(matches!(read, Ok(ItemStatus::Completed)), "the read after it sees it: {read:?}");
    assert_eq!(store.queue().get(&id)?.status, ItemStatus::Completed);
    Ok(())
}

#[cfg(feature = "postgres")]
#[test]
fn a_transaction_closure_that_loses_a_deadlock_runs_once_and_is_answered_busy()
-> spindle::Result<()> {
    if !common::on_postgres() {
        return Ok(());
    }
    let shared = SharedStore::new();
    let store = shared.open();
    let (id, fence) = claimed_item(&store)?;
    let runs = Arc::new(AtomicUsize::new(0));
    let (caller, item, counted) = (store.clone(), id.clone(), Arc::clone(&runs));
    let answer = with_a_lost_deadlock(&shared, &id, move || {
        caller.transaction(move |tx| {
            counted.fetch_add(1, Ordering::SeqCst);
            tx.exec(Complete { id: item, fence, result: json!(1) })?;
            Ok(TxOutcome::Commit(()))
        })
    });
    assert!(matches!(answer, Err(Error::Busy)), "{answer:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "a closure runs once");
    assert_eq!(store.queue().get(&id)?.status, ItemStatus::Claimed, "nothing of it was kept");
    Ok(())
}

#[cfg(feature = "postgres")]
#[test]
fn a_read_only_store_creates_nothing_where_there_is_no_store() {
    if !common::on_postgres() {
        return;
    }
    let shared = SharedStore::new();
    let options = Options::default().read_only(true);
    let refused = Store::connect_with(shared.location(), options);
    assert!(matches!(refused, Err(Error::NotADatabase)), "{refused:?}");
    let schema: Option<String> =
        shared.raw_client().query_one("SELECT current_schema()::text", &[]).expect("raw").get(0);
    assert_eq!(schema, None, "the schema was not created");
}

#[test]
fn a_unique_key_enqueued_by_several_stores_at_once_makes_one_item() -> spindle::Result<()> {
    let shared = SharedStore::new();
    let stores: Vec<Store> = (0..3).map(|_| shared.open()).collect();
    let mut threads = Vec::new();
    for (n, store) in stores.iter().enumerate() {
        for t in 0..4 {
            let store = store.clone();
            threads.push(thread::spawn(move || {
                let item = NewItem::new("once", json!({ "from": n * 10 + t }))
                    .unique(spindle::Unique::new("the-key").per(86_400_000));
                store.queue().enqueue(item).map(|enqueued| enqueued.id)
            }));
        }
    }
    let ids: Vec<String> =
        threads.into_iter().map(|t| t.join().expect("thread")).collect::<spindle::Result<_>>()?;
    assert!(ids.iter().all(|id| *id == ids[0]), "one holder for every enqueue: {ids:?}");
    let stats = stores[0].queue().stats()?;
    assert_eq!(stats.iter().map(|s| s.pending).sum::<u64>(), 1, "one item: {stats:?}");
    for store in stores {
        store.close()?;
    }
    Ok(())
}

/// Two stores' batches of queue calls in one tenant overlap (batch-shaped queue calls share
/// the tenant's writers' turn; `PgConn::begin`): the first store's completion waits for a row
/// another process holds, its batch open, while the second store enqueues, claims and
/// completes, each call answered after its commit. Every call appends the items' events, so
/// both took positions in the tenant's log: a subscriber to it sees every event once, in the
/// log's order.
#[cfg(feature = "postgres")]
#[test]
fn queue_batches_of_two_stores_in_one_tenant_overlap_and_a_subscriber_sees_every_event_once()
-> spindle::Result<()> {
    if !common::on_postgres() {
        return Ok(()); // SQLite's one writer never runs two batches at once.
    }
    let shared = SharedStore::new();
    let (first, second) = (shared.open(), shared.open());
    let mut log = first.subscribe_all(0)?;
    let (id, fence) = claimed_item(&first)?;
    // Another process holds the item's row: the first store's completion waits for it, in the
    // middle of its batch (which holds its share of the tenant's turn).
    let mut raw = shared.raw_client();
    let mut other = raw.transaction().expect("raw transaction");
    other.query("SELECT 1 FROM queue_items WHERE item_id = $1 FOR UPDATE", &[&id]).expect("row");
    let completion = Completion { id: id.clone(), fence, result: json!(1) };
    let mut waiting = first.submit(CompleteBatch { items: vec![completion] })?;
    wait_for_a_lock(&shared, "the first store's batch waits for the row");
    // The second store's calls run meanwhile (on a thread: before, they waited for the first
    // store's batch to end, and a test that hung would say nothing).
    let (done_tx, done_rx) = mpsc::channel();
    let worker = second.clone();
    thread::spawn(move || {
        let run = || -> spindle::Result<()> {
            let queue = worker.queue();
            queue.enqueue_batch((0..5).map(|n| NewItem::new("other", json!(n))).collect())?;
            let claimed = queue.claim_batch("w2", &["other"], 600_000, 5)?;
            assert_eq!(claimed.len(), 5);
            let done = claimed.into_iter().map(|c| Completion {
                id: c.item.id,
                fence: c.fence,
                result: json!(null),
            });
            queue.complete_batch(done.collect())
        };
        drop(done_tx.send(run()));
    });
    let done = done_rx.recv_timeout(PATIENCE).expect("the second store's calls ran meanwhile");
    done?;
    assert!(waiting.try_wait().is_none(), "the first store's batch is still open");
    other.commit().expect("the other process lets the row go");
    waiting.wait()?;
    assert_eq!(first.queue().get(&id)?.status, ItemStatus::Completed);
    // The log as a fresh read has it, and as the subscriber saw it.
    let written = first.events().read_all(0, 1_000)?;
    let positions: Vec<u64> = written.iter().map(|event| event.position).collect();
    assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "{positions:?}");
    // Item "q": enqueued, claimed, completed; the five of "other" in one event a call.
    assert_eq!(written.len(), 6, "{written:?}");
    assert_eq!(written.last().map(|event| event.stream.clone()), Some(Stream::queue("q")));
    let mut seen = Vec::new();
    while seen.len() < written.len() {
        let event = log.recv_timeout(PATIENCE)?.expect("an event of the log in time");
        seen.push(event.position);
    }
    assert_eq!(seen, positions, "every event once, in the log's order");
    assert_eq!(log.try_recv()?, None, "and nothing more");
    Ok(())
}

/// A batch-shaped call leaves its completion's count for its batch's commit. Another process
/// holds that count's row and then waits for the item's row the call completed: the two
/// deadlock at the commit, the server ends the store's side (its deadlock check comes first),
/// and the store runs the call again in its next transaction, once the other process has
/// ended; the caller is answered once, `Ok`, and the item and its count are as one completion
/// leaves them.
#[cfg(feature = "postgres")]
#[test]
fn a_batch_call_whose_commit_loses_a_deadlock_runs_again_and_is_answered_once()
-> spindle::Result<()> {
    if !common::on_postgres() {
        return Ok(()); // SQLite's one writer never meets another's lock.
    }
    let shared = SharedStore::new();
    let store = shared.open();
    // A first completion makes the count's row; then the item the call completes.
    let (id, fence) = claimed_item(&store)?;
    store.queue().complete(&id, fence, json!(null))?;
    let (id, fence) = claimed_item(&store)?;
    let mut raw = shared.raw_client();
    let mut other = raw.transaction().expect("raw transaction");
    // The store's own deadlock check (1 s, the server's default) comes before this one.
    other.batch_execute("SET LOCAL deadlock_timeout = '60s'").expect("deadlock timeout");
    let counts = "SELECT total FROM queue_counts WHERE queue = 'q' AND status = 'completed'
                  FOR UPDATE";
    assert_eq!(other.query(counts, &[]).expect("the count's row").len(), 1);
    let completion = Completion { id: id.clone(), fence, result: json!(2) };
    let mut sent = store.submit(CompleteBatch { items: vec![completion] })?;
    wait_for_a_lock(&shared, "the store's commit waits for the count's row");
    // The other process now waits for the item's row, which the store's batch holds.
    other
        .execute("UPDATE queue_items SET updated_at_ms = updated_at_ms WHERE item_id = $1", &[&id])
        .expect("the item's row, once the store's side of the deadlock is ended");
    assert!(sent.try_wait().is_none(), "the call runs again after the other process ends");
    other.commit().expect("the other process ends");
    sent.wait()?;
    assert_eq!(store.queue().get(&id)?.status, ItemStatus::Completed);
    let stats = store.queue().stats()?;
    let q = stats.iter().find(|stats| stats.queue == "q").expect("the queue's stats");
    assert_eq!(q.completed, 2, "counted once");
    assert!(store.metrics()?.conflict_retries >= 1, "the call ran again");
    common::assert_queue_counts(&store, "after the deadlock");
    Ok(())
}
