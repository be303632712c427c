//! Several writer sessions in one process (`Options::writers`, PostgreSQL): one process's
//! callers do not queue behind one session, a thread's ops keep their order and its reads see
//! its writes, and a subscriber still sees every event once, in order, whichever session wrote
//! it. On SQLite (one writer whatever the option says) the same calls behave as they always
//! did; the option's bounds are checked on both engines.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, bounded};
use serde_json::json;
use spindle::log::Append;
use spindle::queue::{Enqueue, WorkerPool};
use spindle::{Error, NewItem, Options, Store, Stream, TxOutcome, WRITERS_MAX};

/// Long enough that a wait that times out is a lost reply, not a slow machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// How long a call stuck behind a held writer is given to come back anyway.
const STUCK: Duration = Duration::from_millis(300);

#[test]
fn writers_out_of_bounds_are_refused_and_open_nothing() {
    for writers in [0, WRITERS_MAX + 1] {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("store.db");
        let opened = Store::open_with(&path, Options::default().writers(writers));
        assert!(matches!(opened, Err(Error::InvalidInput(_))), "writers {writers}: {opened:?}");
        assert!(!path.exists(), "writers {writers}: nothing is made");
    }
}

/// A transaction held open on one writer's thread (a closure waiting for the test) holds back
/// only the calls of threads on that writer: with two writers, a call from some other thread
/// is answered meanwhile, in another tenant (the held one holds its own tenant's turn). With
/// one writer, or on SQLite, none is. Every call is answered once the hold ends.
#[test]
fn a_call_of_another_thread_is_answered_while_one_writer_is_held() -> spindle::Result<()> {
    // Fresh threads take writers in turn, among other tests' threads: one of twenty lands on
    // the second writer but for a one-in-a-million run of the same parity.
    let threads = if common::on_postgres() { 20 } else { 3 };
    let answered = answered_while_held(2, threads)?;
    if common::on_postgres() {
        assert!(answered, "no thread's call was answered while the first writer was held");
    } else {
        assert!(!answered, "SQLite has one writer: every call waits for the held one");
    }
    assert!(!answered_while_held(1, 3)?, "one writer: every call waits for the held one");
    Ok(())
}

/// Whether, with `writers`, one of up to `threads` fresh threads had a write answered while a
/// transaction of the store was held open; every write commits once it is let go.
fn answered_while_held(writers: usize, threads: usize) -> spindle::Result<bool> {
    let store = common::new_store_exact(Options::default().writers(writers));
    let (holder, release_tx) = hold(&store);
    // Another tenant: the held transaction holds its own tenant's turn.
    let other = store.tenant("other")?;
    let mut waiting = Vec::new();
    let mut answered = false;
    for index in 0..threads {
        let other = other.clone();
        let send = move || other.submit(enqueue("q", index));
        let mut sent = thread::spawn(send).join().expect("the thread sends")?;
        match sent.wait_timeout(STUCK) {
            Some(reply) => {
                reply?;
                answered = true;
                break;
            }
            None => waiting.push(sent),
        }
    }
    release_tx.send(()).expect("the holder waits");
    holder.join().expect("the holder ends")?;
    let submitted = waiting.len() + usize::from(answered);
    for mut sent in waiting {
        sent.wait_timeout(PATIENCE).expect("answered once the hold ends")?;
    }
    let queued = pending_in(&other, "q")?;
    assert_eq!(queued, u64::try_from(submitted).expect("small"), "every write committed once");
    assert_eq!(pending_in(&store, "held")?, 1, "the held transaction committed");
    store.close()?;
    Ok(answered)
}

/// A worker pool keeps up to one round in flight on each writer, each sent to a writer
/// without one: a transaction held open on one of two writers holds up at most one round, and
/// the pool completes its items meanwhile (in another tenant), whichever writer is held and
/// whichever its coordinator's thread would take (each try holds it from a fresh thread, and
/// every other try a spare thread takes the next writer before the pool starts: threads take
/// writers in turn). On SQLite, one writer, the pool completes none until the hold ends.
/// Either way every item is completed once.
#[test]
fn a_pool_completes_its_items_while_one_of_two_writers_is_held() -> spindle::Result<()> {
    let tries = if common::on_postgres() { 6 } else { 1 };
    for n in 0..tries {
        let (while_held, completed) = pool_while_held(2, n % 2 == 1)?;
        assert_eq!(completed, POOL_ITEMS, "every item completed once the hold ends");
        if common::on_postgres() {
            assert_eq!(while_held, POOL_ITEMS, "the pool's rounds went on on the other writer");
        } else {
            assert_eq!(while_held, 0, "SQLite has one writer: the pool waits for the held one");
        }
    }
    Ok(())
}

/// Items of the pool test.
const POOL_ITEMS: u64 = 5;

/// How many items a pool of a store with `writers` completed while a transaction of the store
/// was held open (waiting up to ten seconds on PostgreSQL for all of them, `STUCK` on
/// SQLite), and how many it completed in all; with `spare`, a thread writes once between the
/// holder and the pool's start.
fn pool_while_held(writers: usize, spare: bool) -> spindle::Result<(u64, u64)> {
    let store = common::new_store_exact(Options::default().writers(writers));
    let other = store.tenant("other")?;
    for n in 0..POOL_ITEMS {
        other.exec(enqueue("q", usize::try_from(n).expect("small")))?;
    }
    let (holder, release_tx) = hold(&store);
    let spare = if spare {
        let other = other.clone();
        let send = move || other.submit(enqueue("spare", 0));
        Some(thread::spawn(send).join().expect("the spare thread sends")?)
    } else {
        None
    };
    let pool = other
        .queue()
        .worker(&["q"])
        .threads(2)
        .run(|_job| spindle::queue::Outcome::Complete(json!(null)))?;
    let patience = if common::on_postgres() { PATIENCE / 6 } else { STUCK };
    let while_held = completed_within(&pool, patience);
    release_tx.send(()).expect("the holder waits");
    holder.join().expect("the holder ends")?;
    if let Some(mut spare) = spare {
        spare.wait_timeout(PATIENCE).expect("answered once the hold ends")?;
    }
    completed_within(&pool, PATIENCE);
    pool.stop();
    let report = pool.join()?;
    let stats = other.queue().stats()?;
    let q = stats.iter().find(|stats| stats.queue == "q").expect("queue q");
    assert_eq!((q.completed, q.pending, q.claimed), (POOL_ITEMS, 0, 0), "{q:?}");
    store.close()?;
    Ok((while_held, report.completed))
}

/// How many items `pool` has completed once it has completed them all, or `patience` has
/// passed.
fn completed_within(pool: &WorkerPool, patience: Duration) -> u64 {
    let deadline = Instant::now() + patience;
    while pool.report().completed < POOL_ITEMS && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    pool.report().completed
}

/// Holds a transaction of `store` open on a fresh thread (it enqueues an item on queue
/// `held`, then waits): returns once it is held, with the thread and the sender that lets it
/// commit.
fn hold(store: &Store) -> (thread::JoinHandle<spindle::Result<()>>, Sender<()>) {
    let (held_tx, held_rx) = bounded::<()>(1);
    let (release_tx, release_rx) = bounded::<()>(1);
    let store = store.clone();
    let holder = thread::spawn(move || {
        store.transaction(move |tx| {
            tx.exec(enqueue("held", 0))?;
            held_tx.send(()).expect("the test waits");
            release_rx.recv_timeout(PATIENCE).expect("the test lets go");
            Ok(TxOutcome::Commit(()))
        })
    });
    held_rx.recv_timeout(PATIENCE).expect("the transaction is held");
    (holder, release_tx)
}

/// The op that enqueues item `n` on `queue`.
fn enqueue(queue: &str, n: usize) -> Enqueue {
    Enqueue { item: NewItem::new(queue, json!(n)) }
}

/// How many items of `queue` are pending.
fn pending_in(store: &Store, queue: &str) -> spindle::Result<u64> {
    let stats = store.queue().stats()?;
    Ok(stats.iter().find(|stats| stats.queue == queue).map_or(0, |stats| stats.pending))
}

/// Eight threads append to one tenant at once through three writers, each to a stream of its
/// own, submitting ten appends before it waits and then reading its stream: the read sees
/// every append the thread submitted before it (it runs after them, on the thread's writer),
/// each thread's events keep its order, and a subscriber of the whole tenant sees every event
/// once, at dense positions, whichever session wrote it.
#[test]
fn every_event_of_many_threads_on_several_writers_reaches_a_subscriber_once_in_order()
-> spindle::Result<()> {
    const THREADS: usize = 8;
    const ROUNDS: u64 = 5;
    const AHEAD: u64 = 10;
    let store = common::new_store_exact(Options::default().writers(3));
    let mut subscription = store.subscribe_all(0)?;
    let barrier = Arc::new(Barrier::new(THREADS));
    let appenders: Vec<_> = (0..THREADS)
        .map(|thread_index| {
            let (store, barrier) = (store.clone(), Arc::clone(&barrier));
            thread::spawn(move || append_ahead(&store, &barrier, thread_index, ROUNDS, AHEAD))
        })
        .collect();
    for appender in appenders {
        appender.join().expect("the appender ends")?;
    }
    let total = THREADS as u64 * ROUNDS * AHEAD;
    let mut last_of_thread: BTreeMap<String, u64> = BTreeMap::new();
    let deadline = Instant::now() + PATIENCE;
    for position in 1..=total {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = subscription.recv_timeout(left)?.expect("every event reaches the subscriber");
        assert_eq!(event.position, position, "positions arrive dense and in order");
        let n = event.payload.as_u64().expect("a count");
        let stream = event.stream.to_string();
        let before = last_of_thread.insert(stream.clone(), n);
        assert_eq!(before.map_or(0, |last| last + 1), n, "{stream}: the thread's order");
        assert_eq!(event.seq, n + 1, "{stream}: seqs dense");
    }
    assert_eq!(last_of_thread.len(), THREADS);
    let more = subscription.recv_timeout(Duration::from_millis(200))?;
    assert!(more.is_none(), "no event twice: {more:?}");
    store.close()?;
    Ok(())
}

/// Appends `rounds` times `ahead` events to the thread's stream, each round submitted before
/// any is waited for and then read back at once.
fn append_ahead(
    store: &Store,
    barrier: &Barrier,
    thread_index: usize,
    rounds: u64,
    ahead: u64,
) -> spindle::Result<()> {
    let stream = Stream::custom(format!("thread-{thread_index}"));
    barrier.wait();
    for round in 0..rounds {
        let sent: Vec<_> = (0..ahead)
            .map(|i| store.submit(append(&stream, round * ahead + i)))
            .collect::<spindle::Result<_>>()?;
        let head = store.events().head(&stream)?;
        assert_eq!(head, (round + 1) * ahead, "the read sees the thread's submitted appends");
        for pending in sent {
            pending.wait()?;
        }
    }
    Ok(())
}

/// The op that appends event `n` to `stream`.
fn append(stream: &Stream, n: u64) -> Append {
    Append { stream: stream.clone(), event_type: "n".into(), payload: json!(n), idem_key: None }
}
