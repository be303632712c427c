//! The inline mode (`Options::inline`): the caller's thread runs the store's loop for its own
//! call. The same operations, transactions, events, subscriptions and errors as a store on its
//! own thread; several threads stay correct (serialised); a call back into the store from inside
//! an operation is refused, not a deadlock; and a fresh in-memory store never sees a closed
//! one's data (its connection is reused, wiped).

mod common;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{assert_dense, read_stream};
use serde_json::json;
use spindle::{Error, ManualClock, NewItem, Options, Role, Store, Stream, TxOutcome};

const T0: i64 = 1_700_000_000_000;

fn inline_options(clock: &ManualClock) -> Options {
    Options::default().inline(true).clock(Arc::new(clock.clone()))
}

fn inline_store() -> Store {
    common::new_store_with(inline_options(&ManualClock::new(T0)))
}

#[test]
fn transactions_commit_or_roll_back_whole_and_errors_are_typed() {
    let store = inline_store();
    let stream = Stream::custom("s");
    let s = stream.clone();
    let kept = store
        .transaction(move |tx| {
            tx.append_event(&s, "a", json!(1))?;
            Ok(TxOutcome::Commit(tx.append_event(&s, "b", json!(2))?.seq))
        })
        .expect("commit");
    assert_eq!(kept, 2);
    let s = stream.clone();
    let rolled_back = store.transaction(move |tx| {
        tx.append_event(&s, "c", json!(3))?;
        Ok(TxOutcome::Rollback(()))
    });
    assert!(rolled_back.is_ok());
    assert_eq!(store.events().head(&stream).expect("head"), 2, "the rollback kept nothing");
    let bad = store.events().append(Stream::custom(""), "x", json!(0));
    assert!(matches!(bad, Err(Error::InvalidInput(_))), "{bad:?}");
    let missing = store.queue().get("no-such-item");
    assert!(matches!(missing, Err(Error::NotFound { .. })), "{missing:?}");
    assert_eq!(read_stream(&store, &stream).len(), 2);
    store.close().expect("close");
}

#[test]
fn a_call_back_into_the_store_from_inside_an_operation_is_refused_not_a_deadlock() {
    let store = inline_store();
    let inner = store.clone();
    let answer = store.transaction(move |_tx| {
        let nested = inner.events().head(Stream::custom("s"));
        let closed = inner.close();
        Ok(TxOutcome::Commit((nested, closed)))
    });
    let (nested, closed) = answer.expect("the closure ran");
    assert!(matches!(nested, Err(Error::InvalidInput(_))), "{nested:?}");
    assert!(matches!(closed, Err(Error::InvalidInput(_))), "{closed:?}");
    assert!(store.events().head(Stream::custom("s")).is_ok(), "the store still works");
}

#[test]
fn a_panicking_closure_is_answered_and_the_store_goes_on() {
    let store = inline_store();
    let panicked = store.transaction(|_tx| -> spindle::Result<TxOutcome<()>> { panic!("boom") });
    assert!(
        matches!(panicked, Err(Error::OpPanicked(ref m)) if m.contains("boom")),
        "{panicked:?}"
    );
    let appended = store.events().append(Stream::custom("s"), "a", json!(1)).expect("append");
    assert_eq!(appended.seq, 1);
}

#[test]
fn several_threads_share_an_inline_store_and_every_append_lands_once_in_order() {
    let store = inline_store();
    let stream = Stream::custom("shared");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (store, stream) = (store.clone(), stream.clone());
            thread::spawn(move || {
                (0..200)
                    .map(|i| {
                        let payload = json!({ "t": t, "i": i });
                        store.events().append(&stream, "n", payload).expect("append").seq
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    for handle in threads {
        let seqs = handle.join().expect("thread");
        assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "each caller's seqs grow");
    }
    let events = read_stream(&store, &stream);
    assert_eq!(events.len(), 800);
    assert_dense(&events);
    for t in 0..4 {
        let mine: Vec<u64> = events
            .iter()
            .filter(|e| e.payload["t"] == t)
            .map(|e| e.payload["i"].as_u64().expect("i"))
            .collect();
        assert_eq!(mine, (0..200).collect::<Vec<u64>>(), "thread {t}'s appends in its order");
    }
    store.close().expect("close");
}

#[test]
fn a_subscriber_gets_the_backlog_then_live_events_committed_by_another_thread() {
    let store = inline_store();
    let stream = Stream::custom("s");
    store.events().append(&stream, "old", json!(0)).expect("append");
    let mut subscription = store.subscribe(&stream, 0).expect("subscribe");
    let first = subscription.recv_timeout(Duration::from_secs(5)).expect("recv").expect("event");
    assert_eq!(first.event_type, "old");
    let writer = {
        let (store, stream) = (store.clone(), stream.clone());
        thread::spawn(move || {
            for i in 1..=50 {
                store.events().append(&stream, "new", json!(i)).expect("append");
            }
        })
    };
    let mut seqs = Vec::new();
    while seqs.len() < 50 {
        let event = subscription.recv_timeout(Duration::from_secs(5)).expect("recv");
        seqs.push(event.expect("an event within the timeout").seq);
    }
    writer.join().expect("writer");
    assert_eq!(seqs, (2..=51).collect::<Vec<u64>>());
}

#[test]
fn the_queue_and_the_clock_behave_as_on_a_store_with_its_own_thread() {
    let clock = ManualClock::new(T0);
    let store = common::new_store_with(inline_options(&clock));
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!({}))).expect("enqueue").id;
    let claimed = queue.claim("w", &["q"], 1_000).expect("claim").expect("an item");
    assert_eq!(claimed.item.id, id);
    clock.advance_ms(1_001);
    let lost = queue.complete(&id, claimed.fence, json!({}));
    assert!(matches!(lost, Err(Error::LeaseLost(_))), "{lost:?}");
    let again = queue.claim("w", &["q"], 1_000).expect("claim");
    assert!(again.is_none(), "the expired attempt waits for its backoff");
    clock.advance_ms(60_000);
    let again = queue.claim("w", &["q"], 1_000).expect("claim").expect("retried");
    assert!(again.fence > claimed.fence, "fences only grow");
}

#[test]
fn closing_is_final_for_every_handle_and_closing_again_is_ok() {
    let store = inline_store();
    let other = store.clone();
    store.close().expect("close");
    assert!(matches!(other.events().head(Stream::custom("s")), Err(Error::Closed)));
    assert!(other.close().is_ok());
}

#[test]
fn a_fresh_in_memory_store_never_sees_what_a_closed_one_held() {
    for inline in [true, false] {
        for _ in 0..3 {
            let options = Options::default().inline(inline);
            let store = common::new_store_with(options);
            assert_eq!(store.events().read_all(0, 10).expect("read").len(), 0);
            assert_eq!(store.queue().stats().expect("stats").len(), 0);
            assert!(store.graphs().list(Default::default()).expect("graphs").is_empty());
            let tenants = store.auth().tenants().expect("tenants");
            let ids: Vec<&str> = tenants.iter().map(|t| t.id.as_str()).collect();
            assert_eq!(ids, ["default"], "a fresh store's own rows only");
            assert!(store.auth().tokens().expect("tokens").is_empty());
            fill(&store);
            store.close().expect("close");
        }
    }
}

/// Rows in every domain, foreign keys included.
fn fill(store: &Store) {
    store.events().append(Stream::custom("s"), "a", json!(1)).expect("append");
    store.queue().enqueue(NewItem::new("q", json!({}))).expect("enqueue");
    let flows = store.workflows();
    flows.put_definition("w", "v1", json!({})).expect("define");
    let execution = flows.create_execution("w", "v1", json!({})).expect("create");
    flows.write_snapshot(&execution.id, 0, json!({})).expect("snapshot");
    let registration = spindle::Registration::new("p", "tool", json!({}));
    store.processes().register(registration).expect("register");
    store.graphs().create(json!({})).expect("graph");
    store.auth().create_tenant("acme", "Acme").expect("tenant");
    store.tenant("acme").expect("view").auth().create_token("t", Role::Admin, None).expect("token");
}

#[test]
fn a_call_back_into_an_outer_store_through_an_inner_one_is_refused_not_a_deadlock() {
    for outer_inline in [true, false] {
        let options = Options::default().inline(outer_inline);
        let outer = common::new_store_with(options);
        let inner = inline_store();
        let back = outer.clone();
        let answer = outer.transaction(move |_tx| {
            // The inner store's closure runs on this same thread and calls the outer store.
            let nested = inner.transaction(move |_tx| {
                Ok(TxOutcome::Commit(back.events().head(Stream::custom("s"))))
            });
            Ok(TxOutcome::Commit(nested))
        });
        let nested = answer.expect("outer closure ran").expect("inner closure ran");
        assert!(matches!(nested, Err(Error::InvalidInput(_))), "{nested:?}");
        assert!(outer.events().head(Stream::custom("s")).is_ok(), "the outer store goes on");
    }
}

#[test]
fn a_closure_that_returns_corrupt_does_not_stop_anyone_writing() {
    let store = inline_store();
    let said = store.transaction(|_tx| -> spindle::Result<TxOutcome<()>> {
        Err(Error::Corrupt("not really".into()))
    });
    assert!(matches!(said, Err(Error::Corrupt(_))));
    let appended = store.events().append(Stream::custom("s"), "a", json!(1));
    assert!(
        appended.is_ok(),
        "only SQLite's own report of corruption refuses writes: {appended:?}"
    );
}
