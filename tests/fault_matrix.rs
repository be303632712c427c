//! The environment fault matrix (reliability plan T5), the rows `faults.rs` does not already
//! cover, each fault made for real, its typed error asserted and the data written before it
//! checked afterwards:
//!
//! - a damaged b-tree page: `Corrupt` for what lies on it, never a panic; the other tables,
//!   and the stream's undamaged part, still read;
//! - a truncated file: `Corrupt` at open, and the file is left exactly as it was;
//! - the directory gone: `StoreFile` naming the missing directory (checked before SQLite
//!   opens the path); everything is there once it is back;
//! - the file deleted under an open store: the open store still reads everything;
//! - the WAL deleted under an open store: a clean close still keeps every acknowledged write;
//!   a hot WAL lost in a crash takes only what came after the last checkpoint;
//! - a real full file system (a 1 MiB tmpfs): `DiskFull`, nothing of the refused write, every
//!   earlier commit intact, and writes succeed once space is freed, without a reopen;
//! - a read-only file system (the tmpfs remounted read-only): `CannotOpen` (SQLite cannot read
//!   a WAL-mode file whose WAL it cannot create), the file untouched and whole once writable;
//! - callers still waiting when the store closes: `Closed` for each, promptly, and what was
//!   acknowledged stays; subscribers that drop their end while events flow to them leave the
//!   others and the writer unharmed.
//!
//! The tmpfs rows mount one where the test may (as root here and in CI); elsewhere they print
//! a note and check nothing. `faults.rs` has the other rows: random bytes (`NotADatabase`), a
//! newer schema (`SchemaTooNew`), a capped file (`DiskFull`), a read-only open (`ReadOnly`),
//! a lock held past the busy timeout (`Busy`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{append_n, assert_dense, read_stream};
use serde_json::json;
use spindle::queue::NewItem;
use spindle::{Error, Options, Store, Stream};

const PAGE: usize = 4096;
const EVENTS: u64 = 400;

fn damaged() -> Stream {
    Stream::custom("damaged")
}

/// A closed store with a long stream (`EVENTS` events over about a hundred pages) and one
/// queue item (another table); returns the item's id.
fn store_with_two_tables(path: &Path) -> String {
    let store = Store::open(path).expect("create");
    for i in 0..EVENTS {
        let payload = json!({ "i": i, "pad": "p".repeat(400) });
        store.events().append(damaged(), "big", payload).expect("append");
    }
    let item = store.queue().enqueue(NewItem::new("kept", json!({ "kept": true })));
    store.close().expect("close");
    item.expect("enqueue").id
}

/// The index of the page of `bytes` holding `text`.
fn page_holding(bytes: &[u8], text: &str) -> usize {
    let at = bytes.windows(text.len()).position(|w| w == text.as_bytes()).expect("text in file");
    at / PAGE
}

fn raw_integrity(path: &Path) -> String {
    let conn = rusqlite::Connection::open(path).expect("raw connection");
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity_check")
}

#[test]
fn a_damaged_page_reads_as_corrupt_and_the_undamaged_tables_still_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let item = store_with_two_tables(&path);
    let mut bytes = std::fs::read(&path).expect("read");
    // One of the long stream's pages, from its first half: the one holding the event with
    // `i` = EVENTS / 4 (found by its text, not by its place in the file, which moves whenever
    // the schema grows).
    let page = page_holding(&bytes, &format!("{{\"i\":{},\"pad\"", EVENTS / 4));
    bytes[page * PAGE + 8..page * PAGE + 108].fill(0xA5);
    std::fs::write(&path, &bytes).expect("damage");

    let store = Store::open(&path).expect("the schema pages are intact: it opens");
    let whole = store.events().read(damaged(), 0, 1000);
    assert!(matches!(whole, Err(Error::Corrupt(_))), "got {:?}", whole.map(|e| e.len()));
    // Once corruption is found, writes are refused: they could spread the damage.
    let refused = store.events().append(Stream::custom("new"), "x", json!({}));
    assert!(matches!(refused, Err(Error::Corrupt(_))), "got {refused:?}");
    let refused = store.queue().enqueue(NewItem::new("q", json!({})));
    assert!(matches!(refused, Err(Error::Corrupt(_))), "got {refused:?}");
    let kept = store.queue().get(&item).expect("another table reads");
    assert_eq!(kept.payload, json!({ "kept": true }));
    assert_eq!(store.events().head(damaged()).expect("the stream's head reads"), EVENTS);
    // The events the damage did not touch still read, in order, undamaged.
    let tail = store.events().read(damaged(), EVENTS / 2, 1000).expect("the undamaged half");
    let seqs: Vec<u64> = tail.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (EVENTS / 2 + 1..=EVENTS).collect::<Vec<_>>());
    for event in &tail {
        assert_eq!(event.payload["i"], json!(event.seq - 1));
    }
    store.close().expect("close");
}

#[test]
fn a_truncated_file_is_corrupt_at_open_and_left_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    store_with_two_tables(&path);
    let bytes = std::fs::read(&path).expect("read");
    let half = bytes[..bytes.len() / 2].to_vec();
    std::fs::write(&path, &half).expect("truncate");
    match Store::open(&path) {
        Err(Error::Corrupt(_)) => {}
        other => panic!("expected Corrupt, got {:?}", other.map(|_| "a store")),
    }
    assert_eq!(std::fs::read(&path).expect("read"), half, "a refused file is not written");
}

#[test]
fn a_missing_directory_cannot_open_naming_the_path_and_everything_is_there_once_it_is_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (home, away) = (dir.path().join("home"), dir.path().join("away"));
    std::fs::create_dir(&home).expect("mkdir");
    let path = home.join("store.db");
    let store = Store::open(&path).expect("create");
    append_n(&store, &damaged(), 25);
    store.close().expect("close");
    std::fs::rename(&home, &away).expect("the directory goes");
    match Store::open(&path) {
        Err(Error::StoreFile { path: named, kind, message }) => {
            assert_eq!(kind, std::io::ErrorKind::NotFound);
            assert_eq!(named, path);
            let says = format!("the directory {} does not exist", home.display());
            assert!(message.contains(&says), "names the directory: {message}");
        }
        other => panic!("expected StoreFile, got {:?}", other.map(|_| "a store")),
    }
    assert!(!home.exists(), "a failed open creates no directory");
    std::fs::rename(&away, &home).expect("the directory is back");
    let store = Store::open(&path).expect("reopen");
    let events = read_stream(&store, &damaged());
    assert_dense(&events);
    assert_eq!(events.len(), 25);
    store.close().expect("close");
}

#[test]
fn a_file_deleted_under_an_open_store_still_reads_everything_through_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let item = store_with_two_tables(&path);
    let store = Store::open(&path).expect("open");
    std::fs::remove_file(&path).expect("delete the file");
    let events = read_stream(&store, &damaged());
    assert_dense(&events);
    assert_eq!(events.len() as u64, EVENTS);
    assert_eq!(store.queue().get(&item).expect("item").payload, json!({ "kept": true }));
    // SQLite would go on writing to the deleted file, acknowledged and gone with it: the store
    // refuses the write instead, and writes nothing.
    let refused = store.events().append(damaged(), "x", json!({ "i": -1 }));
    assert!(matches!(refused, Err(Error::Io(_))), "got {refused:?}");
    let refused = store.queue().enqueue(NewItem::new("q", json!({})));
    assert!(matches!(refused, Err(Error::Io(_))), "got {refused:?}");
    assert_eq!(store.events().head(damaged()).expect("head"), EVENTS, "nothing was written");
    assert!(!path.exists(), "no file came back");
    let _ = store.close();
}

#[test]
fn the_wal_deleted_under_an_open_store_loses_nothing_on_a_clean_close() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let store = Store::open(&path).expect("open");
    append_n(&store, &damaged(), 30);
    std::fs::remove_file(path.with_file_name("store.db-wal")).expect("delete the WAL");
    append_n(&store, &Stream::custom("after"), 20);
    store.close().expect("close");
    assert_eq!(raw_integrity(&path), "ok");
    let store = Store::open(&path).expect("reopen");
    assert_eq!(read_stream(&store, &damaged()).len(), 30);
    assert_eq!(read_stream(&store, &Stream::custom("after")).len(), 20);
    store.close().expect("close");
}

#[test]
fn a_hot_wal_lost_in_a_crash_leaves_the_checkpointed_data_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let store = Store::open(&path).expect("open");
    append_n(&store, &damaged(), 30);
    store.close().expect("close: checkpointed");
    let store = Store::open(&path).expect("reopen");
    append_n(&store, &Stream::custom("since"), 20);
    // The machine dies with the WAL lost: what is left is the main file as it stands.
    let crashed = dir.path().join("crashed.db");
    std::fs::copy(&path, &crashed).expect("copy the main file alone");
    store.close().expect("close");

    assert_eq!(raw_integrity(&crashed), "ok");
    let survivor = Store::open(&crashed).expect("the main file alone opens");
    let events = read_stream(&survivor, &damaged());
    assert_dense(&events);
    assert_eq!(events.len(), 30, "everything checkpointed is there");
    assert_eq!(survivor.events().head(Stream::custom("since")).expect("head"), 0);
    survivor.close().expect("close");
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped; `None` (with a
/// note) where mounting is refused.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str, test: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status();
        if status.is_ok_and(|s| s.success()) {
            return Some(Tmpfs { dir });
        }
        eprintln!("NOTE: {test}: cannot mount a tmpfs here (not root?): this half is skipped");
        None
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn remount(&self, writable: bool) {
        let how = if writable { "remount,rw" } else { "remount,ro" };
        let status = Command::new("mount").args(["-o", how]).arg(self.dir.path()).status();
        assert!(status.expect("mount").success(), "mount -o {how}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_real_full_file_system_is_disk_full_keeps_earlier_commits_and_takes_writes_once_freed() {
    let Some(tmpfs) = Tmpfs::mount("1m", "full file system") else { return };
    let path = tmpfs.path().join("store.db");
    let ballast = tmpfs.path().join("ballast");
    std::fs::write(&ballast, vec![0_u8; 200_000]).expect("ballast");
    let store = Store::open(&path).expect("open on the tmpfs");
    let s = Stream::custom("fill");
    let big = || json!({ "pad": "x".repeat(20_000) });
    let mut acked = 0;
    let error = loop {
        match store.events().append(&s, "big", big()) {
            Ok(appended) => {
                acked += 1;
                assert_eq!(appended.seq, acked);
            }
            Err(error) => break error,
        }
        assert!(acked < 100, "1 MiB never filled");
    };
    assert!(matches!(error, Error::DiskFull), "got {error:?}");
    assert!(acked > 0, "something fitted before the disk was full");
    assert!(matches!(store.events().append(&s, "big", big()), Err(Error::DiskFull)));
    assert_eq!(store.events().head(&s).expect("head"), acked, "nothing of the refused writes");
    std::fs::remove_file(&ballast).expect("free space");
    assert_eq!(store.events().append(&s, "big", big()).expect("room again").seq, acked + 1);
    let events = read_stream(&store, &s);
    assert_dense(&events);
    // The close's checkpoint may itself lack room: the WAL then keeps the data for the next
    // open, and the error says so.
    let closed = store.close();
    assert!(matches!(closed, Ok(()) | Err(Error::DiskFull)), "close: {closed:?}");
    assert_eq!(raw_integrity(&path), "ok");
    let store = Store::open(&path).expect("reopen");
    assert_eq!(read_stream(&store, &s).len() as u64, acked + 1, "every commit is there");
    let _ = store.close();
}

#[test]
fn a_read_only_file_system_cannot_open_and_the_store_is_whole_once_writable_again() {
    let Some(tmpfs) = Tmpfs::mount("4m", "read-only file system") else { return };
    let path = tmpfs.path().join("store.db");
    let store = Store::open(&path).expect("create");
    append_n(&store, &damaged(), 12);
    store.close().expect("close");
    let before = std::fs::read(&path).expect("read");
    tmpfs.remount(false);
    // A WAL-mode file whose WAL and shared-memory files cannot be created cannot be read by
    // SQLite (short of `immutable=1`), read-only open or not: the open is refused, typed.
    for options in [Options::default(), Options::default().read_only(true)] {
        match Store::open_with(&path, options) {
            Err(Error::Sqlite(error)) => {
                assert_eq!(error.code(), Some(rusqlite::ffi::SQLITE_CANTOPEN), "{error}");
            }
            other => panic!("expected CannotOpen, got {:?}", other.map(|_| "a store")),
        }
    }
    assert_eq!(std::fs::read(&path).expect("read"), before);
    tmpfs.remount(true);
    let store = Store::open(&path).expect("open once writable");
    let events = read_stream(&store, &damaged());
    assert_dense(&events);
    assert_eq!(events.len(), 12);
    store.close().expect("close");
}

#[test]
fn callers_waiting_when_the_store_closes_get_closed_and_what_they_were_told_stays() {
    let t = common::temp_store();
    let writers: Vec<_> = (0..4)
        .map(|n| {
            let store = t.store.clone();
            std::thread::spawn(move || {
                let s = Stream::custom(format!("w{n}"));
                let mut acked = 0;
                loop {
                    match store.events().append(&s, "n", json!({ "n": acked + 1 })) {
                        Ok(appended) => acked = appended.seq,
                        Err(Error::Closed) => return (Instant::now(), acked),
                        Err(error) => panic!("writer {n}: {error}"),
                    }
                }
            })
        })
        .collect();
    while t.store.events().head(Stream::custom("w3")).expect("head") < 20 {
        std::thread::yield_now();
    }
    t.store.close().expect("close");
    let closed_at = Instant::now();
    let mut told = Vec::new();
    for writer in writers {
        let (gave_up, acked) = writer.join().expect("writer");
        let waited = gave_up.saturating_duration_since(closed_at);
        assert!(waited < Duration::from_secs(1), "a caller waited {waited:?} after close");
        told.push(acked);
    }
    let store = Store::open(&t.path).expect("reopen");
    for (n, acked) in told.into_iter().enumerate() {
        let events = read_stream(&store, &Stream::custom(format!("w{n}")));
        assert_dense(&events);
        assert_eq!(events.len() as u64, acked, "writer {n}: exactly what it was told");
    }
    store.close().expect("close");
}

#[test]
fn subscribers_dropping_their_end_mid_stream_leave_the_writer_and_the_others_unharmed() {
    let store = Store::open_in_memory().expect("open");
    let s = Stream::custom("fan");
    let mut steady = store.subscribe(&s, 0).expect("subscribe");
    let quitters: Vec<_> = (0..6_u64)
        .map(|n| {
            let mut subscription = store.subscribe_with_buffer(&s, 0, 4).expect("subscribe");
            std::thread::spawn(move || {
                for _ in 0..n * 7 {
                    let _ = subscription.recv_timeout(Duration::from_secs(10));
                }
                drop(subscription);
            })
        })
        .collect();
    append_n(&store, &s, 300);
    for quitter in quitters {
        quitter.join().expect("a quitter");
    }
    for seq in 1..=300 {
        let event = steady.recv_timeout(Duration::from_secs(10)).expect("recv").expect("event");
        assert_eq!(event.seq, seq, "the steady subscriber sees every event once, in order");
    }
    assert_eq!(store.events().append(&s, "after", json!(null)).expect("append").seq, 301);
    store.close().expect("close");
}
