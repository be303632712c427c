//! Many threads, many handles: 16 writers on 4 streams with a subscriber per stream (one of
//! them small and stalled, so the actor drops it and it must catch up by paging). Every stream
//! must be dense from 1 with no duplicates, and every subscriber must see every event exactly
//! once, in order.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::{SharedStore, assert_dense, read_stream};
use serde_json::{Value, json};
use spindle::{Event, Stream, Subscription};

const WRITERS: u64 = 16;
const PER_WRITER: u64 = 250;
const STREAMS: u64 = 4;

fn stream(n: u64) -> Stream {
    Stream::custom(format!("s{n}"))
}

/// What a writer appended: (writer, index) pairs.
fn key(event: &Event) -> (u64, u64) {
    let field = |name: &str| event.payload.get(name).and_then(Value::as_u64).expect("field");
    (field("w"), field("i"))
}

/// How a test subscriber reads.
#[derive(Clone)]
enum Pace {
    /// As fast as it can.
    Eager,
    /// A pause after every event while the writers run: it keeps falling behind its buffer.
    Slow,
    /// A few events, then nothing until every writer is done: it is certainly dropped and must
    /// catch up from its cursor.
    Stalled(Arc<AtomicBool>),
}

fn follow(
    mut sub: Subscription,
    expected: usize,
    pace: Pace,
    writers_done: Arc<AtomicBool>,
) -> thread::JoinHandle<Vec<Event>> {
    thread::spawn(move || {
        let mut seen = Vec::with_capacity(expected);
        while seen.len() < expected {
            match &pace {
                Pace::Stalled(done) if seen.len() == 3 => {
                    while !done.load(Ordering::SeqCst) {
                        thread::yield_now();
                    }
                }
                Pace::Slow if !writers_done.load(Ordering::SeqCst) => {
                    thread::sleep(Duration::from_micros(300));
                }
                _ => {}
            }
            let event = sub.recv_timeout(Duration::from_secs(60)).expect("recv").expect("event");
            seen.push(event);
        }
        assert!(sub.try_recv().expect("try_recv").is_none(), "no event past the last");
        seen
    })
}

#[test]
fn sixteen_writers_four_streams_every_subscriber_sees_each_event_once_in_order() {
    // A store file on SQLite (not one in memory), a schema on PostgreSQL.
    let shared = SharedStore::new();
    let store = shared.open();
    let writers_done = Arc::new(AtomicBool::new(false));
    let per_stream = (WRITERS * PER_WRITER / STREAMS) as usize;
    let followers: Vec<_> = (0..STREAMS)
        .map(|n| {
            let (buffer, pace) = match n {
                0 => (4, Pace::Slow),
                1 => (4, Pace::Stalled(Arc::clone(&writers_done))),
                _ => (1024, Pace::Eager),
            };
            let sub = store.subscribe_with_buffer(stream(n), 0, buffer).expect("subscribe");
            follow(sub, per_stream, pace, Arc::clone(&writers_done))
        })
        .collect();
    let total = (WRITERS * PER_WRITER) as usize;
    let all_sub = store.subscribe_all_with_buffer(0, 16).expect("subscribe_all");
    let all_follower = follow(all_sub, total, Pace::Eager, Arc::clone(&writers_done));

    let barrier = Arc::new(Barrier::new(WRITERS as usize));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, barrier) = (store.clone(), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                for i in 0..PER_WRITER {
                    let s = stream((w + i) % STREAMS);
                    store.events().append(&s, "w", json!({"w": w, "i": i})).expect("append");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("writer");
    }
    writers_done.store(true, Ordering::SeqCst);

    let mut everything = BTreeSet::new();
    for (n, follower) in followers.into_iter().enumerate() {
        let seen = follower.join().expect("follower");
        let stored = read_stream(&store, &stream(n as u64));
        assert_dense(&stored);
        assert_dense(&seen);
        assert_eq!(seen, stored, "subscriber {n} saw exactly the stored stream, in order");
        let keys: BTreeSet<_> = stored.iter().map(key).collect();
        assert_eq!(keys.len(), stored.len(), "no duplicate appends on stream {n}");
        everything.extend(keys);
    }
    assert_eq!(everything.len() as u64, WRITERS * PER_WRITER, "every append is stored");

    let positions: Vec<u64> =
        all_follower.join().expect("all follower").iter().map(|e| e.position).collect();
    assert_eq!(positions.len(), total);
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "log order, no repeats");
}

#[test]
fn a_subscription_resumes_from_its_cursor_without_gaps_or_repeats() -> spindle::Result<()> {
    let store = common::new_store();
    let s = Stream::custom("resume");
    common::append_n(&store, &s, 30);
    let mut first = store.subscribe(&s, 0)?;
    for expected in 1..=12 {
        assert_eq!(first.recv()?.seq, expected);
    }
    let cursor = first.cursor();
    drop(first);
    common::append_n(&store, &s, 5);
    let mut second = store.subscribe(&s, cursor)?;
    let rest: Vec<u64> = (0..23).map(|_| second.recv().map(|e| e.seq)).collect::<Result<_, _>>()?;
    assert_eq!(rest, (13..=35).collect::<Vec<_>>());
    assert!(second.try_recv()?.is_none());
    Ok(())
}

#[test]
fn two_subscribers_of_one_stream_both_see_every_event() -> spindle::Result<()> {
    let store = common::new_store();
    let s = Stream::graph("g");
    let mut a = store.subscribe(&s, 0)?;
    let mut b = store.subscribe_with_buffer(&s, 0, 1)?;
    assert!(a.try_recv()?.is_none() && b.try_recv()?.is_none());
    common::append_n(&store, &s, 40);
    let seqs_a: Vec<u64> = (0..40).map(|_| a.recv().map(|e| e.seq)).collect::<Result<_, _>>()?;
    let seqs_b: Vec<u64> = (0..40).map(|_| b.recv().map(|e| e.seq)).collect::<Result<_, _>>()?;
    assert_eq!(seqs_a, (1..=40).collect::<Vec<_>>());
    assert_eq!(seqs_a, seqs_b);
    Ok(())
}

#[test]
fn subscriptions_see_only_their_tenant() -> spindle::Result<()> {
    let store = common::new_store();
    let (acme, globex) = (store.tenant("acme")?, store.tenant("globex")?);
    let s = Stream::custom("shared-name");
    let mut acme_all = acme.subscribe_all(0)?;
    let mut acme_stream = acme.subscribe(&s, 0)?;
    common::append_n(&globex, &s, 5);
    common::append_n(&acme, &s, 2);
    let seen: Vec<u64> =
        (0..2).map(|_| acme_stream.recv().map(|e| e.seq)).collect::<Result<_, _>>()?;
    assert_eq!(seen, [1, 2]);
    assert_eq!(acme_all.recv()?.seq, 1);
    assert_eq!(acme_all.recv()?.seq, 2);
    assert!(acme_all.try_recv()?.is_none());
    assert!(acme_stream.try_recv()?.is_none());
    Ok(())
}

#[test]
fn a_live_subscriber_sees_events_another_connection_wrote_without_a_gap() -> spindle::Result<()> {
    let shared = SharedStore::new();
    let store = shared.open();
    let other = shared.open(); // another connection to the store, as another process has
    let s = Stream::custom("shared");
    let mut follower = store.subscribe(&s, 0)?;
    assert!(follower.try_recv()?.is_none(), "caught up and live");

    common::append_n(&other, &s, 3);
    // Nothing is written through this store: the actor must notice the foreign commits itself.
    for expected in 1..=3 {
        let event = follower.recv_timeout(Duration::from_secs(10))?.expect("foreign event");
        assert_eq!(event.seq, expected);
    }
    common::append_n(&other, &s, 2);
    store.events().append(&s, "local", json!(null))?;
    let seqs: Vec<u64> =
        (0..3).map(|_| follower.recv().map(|e| e.seq)).collect::<Result<_, _>>()?;
    assert_eq!(seqs, [4, 5, 6], "the local event does not jump over the foreign ones");
    other.close()?;
    Ok(())
}
