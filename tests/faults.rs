//! Environment faults, each mapped to its typed error: a newer schema, a file that is not a
//! database, a full disk, a read-only store, a failed commit.

mod common;

use common::{append_n, temp_store};
use serde_json::json;
use spindle::{Error, Options, Store, Stream, TxOutcome};

fn file_bytes(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).expect("read file")
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() -> spindle::Result<()> {
    let t = temp_store();
    append_n(&t.store, &Stream::custom("s"), 3);
    t.store.close()?;
    rusqlite::Connection::open(&t.path)?.pragma_update(None, "user_version", 99)?;
    let before = file_bytes(&t.path);
    match Store::open(&t.path) {
        Err(Error::SchemaTooNew { found: 99, supported: 7 }) => {}
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    assert_eq!(file_bytes(&t.path), before);
    Ok(())
}

#[test]
fn a_garbage_file_is_not_a_database() -> spindle::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("garbage.db");
    let garbage: Vec<u8> =
        (0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&path, &garbage)?;
    assert!(matches!(Store::open(&path), Err(Error::NotADatabase)));
    assert_eq!(file_bytes(&path), garbage);
    Ok(())
}

#[test]
fn another_applications_database_is_refused() -> spindle::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("theirs.db");
    rusqlite::Connection::open(&path)?.execute_batch("CREATE TABLE theirs (x INTEGER)")?;
    let before = file_bytes(&path);
    assert!(matches!(Store::open(&path), Err(Error::InvalidInput(_))));
    assert_eq!(file_bytes(&path), before, "left exactly as it was");

    let versioned = dir.path().join("versioned.db");
    rusqlite::Connection::open(&versioned)?
        .execute_batch("CREATE TABLE theirs (x INTEGER); PRAGMA user_version = 1;")?;
    let before = file_bytes(&versioned);
    assert!(matches!(Store::open(&versioned), Err(Error::InvalidInput(_))));
    assert_eq!(file_bytes(&versioned), before, "left exactly as it was");
    assert!(!dir.path().join("versioned.db-wal").exists());
    Ok(())
}

#[test]
fn a_full_disk_fails_every_op_of_the_batch_and_writes_succeed_once_space_is_freed()
-> spindle::Result<()> {
    let mut t = temp_store();
    let filler = Stream::custom("filler");
    let big = json!("x".repeat(200_000));
    for _ in 0..5 {
        t.store.events().append(&filler, "big", big.clone())?;
    }
    // Reopen with the file capped at its current size: any new page is "disk full".
    t.store.close()?;
    let file_bytes = std::fs::metadata(&t.path)?.len();
    let options = Options::default().file_bytes_max(file_bytes);
    t.store = Store::open_with(&t.path, options)?;
    let s = Stream::custom("victim");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (store, s, big) = (t.store.clone(), s.clone(), big.clone());
            std::thread::spawn(move || store.events().append(&s, "big", big))
        })
        .collect();
    for handle in handles {
        let result = handle.join().expect("thread");
        assert!(matches!(result, Err(Error::DiskFull)), "got {result:?}");
    }
    assert_eq!(t.store.events().head(&s)?, 0, "nothing was written");
    // Every earlier commit is intact.
    let earlier = common::read_stream(&t.store, &filler);
    common::assert_dense(&earlier);
    assert!(earlier.len() == 5 && earlier.iter().all(|e| e.payload == big), "the filler");

    // Free space by deleting the filler, then write again.
    assert_eq!(t.store.events().truncate(&filler, 100)?, 5);
    let appended = t.store.events().append(&s, "big", big)?;
    assert_eq!(appended.seq, 1);
    t.store.close()?;
    let check: String =
        rusqlite::Connection::open(&t.path)?
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    assert_eq!(check, "ok");
    Ok(())
}

#[test]
fn a_read_only_store_reads_and_refuses_writes() -> spindle::Result<()> {
    let t = temp_store();
    let s = Stream::custom("ro");
    append_n(&t.store, &s, 4);
    t.store.close()?;
    let options = Options::default().read_only(true);
    let store = Store::open_with(&t.path, options)?;
    assert_eq!(store.events().head(&s)?, 4);
    assert_eq!(store.events().read(&s, 0, 10)?.len(), 4);
    assert!(matches!(store.events().append(&s, "x", json!(1)), Err(Error::ReadOnly)));
    assert!(matches!(store.events().truncate(&s, 10), Err(Error::ReadOnly)));
    assert!(matches!(store.transaction(|_| Ok(TxOutcome::Commit(()))), Err(Error::ReadOnly)));
    assert_eq!(store.events().head(&s)?, 4);
    store.close()?;
    Ok(())
}

#[test]
fn a_failed_commit_fails_the_batch_publishes_nothing_and_the_store_carries_on()
-> spindle::Result<()> {
    let store = Store::open_in_memory()?;
    store.transaction(|tx| {
        tx.sqlite()?.execute_batch(
            "CREATE TABLE parent (id INTEGER PRIMARY KEY);
             CREATE TABLE child (parent_id INTEGER REFERENCES parent (id)
                                 DEFERRABLE INITIALLY DEFERRED);",
        )?;
        Ok(TxOutcome::Commit(()))
    })?;
    let s = Stream::custom("c");
    let mut follower = store.subscribe(&s, 0)?;
    assert!(follower.try_recv()?.is_none());
    let s2 = s.clone();
    // The orphan row passes every statement and fails only at COMMIT.
    let result = store.transaction(move |tx| {
        tx.append_event(&s2, "lost", json!(1))?;
        tx.sqlite()?.execute("INSERT INTO child (parent_id) VALUES (42)", [])?;
        Ok(TxOutcome::Commit(()))
    });
    assert!(matches!(result, Err(Error::Sqlite(_))), "got {result:?}");
    assert_eq!(store.events().head(&s)?, 0);
    store.events().append(&s, "kept", json!(2))?;
    let event = follower.recv()?;
    assert_eq!((event.seq, event.event_type.as_str()), (1, "kept"));
    Ok(())
}

#[test]
fn while_another_connection_holds_the_write_lock_reads_run_and_writes_are_busy()
-> spindle::Result<()> {
    let options = Options::default().busy_timeout(std::time::Duration::from_millis(100));
    let t = common::temp_store_with(options);
    let s = Stream::custom("locked");
    append_n(&t.store, &s, 2);
    let blocker = rusqlite::Connection::open(&t.path)?;
    blocker.execute_batch("BEGIN IMMEDIATE")?;
    // A batch of reads begins DEFERRED and needs no write lock.
    assert_eq!(t.store.events().head(&s)?, 2);
    assert_eq!(t.store.events().read(&s, 0, 10)?.len(), 2);
    assert!(matches!(t.store.events().append(&s, "x", json!(1)), Err(Error::Busy)));
    assert_eq!(t.store.events().read(&s, 0, 10)?.len(), 2, "earlier commits intact");
    blocker.execute_batch("ROLLBACK")?;
    assert_eq!(t.store.events().append(&s, "x", json!(1))?.seq, 3);
    Ok(())
}

#[test]
fn closing_while_another_connection_reads_is_ok_and_keeps_everything() -> spindle::Result<()> {
    let options = Options::default().busy_timeout(std::time::Duration::from_millis(50));
    let t = common::temp_store_with(options);
    let s = Stream::custom("shared");
    append_n(&t.store, &s, 3);
    let reader = rusqlite::Connection::open(&t.path)?;
    reader.execute_batch("BEGIN")?;
    let seen: i64 = reader.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
    assert_eq!(seen, 3);
    // The final checkpoint cannot truncate the WAL under the reader: the close still succeeds.
    t.store.close()?;
    reader.execute_batch("COMMIT")?;
    drop(reader);
    assert_eq!(Store::open(&t.path)?.events().head(&s)?, 3);
    Ok(())
}
