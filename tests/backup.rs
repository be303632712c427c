//! Online backup and restore of a store file (`Store::backup_to`, `Store::restore`): a copy
//! taken while a writer keeps committing holds every write acknowledged before the call and is
//! one consistent prefix of the commits; a copy killed midway (a child process, this test
//! binary again, SIGKILLed inside the copy) leaves nothing at its path; a path that is taken is
//! refused with nothing written; a restore refuses a store that is open (to write: its
//! presence lock; or to read: the kernel's locks) and a bad backup, changing nothing, and
//! replaces a closed store (a stale WAL beside it included) by the backup's contents. The
//! pipeline run resumed from a restored store is `cli/tests/cli_backup.rs`'s.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, unbounded};
use serde_json::json;
use spindle::{Error, NewItem, Options, Role, Store, Stream, TxOutcome};

const CHILD_ENV: &str = "SPINDLE_BACKUP_CHILD";

/// How long a test waits for something another thread or process does before failing.
const PATIENCE: Duration = Duration::from_secs(60);

/// A write the load acknowledged: its number, its event's seq, its queue item.
#[derive(Debug, Clone)]
struct Ack {
    n: u64,
    seq: u64,
    item: String,
}

/// Fills `store` with about `mib` MiB of events, so that a copy takes several steps.
fn fill(store: &Store, mib: usize) {
    let filler = Stream::custom("filler");
    let text = "x".repeat(1000);
    for _ in 0..mib {
        let (stream, text) = (filler.clone(), text.clone());
        store
            .transaction(move |tx| {
                for i in 0..1000 {
                    tx.append_event(&stream, "fill", json!({ "i": i, "text": text }))?;
                }
                Ok(TxOutcome::Commit(()))
            })
            .expect("fill");
    }
}

/// A thread that commits, until `stop`, one transaction after another, each an event on
/// `custom:load` and a queue item, both numbered; every acknowledgement goes to the receiver.
fn load(store: &Store, stop: &Arc<AtomicBool>) -> (std::thread::JoinHandle<()>, Receiver<Ack>) {
    let (acks, acked) = unbounded();
    let (store, stop) = (store.clone(), Arc::clone(stop));
    let thread = std::thread::spawn(move || {
        for n in 0.. {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let (seq, item) = store
                .transaction(move |tx| {
                    let event = tx.append_event(Stream::custom("load"), "n", json!({ "n": n }))?;
                    let item = NewItem::new("load", json!({ "n": n }));
                    let enqueued = tx.exec(spindle::queue::Enqueue { item })?;
                    Ok(TxOutcome::Commit((event.seq, enqueued.id)))
                })
                .expect("a load write");
            if acks.send(Ack { n, seq, item }).is_err() {
                return;
            }
        }
    });
    (thread, acked)
}

#[test]
fn a_copy_under_a_write_load_holds_every_acknowledged_write_and_a_consistent_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, copy) = (dir.path().join("live.db"), dir.path().join("copy.db"));
    let store = Store::open(&path).expect("open");
    fill(&store, 4);
    let stop = Arc::new(AtomicBool::new(false));
    let (writer, acked) = load(&store, &stop);
    let mut before: Vec<Ack> =
        (0..200).map(|_| acked.recv_timeout(PATIENCE).expect("the load writes")).collect();
    let (mut steps, during) = (0, Stream::custom("during"));
    let report = store
        .backup_to_with(&copy, |progress| {
            steps += 1;
            if steps == 1 {
                assert!(progress.copied_pages < progress.total_pages, "{progress:?}");
                // Inside the copy, which holds its snapshot: writers are not held back. This
                // write is acknowledged after the snapshot was taken, so it is not in the copy.
                store.events().append(&during, "late", json!({})).expect("a write meanwhile");
                for _ in 0..3 {
                    acked.recv_timeout(PATIENCE).expect("the load commits during the copy");
                }
            }
        })
        .expect("backup");
    stop.store(true, Ordering::SeqCst);
    writer.join().expect("the writer");
    assert!(steps > 3, "the copy took several steps: {steps}");
    before.extend(acked.try_iter());
    let all = before;
    assert_eq!(report.path, copy);
    assert_eq!(report.bytes, std::fs::metadata(&copy).expect("the copy").len());
    assert!(report.pages > 1000, "about 4 MiB: {report:?}");
    store.close().expect("close");

    let copy = Store::open_with(&copy, Options::default().read_only(true))
        .expect("the copy opens as a store");
    let events = common::read_stream(&copy, &Stream::custom("load"));
    common::assert_dense(&events);
    let kept = events.len() as u64;
    assert!(kept >= 200, "every write acknowledged before the call: {kept}");
    assert_eq!(copy.events().head(&during).expect("head"), 0, "not a write after the snapshot");
    for ack in &all {
        match copy.queue().get(&ack.item) {
            Ok(item) if ack.n < kept => {
                assert_eq!(item.payload, json!({ "n": ack.n }));
                let event = &events[usize::try_from(ack.seq - 1).expect("index")];
                assert_eq!(event.payload, json!({ "n": ack.n }), "the same transaction");
            }
            Err(Error::NotFound { .. }) if ack.n >= kept => {}
            other => panic!("write {} of {kept} kept: {other:?}", ack.n),
        }
    }
    assert_eq!(common::read_stream(&copy, &Stream::custom("filler")).len(), 4000);
    copy.close().expect("close the copy");
}

#[test]
fn the_copy_is_one_file_that_opens_to_write_and_the_store_goes_on() {
    let s = common::temp_store();
    common::append_n(&s.store, &Stream::custom("s"), 10);
    let copy = s.dir.path().join("copy.db");
    s.store.backup_to(&copy).expect("backup");
    let beside: Vec<PathBuf> =
        ["-wal", "-shm", "-journal"].iter().map(|suffix| with_suffix(&copy, suffix)).collect();
    assert!(beside.iter().all(|file| !file.exists()), "a single file: {beside:?}");
    assert_eq!(partials(s.dir.path()), Vec::<PathBuf>::new());
    // The store is still open and writable; the copy is a store of its own.
    common::append_n(&s.store, &Stream::custom("s"), 1);
    let copied = Store::open(&copy).expect("open the copy to write");
    assert_eq!(copied.events().head(Stream::custom("s")).expect("head"), 10);
    common::append_n(&copied, &Stream::custom("s"), 1);
    assert_eq!(s.store.events().head(Stream::custom("s")).expect("head"), 11);
    copied.close().expect("close");
}

/// The child: opens the store, fills it, and copies it to `copy`, printing each step's
/// progress; after `steps` steps it stops inside the copy and waits to be killed.
fn child(spec: &str) {
    let (steps, rest) = spec.split_once('|').expect("steps|path|copy");
    let (path, copy) = rest.split_once('|').expect("path|copy");
    let steps: u64 = steps.parse().expect("a number");
    let store = Store::open(path).expect("the child opens the store");
    fill(&store, 4);
    let mut told = 0;
    let _ = store.backup_to_with(copy, |progress| {
        println!("\nstep {} of {}", progress.copied_pages, progress.total_pages);
        told += 1;
        if told == steps {
            std::thread::park();
        }
    });
    println!("\ncopied");
    std::thread::park();
}

#[test]
fn a_copy_killed_midway_leaves_nothing_at_its_path() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    for steps in [1, 3] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, copy) = (dir.path().join("store.db"), dir.path().join("copy.db"));
        let spec = format!("{steps}|{}|{}", path.display(), copy.display());
        let name = "a_copy_killed_midway_leaves_nothing_at_its_path";
        let mut child = common::spawn_child_test(name, CHILD_ENV, spec);
        let stdout = child.stdout.take().expect("the child's stdout");
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let told = lines.by_ref().filter(|line| line.starts_with("step ")).nth(steps - 1);
        let told = told.expect("the child tells its steps");
        let numbers: Vec<u64> =
            told.split_whitespace().filter_map(|word| word.parse().ok()).collect();
        assert!(numbers[0] > 0 && numbers[0] < numbers[1], "midway: {told}");
        // Inside the copy: only the partial file is there.
        assert!(!copy.exists(), "nothing at the copy's path before it is whole");
        assert_eq!(partials(dir.path()).len(), 1, "{:?}", partials(dir.path()));
        child.kill().expect("SIGKILL the child");
        child.wait().expect("reap the child");
        assert!(!copy.exists(), "nothing at the copy's path after the kill");
        let left = partials(dir.path());
        let name = left[0].file_name().expect("name").to_string_lossy().into_owned();
        assert!(name.starts_with("copy.db.partial-"), "the partial file's name: {name}");
        // What the killed copy left does not open as a copy of the store: read-only, it is
        // refused (its hot journal cannot be rolled back); to write, SQLite rolls the journal
        // back to the empty file the copy began with, so at most an empty store opens there.
        let read_only = Store::open_with(&left[0], Options::default().read_only(true));
        assert!(read_only.is_err(), "a partial copy opened read-only");
        if let Ok(opened) = Store::open(&left[0]) {
            let events = common::read_stream(&opened, &Stream::custom("filler"));
            assert!(events.is_empty(), "a partial copy showed {} of the events", events.len());
        }
        // The store itself is untouched by it, and a new copy to the same path is whole.
        let store = Store::open(&path).expect("reopen the store");
        store.backup_to(&copy).expect("a second copy");
        let copied = Store::open(&copy).expect("open the copy");
        assert_eq!(common::read_stream(&copied, &Stream::custom("filler")).len(), 4000);
    }
}

#[test]
fn a_path_that_is_taken_is_refused_and_nothing_is_written() {
    let s = common::temp_store();
    common::append_n(&s.store, &Stream::custom("s"), 3);
    let taken = s.dir.path().join("taken.db");
    std::fs::write(&taken, b"keep me").expect("write");
    let before = listing(s.dir.path());
    match s.store.backup_to(&taken) {
        Err(Error::StoreFile { path, kind: std::io::ErrorKind::AlreadyExists, message }) => {
            assert_eq!(path, taken);
            assert!(message.contains("never replaces"), "{message}");
        }
        other => panic!("expected StoreFile (AlreadyExists), got {other:?}"),
    }
    assert_eq!(std::fs::read(&taken).expect("read"), b"keep me");
    // SQLite's files beside the path would be taken for the copy's own.
    let fresh = s.dir.path().join("fresh.db");
    std::fs::write(with_suffix(&fresh, "-wal"), b"stale").expect("write");
    let refused = s.store.backup_to(&fresh);
    assert!(
        matches!(&refused, Err(Error::StoreFile { kind: std::io::ErrorKind::AlreadyExists, .. })),
        "{refused:?}"
    );
    assert!(!fresh.exists());
    std::fs::remove_file(with_suffix(&fresh, "-wal")).expect("remove");
    // The store file itself, a missing directory.
    assert!(matches!(s.store.backup_to(&s.path), Err(Error::StoreFile { .. })));
    let nowhere = s.dir.path().join("missing").join("copy.db");
    let refused = s.store.backup_to(&nowhere);
    assert!(
        matches!(&refused, Err(Error::StoreFile { kind: std::io::ErrorKind::NotFound, .. })),
        "{refused:?}"
    );
    assert_eq!(listing(s.dir.path()), before, "nothing written");
}

#[test]
fn what_has_no_file_to_copy_or_may_not_copy_it_is_refused() {
    let memory = Store::open_in_memory().expect("memory");
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("copy.db");
    assert!(matches!(memory.backup_to(&copy), Err(Error::InvalidInput(_))));
    let s = common::temp_store();
    let (secret, _) = s.store.auth().create_token("t", Role::Admin, None).expect("token");
    let bound = s.store.authenticate(secret.expose()).expect("authenticate");
    assert!(matches!(bound.backup_to(&copy), Err(Error::Forbidden(_))), "it holds every tenant");
    s.store.close().expect("close");
    assert!(matches!(s.store.backup_to(&copy), Err(Error::Closed)));
    assert!(!copy.exists());
}

#[test]
fn each_engine_copies_its_store_or_says_what_to_use_instead() {
    let store = common::new_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("copy.db");
    match store.backup_to(&copy) {
        Err(Error::WrongEngine(message)) if common::on_postgres() => {
            assert!(message.contains("pg_dump"), "{message}");
        }
        Err(Error::InvalidInput(message)) if !common::on_files() => {
            assert!(message.contains("in-memory"), "{message}");
        }
        Ok(report) if common::on_files() => assert!(report.pages > 0),
        other => panic!("{other:?}"),
    }
}

/// A store at `path` holding `n` events on `custom:which`; closed.
fn store_with(path: &Path, which: &str, n: u64) {
    let store = Store::open(path).expect("open");
    common::append_n(&store, &Stream::custom(which), n);
    store.close().expect("close");
}

fn head(path: &Path, which: &str) -> u64 {
    let store = Store::open(path).expect("open");
    let head = store.events().head(Stream::custom(which)).expect("head");
    store.close().expect("close");
    head
}

#[test]
fn a_restore_puts_the_backup_in_a_closed_stores_place_and_refuses_an_open_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (backup, dest) = (dir.path().join("backup.db"), dir.path().join("app.db"));
    let source = Store::open(dir.path().join("source.db")).expect("open");
    common::append_n(&source, &Stream::custom("backup"), 5);
    source.backup_to(&backup).expect("backup");
    store_with(&dest, "old", 7);

    // Open to write: the presence lock says so.
    let open = Store::open(&dest).expect("open");
    let before = listing(dir.path());
    match Store::restore(&backup, &dest) {
        Err(Error::StoreFile { kind: std::io::ErrorKind::ResourceBusy, message, .. }) => {
            assert!(message.contains("open"), "{message}");
        }
        other => panic!("expected StoreFile (ResourceBusy), got {other:?}"),
    }
    assert_eq!(listing(dir.path()), before, "nothing written");
    assert_eq!(open.events().head(Stream::custom("old")).expect("head"), 7, "untouched");
    open.close().expect("close");

    // Open only to read: no presence lock, but SQLite's lock on the store's -shm.
    if Path::new("/proc/locks").exists() {
        let reader = Options::default().read_only(true);
        let reading = Store::open_with(&dest, reader).expect("open to read");
        assert_eq!(reading.events().head(Stream::custom("old")).expect("head"), 7);
        let refused = Store::restore(&backup, &dest);
        assert!(
            matches!(
                &refused,
                Err(Error::StoreFile { kind: std::io::ErrorKind::ResourceBusy, .. })
            ),
            "{refused:?}"
        );
        reading.close().expect("close");
    }
    assert_eq!(head(&dest, "old"), 7, "untouched");

    let report = Store::restore(&backup, &dest).expect("restore");
    assert_eq!(report.path, dest.canonicalize().expect("resolved"));
    assert_eq!((head(&dest, "backup"), head(&dest, "old")), (5, 0), "the backup's contents");
    assert_eq!(partials(dir.path()), Vec::<PathBuf>::new());
    // Into a path with nothing there too.
    let new = dir.path().join("new.db");
    Store::restore(&backup, &new).expect("restore into a new path");
    assert_eq!(head(&new, "backup"), 5);
}

/// The child of the stale-WAL test: opens the store, writes, says so, and waits to be killed
/// with its commits in the WAL.
fn crashing_child(path: &str) {
    let store = Store::open(path).expect("the child opens the store");
    common::append_n(&store, &Stream::custom("crashed"), 9);
    println!("\nwritten");
    std::thread::park();
}

const CRASH_ENV: &str = "SPINDLE_BACKUP_CRASH_CHILD";

#[test]
fn a_restore_over_a_crashed_store_leaves_no_stale_wal_to_apply_to_the_copy() {
    if let Ok(path) = std::env::var(CRASH_ENV) {
        return crashing_child(&path);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (backup, dest) = (dir.path().join("backup.db"), dir.path().join("app.db"));
    let source = Store::open(dir.path().join("source.db")).expect("open");
    common::append_n(&source, &Stream::custom("backup"), 4);
    source.backup_to(&backup).expect("backup");
    let name = "a_restore_over_a_crashed_store_leaves_no_stale_wal_to_apply_to_the_copy";
    let mut child = common::spawn_child_test(name, CRASH_ENV, &dest);
    let stdout = child.stdout.take().expect("the child's stdout");
    let said = BufReader::new(stdout).lines().map_while(Result::ok).any(|line| line == "written");
    assert!(said, "the child wrote");
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    let wal = with_suffix(&dest, "-wal");
    assert!(wal.metadata().is_ok_and(|meta| meta.len() > 0), "the commits are in the WAL");

    Store::restore(&backup, &dest).expect("restore");
    assert!(!wal.exists() && !with_suffix(&dest, "-shm").exists(), "no stale WAL beside it");
    assert_eq!((head(&dest, "backup"), head(&dest, "crashed")), (4, 0));
    let checked = Store::open(&dest).expect("open");
    common::append_n(&checked, &Stream::custom("after"), 2);
    checked.close().expect("close");
    assert_eq!(head(&dest, "after"), 2);
}

#[test]
fn a_bad_backup_or_a_file_that_is_not_a_store_is_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (backup, dest) = (dir.path().join("backup.db"), dir.path().join("app.db"));
    let source = Store::open(dir.path().join("source.db")).expect("open");
    common::append_n(&source, &Stream::custom("backup"), 50);
    source.backup_to(&backup).expect("backup");
    store_with(&dest, "old", 3);

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database at all, but long enough to look like a header")
        .expect("write");
    let other_app = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&other_app).expect("sqlite");
    conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1)").expect("a table");
    drop(conn);
    let damaged = dir.path().join("damaged.db");
    std::fs::copy(&backup, &damaged).expect("copy");
    damage(&damaged);
    let listed = listing(dir.path());
    let cases: [(&Path, Expected); 5] = [
        (&text, |e| matches!(e, Error::NotADatabase)),
        (&other_app, |e| matches!(e, Error::InvalidInput(_))),
        (&damaged, |e| matches!(e, Error::Corrupt(_))),
        (&dest, |e| matches!(e, Error::InvalidInput(_))),
        (&dir.path().join("missing.db"), |e| matches!(e, Error::StoreFile { .. })),
    ];
    for (bad, expected) in cases {
        match Store::restore(bad, &dest) {
            Err(error) if expected(&error) => {}
            other => panic!("{}: {other:?}", bad.display()),
        }
        assert_eq!(listing(dir.path()), listed, "{}: nothing written", bad.display());
    }
    assert_eq!(head(&dest, "old"), 3, "the store is as it was");
    // Nor is a file that is not a store replaced.
    match Store::restore(&backup, &text) {
        Err(Error::StoreFile { kind: std::io::ErrorKind::InvalidInput, message, .. }) => {
            assert!(message.contains("not a Spindle store"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(std::fs::read_to_string(&text).expect("read").starts_with("not a database"));
}

/// What a refused restore's error must be.
type Expected = fn(&Error) -> bool;

/// Overwrites the head of the events table's root page in the file at `path` (its page type
/// and cell count), which SQLite's integrity check finds.
fn damage(path: &Path) {
    use std::io::{Seek, SeekFrom, Write};
    let conn = rusqlite::Connection::open(path).expect("open");
    let sql = "SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = 'events'";
    let root: i64 = conn.query_row(sql, [], |row| row.get(0)).expect("the events table");
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |row| row.get(0)).expect("size");
    let offset = u64::try_from((root - 1) * page_size).expect("an offset");
    conn.close().expect("close");
    let mut file = std::fs::OpenOptions::new().write(true).open(path).expect("open");
    file.seek(SeekFrom::Start(offset)).expect("seek");
    file.write_all(&[0xA5; 8]).expect("write");
}

/// `path` with `suffix` added to its name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The partial files a copy left in `dir`.
fn partials(dir: &Path) -> Vec<PathBuf> {
    listing(dir).into_iter().filter(|path| path.to_string_lossy().contains(".partial-")).collect()
}

/// The files of `dir`, sorted.
fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read the directory")
        .map(|entry| entry.expect("an entry").path())
        .collect();
    files.sort();
    files
}
