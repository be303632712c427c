//! Several stores open on one database, as processes on several hosts would have it: each
//! sees what the others commit (subscriptions, reads), and on PostgreSQL a blocking claim in
//! one is woken by an enqueue in another (LISTEN/NOTIFY; on SQLite another process's enqueue
//! rings no bell, see `Worker::poll_interval`).

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::SharedStore;
use serde_json::json;
use spindle::{NewItem, Stream};

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
