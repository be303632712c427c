//! The event log (DESIGN.md §5.1): dense sequences, global positions, idempotent appends,
//! reads by cursor, heads, truncation, and tenant isolation.

mod common;

use common::{append_n, assert_dense, read_stream};
use serde_json::json;
use spindle::{Error, Stream, StreamKind};

#[test]
fn sequences_are_dense_per_stream_and_positions_global() -> spindle::Result<()> {
    let store = common::new_store();
    let (a, b) = (Stream::custom("a"), Stream::graph("g1"));
    let first = store.events().append(&a, "x", json!(1))?;
    let second = store.events().append(&b, "x", json!(2))?;
    let third = store.events().append(&a, "x", json!(3))?;
    assert_eq!((first.seq, second.seq, third.seq), (1, 1, 2));
    assert!(first.position < second.position && second.position < third.position);
    assert!(!first.existed);
    let all = store.events().read_all(0, 10)?;
    let order: Vec<(StreamKind, u64)> = all.iter().map(|e| (e.stream.kind(), e.seq)).collect();
    assert_eq!(order, [(StreamKind::Custom, 1), (StreamKind::Graph, 1), (StreamKind::Custom, 2)]);
    Ok(())
}

#[test]
fn reads_page_after_a_cursor() -> spindle::Result<()> {
    let store = common::new_store();
    let s = Stream::execution("e1");
    append_n(&store, &s, 25);
    let page = store.events().read(&s, 10, 5)?;
    let seqs: Vec<u64> = page.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [11, 12, 13, 14, 15]);
    assert!(store.events().read(&s, 25, 5)?.is_empty());
    let all = store.events().read_all(page[4].position, 1000)?;
    assert_eq!(all.len(), 10);
    assert_eq!(store.events().head(&s)?, 25);
    assert_eq!(store.events().head(Stream::execution("never"))?, 0);
    Ok(())
}

#[test]
fn an_idempotent_append_writes_once() -> spindle::Result<()> {
    let store = common::new_store();
    let s = Stream::process("p1");
    let first = store.events().append_idempotent(&s, "done", json!({"a": 1, "b": 2}), "k1")?;
    // Same content (keys in another order): the first event comes back, nothing is written.
    let again = store.events().append_idempotent(&s, "done", json!({"b": 2, "a": 1}), "k1")?;
    assert_eq!((again.seq, again.position), (first.seq, first.position));
    assert!(again.existed && !first.existed);
    assert_eq!(store.events().head(&s)?, 1);

    let other_payload = store.events().append_idempotent(&s, "done", json!({"a": 9}), "k1");
    assert!(matches!(other_payload, Err(Error::Conflict(_))));
    let other_type = store.events().append_idempotent(&s, "failed", json!({"a": 1, "b": 2}), "k1");
    assert!(matches!(other_type, Err(Error::Conflict(_))));
    assert_eq!(store.events().head(&s)?, 1);
    assert_eq!(read_stream(&store, &s).len(), 1);

    // Truncation keeps the keys: a replay after it still writes nothing.
    store.events().append(&s, "more", json!(null))?;
    assert_eq!(store.events().truncate(&s, 100)?, 2);
    let replay = store.events().append_idempotent(&s, "done", json!({"a": 1, "b": 2}), "k1")?;
    assert!(replay.existed);
    assert_eq!((replay.seq, replay.position), (first.seq, first.position));
    assert_eq!(store.events().head(&s)?, 2);

    // The same key on another stream is another event.
    let elsewhere =
        store.events().append_idempotent(Stream::process("p2"), "done", json!(1), "k1")?;
    assert!(!elsewhere.existed);
    Ok(())
}

#[test]
fn truncation_deletes_before_a_seq_and_never_reuses_one() -> spindle::Result<()> {
    let store = common::new_store();
    let s = Stream::custom("t");
    append_n(&store, &s, 10);
    assert_eq!(store.events().truncate(&s, 4)?, 3);
    let left = read_stream(&store, &s);
    assert_eq!(left.first().map(|e| e.seq), Some(4));
    assert_eq!(store.events().truncate(&s, 100)?, 7);
    assert!(read_stream(&store, &s).is_empty());
    assert_eq!(store.events().head(&s)?, 10);
    assert_eq!(store.events().append(&s, "next", json!(null))?.seq, 11);
    Ok(())
}

#[test]
fn tenants_do_not_see_each_others_events() -> spindle::Result<()> {
    let store = common::new_store();
    let (acme, globex) = (store.tenant("acme")?, store.tenant("globex")?);
    let s = Stream::custom("orders");
    append_n(&acme, &s, 3);
    append_n(&globex, &s, 2);
    let idem = acme.events().append_idempotent(&s, "x", json!(1), "key")?;
    // The same key in another tenant is not a replay and not a conflict.
    let other = globex.events().append_idempotent(&s, "y", json!(2), "key")?;
    assert!(!idem.existed && !other.existed);

    assert_dense(&read_stream(&acme, &s));
    assert_eq!(acme.events().head(&s)?, 4);
    assert_eq!(globex.events().head(&s)?, 3);
    assert_eq!(store.events().head(&s)?, 0);
    assert!(acme.events().read_all(0, 100)?.iter().all(|e| e.payload != json!(2)));
    assert_eq!(globex.events().read_all(0, 100)?.len(), 3);
    assert_eq!(globex.events().truncate(&s, 100)?, 3);
    assert_eq!(read_stream(&acme, &s).len(), 4);
    Ok(())
}

#[test]
fn created_at_comes_from_the_injected_clock() -> spindle::Result<()> {
    let clock = spindle::ManualClock::new(1_700_000_000_000);
    let options = spindle::Options::default().clock(std::sync::Arc::new(clock.clone()));
    let store = common::new_store_with(options);
    let s = Stream::custom("c");
    store.events().append(&s, "a", json!(1))?;
    clock.advance_ms(5_000);
    store.events().append(&s, "b", json!(2))?;
    clock.set_ms(1_000); // backwards: stamps never go back
    store.events().append(&s, "c", json!(3))?;
    let stamps: Vec<i64> = read_stream(&store, &s).iter().map(|e| e.created_at_ms).collect();
    assert_eq!(stamps, [1_700_000_000_000, 1_700_000_005_000, 1_700_000_005_000]);
    Ok(())
}

#[test]
fn last_position_is_the_tenants_newest_event_and_reading_after_it_sees_only_new_ones()
-> spindle::Result<()> {
    let store = common::new_store();
    assert_eq!(store.events().last_position()?, 0);
    let other = store.tenant("other")?;
    let mine = store.events().append(Stream::custom("a"), "x", json!(1))?;
    other.events().append(Stream::custom("a"), "x", json!(2))?;
    assert_eq!(store.events().last_position()?, mine.position);
    assert!(other.events().last_position()? > mine.position);
    let next = store.events().append(Stream::custom("b"), "y", json!(3))?;
    let after = store.events().read_all(mine.position, 10)?;
    assert_eq!(after.iter().map(|e| e.position).collect::<Vec<_>>(), [next.position]);
    Ok(())
}
