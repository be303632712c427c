//! Reads off the writer's thread (`Options::readers`): a read held open never holds a write
//! back, a read sees every write whose reply came before it was sent (also one its own thread
//! submitted and has not waited for), a read closure reads one snapshot and refuses whatever
//! may write, and subscriptions stay gap-free while readers page their backlog. Deterministic:
//! the held read waits on a channel, not on time. The held read runs on PostgreSQL too
//! (`SPINDLE_TEST_ENGINE=postgres`); the rest on a file store.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::bounded;
use serde_json::json;
use spindle::log::{Append, Head, ReadAll};
use spindle::{Error, Options, READERS_MAX, Role, Store, Stream, TenantStatus, TenantUpdate};

/// A file store with `readers` reader threads, in its own directory.
fn file_store(readers: usize) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("a directory");
    let options = Options::default().readers(readers);
    let store = Store::open_with(dir.path().join("readers.db"), options).expect("open");
    (dir, store)
}

fn append(stream: &Stream, n: u64) -> Append {
    Append { stream: stream.clone(), event_type: "n".into(), payload: json!(n), idem_key: None }
}

#[test]
fn a_read_held_open_does_not_hold_a_write_back_and_reads_one_snapshot() {
    let (_dir, store) = file_store(2);
    let (before, after) = hold_a_read_while_writing(&store);
    assert_eq!((before, after), (0, 0), "one snapshot, from before the write");
    store.close().expect("close");
}

/// The same on PostgreSQL, where a reader is a session of its own (a read transaction there
/// is `REPEATABLE READ READ ONLY`: one snapshot too).
#[cfg(feature = "postgres")]
#[test]
fn a_read_held_open_on_postgres_does_not_hold_a_write_back() {
    if !common::on_postgres() {
        return;
    }
    let shared = common::SharedStore::new();
    let store = shared.open_with(Options::default().readers(2));
    assert_eq!(hold_a_read_while_writing(&store), (0, 0), "one snapshot");
    store.close().expect("close");
}

/// Holds a read closure open (it reads the head, then waits on a channel, then reads it
/// again), appends meanwhile and asserts the append is answered while the read still waits;
/// returns the two heads the read saw.
fn hold_a_read_while_writing(store: &Store) -> (u64, u64) {
    let stream = Stream::custom("held");
    let (started_tx, started) = bounded(1);
    let (release, released) = bounded::<()>(1);
    let reader = {
        let (store, stream) = (store.clone(), stream.clone());
        thread::spawn(move || {
            store.read(move |tx| {
                let before = tx.exec(Head { stream: stream.clone() })?;
                started_tx.send(()).expect("started");
                released.recv().expect("released");
                let after = tx.exec(Head { stream })?;
                Ok((before, after))
            })
        })
    };
    started.recv().expect("the read is open");
    // The write is answered while the read still holds its snapshot open.
    let mut write = store.submit(append(&stream, 1)).expect("submit");
    let written =
        write.wait_timeout(Duration::from_secs(30)).expect("answered while the read waits");
    assert_eq!(written.expect("appended").seq, 1);
    release.send(()).expect("release");
    let heads = reader.join().expect("reader").expect("read");
    assert_eq!(store.events().head(&stream).expect("head"), 1, "a new read sees it");
    heads
}

#[test]
fn a_read_held_open_never_makes_the_writers_checkpoint_wait() {
    // A small WAL bound forces truncating checkpoints, which wait for readers up to the busy
    // timeout (long here): the writer must not wait for the held read at all.
    let dir = tempfile::tempdir().expect("a directory");
    let options = Options::default()
        .readers(2)
        .wal_bytes_max(64 * 1024)
        .busy_timeout(Duration::from_secs(60));
    let store = Store::open_with(dir.path().join("wal.db"), options).expect("open");
    let stream = Stream::custom("grows");
    let (started_tx, started) = bounded(1);
    let (release, released) = bounded::<()>(1);
    let reader = {
        let (store, stream) = (store.clone(), stream.clone());
        thread::spawn(move || {
            store.read(move |tx| {
                let head = tx.exec(Head { stream })?;
                started_tx.send(()).expect("started");
                released.recv().expect("released");
                Ok(head)
            })
        })
    };
    started.recv().expect("the read holds its snapshot");
    let pad = "w".repeat(4096);
    for n in 0..200 {
        let payload = json!({ "n": n, "pad": pad });
        let mut write = store
            .submit(Append {
                stream: stream.clone(),
                event_type: "n".into(),
                payload,
                idem_key: None,
            })
            .expect("submit");
        let answered = write.wait_timeout(Duration::from_secs(20));
        assert!(answered.is_some_and(|a| a.is_ok()), "append {n} waited for the held read");
    }
    release.send(()).expect("release");
    assert_eq!(reader.join().expect("reader").expect("read"), 0);
    assert_eq!(store.events().head(&stream).expect("head"), 200);
    store.close().expect("close");
}

#[test]
fn a_bound_views_administration_of_a_suspended_tenant_is_refused_wherever_reads_run() {
    let (_dir, file) = file_store(2);
    let memory = Store::open_in_memory().expect("in memory");
    for store in [file, memory] {
        store.auth().create_tenant("acme", "Acme").expect("tenant");
        let acme = store.tenant("acme").expect("acme");
        let (secret, _) = acme.auth().create_token("ops", Role::Admin, None).expect("token");
        let bound = store.authenticate(secret.expose()).expect("a bound view");
        assert!(bound.auth().tenant("acme").is_ok(), "active: it reads");
        let suspend = TenantUpdate::default().status(TenantStatus::Suspended);
        store.auth().update_tenant("acme", suspend).expect("suspend");
        let refused = bound.auth().tenant("acme");
        assert!(matches!(refused, Err(Error::TenantSuspended(_))), "{refused:?}");
        let tokens = bound.auth().tokens();
        assert!(matches!(tokens, Err(Error::TenantSuspended(_))), "{tokens:?}");
        store.close().expect("close");
    }
}

#[test]
fn a_read_sees_every_write_answered_before_it_was_sent() {
    let (_dir, store) = file_store(2);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            thread::spawn(move || {
                let stream = Stream::custom(format!("ryw-{t}"));
                for n in 1..=200_u64 {
                    store.exec(append(&stream, n)).expect("append");
                    assert_eq!(store.events().head(&stream).expect("head"), n, "thread {t}");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a thread");
    }
    store.close().expect("close");
}

#[test]
fn a_read_a_thread_sends_after_its_unanswered_writes_sees_them() {
    let (_dir, store) = file_store(2);
    let stream = Stream::custom("submitted");
    for round in 0..50_u64 {
        let writes: Vec<_> =
            (0..5).map(|n| store.submit(append(&stream, round * 5 + n)).expect("submit")).collect();
        // Sent before any of the writes' replies were taken: it runs after them.
        let head = store.submit(Head { stream: stream.clone() }).expect("submit a read");
        assert_eq!(head.wait().expect("head"), (round + 1) * 5, "round {round}");
        for write in writes {
            write.wait().expect("appended");
        }
    }
    store.close().expect("close");
}

#[test]
fn a_read_closure_refuses_what_may_write_and_writes_nothing() {
    for readers in [0, 2] {
        let (_dir, store) = file_store(readers);
        let stream = Stream::custom("refused");
        let s = stream.clone();
        let op = store.read(move |tx| tx.exec(append(&s, 1)).map(|_| ()));
        assert!(matches!(op, Err(Error::InvalidInput(_))), "{readers} readers: {op:?}");
        let s = stream.clone();
        let appended = store.read(move |tx| tx.append_event(&s, "n", json!(1)).map(|_| ()));
        assert!(matches!(appended, Err(Error::InvalidInput(_))), "{appended:?}");
        let raw = store.read(|tx| tx.sqlite().map(|_| ()));
        assert!(matches!(raw, Err(Error::InvalidInput(_))), "{raw:?}");
        assert_eq!(store.events().head(&stream).expect("head"), 0, "nothing was written");
        store.close().expect("close");
    }
}

#[test]
fn reads_work_without_readers_and_the_bound_is_checked() {
    let memory = Store::open_in_memory().expect("in memory");
    let stream = Stream::custom("m");
    memory.events().append(&stream, "n", json!(1)).expect("append");
    let s = stream.clone();
    assert_eq!(memory.read(move |tx| tx.exec(Head { stream: s })).expect("read"), 1);
    let (_dir, none) = file_store(0);
    none.events().append(&stream, "n", json!(1)).expect("append");
    assert_eq!(none.read(move |tx| tx.exec(Head { stream })).expect("read"), 1);
    let dir = tempfile::tempdir().expect("a directory");
    let options = Options::default().readers(READERS_MAX + 1);
    let refused = Store::open_with(dir.path().join("x.db"), options);
    assert!(matches!(refused, Err(Error::InvalidInput(_))), "{refused:?}");
    assert!(!dir.path().join("x.db").exists(), "nothing was created");
}

#[test]
fn a_read_after_close_is_closed_and_a_read_calling_its_store_is_refused() {
    let (_dir, store) = file_store(1);
    let inner = store.clone();
    let reentrant = store.read(move |_| inner.events().head(Stream::custom("x")));
    assert!(matches!(reentrant, Err(Error::InvalidInput(_))), "{reentrant:?}");
    store.close().expect("close");
    let closed = store.events().head(Stream::custom("x"));
    assert!(matches!(closed, Err(Error::Closed)), "{closed:?}");
}

#[test]
fn subscriptions_stay_gap_free_while_readers_page_their_backlog() {
    let (_dir, store) = file_store(2);
    let writers = 4_u64;
    let per_writer = 500_u64;
    // Some history first, so the subscription pages before it goes live.
    for n in 0..300 {
        store.exec(append(&Stream::custom("history"), n)).expect("append");
    }
    let mut subscription = store.subscribe_all(0).expect("subscribe");
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            thread::spawn(move || {
                let stream = Stream::custom(format!("w{w}"));
                for n in 0..per_writer {
                    store.exec(append(&stream, n)).expect("append");
                }
            })
        })
        .collect();
    let total = 300 + writers * per_writer;
    let mut last = 0;
    for _ in 0..total {
        let event = subscription
            .recv_timeout(Duration::from_secs(30))
            .expect("recv")
            .expect("every event comes");
        assert!(event.position > last, "in order, once: {} after {last}", event.position);
        last = event.position;
    }
    for thread in threads {
        thread.join().expect("a writer");
    }
    let all = store.exec(ReadAll { after_position: 0, limit: 10 }).expect("read all");
    assert_eq!(all.len(), 10);
    assert_eq!(last, total, "positions are dense here: every one was seen");
    drop(subscription);
    store.close().expect("close");
}

#[test]
fn many_readers_and_a_writer_share_a_store_without_errors() {
    let (_dir, store) = file_store(4);
    let stream = Arc::new(Stream::custom("shared"));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (store, stream) = (store.clone(), Arc::clone(&stream));
            thread::spawn(move || {
                let mut seen = 0;
                for _ in 0..300 {
                    let head = store.events().head(stream.as_ref()).expect("head");
                    assert!(head >= seen, "a later read never sees less");
                    seen = head;
                }
            })
        })
        .collect();
    for n in 0..300 {
        store.exec(append(stream.as_ref(), n)).expect("append");
    }
    for reader in readers {
        reader.join().expect("a reader");
    }
    store.close().expect("close");
}
